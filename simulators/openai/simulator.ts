// OpenAI Responses API simulator: a real HTTP server (node:http on 127.0.0.1) answering
// `POST /v1/responses`, non-stream JSON and `stream: true` SSE, in the same form as the recorded
// vendor streams in test/fixtures/openai (every frame `event: <type>\ndata: <compact json>\n\n`,
// sequence_number from 0, full response snapshots in response.created / in_progress / the
// terminal event, no `[DONE]`). It is the "vendor called directly" baseline in benchmarks, so a
// plain reply is planned in one pass over the body and written with one `res.end`.
//
// URL: `sim.url` is the base URL *including* `/v1` (http://127.0.0.1:PORT/v1), the form the
// official SDK's `baseURL` and INKGATE_OPENAI_BASE_URL take; requests go to `${url}/responses`.
// `sim.origin` is the same without `/v1`.
//
// Auth: `Authorization: Bearer <apiKey>` (default apiKey 'sk-sim-openai'); anything else 401
// invalid_api_key. Bodies above maxBodyBytes (default 8 MiB) get 413. Validation: `model` must be
// a string (400 missing_required_parameter); `max_output_tokens`, when not null, an integer >= 16
// (400 integer_below_min_value, as the real API). Other paths: 404 "Invalid URL (METHOD /path)".
// Error bodies are the OpenAI envelope {"error":{"message","type","param","code"}}; every reply
// carries `x-request-id`.
//
// Reply (numbers are in simulator-reply.ts, top comment): text by default (8 delta pieces,
// "This is a simulated reply from the vendor."); a reasoning item first when `reasoning` is
// requested (with a streamed summary when reasoning.summary is set); a function_call when `tools`
// has a function tool and the last input item is a user message containing "use the tool" (or
// tool_choice is "required" / a named function); after a function_call_output the reply is the
// text "Tool result: <output>". `max_output_tokens` clips reasoning first, then the visible
// pieces, and ends with status "incomplete", incomplete_details.reason "max_output_tokens",
// terminal event `response.incomplete`. The request's `model` is echoed in every snapshot.
//
// Directives: `[[sim:NAME]]` or `[[sim:NAME=N]]` anywhere in `instructions` or in the text of any
// input item (headers do not pass through the gateway). At most 32 are read; unknown names are
// ignored; for cut/reset/stall the first one wins.
//   status=N         (400..599) answer HTTP N before any byte: 400 invalid_request_error, 401, 403, 404
//                    model_not_found, 409, 413, 422, 429 rate_limit_exceeded (+ retry-after and
//                    x-ratelimit-* headers), 500 server_error, 502, 503 (+ retry-after); other N
//                    get a generic envelope
//   retry-after=S    retry-after seconds for 429/503 (default 1)
//   failed           stream: created, in_progress, `error` event (nested first-party shape, as the
//                    recorded stream), `response.failed` with usage null. Non-stream: 200 with
//                    status "failed", error {code:"server_error"}, usage null
//   error-flat       with failed: the `error` event in the flat SDK shape {type,code,message,param}
//   cut[=N]          end the body cleanly after N frames (default: every frame before the terminal
//                    event). Non-stream: half the JSON body, then a clean end
//   reset[=N]        destroy the socket after N frames (default as cut). Non-stream: after half
//   stall[=N]        stop writing after N frames (default: through the first delta) and hold the
//                    connection until the client leaves or close(). Non-stream: after half
//   stall-headers    never answer (no status line); held until the client leaves or close()
//   no-usage         terminal snapshot (and non-stream body) with usage null
//   chunk=N          write the body N bytes at a time (chunk=1: byte by byte, one write each,
//                    yielding to the event loop between writes)
//   crlf             CRLF line endings in the SSE body
//   pace=MS          wait MS before each delta frame (overrides opts.tokenPaceMs); non-stream
//                    waits MS * output_tokens before answering
//   tokens=N         reply length in text delta pieces (1..200000)
//   reasoning=N      force a reasoning item worth N reasoning tokens
//   cached=N         cached_tokens = min(N, input_tokens)
//   cache-write=N    add input_tokens_details.cache_write_tokens = min(N, input - cached)
//   trailer-comment  append `: service.usage {...}` after the terminal event (SDK compatibility checks)
//   trailer-event    append `event: service.usage` + data after the terminal event
//   done             append `data: [DONE]` (what OpenAI-compatible servers send; the real API does not)

import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';
import { IdSource, planReply, readRequestFacts, type ReplyPlan, type SimDirectives } from './simulator-reply.js';
import { readBody } from '../read-json-body.js';

export { simulatedInputTokens, DEFAULT_REPLY_TOKENS } from './simulator-reply.js';

