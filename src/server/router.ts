// The route table: exact paths in a map, parameterised paths (":id") matched segment by segment.
// Built once at start-up.
import type { HttpContext } from './http-context.js';

export type Access = 'public' | 'key';

export interface Route {
  readonly method: 'GET' | 'POST';
  readonly pattern: string;
  readonly access: Access;
  /** Body cap in bytes for routes that take a JSON body. */
  readonly bodyBytes?: number;
  /**
   * The handler's ledger reserve re-checks the key before anything is spent or sent (text lanes),
   * so the key may come from the authenticator's short cache instead of a lookup per request.
   */
  readonly keyRecheckedByReserve?: boolean;
  /**
   * One more header carrying our request id, under the name the protocol's official SDK reads it
   * from (the Anthropic SDK's `_request_id` / `requestID` come from `request-id`; the OpenAI SDK
   * reads `x-request-id`, which every response has).
   */
  readonly requestIdHeader?: string;
  /**
   * A keyed route limited in a per-key bucket of its own (`prefix` + key id) instead of the key's
   * main one, so that its calls cannot use up the key's other requests; `message` words its 429.
   */
  readonly rateBucket?: { readonly prefix: string; readonly perMinute: number; readonly message: string };
  /**
   * The route's work. A billed route's comes in two phases: the handler parses and validates with
   * nothing held, and returns its serve step, which starts with the hold. The hold re-checks the
   * key (keyRecheckedByReserve), so the server knows which errors came before that check from the
   * phase they came from, not from a flag.
   */
  readonly handler: (ctx: HttpContext) => Promise<void | ServeStep>;
}

/** A billed route's second phase: from its hold on (the hold confirmed the key). */
export type ServeStep = () => Promise<void>;

interface Compiled {
  readonly route: Route;
  readonly segments: readonly string[];
}

export type Match = { route: Route; params: string[] } | { allow: string } | undefined;

export class Router {
  private readonly exact = new Map<string, Route>();
  private readonly exactMethods = new Map<string, string[]>();
  private readonly patterned: Compiled[] = [];

  constructor(routes: readonly Route[]) {
    for (const r of routes) {
      if (r.pattern.includes(':')) this.patterned.push({ route: r, segments: r.pattern.split('/') });
      else {
        this.exact.set(r.method + ' ' + r.pattern, r);
        const ms = this.exactMethods.get(r.pattern) ?? [];
        ms.push(r.method);
        this.exactMethods.set(r.pattern, ms);
      }
    }
  }

  /**
   * A route, or the methods the path does allow (404 with Allow), or undefined (404). HEAD takes
   * the GET route (RFC 9110, 9.3.2): the handler runs as for GET and the context sends no body.
   */
  match(requestMethod: string, path: string): Match {
    const method = requestMethod === 'HEAD' ? 'GET' : requestMethod;
    // A trailing slash is the same resource; anything else must match exactly.
    const p = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
    const hit = this.exact.get(method + ' ' + p);
    if (hit) return { route: hit, params: [] };
    const allowed = this.exactMethods.get(p);
    const parts = p.split('/');
    const allow: string[] = allowed ? [...allowed] : [];
    for (const c of this.patterned) {
      if (c.segments.length !== parts.length) continue;
      const params: string[] = [];
      let ok = true;
      for (let i = 0; i < parts.length; i++) {
        const s = c.segments[i]!;
        if (s.startsWith(':')) {
          if (parts[i] === '') {
            ok = false;
            break;
          }
          params.push(decodeURIComponentSafe(parts[i]!));
        } else if (s !== parts[i]) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      if (c.route.method === method) return { route: c.route, params };
      allow.push(c.route.method);
    }
    if (allow.includes('GET')) allow.push('HEAD');
    return allow.length > 0 ? { allow: [...new Set(allow)].join(', ') } : undefined;
  }
}

function decodeURIComponentSafe(component: string): string {
  try {
    return decodeURIComponent(component);
  } catch {
    return component;
  }
}
