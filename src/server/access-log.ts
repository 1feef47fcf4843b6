// The access log: one `info` line per finished request on the public port, so an operator sees
// what each client was answered, and with which code and `param` a request was refused:
//   {"level":"info","time":"...","request_id":"req_...","key_prefix":"svc_AbCdEfGh",
//    "method":"POST","route":"/v1/messages","status":400,"duration_ms":1.2,
//    "client":"203.0.113.9","code":"invalid_message","param":"messages[1].role","msg":"http.request"}
// `route` is the route's pattern (`/v1/generations/:id`), `console`, `media` or `unmatched`;
// `status` 0 means the client went away before any answer. Never the path itself (a client may
// put anything there, a key included: test/reliability/auth-leaks.test.ts sends one), a query
// string (signed links carry their signature there), a header value, a key or a body. It carries
// the bindings every request-scoped line has (request_id, key_prefix) as its first fields rather
// than through a child logger: a child per request would serialize them once more for the one
// line it writes. One fields object and one line per request: the bench measures its cost
// (docs/performance.md).
import type { Logger } from '../util/log.js';
import type { HttpContext } from './http-context.js';

export type AccessLog = (ctx: HttpContext, route: string, startedMs: number) => void;

export function createAccessLog(log: Logger): AccessLog {
  return (ctx, route, startedMs) => {
    const fields: Record<string, unknown> = {
      request_id: ctx.requestId,
      key_prefix: ctx.auth?.keyPrefix ?? null,
      method: ctx.method,
      route,
      status: ctx.status,
      duration_ms: Math.round((performance.now() - startedMs) * 10) / 10,
      client: ctx.caller ?? ctx.remoteAddress,
    };
    const err = ctx.error;
    if (err !== undefined) {
      fields.code = err.code;
      fields.param = err.param ?? null;
    }
    if (ctx.aborted && !ctx.responded) fields.aborted = true;
    log.info(fields, 'http.request');
  };
}
