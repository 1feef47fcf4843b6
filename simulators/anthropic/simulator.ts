// Anthropic Messages API simulator: a real HTTP server (node:http, 127.0.0.1, port 0) that
// answers `POST /v1/messages` (JSON or SSE) and `POST /v1/messages/count_tokens` (planned in
// count-tokens.ts) in the wire form of the real API (compact JSON, `event:` + `data:` frames, a `ping`
// after the first content_block_start, `request-id` header, error envelope
// `{"type":"error","error":{"type","message"},"request_id"}`). It is the vendor in tests, in
// `npm run demo`, and the "vendor called directly" baseline of the bench, so the per-request
// work is one JSON.parse, one walk over the body and string templates.
//
// Auth: the key must equal opts.apiKey, sent as `x-api-key` (SDK 0.x, curl) or as
// `Authorization: Bearer` (what @anthropic-ai/sdk 1.x sends for `apiKey`); both headers at once
// or a wrong key answer 401 authentication_error. `anthropic-version` is required (400). Every request is recorded (bounded) with its headers and parsed body.
// Numbers (input/cache/output tokens) are deterministic: the formulas are in scenarios.ts.
//
// Replies: text "Echo: <words of the last user message>" padded with filler to `replyTokens`
// pieces (default 12); thinking blocks (thinking_delta pieces + one signature_delta) when
// `thinking` is enabled or adaptive; a tool_use block (input_json_delta pieces, stop_reason
// tool_use) when tools are given and the last user text says "use the tool", or tool_choice
// is any/tool, or `[[sim:tool]]`. A user turn answering with tool_result gets a text reply.
// Thinking blocks sent back must carry the signature the simulator gave them (400 otherwise),
// and with thinking on, the assistant tool turn being answered must start with its thinking
// block, as the real API demands. `max_tokens` cuts the reply (stop_reason max_tokens),
// `stop_sequences` end it (stop_reason stop_sequence). The `model` received is echoed.
//
// Failure modes and shaping are chosen by directives in the LAST USER MESSAGE's text (headers
// do not pass through the gateway), or for every request by opts.scenario / setScenario():
//   [[sim:status=N]]            answer HTTP N before any byte (400 invalid_request_error,
//                               401, 402 billing_error, 403, 404 not_found_error, 413
//                               request_too_large, 422, 429 rate_limit_error, 500 api_error,
//                               503, 504 timeout_error, 529 overloaded_error); 429 and 529
//                               carry `retry-after` (default 12 s)
//   [[sim:retry-after=S]]       the retry-after seconds for 429/529
//   [[sim:prompt-too-long]]     400 "prompt is too long: N tokens > 200000 maximum"
//   [[sim:overloaded-midstream]] stream: `event: error` overloaded_error after half the
//                               content deltas, then the response ends; non-stream: 529
//   [[sim:cut-before-delta]]    stream ends cleanly (HTTP-wise) before message_delta
//   [[sim:cut-before-stop]]     stream ends after message_delta, before message_stop
//   [[sim:reset-before-delta]], [[sim:reset-before-stop]]  same, but the connection is
//                               closed without the chunked terminator (a dropped connection)
//   [[sim:cut=N]], [[sim:reset=N]], [[sim:stall=N]]  stop after N frames
//   [[sim:stall-before-delta]], [[sim:stall-before-stop]], [[sim:stall-midstream]]
//                               stop sending (connection held open) at that point
//   [[sim:stall-before-headers]] read the request, never answer
//   [[sim:stall-after-headers]] send 200 headers, then nothing (alias [[sim:stall-headers]])
//                               (non-stream: cut/reset send half the JSON body; stall-*
//                               after headers sends headers and half the body)
//   [[sim:chunk=N]]             write N bytes at a time ([[sim:chunking=byte]] = 1)
//   [[sim:split]]               split writes before and after every CR and LF
//                               ([[sim:chunking=split]]); [[sim:chunking=event]] = default
//   [[sim:crlf]], [[sim:cr]], [[sim:lf]]  SSE line endings
//   [[sim:pace=MS]]             ms between content deltas (non-stream: MS x output tokens
//                               before the response)
//   [[sim:tokens=N]]            text reply length in pieces (tokens)
//   [[sim:thinking-tokens=N]]   thinking length in pieces (when thinking is on)
//   [[sim:tool]], [[sim:tool=NAME]]  force a tool call
//   [[sim:cache=write|read|none]] force the prompt-cache bucket
//   [[sim:delta-usage=output]]  message_delta usage carries only output_tokens (older form)
// An unknown or malformed directive answers 400 invalid_request_error naming it.

