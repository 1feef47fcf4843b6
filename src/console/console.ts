// The console: browser pages under /console, served by the gateway itself (same host as /v1).
// Sign-in is by one-time link (`inkgate console link`), the session a random id in an HttpOnly,
// SameSite=Strict cookie; every state-changing form carries the session's CSRF token; every answer
// carries a strict Content-Security-Policy (html.ts). The server calls this for any path it does
// not route under /v1; it answers true when the path is the console's.
import { ApiError } from '../errors.js';
import { clientAddressResolver } from '../ops/client-address.js';
import type { HttpContext } from '../server/http-context.js';
import { toApiError, type OtherAnswer } from '../server/server.js';
import { PageError, type ConsoleDeps, type PageCtx, type SignedIn } from './context.js';
import { esc, page, redirect, sendHtml } from './html.js';
import { keysPage, createKeyAction, revokeKeyAction, limitKeyAction, overviewPage, usageFrameKeyAction } from './pages-account.js';
import { billingPage } from './pages-billing.js';
import { playgroundPage, playgroundFormAction, playgroundStreamAction } from './pages-playground.js';
import { referenceIndexPage, referencePage } from './pages-reference.js';
import { signInPage, signInAction, signOutAction } from './pages-signin.js';
import { generationDownload, usagePage, usageCsv, requestPage } from './pages-usage.js';
import { cookieValue, csrfOk, findSession, SESSION_COOKIE } from './sessions.js';
import { FAVICON_PATH, serveStatic } from './static.js';

/** Form posts are small; the playground prompt is the largest field. */
const FORM_BODY_BYTES = 64 * 1024;

type Access = 'public' | 'session' | 'csrf';
interface ConsoleRoute {
  readonly method: 'GET' | 'POST';
  readonly re: RegExp;
  readonly access: Access;
  /** Public pages take a PageCtx (no session); the others get a SignedIn once handle() checked it. */
  readonly run: (pageCtx: SignedIn) => Promise<void>;
}

const ID = '([A-Za-z0-9_-]{1,128})';
const ROUTES: readonly ConsoleRoute[] = [
  { method: 'GET', re: /^\/console$/, access: 'session', run: overviewPage },
  { method: 'GET', re: /^\/console\/signin$/, access: 'public', run: signInPage },
  { method: 'POST', re: /^\/console\/signin$/, access: 'public', run: signInAction },
  { method: 'POST', re: /^\/console\/signout$/, access: 'csrf', run: signOutAction },
  { method: 'GET', re: /^\/console\/keys$/, access: 'session', run: keysPage },
  { method: 'POST', re: /^\/console\/keys$/, access: 'csrf', run: createKeyAction },
  { method: 'POST', re: new RegExp(`^/console/keys/${ID}/revoke$`), access: 'csrf', run: revokeKeyAction },
  { method: 'POST', re: new RegExp(`^/console/keys/${ID}/limit$`), access: 'csrf', run: limitKeyAction },
  { method: 'POST', re: new RegExp(`^/console/keys/${ID}/usage-frame$`), access: 'csrf', run: usageFrameKeyAction },
  { method: 'GET', re: /^\/console\/usage$/, access: 'session', run: usagePage },
  { method: 'GET', re: /^\/console\/usage\.csv$/, access: 'session', run: usageCsv },
  { method: 'GET', re: new RegExp(`^/console/requests/${ID}$`), access: 'session', run: requestPage },
  { method: 'GET', re: new RegExp(`^/console/generations/${ID}$`), access: 'session', run: generationDownload },
  { method: 'GET', re: /^\/console\/billing$/, access: 'session', run: billingPage },
  { method: 'GET', re: /^\/console\/playground$/, access: 'session', run: playgroundPage },
  { method: 'POST', re: /^\/console\/playground$/, access: 'csrf', run: playgroundFormAction },
  { method: 'POST', re: /^\/console\/playground\/stream$/, access: 'csrf', run: playgroundStreamAction },
  { method: 'GET', re: /^\/console\/reference$/, access: 'public', run: referenceIndexPage },
  { method: 'GET', re: new RegExp(`^/console/reference/${ID}$`), access: 'public', run: referencePage },
];

export function consoleHandler(deps: ConsoleDeps): (ctx: HttpContext) => OtherAnswer {
  // The caller as the /v1 limits see it: behind a balancer the peer is not the caller.
  const clientAddress = clientAddressResolver(deps.services.config.server);
  const answered = (p: Promise<void>): OtherAnswer => ({ route: 'console', answered: p });
  return (ctx) => {
    if (ctx.path === FAVICON_PATH) {
      serveStatic(ctx, 'favicon.svg');
      return answered(Promise.resolve());
    }
    const path = ctx.path.length > 8 && ctx.path.endsWith('/') ? ctx.path.slice(0, -1) : ctx.path;
    if (path !== '/console' && !path.startsWith('/console/')) return false;
    if (path.startsWith('/console/static/')) {
      serveStatic(ctx, path.slice('/console/static/'.length));
      return answered(Promise.resolve());
    }
    // uWS wants the body reader attached in this tick.
    if (ctx.method === 'POST') ctx.collectBody(FORM_BODY_BYTES);
    if (ctx.done) return answered(Promise.resolve());
    return answered(handle(deps, ctx, path, clientAddress(ctx)).catch((e: unknown) => failPage(ctx, e)));
  };
}