export interface OpenAISimulatorOptions {
  apiKey?: string;
  /** Delay before each delta frame, in ms (default 0); `[[sim:pace=N]]` overrides per request. */
  tokenPaceMs?: number;
  /** Requests kept in `requests` (oldest dropped first); default 1000, 0 keeps none. */
  maxRecordedRequests?: number;
  /** Largest request body accepted; default 8 MiB (the gateway caps text bodies at 4 MiB). */
  maxBodyBytes?: number;
  /** Default 0 (any free port). */
  port?: number;
  /**
   * When set, replies name the model `<requested>-<modelSuffix>`, as the real API answers with a
   * dated snapshot (`gpt-5-mini` -> `gpt-5-mini-2025-08-07`).
   */
  modelSuffix?: string;
}

export interface RecordedRequest {
  method: string;
  /** Path with query string, as received. */
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body; undefined when empty or not JSON. */
  body: unknown;
  /** -1 when the body passed maxBodyBytes (answered 413). */
  bodyBytes: number;
}

export interface OpenAISimulator {
  /** Base URL including `/v1`, e.g. http://127.0.0.1:41234/v1 (the SDK's baseURL form). */
  url: string;
  /** Same without `/v1`. */
  origin: string;
  apiKey: string;
  requests: RecordedRequest[];
  /** Every request received since the start, recorded or not. */
  readonly requestCount: number;
  close(): Promise<void>;
}

const DEFAULT_API_KEY = 'sk-sim-openai';
const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
const SSE_CONTENT_TYPE = 'text/event-stream; charset=utf-8';
const JSON_CONTENT_TYPE = 'application/json';

interface ErrorShape {
  type: string;
  code: string | null;
  message: string;
}

function errorFor(status: number, model: string): ErrorShape {
  switch (status) {
    case 400:
      return { type: 'invalid_request_error', code: 'invalid_value', message: 'Invalid request (simulated).' };
    case 401:
      return { type: 'invalid_request_error', code: 'invalid_api_key', message: 'Incorrect API key provided (simulated).' };
    case 403:
      return {
        type: 'invalid_request_error',
        code: 'unsupported_country_region_territory',
        message: 'Country, region, or territory not supported (simulated).',
      };
    case 404:
      return { type: 'invalid_request_error', code: 'model_not_found', message: `The model \`${model}\` does not exist or you do not have access to it.` };
    case 409:
      return { type: 'invalid_request_error', code: 'conflict', message: 'The request conflicted with another request (simulated).' };
    case 413:
      return { type: 'invalid_request_error', code: 'request_too_large', message: 'Request too large (simulated).' };
    case 422:
      return { type: 'invalid_request_error', code: 'unprocessable_entity', message: 'The request could not be processed (simulated).' };
    case 429:
      return { type: 'requests', code: 'rate_limit_exceeded', message: `Rate limit reached for ${model} on requests per min (RPM) (simulated).` };
    case 500:
      return { type: 'server_error', code: null, message: 'The server had an error while processing your request. Sorry about that! (simulated)' };
    case 502:
      return { type: 'server_error', code: null, message: 'Bad gateway (simulated).' };
    case 503:
      return { type: 'server_error', code: null, message: 'The engine is currently overloaded, please try again later. (simulated)' };
    default:
      return { type: status >= 500 ? 'server_error' : 'invalid_request_error', code: null, message: `Simulated HTTP ${status}.` };
  }
}

function envelope(e: ErrorShape, param: string | null): string {
  return JSON.stringify({ error: { message: e.message, type: e.type, param, code: e.code } });
}