import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventEmitter } from 'node:events';
import {
  SimRequestError,
  countInput,
  emptyDirectives,
  lastUserTurn,
  parseDirectives,
  planReply,
  prefixKey,
  validateMessagesBody,
  type InputCount,
  type PlannedBlock,
  type ReplyPlan,
  type SimDirectives,
} from './scenarios.js';
import { readBody } from '../read-json-body.js';
import { COUNT_TOKENS_PATH, planCountTokens, type CountTokensPlan } from './count-tokens.js';

export const DEFAULT_SIM_API_KEY = 'sk-ant-sim-key-0000';
const DEFAULT_RETRY_AFTER_S = 12;
const DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024;
const MAX_CACHE_ENTRIES = 10_000;

export type SimChunking = 'event' | 'byte' | 'split';
export type SimLineEnding = 'lf' | 'crlf' | 'cr';

export interface AnthropicSimulatorOptions {
  /** The only accepted key, as `x-api-key` or `Authorization: Bearer` (default DEFAULT_SIM_API_KEY). */
  apiKey?: string;
  /** ms between content deltas; 0 = as fast as possible (default). */
  tokenPaceMs?: number;
  chunking?: SimChunking;
  lineEnding?: SimLineEnding;
  /** Text reply length in pieces when no `[[sim:tokens=N]]` (default 12). */
  replyTokens?: number;
  /** Thinking length in pieces (default 6). */
  thinkingTokens?: number;
  /** When set, other models answer 404 not_found_error `model: <id>`. */
  models?: readonly string[];
  /**
   * When set, replies name the model `<requested>-<modelSuffix>`, as the real API answers an
   * alias with its dated snapshot (`claude-sonnet-4-5` -> `claude-sonnet-4-5-20250929`).
   */
  modelSuffix?: string;
  /** Body cap; above it 413 request_too_large (default 32 MiB, the real API's). */
  maxBodyBytes?: number;
  /** Recorded requests kept, oldest dropped first (default 1000; 0 = none). */
  maxRecordedRequests?: number;
  /** Smallest cacheable prefix in tokens (default 0; the real API needs 1024+). */
  cacheMinTokens?: number;
  /** Directives applied to every request before the message's own, e.g. '[[sim:crlf]]'. */
  scenario?: string;
}

export type SimResponseEnd = 'complete' | 'error_status' | 'cut' | 'reset' | 'stalled' | 'client_closed';

export interface RecordedRequest {
  method: string;
  /** Path with query string, as received. */
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body, or undefined when it was not JSON. */
  body: unknown;
  requestId: string;
  /** How the response ended; undefined while it is running. */
  end: SimResponseEnd | undefined;
}

export interface AnthropicSimulator {
  /** Base URL, e.g. http://127.0.0.1:PORT (the SDK's baseURL; paths start with /v1). */
  url: string;
  port: number;
  requests: RecordedRequest[];
  /** Requests received since start (not bounded like `requests`). */
  readonly requestCount: number;
  /** Emits 'request' (RecordedRequest) on arrival and 'response-end' (RecordedRequest). */
  events: EventEmitter;
  /** Resolves once `count` requests in total have arrived. */
  waitForRequests(count: number): Promise<void>;
  /** Default directives for every request (null clears). */
  setScenario(directives: string | null): void;
  /** Forgets which prompt prefixes are cached. */
  clearCache(): void;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Precomputed wire pieces.

const ORG_ID = '5f8a1c3e-0b7d-4e2a-9c61-3d2f7b8e4a10';
const BASE_HEADERS = {
  'anthropic-organization-id': ORG_ID,
  'anthropic-ratelimit-requests-limit': '4000',
  'anthropic-ratelimit-requests-remaining': '3999',
  'anthropic-ratelimit-tokens-limit': '2000000',
  'anthropic-ratelimit-tokens-remaining': '1999000',
};
const STREAM_HEADERS = { ...BASE_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };
const JSON_HEADERS = { ...BASE_HEADERS, 'content-type': 'application/json' };

const PING = 'event: ping\ndata: {"type": "ping"}\n\n';
const MESSAGE_STOP = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
const OVERLOADED_EVENT = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n';

const PRECOMPUTED_INDEXES = 8;
const deltaPrefix = (kind: string, field: string, i: number): string =>
  `event: content_block_delta\ndata: {"type":"content_block_delta","index":${i},"delta":{"type":"${kind}","${field}":`;
const table = (f: (i: number) => string): string[] => Array.from({ length: PRECOMPUTED_INDEXES }, (_, i) => f(i));
const TEXT_DELTA = table((i) => deltaPrefix('text_delta', 'text', i));
const THINKING_DELTA = table((i) => deltaPrefix('thinking_delta', 'thinking', i));
const SIGNATURE_DELTA = table((i) => deltaPrefix('signature_delta', 'signature', i));
const JSON_DELTA = table((i) => deltaPrefix('input_json_delta', 'partial_json', i));
const BLOCK_STOP = table((i) => `event: content_block_stop\ndata: {"type":"content_block_stop","index":${i}}\n\n`);
const pick = (t: string[], i: number, f: (i: number) => string): string => (i < PRECOMPUTED_INDEXES ? t[i]! : f(i));

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};
const ERROR_MESSAGES: Record<string, string> = {
  invalid_request_error: 'Invalid request.',
  authentication_error: 'invalid x-api-key',
  billing_error: 'Your credit balance is too low to access the Anthropic API.',
  permission_error: 'Your API key does not have permission to use the specified resource.',
  not_found_error: 'Not found.',
  request_too_large: 'Request exceeds the maximum allowed number of bytes.',
  rate_limit_error: 'Number of request tokens has exceeded your per-minute rate limit',
  api_error: 'Internal server error',
  timeout_error: 'Request timed out.',
  overloaded_error: 'Overloaded',
};
const errorTypeFor = (status: number): string => ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');

