// What every console page handler gets: the exchange, the signed-in session (when there is one),
// the parsed query and form, and the gateway's services.
import type { HttpContext } from '../server/http-context.js';
import type { Services } from '../services.js';
import type { Session } from './sessions.js';

export interface ConsoleDeps {
  readonly services: Services;
  /** The media host's signing secret (download links of generations). */
  readonly mediaSecret: Buffer;
  /** The media host's clock (the same one checks the links' expiry). */
  readonly mediaClock: () => number;
  /** This gateway's own base URL, for the playground's calls through /v1 (known once it listens). */
  readonly selfUrl: () => string;
  /** The routes the gateway serves, as method and pattern (reference pages, OpenAPI). */
  readonly routes: () => ReadonlyArray<{ readonly method: string; readonly pattern: string }>;
}

export interface PageCtx {
  readonly ctx: HttpContext;
  readonly d: ConsoleDeps;
  readonly session: Session | undefined;
  readonly query: URLSearchParams;
  readonly form: URLSearchParams;
  /** Path parameters (":id") in order. */
  readonly params: readonly string[];
}

export interface SignedIn extends PageCtx {
  readonly session: Session;
}

/** A page that refuses with an HTTP status and a message shown to the person. */
export class PageError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