export async function startOpenAISimulator(opts: OpenAISimulatorOptions = {}): Promise<OpenAISimulator> {
  const apiKey = opts.apiKey ?? DEFAULT_API_KEY;
  const maxRecorded = opts.maxRecordedRequests ?? 1000;
  const requests: RecordedRequest[] = [];
  const ctx: SimContext = {
    expectedAuth: `Bearer ${apiKey}`,
    defaultPaceMs: opts.tokenPaceMs ?? 0,
    maxBodyBytes: opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
    ids: new IdSource(),
    requestIds: new IdSource(),
    modelSuffix: opts.modelSuffix,
    record(r: RecordedRequest): void {
      if (maxRecorded <= 0) return;
      requests.push(r);
      if (requests.length > maxRecorded) requests.shift();
    },
  };

  let requestCount = 0;
  const server = createServer({ noDelay: true }, (req, res) => {
    requestCount++;
    handle(ctx, req, res).catch(() => {
      // Reading the body failed (client left mid-upload) or a write raced a close.
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'content-type': JSON_CONTENT_TYPE });
        res.end(envelope(errorFor(500, ''), null));
      } else {
        res.destroy();
      }
    });
  });

  server.listen(opts.port ?? 0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  const origin = `http://127.0.0.1:${port}`;
  let closing: Promise<void> | undefined;

  return {
    url: `${origin}/v1`,
    origin,
    apiKey,
    requests,
    get requestCount() {
      return requestCount;
    },
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

function sendError(res: ServerResponse, requestId: string, status: number, e: ErrorShape, param: string | null, retryAfterS?: number): void {
  const headers: Record<string, string> = {
    'content-type': JSON_CONTENT_TYPE,
    'x-request-id': requestId,
  };
  if (status === 429 || status === 503) headers['retry-after'] = String(retryAfterS ?? 1);
  if (status === 429) {
    headers['x-ratelimit-limit-requests'] = '60';
    headers['x-ratelimit-remaining-requests'] = '0';
    headers['x-ratelimit-reset-requests'] = `${retryAfterS ?? 1}s`;
  }
  if (status === 401) headers['www-authenticate'] = 'Bearer';
  res.writeHead(status, headers);
  res.end(envelope(e, param));
}

/** What the vendor answers 400 for in a body, checked in its order; undefined when it passes. */
function bodyRefusal(body: unknown, parseFailed: boolean): { e: ErrorShape; param: string | null } | undefined {
  if (parseFailed || typeof body !== 'object' || body === null || Array.isArray(body)) {
    return {
      e: {
        type: 'invalid_request_error',
        code: null,
        message: "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly.)",
      },
      param: null,
    };
  }
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model.length === 0) {
    return { e: { type: 'invalid_request_error', code: 'missing_required_parameter', message: "Missing required parameter: 'model'." }, param: 'model' };
  }
  const mot = b.max_output_tokens;
  if (mot === undefined || mot === null) return undefined;
  if (typeof mot !== 'number' || !Number.isInteger(mot)) {
    return {
      e: { type: 'invalid_request_error', code: 'invalid_type', message: "Invalid type for 'max_output_tokens': expected an integer." },
      param: 'max_output_tokens',
    };
  }
  if (mot < 16) {
    return {
      e: {
        type: 'invalid_request_error',
        code: 'integer_below_min_value',
        message: `Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got ${mot} instead.`,
      },
      param: 'max_output_tokens',
    };
  }
  return undefined;
}

/** What one simulator's handler reads. */
interface SimContext {
  readonly expectedAuth: string;
  readonly defaultPaceMs: number;
  readonly maxBodyBytes: number;
  readonly ids: IdSource;
  readonly requestIds: IdSource;
  readonly modelSuffix: string | undefined;
  record(r: RecordedRequest): void;
}

async function handle(c: SimContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const startedMs = Date.now();
  const requestId = `req_${c.requestIds.next(32)}`;
  const path = req.url ?? '/';
  const q = path.indexOf('?');
  const pathname = q === -1 ? path : path.slice(0, q);
  const method = req.method ?? 'GET';

  const raw = await readBody(req, c.maxBodyBytes);
  if (raw === undefined) {
    c.record({ method, path, headers: req.headers, body: undefined, bodyBytes: -1 });
    // Answer at once and close the connection after the answer; the rest of the upload is dropped.
    res.setHeader('connection', 'close');
    sendError(
      res,
      requestId,
      413,
      { type: 'invalid_request_error', code: 'request_too_large', message: `Request body exceeds ${c.maxBodyBytes} bytes.` },
      null,
    );
    return;
  }
  let body: unknown;
  let parseFailed = false;
  if (raw.length > 0) {
    try {
      body = JSON.parse(raw.toString('utf8'));
    } catch {
      parseFailed = true;
    }
  }
  c.record({ method, path, headers: req.headers, body, bodyBytes: raw.length });

  if (method !== 'POST' || pathname !== '/v1/responses') {
    sendError(res, requestId, 404, { type: 'invalid_request_error', code: null, message: `Invalid URL (${method} ${pathname})` }, null);
    return;
  }
  if (req.headers.authorization !== c.expectedAuth) {
    sendError(res, requestId, 401, errorFor(401, ''), null);
    return;
  }
  const refused = bodyRefusal(body, parseFailed);
  if (refused !== undefined) return sendError(res, requestId, 400, refused.e, refused.param);
  const b = body as Record<string, unknown> & { model: string };
  const facts = readRequestFacts(b);
  const d = facts.directives;
  if (d.stallHeaders) return; // held until the client leaves or close() destroys the socket
  if (d.status !== undefined) {
    sendError(res, requestId, d.status, errorFor(d.status, b.model), null, d.retryAfterS);
    return;
  }
  const stream = b.stream === true;
  const plan = planReply(b, facts, { ids: c.ids, createdAtS: Math.floor(startedMs / 1000), modelSuffix: c.modelSuffix }, stream);
  const paceMs = d.paceMs ?? c.defaultPaceMs;
  if (stream) await sendStream(res, requestId, startedMs, plan, d, paceMs);
  else await sendJson(res, requestId, startedMs, plan, d, paceMs);
}

function baseHeaders(requestId: string, startedMs: number, contentType: string): Record<string, string> {
  return {
    'content-type': contentType,
    'x-request-id': requestId,
    'openai-version': '2020-10-01',
    'openai-processing-ms': String(Date.now() - startedMs),
  };
}

/** Resolves false when the client left (or close() ran) before the wait ended. */
async function wait(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}

async function drained(res: ServerResponse, signal: AbortSignal): Promise<boolean> {
  try {
    await once(res, 'drain', { signal });
    return true;
  } catch {
    return false;
  }
}

/** Writes data, chunkBytes at a time when set; honours backpressure. False when the client left. */
async function writeOut(res: ServerResponse, data: string, chunkBytes: number | undefined, signal: AbortSignal): Promise<boolean> {
  if (chunkBytes === undefined) {
    if (!res.write(data) && !(await drained(res, signal))) return false;
    return !signal.aborted;
  }
  const buf = Buffer.from(data, 'utf8');
  for (let off = 0; off < buf.length; off += chunkBytes) {
    if (signal.aborted) return false;
    if (!res.write(buf.subarray(off, off + chunkBytes)) && !(await drained(res, signal))) return false;
    // Let each small write leave as its own packet rather than coalescing with the next.
    await tick();
  }
  return !signal.aborted;
}

function abortOnClose(res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.once('close', () => ac.abort());
  return ac.signal;
}

function finish(res: ServerResponse, mode: 'end' | 'cut' | 'reset' | 'stall'): void {
  if (mode === 'reset') res.socket?.destroy();
  else if (mode !== 'stall') res.end();
  // 'stall': leave the response open; the client's timeout or close() ends it.
}

async function sendStream(res: ServerResponse, requestId: string, startedMs: number, plan: ReplyPlan, d: SimDirectives, paceMs: number): Promise<void> {
  const frames = plan.frames;
  const headers = baseHeaders(requestId, startedMs, SSE_CONTENT_TYPE);
  // Fast path: the whole stream in one write.
  if (d.stop === undefined && d.chunkBytes === undefined && paceMs === 0) {
    let text = frames.join('');
    if (d.crlf) text = text.replace(/\n/g, '\r\n');
    res.writeHead(200, headers);
    res.end(text);
    return;
  }
  let count = frames.length;
  if (d.stop !== undefined) {
    const fallback = d.stop.mode === 'stall' && plan.firstDeltaIndex !== -1 ? plan.firstDeltaIndex + 1 : plan.terminalIndex;
    count = Math.min(d.stop.afterFrames ?? fallback, frames.length);
  }
  const signal = abortOnClose(res);
  res.writeHead(200, headers);
  res.flushHeaders();
  for (let i = 0; i < count; i++) {
    if (paceMs > 0 && plan.isDelta[i] && !(await wait(paceMs, signal))) return;
    const frame = d.crlf ? frames[i]!.replace(/\n/g, '\r\n') : frames[i]!;
    if (!(await writeOut(res, frame, d.chunkBytes, signal))) return;
  }
  finish(res, d.stop?.mode ?? 'end');
}

async function sendJson(res: ServerResponse, requestId: string, startedMs: number, plan: ReplyPlan, d: SimDirectives, paceMs: number): Promise<void> {
  const body = plan.finalJson;
  const outputTokens = plan.usage?.output ?? 0;
  if (d.stop === undefined && d.chunkBytes === undefined && (paceMs === 0 || outputTokens === 0)) {
    const headers = baseHeaders(requestId, startedMs, JSON_CONTENT_TYPE);
    headers['content-length'] = String(Buffer.byteLength(body));
    res.writeHead(200, headers);
    res.end(body);
    return;
  }
  const signal = abortOnClose(res);
  if (paceMs > 0 && outputTokens > 0 && !(await wait(paceMs * outputTokens, signal))) return;
  const headers = baseHeaders(requestId, startedMs, JSON_CONTENT_TYPE);
  const part = d.stop === undefined ? body : body.slice(0, Math.floor(body.length / 2));
  if (d.stop === undefined) headers['content-length'] = String(Buffer.byteLength(body));
  res.writeHead(200, headers);
  if (!(await writeOut(res, part, d.chunkBytes, signal))) return;
  finish(res, d.stop?.mode ?? 'end');
}