// ---------------------------------------------------------------------------------------------
// Rendering.

interface Usage {
  input: number;
  cacheWrite: number;
  cacheRead: number;
  cache5m: number;
  cache1h: number;
  output: number;
}

function usageJson(u: Usage, output: number): string {
  return `{"input_tokens":${u.input},"cache_creation_input_tokens":${u.cacheWrite},"cache_read_input_tokens":${u.cacheRead},"cache_creation":{"ephemeral_5m_input_tokens":${u.cache5m},"ephemeral_1h_input_tokens":${u.cache1h}},"output_tokens":${output},"service_tier":"standard"}`;
}

interface RenderedStream {
  frames: string[];
  /** Index of the first frame that follows each content delta that gets paced, as flags. */
  paced: boolean[];
  /** Frame index just after half of the content deltas. */
  midIndex: number;
}

function renderStream(id: string, model: string, plan: ReplyPlan, u: Usage, outputOnlyDelta: boolean): RenderedStream {
  const frames: string[] = [];
  const paced: boolean[] = [];
  const push = (s: string, pace: boolean): void => {
    frames.push(s);
    paced.push(pace);
  };
  push(
    `event: message_start\ndata: {"type":"message_start","message":{"id":"${id}","type":"message","role":"assistant","model":${JSON.stringify(model)},"content":[],"stop_reason":null,"stop_sequence":null,"usage":${usageJson(u, Math.min(1, plan.outputTokens))}}}\n\n`,
    false,
  );
  let deltas = 0;
  const totalDeltas = plan.blocks.reduce((n, b) => n + b.pieces.length, 0);
  let midIndex = -1;
  const delta = (s: string): void => {
    push(s, deltas > 0);
    deltas++;
    if (midIndex === -1 && deltas >= Math.ceil(totalDeltas / 2)) midIndex = frames.length;
  };
  plan.blocks.forEach((b: PlannedBlock, i: number) => {
    push(`event: content_block_start\ndata: {"type":"content_block_start","index":${i},"content_block":${blockStartJson(b)}}\n\n`, false);
    if (i === 0) push(PING, false);
    if (b.type === 'text') {
      const pre = pick(TEXT_DELTA, i, (k) => deltaPrefix('text_delta', 'text', k));
      for (const p of b.pieces) delta(`${pre}${JSON.stringify(p)}}}\n\n`);
    } else if (b.type === 'thinking') {
      const pre = pick(THINKING_DELTA, i, (k) => deltaPrefix('thinking_delta', 'thinking', k));
      for (const p of b.pieces) delta(`${pre}${JSON.stringify(p)}}}\n\n`);
      push(`${pick(SIGNATURE_DELTA, i, (k) => deltaPrefix('signature_delta', 'signature', k))}"${b.signature}"}}\n\n`, false);
    } else {
      const pre = pick(JSON_DELTA, i, (k) => deltaPrefix('input_json_delta', 'partial_json', k));
      for (const p of b.pieces) {
        if (p.length === 0) push(`${pre}""}}\n\n`, false);
        else delta(`${pre}${JSON.stringify(p)}}}\n\n`);
      }
    }
    push(
      pick(BLOCK_STOP, i, (k) => `event: content_block_stop\ndata: {"type":"content_block_stop","index":${k}}\n\n`),
      false,
    );
  });
  if (midIndex === -1) midIndex = frames.length;
  const usage = outputOnlyDelta
    ? `{"output_tokens":${plan.outputTokens}}`
    : `{"input_tokens":${u.input},"cache_creation_input_tokens":${u.cacheWrite},"cache_read_input_tokens":${u.cacheRead},"output_tokens":${plan.outputTokens}}`;
  push(
    `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"${plan.stopReason}","stop_sequence":${JSON.stringify(plan.stopSequence)}},"usage":${usage}}\n\n`,
    false,
  );
  push(MESSAGE_STOP, false);
  return { frames, paced, midIndex };
}

