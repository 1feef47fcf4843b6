// The access log: one `info` line per finished request on the public port, so an operator sees
// what each client was answered, and with which code and `param` a request was refused:
//   {"level":"info","time":"...","request_id":"req_...","key_prefix":"svc_AbCdEfGh",
//    "method":"POST","route":"/v1/messages","status":400,"duration_ms":1.2,
//    "client":"203.0.113.9","code":"invalid_message","param":"messages[1].role","msg":"http.request"}
// `route` is the route's pattern (`/v1/generations/:id`), `console`, `media`, `unmatched` or
// `framing`; `status` 499 with `code: "client_closed"` means the client went away before its
// answer was complete. Never the path itself (a client may
// put anything there, a key included: test/reliability/auth-leaks.test.ts sends one), a query
// string (signed links carry their signature there), a header value, a key or a body. It carries
// the bindings every request-scoped line has (request_id, key_prefix) as its first fields rather
// than through a child logger: a child per request would serialize them once more for the one
// line it writes. One line per request, its fields serialised here (Logger.infoLine): the bench
// measures its cost (docs/performance.md). What the client chose and the line repeats (the method, `param`, the
// address a trusted proxy reported) is cut to a few hundred characters: a line stays small whatever
// a request carries. A 5xx line also carries `loopDelayMs`, the event loop's delay at that moment.
import { clipped } from '../errors.js';
import type { Logger } from '../util/log.js';
import { loopDelayMs } from '../util/loop-delay.js';
import type { HttpContext } from './http-context.js';

export type AccessLog = (ctx: HttpContext, route: string, startedMs: number) => void;

export function createAccessLog(log: Logger): AccessLog {
  const line = log.infoLine;
  if (line === undefined) return (ctx, route, startedMs) => log.info(accessFields(ctx, route, startedMs), 'http.request');
  // The same fields in the same order, serialised here: pino's generic walk of a fields object was
  // most of the line's cost (the request budget in docs/performance.md).
  return (ctx, route, startedMs) => {
    const err = ctx.error;
    const prefix = ctx.auth?.keyPrefix;
    let text =
      `"request_id":"${ctx.requestId}","key_prefix":${prefix === undefined ? 'null' : JSON.stringify(prefix)},` +
      `"method":${JSON.stringify(clipped(ctx.method, 32))},"route":${JSON.stringify(route)},"status":${ctx.loggedStatus},` +
      `"duration_ms":${Math.round((performance.now() - startedMs) * 10) / 10},"client":${JSON.stringify(clipped(ctx.caller ?? ctx.remoteAddress))}`;
    if (ctx.clientClosed) text += ',"code":"client_closed","param":null';
    else if (err !== undefined) text += `,"code":${JSON.stringify(err.code)},"param":${err.param === undefined ? 'null' : JSON.stringify(clipped(err.param))}`;
    // A 5xx (a store or limiter timeout's 503 among them) says how late our own timers ran then,
    // so a stall of this process is not read as the peer's slowness (util/loop-delay.ts).
    if (ctx.loggedStatus >= 500) text += `,"loopDelayMs":${loopDelayMs() ?? 'null'}`;
    // A turn on a WebSocket (Responses over one socket): one line per turn, each with its own request id.
    if (ctx.transport === 'websocket') text += ',"transport":"websocket"';
    if (ctx.tries > 0)
      text += `,"vendor_deployment":${ctx.vendorDeployment === undefined ? 'null' : JSON.stringify(ctx.vendorDeployment)},"tries":${ctx.tries}`;
    line(text, 'http.request');
  };
}

/** The line's fields as an object, for a logger that cannot take them serialised. */
function accessFields(ctx: HttpContext, route: string, startedMs: number): Record<string, unknown> {
  const fields: Record<string, unknown> = {
    request_id: ctx.requestId,
    key_prefix: ctx.auth?.keyPrefix ?? null,
    method: clipped(ctx.method, 32),
    route,
    status: ctx.loggedStatus,
    duration_ms: Math.round((performance.now() - startedMs) * 10) / 10,
    client: clipped(ctx.caller ?? ctx.remoteAddress),
  };
  const err = ctx.error;
  if (ctx.clientClosed) {
    fields.code = 'client_closed';
    fields.param = null;
  } else if (err !== undefined) {
    fields.code = err.code;
    fields.param = err.param === undefined ? null : clipped(err.param);
  }
  if (ctx.loggedStatus >= 500) fields.loopDelayMs = loopDelayMs() ?? null;
  if (ctx.transport === 'websocket') fields.transport = 'websocket';
  if (ctx.tries > 0) {
    fields.vendor_deployment = ctx.vendorDeployment ?? null;
    fields.tries = ctx.tries;
  }
  return fields;
}