async function handle(deps: ConsoleDeps, ctx: HttpContext, path: string, address: string): Promise<void> {
  const method = ctx.method === 'HEAD' ? 'GET' : ctx.method;
  let route: ConsoleRoute | undefined;
  let params: string[] = [];
  for (const r of ROUTES) {
    const m = r.re.exec(path);
    if (m && r.method === method) {
      route = r;
      params = m.slice(1);
      break;
    }
  }
  if (!route) throw new PageError(404, 'There is no console page at this address.');
  // Every console page reads the store (the session at least): bounded per client address.
  const budget = await deps.services.limiter.take('console:' + address, deps.services.config.limits.publicRequestsPerMinute);
  if (!budget.allowed) throw new PageError(429, 'Too many console requests from this address; wait a minute and try again.');
  const session = await findSession(deps.services.pool, cookieValue(ctx.header('cookie'), SESSION_COOKIE));
  if (route.access !== 'public' && session === undefined) {
    if (method === 'GET') return redirect(ctx, '/console/signin');
    throw new PageError(401, 'You are not signed in (or your session ended). Ask for a new sign-in link.');
  }
  if (method === 'POST' && !sameOrigin(deps, ctx)) throw new PageError(403, 'The form was sent from another site.');
  const form = method === 'POST' ? await readForm(ctx) : new URLSearchParams();
  if (route.access === 'csrf' && !csrfOk(session!, form.get('csrf') ?? ctx.header('x-csrf-token'))) {
    throw new PageError(403, 'The form was not sent from this console session (missing or wrong CSRF token). Reload the page and try again.');
  }
  const p: PageCtx = { ctx, d: deps, session, query: new URLSearchParams(ctx.query), form, params };
  await route.run(p as SignedIn);
}

/**
 * A browser's post names its origin: it must be this console's (the Host it was sent to, or
 * console.url or server.publicUrl behind a proxy). "null" (a sandboxed or privacy-stripped sender) is refused too. A
 * post without Origin is not a browser's cross-site form, and the CSRF token still applies to it.
 */
function sameOrigin(deps: ConsoleDeps, ctx: HttpContext): boolean {
  const origin = ctx.header('origin');
  if (origin === undefined) return true;
  let host: string;
  try {
    host = new URL(origin).host;
  } catch {
    return false;
  }
  if (host !== '' && host === ctx.header('host')) return true;
  const configured = deps.services.config.console.url ?? deps.services.config.server.publicUrl;
  return configured !== null && host === new URL(configured).host;
}

async function readForm(ctx: HttpContext): Promise<URLSearchParams> {
  const type = (ctx.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  const body = await ctx.readBody();
  if (type === 'application/x-www-form-urlencoded') return new URLSearchParams(body.toString('utf8'));
  if (type === 'application/json') {
    // The playground's script posts JSON; only flat string fields are taken.
    let v: unknown;
    try {
      v = JSON.parse(body.toString('utf8'));
    } catch {
      throw new PageError(400, 'The body is not valid JSON.');
    }
    const out = new URLSearchParams();
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k, x] of Object.entries(v)) if (typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean') out.set(k, String(x));
    }
    return out;
  }
  if (body.length === 0) return new URLSearchParams();
  throw new PageError(415, 'Forms must be sent as application/x-www-form-urlencoded.');
}

function failPage(ctx: HttpContext, error: unknown): void {
  // Mid-stream (the playground's relay ends its own answer) there is nothing left to say.
  if (ctx.done) return;
  let status: number;
  let message: string;
  if (error instanceof PageError) {
    status = error.status;
    message = error.message;
  } else {
    const err = error instanceof ApiError ? error : toApiError(error, ctx);
    status = err.status;
    message = err.message;
  }
  const back = status === 401 ? '<p><a href="/console/signin">Sign in</a></p>' : '<p><a href="/console">Back to the console</a></p>';
  sendHtml(
    ctx,
    status,
    page(
      { title: status === 404 ? 'Not found' : 'Something went wrong' },
      `<p role="alert">${esc(message)}</p><p class="muted">Request id ${esc(ctx.requestId)}</p>${back}`,
    ),
  );
}

/** Where this process reaches its own /v1 (the playground's calls): a wildcard listen address on loopback. */
export function selfBaseUrl(host: string, port: number): string {
  const h = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') ? `[${host}]` : host;
  return `http://${h}:${port}`;
}