function blockStartJson(b: PlannedBlock): string {
  if (b.type === 'text') return '{"type":"text","text":""}';
  if (b.type === 'thinking') return '{"type":"thinking","thinking":"","signature":""}';
  return `{"type":"tool_use","id":"${b.id}","name":${JSON.stringify(b.name)},"input":{}}`;
}

function renderMessage(id: string, model: string, plan: ReplyPlan, u: Usage): string {
  const content = plan.blocks.map((b) =>
    b.type === 'text'
      ? { type: 'text', text: b.text }
      : b.type === 'thinking'
        ? { type: 'thinking', thinking: b.thinking, signature: b.signature }
        : { type: 'tool_use', id: b.id, name: b.name, input: b.input },
  );
  return `{"id":"${id}","type":"message","role":"assistant","model":${JSON.stringify(model)},"content":${JSON.stringify(content)},"stop_reason":"${plan.stopReason}","stop_sequence":${JSON.stringify(plan.stopSequence)},"usage":${usageJson(u, plan.outputTokens)}}`;
}

// ---------------------------------------------------------------------------------------------
// Output shaping: line endings and write sizes.

interface Shape {
  lineEnding: SimLineEnding;
  chunkBytes: number | undefined;
  split: boolean;
}

function applyLineEnding(s: string, le: SimLineEnding): string {
  return le === 'lf' ? s : s.replace(/\n/g, le === 'crlf' ? '\r\n' : '\r');
}

/**
 * Shaped pieces leave one per turn of the loop: Node 22 and later join the writes of one tick into
 * one HTTP chunk, which would undo the shape asked for. Whatever is written or ended after them on
 * the same response waits its turn behind them (`afterShaped`).
 */
const shapedTail = new WeakMap<ServerResponse, Promise<void>>();
const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

/** Runs `fn` once every shaped piece queued on `res` is written (at once when none is). */
function afterShaped(res: ServerResponse, fn: () => void): void {
  const tail = shapedTail.get(res);
  if (tail === undefined) fn();
  else
    shapedTail.set(
      res,
      tail.then(() => (res.destroyed ? undefined : fn())),
    );
}

/** Ends `res` after its shaped pieces. */
function endShaped(res: ServerResponse): void {
  afterShaped(res, () => res.end());
}

/** Writes `s` shaped; `cb` runs once the last piece is flushed to the socket. */
function writeShaped(res: ServerResponse, s: string, shape: Shape, cb?: () => void): void {
  if (shape.chunkBytes === undefined && !shape.split) {
    afterShaped(res, () => res.write(s, cb));
    return;
  }
  const buf = Buffer.from(s, 'utf8');
  const pieces: Buffer[] = [];
  if (shape.split) {
    let prev = 0;
    for (let i = 0; i < buf.length; i++) {
      if (buf[i] === 0x0a || buf[i] === 0x0d) {
        if (i > prev) pieces.push(buf.subarray(prev, i));
        pieces.push(buf.subarray(i, i + 1));
        prev = i + 1;
      }
    }
    if (prev < buf.length) pieces.push(buf.subarray(prev));
  } else {
    pieces.push(buf);
  }
  const size = shape.chunkBytes;
  const out: Buffer[] = [];
  for (const p of pieces) {
    if (size === undefined || p.length <= size) out.push(p);
    else for (let i = 0; i < p.length; i += size) out.push(p.subarray(i, i + size));
  }
  const run = async (): Promise<void> => {
    for (let k = 0; k < out.length; k++) {
      if (res.destroyed) return;
      res.write(out[k]!, k === out.length - 1 ? cb : undefined);
      await nextTurn();
    }
  };
  shapedTail.set(res, (shapedTail.get(res) ?? Promise.resolve()).then(run));
}

// ---------------------------------------------------------------------------------------------
// The server.

interface Active {
  timer: NodeJS.Timeout | undefined;
}

/** Every simulated model's context window, in prompt tokens (the simulator's own count). */
const CONTEXT_WINDOW_TOKENS = 200_000;

export async function startAnthropicSimulator(opts: AnthropicSimulatorOptions = {}): Promise<AnthropicSimulator> {
  const sim = new Sim(opts);
  const server = listenFor(sim, opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests: sim.requests,
    get requestCount() {
      return sim.requestCount;
    },
    events: sim.events,
    waitForRequests: (count) => sim.waitForRequests(count),
    setScenario(directives: string | null): void {
      sim.scenario = directives;
    },
    clearCache(): void {
      sim.cache.clear();
    },
    close(): Promise<void> {
      for (const a of sim.active) if (a.timer !== undefined) clearTimeout(a.timer);
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}

/** The HTTP server: reads each body up to `maxBodyBytes` (beyond, the vendor's 413) and hands it to the simulator. */
function listenFor(sim: Sim, maxBodyBytes: number): Server {
  const server = createServer((req, res) => {
    readBody(req, maxBodyBytes).then(
      (raw) => {
        try {
          sim.handle(req, res, raw ?? null);
        } catch (e) {
          // A simulator bug must show as a 500 in the test that hit it, not kill the process.
          if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: `simulator: ${(e as Error).message}` } }));
        }
      },
      () => res.destroy(),
    );
  });
  server.keepAliveTimeout = 30_000;
  return server;
}

/** One admitted request on its way to an answer. */
interface Reply {
  readonly res: ServerResponse;
  readonly rec: RecordedRequest;
  readonly state: Active;
  readonly requestId: string;
  readonly messageId: string;
  readonly model: string;
  readonly plan: ReplyPlan;
  readonly u: Usage;
  readonly d: SimDirectives;
  readonly shape: Shape;
  readonly paceMs: number;
}

/** The simulator's state and its answer to one request, step by step. */
class Sim {
  private readonly apiKey: string;
  private readonly maxRecorded: number;
  private readonly cacheMinTokens: number;
  private readonly defaults: { replyTokens: number; thinkingTokens: number };
  private readonly models: ReadonlySet<string> | undefined;
  private readonly baseShape: Shape;
  private readonly basePaceMs: number;
  scenario: string | null;
  readonly cache = new Set<string>();
  readonly requests: RecordedRequest[] = [];
  readonly events = new EventEmitter();
  readonly active = new Set<Active>();
  requestCount = 0;
  private seq = 0;
  // Ids: fixed-length, unique per simulator run, shaped like the real ones.
  private readonly runTag = (Date.now() % 1_000_000).toString(36).padStart(4, '0');

  constructor(private readonly opts: AnthropicSimulatorOptions) {
    this.apiKey = opts.apiKey ?? DEFAULT_SIM_API_KEY;
    this.maxRecorded = opts.maxRecordedRequests ?? 1000;
    this.cacheMinTokens = opts.cacheMinTokens ?? 0;
    this.defaults = { replyTokens: opts.replyTokens ?? 12, thinkingTokens: opts.thinkingTokens ?? 6 };
    this.models = opts.models ? new Set(opts.models) : undefined;
    this.baseShape = { lineEnding: opts.lineEnding ?? 'lf', chunkBytes: opts.chunking === 'byte' ? 1 : undefined, split: opts.chunking === 'split' };
    this.basePaceMs = opts.tokenPaceMs ?? 0;
    this.scenario = opts.scenario ?? null;
    this.events.setMaxListeners(100);
  }

  private nextId(prefix: string): string {
    return `${prefix}${this.runTag}${(++this.seq).toString(36).padStart(16, '0')}`;
  }

  waitForRequests(count: number): Promise<void> {
    if (this.requestCount >= count) return Promise.resolve();
    return new Promise((resolve) => {
      const on = (): void => {
        if (this.requestCount >= count) {
          this.events.off('request', on);
          resolve();
        }
      };
      this.events.on('request', on);
    });
  }

  private sendError(
    res: ServerResponse,
    rec: RecordedRequest | undefined,
    requestId: string,
    status: number,
    type: string,
    message: string,
    extra?: Record<string, string>,
  ): void {
    const body =
      status === 413 && type === 'request_too_large'
        ? JSON.stringify({ type: 'error', error: { type, message } }) // from Cloudflare: no request_id
        : JSON.stringify({ type: 'error', error: { type, message }, request_id: requestId });
    res.writeHead(status, { ...JSON_HEADERS, 'request-id': requestId, 'content-length': String(Buffer.byteLength(body)), ...extra });
    res.end(body);
    if (rec) rec.end = 'error_status';
  }

  /** Records the request and follows its response to the end. */
  private record(req: IncomingMessage, res: ServerResponse, requestId: string, body: unknown): { rec: RecordedRequest; state: Active } {
    const rec: RecordedRequest = { method: req.method ?? '', path: req.url ?? '/', headers: req.headers, body, requestId, end: undefined };
    this.requestCount++;
    if (this.maxRecorded > 0) {
      if (this.requests.length >= this.maxRecorded) this.requests.splice(0, this.requests.length - this.maxRecorded + 1);
      this.requests.push(rec);
    }
    this.events.emit('request', rec);
    const state: Active = { timer: undefined };
    this.active.add(state);
    res.on('close', () => {
      this.active.delete(state);
      if (state.timer !== undefined) clearTimeout(state.timer);
      if (rec.end === undefined) rec.end = 'client_closed';
      this.events.emit('response-end', rec);
    });
    return { rec, state };
  }

  handle(req: IncomingMessage, res: ServerResponse, raw: Buffer | null): void {
    const requestId = this.nextId('req_011CSim');
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    let body: unknown;
    try {
      body = raw === null ? undefined : JSON.parse(raw.toString('utf8'));
    } catch {
      body = undefined;
    }
    const { rec, state } = this.record(req, res, requestId, body);
    const b = this.admit(req, res, rec, requestId, path, raw, body);
    if (b === undefined) return;
    if (path === COUNT_TOKENS_PATH) return this.replyCount(res, rec, requestId, planCountTokens(b, this.scenario));
    const count = countInput(b);
    const d: SimDirectives = emptyDirectives();
    const turn = lastUserTurn(b);
    const directiveError = (this.scenario !== null ? parseDirectives(this.scenario, d) : undefined) ?? parseDirectives(turn.text, d);
    if (directiveError !== undefined) return this.sendError(res, rec, requestId, 400, 'invalid_request_error', directiveError);
    if (this.refusedByDirective(res, rec, requestId, d, count)) return;
    const u = this.usage(b, d, count);
    const plan = planReply(b, turn, d, this.defaults, () => this.nextId('toolu_01Sim'));
    u.output = plan.outputTokens;
    const r: Reply = {
      res,
      rec,
      state,
      requestId,
      plan,
      u,
      d,
      messageId: this.nextId('msg_01Sim'),
      model: this.opts.modelSuffix ? `${b.model}-${this.opts.modelSuffix}` : b.model,
      shape: {
        lineEnding: d.lineEnding ?? this.baseShape.lineEnding,
        chunkBytes: d.chunkBytes ?? this.baseShape.chunkBytes,
        split: d.splitAtLineEnds || this.baseShape.split,
      },
      paceMs: d.paceMs ?? this.basePaceMs,
    };
    if (b.stream === true) this.replyStream(r);
    else this.replyMessage(r);
  }

  /** The checks before any model work, in the vendor's order; the body when they pass, else answered. */
  private admit(
    req: IncomingMessage,
    res: ServerResponse,
    rec: RecordedRequest,
    requestId: string,
    path: string,
    raw: Buffer | null,
    body: unknown,
  ): Record<string, any> | undefined {
    const fail = (status: number, type: string, message: string, extra?: Record<string, string>): undefined => {
      this.sendError(res, rec, requestId, status, type, message, extra);
      return undefined;
    };
    if (raw === null) return fail(413, 'request_too_large', ERROR_MESSAGES.request_too_large!, { connection: 'close' });
    if (req.method !== 'POST' || (path !== '/v1/messages' && path !== COUNT_TOKENS_PATH)) return fail(404, 'not_found_error', 'Not Found');
    const xKey = req.headers['x-api-key'];
    const bearer = req.headers.authorization;
    if (xKey !== undefined && bearer !== undefined)
      return fail(401, 'authentication_error', 'Provide either an x-api-key header or an Authorization header, not both.');
    if ((xKey !== undefined ? xKey : bearer?.startsWith('Bearer ') ? bearer.slice(7) : undefined) !== this.apiKey) {
      return fail(401, 'authentication_error', xKey !== undefined ? 'invalid x-api-key' : 'Invalid bearer token');
    }
    if (!req.headers['anthropic-version']) return fail(400, 'invalid_request_error', 'anthropic-version: header is required');
    if (body === undefined) return fail(400, 'invalid_request_error', 'There was an issue with your request body: it is not valid JSON.');
    try {
      validateMessagesBody(body, path === COUNT_TOKENS_PATH);
    } catch (e) {
      if (!(e instanceof SimRequestError)) throw e;
      return fail(e.status, e.errorType, e.message);
    }
    const b = body as Record<string, any>;
    if (this.models !== undefined && !this.models.has(b.model)) return fail(404, 'not_found_error', `model: ${b.model}`);
    return b;
  }

  /** Directives that answer before any reply (a stall, an error status, a prompt too long); true when answered. */
  private refusedByDirective(res: ServerResponse, rec: RecordedRequest, requestId: string, d: SimDirectives, count: InputCount): boolean {
    if (d.stallBeforeHeaders) {
      rec.end = 'stalled';
      return true; // held open until the client leaves or close()
    }
    if (d.status !== undefined) {
      this.sendStatus(res, rec, requestId, d.status, d.retryAfterS);
      return true;
    }
    // The vendor refuses a prompt beyond the context itself, whoever sends it (or on request).
    if (d.promptTooLong || count.total > CONTEXT_WINDOW_TOKENS) {
      this.sendError(
        res,
        rec,
        requestId,
        400,
        'invalid_request_error',
        `prompt is too long: ${Math.max(count.total, CONTEXT_WINDOW_TOKENS + 1)} tokens > ${CONTEXT_WINDOW_TOKENS} maximum`,
      );
      return true;
    }
    return false;
  }

  /** `[[sim:status=N]]`: the vendor's error for N, with `retry-after` where the vendor sends one. */
  private sendStatus(res: ServerResponse, rec: RecordedRequest, requestId: string, status: number, retryAfterS: number | undefined): void {
    const type = errorTypeFor(status);
    const extra: Record<string, string> = {};
    if (status === 429 || status === 529) extra['retry-after'] = String(retryAfterS ?? DEFAULT_RETRY_AFTER_S);
    if (status === 429) extra['anthropic-ratelimit-requests-remaining'] = '0';
    this.sendError(res, rec, requestId, status, type, ERROR_MESSAGES[type] ?? 'Error', extra);
  }

  /** POST /v1/messages/count_tokens, as count-tokens.ts planned it. */
  private replyCount(res: ServerResponse, rec: RecordedRequest, requestId: string, plan: CountTokensPlan): void {
    if (plan.kind === 'invalid') return this.sendError(res, rec, requestId, 400, 'invalid_request_error', plan.message);
    if (plan.kind === 'status') return this.sendStatus(res, rec, requestId, plan.status, plan.retryAfterS);
    if (plan.kind === 'stall') {
      rec.end = 'stalled';
      return; // held open until the client leaves or close()
    }
    res.writeHead(200, { ...JSON_HEADERS, 'request-id': requestId, 'content-length': String(plan.json.length) });
    res.end(plan.json);
    rec.end = 'complete';
  }

  /** Input usage, with prompt caching (a prefix seen before is read, a new one written). */
  private usage(b: Record<string, any>, d: SimDirectives, count: InputCount): Usage {
    const u: Usage = { input: count.total, cacheWrite: 0, cacheRead: 0, cache5m: 0, cache1h: 0, output: 0 };
    if (d.cache === 'none' || count.prefixTokens <= 0 || count.prefixTokens < this.cacheMinTokens) return u;
    let hit: boolean;
    if (d.cache === 'read') hit = true;
    else if (d.cache === 'write') hit = false;
    else {
      const key = prefixKey(b, count.prefixSegments);
      hit = this.cache.has(key);
      if (!hit) {
        if (this.cache.size >= MAX_CACHE_ENTRIES) this.cache.clear();
        this.cache.add(key);
      }
    }
    if (hit) u.cacheRead = count.prefixTokens;
    else {
      u.cacheWrite = count.prefixTokens;
      if (count.prefixTtl === '1h') u.cache1h = count.prefixTokens;
      else u.cache5m = count.prefixTokens;
    }
    u.input = count.total - count.prefixTokens;
    return u;
  }

  private replyStream(r: Reply): void {
    const { res, rec, d } = r;
    res.writeHead(200, { ...STREAM_HEADERS, 'request-id': r.requestId });
    if (d.stallAfterHeaders) {
      res.flushHeaders();
      rec.end = 'stalled';
      return;
    }
    const rendered = renderStream(r.messageId, r.model, r.plan, r.u, d.deltaUsageOutputOnly);
    let upTo = rendered.frames.length;
    let terminal: Terminal = 'end';
    if (d.overloadedMidstream) {
      upTo = rendered.midIndex;
      terminal = 'error';
    } else if (d.stop !== undefined) {
      const at = d.stop.at;
      upTo =
        at === 'before-delta'
          ? rendered.frames.length - 2
          : at === 'before-stop'
            ? rendered.frames.length - 1
            : at === -1
              ? rendered.midIndex
              : Math.min(at, rendered.frames.length);
      terminal = d.stop.mode === 'cut' ? 'end' : d.stop.mode;
    }
    streamFrames(res, rec, r.state, rendered, upTo, terminal, r.shape, r.paceMs);
  }

  private replyMessage(r: Reply): void {
    const { res, rec, d, shape, requestId } = r;
    if (d.overloadedMidstream) {
      return this.sendError(res, rec, requestId, 529, 'overloaded_error', 'Overloaded', { 'retry-after': String(d.retryAfterS ?? DEFAULT_RETRY_AFTER_S) });
    }
    const json = renderMessage(r.messageId, r.model, r.plan, r.u);
    const respond = (): void => {
      r.state.timer = undefined;
      if (d.stallAfterHeaders) {
        res.writeHead(200, { ...JSON_HEADERS, 'request-id': requestId });
        res.flushHeaders();
        rec.end = 'stalled';
        return;
      }
      if (d.stop !== undefined) {
        res.writeHead(200, { ...JSON_HEADERS, 'request-id': requestId });
        const half = json.slice(0, json.length >> 1);
        const mode = d.stop.mode;
        writeShaped(res, half, { ...shape, lineEnding: 'lf' }, mode === 'reset' ? () => res.socket?.end() : undefined);
        if (mode === 'cut') endShaped(res);
        rec.end = mode === 'cut' ? 'cut' : mode === 'reset' ? 'reset' : 'stalled';
        return;
      }
      if (shape.chunkBytes === undefined && !shape.split) {
        res.writeHead(200, { ...JSON_HEADERS, 'request-id': requestId, 'content-length': String(Buffer.byteLength(json)) });
        res.end(json);
      } else {
        res.writeHead(200, { ...JSON_HEADERS, 'request-id': requestId });
        writeShaped(res, json, { ...shape, lineEnding: 'lf' });
        endShaped(res);
      }
      rec.end = 'complete';
    };
    if (r.paceMs > 0) r.state.timer = setTimeout(respond, r.paceMs * r.plan.outputTokens);
    else respond();
  }
}

type Terminal = 'end' | 'reset' | 'stall' | 'error';

/** Writes frames [0, upTo) (all at once, or paced one token apart), then ends as `terminal` says. */
function streamFrames(
  res: ServerResponse,
  rec: RecordedRequest,
  state: Active,
  r: RenderedStream,
  upTo: number,
  terminal: Terminal,
  shape: Shape,
  paceMs: number,
): void {
  const finish = (): void => {
    if (terminal === 'end') {
      endShaped(res);
      rec.end = upTo === r.frames.length ? 'complete' : 'cut';
    } else if (terminal === 'error') {
      writeShaped(res, applyLineEnding(OVERLOADED_EVENT, shape.lineEnding), shape);
      endShaped(res);
      rec.end = 'cut';
    } else if (terminal === 'reset') {
      rec.end = 'reset';
      // Close the connection without the chunked terminator once the bytes are flushed.
      afterShaped(res, () => res.write('', () => res.socket?.end()));
    } else {
      rec.end = 'stalled';
    }
  };
  if (paceMs <= 0) {
    let s = '';
    for (let i = 0; i < upTo; i++) s += r.frames[i];
    if (s.length > 0) writeShaped(res, applyLineEnding(s, shape.lineEnding), shape);
    else res.flushHeaders();
    finish();
    return;
  }
  let i = 0;
  const step = (): void => {
    state.timer = undefined;
    if (res.destroyed) return;
    let s = '';
    do {
      s += r.frames[i];
      i++;
    } while (i < upTo && !r.paced[i]);
    writeShaped(res, applyLineEnding(s, shape.lineEnding), shape);
    if (i >= upTo) finish();
    else state.timer = setTimeout(step, paceMs);
  };
  if (upTo === 0) {
    res.flushHeaders();
    finish();
  } else step();
}
