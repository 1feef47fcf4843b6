// Reply planning for the OpenAI Responses simulator: reads a request body once, decides the reply
// (text, function call, reasoning, truncation, failure) and renders it as the exact SSE frames or
// JSON body the real API sends. Pure: no I/O, no clock except the `createdAtS` it is given.
// The HTTP side (auth, body caps, pacing, cutting, stalling) is in simulator.ts.
//
// Deterministic numbers (documented in simulator.ts, asserted in test/vendors/openai-simulator.test.ts):
//   input_tokens  = ceil(C / 4) + 4 * items + (instructions non-empty ? 4 : 0)
//                   C = characters (UTF-16 units) of instructions + every text in `input` (message
//                   text parts or string content, function_call_output output, function_call name
//                   and arguments, reasoning summary text) + JSON.stringify(tools) when tools is a
//                   non-empty array; items = 1 for a string `input`, else the input array length.
//                   Monotone: adding text or items never lowers it. Directive text counts too.
//   cached_tokens = floor(input_tokens / 2) when `prompt_cache_key` is a non-empty string, else 0;
//                   `[[sim:cached=N]]` sets it to min(N, input_tokens).
//   cache_write_tokens: absent unless `[[sim:cache-write=N]]` (then min(N, input - cached)).
//   reasoning_tokens: 0 without `reasoning`; with `reasoning` (effort not "none"): minimal 4,
//                   low 8, medium or unset 16, high 32, xhigh 64; `[[sim:reasoning=N]]` forces N.
//   output_tokens = reasoning_tokens + number of delta pieces (text or function-call arguments),
//                   clipped to max_output_tokens (reasoning is spent first, as real models do).

import { randomBytes } from 'node:crypto';

export type StopMode = 'cut' | 'reset' | 'stall';

export interface SimDirectives {
  /** Answer this HTTP error status before any byte of a reply. */
  status: number | undefined;
  retryAfterS: number | undefined;
  failed: boolean;
  /** Error event in the flat SDK shape instead of the nested first-party one. */
  errorFlat: boolean;
  stop: { mode: StopMode; afterFrames: number | undefined } | undefined;
  stallHeaders: boolean;
  noUsage: boolean;
  chunkBytes: number | undefined;
  crlf: boolean;
  paceMs: number | undefined;
  tokens: number | undefined;
  reasoningTokens: number | undefined;
  cachedTokens: number | undefined;
  cacheWriteTokens: number | undefined;
  trailerComment: boolean;
  trailerEvent: boolean;
  done: boolean;
}

export const MAX_SIM_TOKENS = 200_000;
const MAX_DIRECTIVES = 32;
const DIRECTIVE_RE = /\[\[sim:([a-z-]+)(?:=(\d{1,9}))?\]\]/g;

function emptyDirectives(): SimDirectives {
  return {
    status: undefined,
    retryAfterS: undefined,
    failed: false,
    errorFlat: false,
    stop: undefined,
    stallHeaders: false,
    noUsage: false,
    chunkBytes: undefined,
    crlf: false,
    paceMs: undefined,
    tokens: undefined,
    reasoningTokens: undefined,
    cachedTokens: undefined,
    cacheWriteTokens: undefined,
    trailerComment: false,
    trailerEvent: false,
    done: false,
  };
}

type DirectiveHandler = (d: SimDirectives, arg: number | undefined) => void;
const stopAt =
  (mode: StopMode): DirectiveHandler =>
  (d, arg) =>
    void (d.stop ??= { mode, afterFrames: arg });

/** What each `[[sim:name=N]]` does; out-of-range numbers are clamped or ignored, never an error. */
const DIRECTIVES: Readonly<Record<string, DirectiveHandler>> = {
  status: (d, arg) => {
    if (arg !== undefined && arg >= 400 && arg <= 599) d.status = arg;
  },
  'retry-after': (d, arg) => {
    if (arg !== undefined) d.retryAfterS = Math.min(arg, 3600);
  },
  failed: (d) => void (d.failed = true),
  'error-flat': (d) => void (d.errorFlat = true),
  cut: stopAt('cut'),
  reset: stopAt('reset'),
  stall: stopAt('stall'),
  'stall-headers': (d) => void (d.stallHeaders = true),
  'no-usage': (d) => void (d.noUsage = true),
  chunk: (d, arg) => {
    if (arg !== undefined && arg >= 1) d.chunkBytes = Math.min(arg, 65_536);
  },
  crlf: (d) => void (d.crlf = true),
  pace: (d, arg) => {
    if (arg !== undefined) d.paceMs = Math.min(arg, 10_000);
  },
  tokens: (d, arg) => {
    if (arg !== undefined && arg >= 1) d.tokens = Math.min(arg, MAX_SIM_TOKENS);
  },
  reasoning: (d, arg) => {
    if (arg !== undefined) d.reasoningTokens = Math.min(arg, MAX_SIM_TOKENS);
  },
  cached: (d, arg) => {
    if (arg !== undefined) d.cachedTokens = arg;
  },
  'cache-write': (d, arg) => {
    if (arg !== undefined) d.cacheWriteTokens = arg;
  },
  'trailer-comment': (d) => void (d.trailerComment = true),
  'trailer-event': (d) => void (d.trailerEvent = true),
  done: (d) => void (d.done = true),
};

function applyDirective(d: SimDirectives, name: string, arg: number | undefined): void {
  // Unknown directives are ignored, like unknown words.
  if (Object.hasOwn(DIRECTIVES, name)) DIRECTIVES[name]!(d, arg);
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** What one walk over the request body found. */
export interface RequestFacts {
  chars: number;
  items: number;
  hasInstructions: boolean;
  directives: SimDirectives;
  /** Text of the last input item when it is a user message (or the string input). */
  lastUserText: string | undefined;
  /** Output of the last input item when it is a function_call_output. */
  lastToolOutput: string | undefined;
}

function partsText(content: unknown, texts: string[]): void {
  if (typeof content === 'string') {
    texts.push(content);
    return;
  }
  if (!Array.isArray(content)) return;
  for (const part of content) {
    if (!isObj(part)) continue;
    if (typeof part.text === 'string') texts.push(part.text);
    else if (typeof part.refusal === 'string') texts.push(part.refusal);
  }
}

export function readRequestFacts(body: Obj): RequestFacts {
  const texts: string[] = [];
  let hasInstructions = false;
  if (typeof body.instructions === 'string' && body.instructions.length > 0) {
    texts.push(body.instructions);
    hasInstructions = true;
  }
  let items = 0;
  let lastUserText: string | undefined;
  let lastToolOutput: string | undefined;
  const input = body.input;
  if (typeof input === 'string') {
    texts.push(input);
    items = 1;
    lastUserText = input;
  } else if (Array.isArray(input)) {
    items = input.length;
    for (let i = 0; i < input.length; i++) {
      const item: unknown = input[i];
      if (!isObj(item)) continue;
      const before = texts.length;
      const type = item.type;
      if (type === 'function_call_output' || type === 'custom_tool_call_output') {
        partsText(item.output, texts);
      } else if (type === 'function_call') {
        if (typeof item.name === 'string') texts.push(item.name);
        if (typeof item.arguments === 'string') texts.push(item.arguments);
      } else if (type === 'reasoning') {
        partsText(item.summary, texts);
      } else {
        partsText(item.content, texts);
      }
      if (i === input.length - 1) {
        const added = texts.slice(before).join('');
        if (type === 'function_call_output' || type === 'custom_tool_call_output') lastToolOutput = added;
        else if ((type === undefined || type === 'message') && item.role === 'user') lastUserText = added;
      }
    }
  }
  let chars = 0;
  for (const text of texts) chars += text.length;
  if (Array.isArray(body.tools) && body.tools.length > 0) chars += JSON.stringify(body.tools).length;
  return { chars, items, hasInstructions, directives: scanDirectives(texts), lastUserText, lastToolOutput };
}

/** The directives in the request's texts, at most MAX_DIRECTIVES of them, in order. */
function scanDirectives(texts: readonly string[]): SimDirectives {
  const directives = emptyDirectives();
  let seen = 0;
  for (const text of texts) {
    if (seen >= MAX_DIRECTIVES) break;
    if (text.indexOf('[[sim:') === -1) continue;
    DIRECTIVE_RE.lastIndex = 0;
    for (let m = DIRECTIVE_RE.exec(text); m !== null && seen < MAX_DIRECTIVES; m = DIRECTIVE_RE.exec(text)) {
      seen++;
      applyDirective(directives, m[1]!, m[2] === undefined ? undefined : Number(m[2]));
    }
  }
  return directives;
}

/** The simulator's input-token count for a request body (formula at the top of this file). */
export function simulatedInputTokens(body: Obj): number {
  const f = readRequestFacts(body);
  return inputTokensOf(f);
}

function inputTokensOf(f: RequestFacts): number {
  return Math.ceil(f.chars / 4) + 4 * f.items + (f.hasInstructions ? 4 : 0);
}

// ---- precomputed text pieces ------------------------------------------------------------

const WORDS = [
  ' This',
  ' is',
  ' a',
  ' simulated',
  ' reply',
  ' from',
  ' the',
  ' vendor.',
  ' It',
  ' streams',
  ' one',
  ' piece',
  ' per',
  ' output',
  ' token,',
  ' so',
  ' counts',
  ' stay',
  ' exact',
  ' and',
  ' easy',
  ' to',
  ' check;',
  ' the',
  ' words',
  ' repeat',
  ' after',
  ' thirty',
  ' two',
  ' pieces',
  ' in',
  ' order.',
];
const FIRST_WORD = 'This';
/** Default reply length in delta pieces (= visible output tokens). */
export const DEFAULT_REPLY_TOKENS = 8;

const OBF_CHARS = 'aZ3kQ9xLm2Vt7RbW';
function obfuscationFor(piece: string): string {
  // Real obfuscation pads each delta to a similar length with random characters; ours is fixed.
  const n = Math.max(1, 16 - piece.length);
  let s = '';
  for (let i = 0; i < n; i++) s += OBF_CHARS[(piece.length * 7 + i) % OBF_CHARS.length];
  return s;
}

interface Piece {
  text: string;
  /** `,"delta":"…","logprobs":[],"obfuscation":"…"}\n\n` and the variant without obfuscation. */
  textTailObf: string;
  textTailPlain: string;
  summaryTailObf: string;
  summaryTailPlain: string;
}

function makePiece(text: string): Piece {
  const j = JSON.stringify(text);
  const obf = `,"obfuscation":"${obfuscationFor(text)}"`;
  return {
    text,
    textTailObf: `,"delta":${j},"logprobs":[]${obf}}\n\n`,
    textTailPlain: `,"delta":${j},"logprobs":[]}\n\n`,
    summaryTailObf: `,"delta":${j}${obf}}\n\n`,
    summaryTailPlain: `,"delta":${j}}\n\n`,
  };
}

const FIRST_PIECE = makePiece(FIRST_WORD);
const WORD_PIECES = WORDS.map(makePiece);
const pieceAt = (i: number): Piece => (i === 0 ? FIRST_PIECE : WORD_PIECES[i % WORD_PIECES.length]!);

const SUMMARY_PIECES = ['**Planning', ' the', ' reply**\n\nThe', ' user', ' wants', ' an', ' answer.'].map(makePiece);

const EFFORT_TOKENS: Record<string, number> = { minimal: 4, low: 8, medium: 16, high: 32, xhigh: 64 };

// ---- ids -----------------------------------------------------------------------------------

/** Unique hex ids: a random per-process prefix, then a counter (the last 18 hex digits). */
export class IdSource {
  private readonly base = randomBytes(16).toString('hex');
  private n = 0;
  /** `hexDigits` between 18 and 50. */
  next(hexDigits = 50): string {
    this.n++;
    return this.base.slice(0, hexDigits - 18) + this.n.toString(16).padStart(18, '0');
  }
}

// ---- frames -------------------------------------------------------------------------------

const HEAD_CACHE = new Map<string, string>();
function head(type: string): string {
  let h = HEAD_CACHE.get(type);
  if (h === undefined) {
    h = `event: ${type}\ndata: {"type":"${type}","sequence_number":`;
    HEAD_CACHE.set(type, h);
  }
  return h;
}

class Frames {
  readonly list: string[] = [];
  readonly isDelta: boolean[] = [];
  seq = 0;
  push(type: string, rest: string, delta = false): void {
    // rest starts with ',' (or is '}\n\n' alone) and ends the frame.
    this.list.push(head(type) + this.seq + rest);
    this.isDelta.push(delta);
    this.seq++;
  }
  /** A whole frame outside the numbered event sequence (trailers after the terminal event). */
  pushRaw(frame: string): void {
    this.list.push(frame);
    this.isDelta.push(false);
  }
}

const J = JSON.stringify;

export interface ReplyPlan {
  model: string;
  responseId: string;
  status: 'completed' | 'incomplete' | 'failed';
  usage: { input: number; cached: number; cacheWrite: number | undefined; output: number; reasoning: number } | undefined;
  /** The final response object as JSON text (non-stream body, and the terminal snapshot). */
  finalJson: string;
  /** SSE frames (LF endings); the terminal frame is at terminalIndex; trailers follow it. */
  frames: string[];
  isDelta: boolean[];
  terminalIndex: number;
  /** Index of the first delta frame, or -1. */
  firstDeltaIndex: number;
  visibleText: string;
}

export interface PlanContext {
  ids: IdSource;
  createdAtS: number;
  /** Replies name the model `<requested>-<modelSuffix>` (a dated snapshot) when set. */
  modelSuffix?: string;
}

// ---- deciding the reply -----------------------------------------------------------------

/** Input-side usage numbers (formula at the top of this file). */
function inputUsage(body: Obj, facts: RequestFacts): { input: number; cached: number; cacheWrite: number | undefined } {
  const d = facts.directives;
  const input = inputTokensOf(facts);
  const cacheKey = typeof body.prompt_cache_key === 'string' && body.prompt_cache_key.length > 0;
  const cached = d.cachedTokens !== undefined ? Math.min(d.cachedTokens, input) : cacheKey ? Math.floor(input / 2) : 0;
  const cacheWrite = d.cacheWriteTokens !== undefined ? Math.min(d.cacheWriteTokens, input - cached) : undefined;
  return { input, cached, cacheWrite };
}

/** What the request asks of reasoning, and the reasoning tokens that would take before any budget. */
interface ReasoningAsk {
  effort: string | undefined;
  summaryMode: string | undefined;
  wanted: boolean;
  /** A summary is streamed and kept in the reasoning item. */
  summary: boolean;
  tokens: number;
}

function reasoningAsk(body: Obj, d: SimDirectives): ReasoningAsk {
  const req = isObj(body.reasoning) ? body.reasoning : undefined;
  const effort = req && typeof req.effort === 'string' ? req.effort : undefined;
  const summaryMode = req && typeof req.summary === 'string' ? req.summary : undefined;
  const wanted = d.reasoningTokens !== undefined || (req !== undefined && effort !== 'none' && (effort !== undefined || summaryMode !== undefined));
  const tokens = d.reasoningTokens ?? (wanted ? (EFFORT_TOKENS[effort ?? 'medium'] ?? 16) : 0);
  return { effort, summaryMode, wanted, summary: wanted && summaryMode !== undefined && summaryMode !== 'none', tokens };
}

/** The function tool the reply calls, if any: forced by tool_choice, or "use the tool" in the last user turn. */
function calledTool(body: Obj, facts: RequestFacts, tools: readonly unknown[]): Obj | undefined {
  const fnTools = tools.filter((x): x is Obj => isObj(x) && x.type === 'function' && typeof x.name === 'string');
  const toolChoice = body.tool_choice;
  const forced = toolChoice === 'required' || (isObj(toolChoice) && toolChoice.type === 'function');
  const callTool =
    !facts.directives.failed &&
    fnTools.length > 0 &&
    toolChoice !== 'none' &&
    (forced || (facts.lastUserText !== undefined && /use the tool/i.test(facts.lastUserText)));
  if (!callTool) return undefined;
  return isObj(toolChoice) && typeof toolChoice.name === 'string' ? (fnTools.find((x) => x.name === toolChoice.name) ?? fnTools[0]!) : fnTools[0]!;
}

/** The visible content before the budget: text pieces, or a call's argument pieces, or nothing (failed). */
interface Content {
  textPieces: Piece[] | undefined;
  fnName: string;
  argPieces: string[];
}

function plannedContent(facts: RequestFacts, tool: Obj | undefined): Content {
  const d = facts.directives;
  if (d.failed) return { textPieces: undefined, fnName: '', argPieces: [] };
  if (tool !== undefined) {
    return { textPieces: undefined, fnName: tool.name as string, argPieces: splitArgs(J(argumentsFor(tool.parameters))) };
  }
  if (facts.lastToolOutput !== undefined && d.tokens === undefined) {
    return { textPieces: wordsToPieces(`Tool result: ${facts.lastToolOutput.slice(0, 200)}`), fnName: '', argPieces: [] };
  }
  const n = d.tokens ?? DEFAULT_REPLY_TOKENS;
  const textPieces = new Array<Piece>(n);
  for (let i = 0; i < n; i++) textPieces[i] = pieceAt(i);
  return { textPieces, fnName: '', argPieces: [] };
}

/** max_output_tokens spent on reasoning first, then on visible pieces. */
function fitBudget(reasoning: number, pieces: number, maxOut: number): { reasoning: number; pieces: number; incomplete: boolean } {
  let incomplete = false;
  if (reasoning > maxOut) {
    reasoning = maxOut;
    incomplete = true;
  }
  const room = maxOut - reasoning;
  if (pieces > room) {
    pieces = room;
    incomplete = true;
  }
  return { reasoning, pieces, incomplete };
}

// ---- rendering ----------------------------------------------------------------------------

type Snapshot = (status: string, error: string, incomplete: string, output: string, serviceTier: string, usage: string) => string;

/** The response object writer: everything that only depends on the request is stringified once. */
function snapshotWriter(body: Obj, responseId: string, createdAtS: number, model: string, ask: ReasoningAsk): Snapshot {
  const reasoningEcho = { effort: ask.effort ?? null, summary: ask.summaryMode ?? null };
  const tools = Array.isArray(body.tools) ? (body.tools as unknown[]) : [];
  const pre = `{"id":"${responseId}","object":"response","created_at":${createdAtS},"status":"`;
  const afterStatus = `","background":${J(body.background === true)},"error":`;
  const mid1 =
    `,"instructions":${J(body.instructions ?? null)},"max_output_tokens":${J(body.max_output_tokens ?? null)}` +
    `,"max_tool_calls":${J(body.max_tool_calls ?? null)},"model":${J(model)},"output":`;
  const beforeTier =
    `,"parallel_tool_calls":${J(body.parallel_tool_calls ?? true)},"previous_response_id":${J(body.previous_response_id ?? null)}` +
    `,"prompt_cache_key":${J(body.prompt_cache_key ?? null)},"reasoning":${J(reasoningEcho)}` +
    `,"safety_identifier":${J(body.safety_identifier ?? null)},"service_tier":`;
  const afterTier =
    `,"store":${J(body.store ?? true)}` +
    `,"temperature":${J(body.temperature ?? 1)},"text":${J(body.text ?? { format: { type: 'text' }, verbosity: 'medium' })}` +
    `,"tool_choice":${J(body.tool_choice ?? 'auto')},"tools":${J(tools)},"top_logprobs":${J(body.top_logprobs ?? 0)}` +
    `,"top_p":${J(body.top_p ?? 1)},"truncation":${J(body.truncation ?? 'disabled')},"usage":`;
  const tail = `,"user":${J(body.user ?? null)},"metadata":${J(body.metadata ?? {})}}`;
  return (st, err, inc, output, serviceTier, usage) =>
    pre + st + afterStatus + err + ',"incomplete_details":' + inc + mid1 + output + beforeTier + J(serviceTier) + afterTier + usage + tail;
}

function usageJson(usage: ReplyPlan['usage']): string {
  if (!usage) return 'null';
  return (
    `{"input_tokens":${usage.input},"input_tokens_details":{"cached_tokens":${usage.cached}` +
    (usage.cacheWrite !== undefined ? `,"cache_write_tokens":${usage.cacheWrite}` : '') +
    `},"output_tokens":${usage.output},"output_tokens_details":{"reasoning_tokens":${usage.reasoning}},"total_tokens":${usage.input + usage.output}}`
  );
}

/** Output items and SSE frames as they are rendered, in output order. */
interface Render {
  readonly f: Frames;
  readonly items: string[];
  readonly stream: boolean;
  /** Deltas carry an `obfuscation` field (unless stream_options.include_obfuscation is false). */
  readonly obf: boolean;
  readonly idCore: string;
  outputIndex: number;
  firstDeltaIndex: number;
}

function pushDelta(r: Render, type: string, rest: string): void {
  if (r.firstDeltaIndex === -1) r.firstDeltaIndex = r.f.list.length;
  r.f.push(type, rest, true);
}

function renderReasoning(r: Render, body: Obj, wantSummary: boolean): void {
  const { f } = r;
  const rsId = `rs_${r.idCore}`;
  const summaryText = wantSummary ? SUMMARY_PIECES.map((p) => p.text).join('') : '';
  // Asked for (`include: ["reasoning.encrypted_content"]`, as stateless clients and inkgate do),
  // the item carries the opaque reasoning a client sends back on the next turn.
  const wantsEncrypted = Array.isArray(body.include) && body.include.includes('reasoning.encrypted_content');
  const encrypted = wantsEncrypted ? `"encrypted_content":${J('gAAAAAsim' + Buffer.from(rsId).toString('base64'))},` : '';
  const doneItem = `{"id":"${rsId}","type":"reasoning",${encrypted}"summary":${wantSummary ? `[{"type":"summary_text","text":${J(summaryText)}}]` : '[]'}}`;
  r.items.push(doneItem);
  if (r.stream) {
    const oi = `,"output_index":${r.outputIndex}`;
    f.push('response.output_item.added', `${oi},"item":{"id":"${rsId}","type":"reasoning","summary":[]}}\n\n`);
    if (wantSummary) {
      const ids = `,"item_id":"${rsId}"${oi},"summary_index":0`;
      f.push('response.reasoning_summary_part.added', `${ids},"part":{"type":"summary_text","text":""}}\n\n`);
      for (const p of SUMMARY_PIECES) f.push('response.reasoning_summary_text.delta', ids + (r.obf ? p.summaryTailObf : p.summaryTailPlain));
      f.push('response.reasoning_summary_text.done', `${ids},"text":${J(summaryText)}}\n\n`);
      f.push('response.reasoning_summary_part.done', `${ids},"part":{"type":"summary_text","text":${J(summaryText)}}}\n\n`);
    }
    f.push('response.output_item.done', `${oi},"item":${doneItem}}\n\n`);
  }
  r.outputIndex++;
}

/** The message item with the first `count` pieces; returns its text. */
function renderMessage(r: Render, pieces: Piece[], count: number, incomplete: boolean): string {
  const { f } = r;
  const msgId = `msg_${r.idCore}`;
  let text = '';
  for (let i = 0; i < count; i++) text += pieces[i]!.text;
  const textJ = J(text);
  const part = `{"type":"output_text","annotations":[],"logprobs":[],"text":${textJ}}`;
  const doneItem = `{"id":"${msgId}","type":"message","status":"${incomplete ? 'incomplete' : 'completed'}","content":[${part}],"role":"assistant"}`;
  r.items.push(doneItem);
  if (r.stream) {
    const oi = `,"output_index":${r.outputIndex}`;
    const ids = `,"item_id":"${msgId}"${oi},"content_index":0`;
    f.push('response.output_item.added', `${oi},"item":{"id":"${msgId}","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n`);
    f.push('response.content_part.added', `${ids},"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n`);
    for (let i = 0; i < count; i++) {
      const p = pieces[i]!;
      pushDelta(r, 'response.output_text.delta', ids + (r.obf ? p.textTailObf : p.textTailPlain));
    }
    f.push('response.output_text.done', `${ids},"text":${textJ},"logprobs":[]}\n\n`);
    f.push('response.content_part.done', `${ids},"part":${part}}\n\n`);
    f.push('response.output_item.done', `${oi},"item":${doneItem}}\n\n`);
  }
  r.outputIndex++;
  return text;
}

/** The function_call item with the first `count` argument pieces. */
function renderFunctionCall(r: Render, fnName: string, argPieces: string[], count: number, incomplete: boolean): void {
  const { f } = r;
  const fcId = `fc_${r.idCore}`;
  const callId = `call_${r.idCore.slice(-24)}`;
  const argsJ = J(argPieces.slice(0, count).join(''));
  const itemHead = `{"id":"${fcId}","type":"function_call","status":"`;
  const itemTail = `,"call_id":"${callId}","name":${J(fnName)}}`;
  const doneItem = `${itemHead}${incomplete ? 'incomplete' : 'completed'}","arguments":${argsJ}${itemTail}`;
  r.items.push(doneItem);
  if (r.stream) {
    const oi = `,"output_index":${r.outputIndex}`;
    const ids = `,"item_id":"${fcId}"${oi}`;
    f.push('response.output_item.added', `${oi},"item":${itemHead}in_progress","arguments":""${itemTail}}\n\n`);
    for (let i = 0; i < count; i++) {
      const piece = argPieces[i]!;
      pushDelta(r, 'response.function_call_arguments.delta', `${ids},"delta":${J(piece)}${r.obf ? `,"obfuscation":"${obfuscationFor(piece)}"` : ''}}\n\n`);
    }
    f.push('response.function_call_arguments.done', `${ids},"name":${J(fnName)},"arguments":${argsJ}}\n\n`);
    f.push('response.output_item.done', `${oi},"item":${doneItem}}\n\n`);
  }
  r.outputIndex++;
}

const FAILED_MESSAGE = 'The model failed to generate a response. (simulated)';
const FAILED_ERROR_JSON = `{"code":"server_error","message":"${FAILED_MESSAGE}"}`;
const TERMINAL_EVENTS: Readonly<Record<ReplyPlan['status'], string>> = {
  completed: 'response.completed',
  incomplete: 'response.incomplete',
  failed: 'response.failed',
};
const USAGE_TRAILER = `{"type":"service.usage","ink_charged":1,"usd_payg_charged":0.01,"request_id":"req_sim"}`;

/** The error event of a failed stream, the terminal event and the trailers; returns the terminal's index. */
function renderEnd(f: Frames, d: SimDirectives, status: ReplyPlan['status'], finalJson: string): number {
  if (d.failed) {
    if (d.errorFlat) f.push('error', `,"code":"server_error","message":"${FAILED_MESSAGE}","param":null}\n\n`);
    // First-party shape, as in the recorded prism__stream-unknown-error-responses-1 stream.
    else f.push('error', `,"error":{"code":"server_error","message":"${FAILED_MESSAGE}","param":null}}\n\n`);
  }
  const terminalIndex = f.list.length;
  f.push(TERMINAL_EVENTS[status], `,"response":${finalJson}}\n\n`);
  if (d.trailerComment) f.pushRaw(`: service.usage ${USAGE_TRAILER}\n\n`);
  if (d.trailerEvent) f.pushRaw(`event: service.usage\ndata: ${USAGE_TRAILER}\n\n`);
  if (d.done) f.pushRaw('data: [DONE]\n\n');
  return terminalIndex;
}

/**
 * Plans the whole reply for a validated body. `stream` selects whether frames are rendered
 * (the non-stream path only needs finalJson).
 */
export function planReply(body: Obj, facts: RequestFacts, ctx: PlanContext, stream: boolean): ReplyPlan {
  const d = facts.directives;
  const model = ctx.modelSuffix ? `${body.model as string}-${ctx.modelSuffix}` : (body.model as string);
  const idCore = ctx.ids.next();
  const responseId = `resp_${idCore}`;
  const ask = reasoningAsk(body, d);
  const tool = calledTool(body, facts, Array.isArray(body.tools) ? (body.tools as unknown[]) : []);
  const content = plannedContent(facts, tool);
  const maxOut = typeof body.max_output_tokens === 'number' ? body.max_output_tokens : Infinity;
  const fit = fitBudget(d.failed ? 0 : ask.tokens, content.textPieces ? content.textPieces.length : content.argPieces.length, maxOut);
  const showContent = !d.failed && fit.pieces > 0;
  const status: ReplyPlan['status'] = d.failed ? 'failed' : fit.incomplete ? 'incomplete' : 'completed';
  const usage = d.noUsage || d.failed ? undefined : { ...inputUsage(body, facts), output: fit.reasoning + fit.pieces, reasoning: fit.reasoning };

  const snapshot = snapshotWriter(body, responseId, ctx.createdAtS, model, ask);
  const tier = typeof body.service_tier === 'string' ? body.service_tier : 'auto';
  const obf = !(isObj(body.stream_options) && body.stream_options.include_obfuscation === false);
  const r: Render = { f: new Frames(), items: [], stream, obf, idCore, outputIndex: 0, firstDeltaIndex: -1 };
  if (stream) {
    const inProgress = snapshot('in_progress', 'null', 'null', '[]', tier, 'null');
    r.f.push('response.created', `,"response":${inProgress}}\n\n`);
    r.f.push('response.in_progress', `,"response":${inProgress}}\n\n`);
  }
  if (ask.wanted && !d.failed) renderReasoning(r, body, ask.summary);
  let visibleText = '';
  if (showContent && content.textPieces) visibleText = renderMessage(r, content.textPieces, fit.pieces, fit.incomplete);
  else if (showContent && tool) renderFunctionCall(r, content.fnName, content.argPieces, fit.pieces, fit.incomplete);

  const output = `[${r.items.join(',')}]`;
  const endTier = tier === 'auto' ? 'default' : tier;
  const finalJson = d.failed
    ? snapshot('failed', FAILED_ERROR_JSON, 'null', output, endTier, 'null')
    : snapshot(status, 'null', fit.incomplete ? '{"reason":"max_output_tokens"}' : 'null', output, endTier, usageJson(usage));
  const terminalIndex = stream ? renderEnd(r.f, d, status, finalJson) : -1;
  return {
    model,
    responseId,
    status,
    usage,
    finalJson,
    frames: r.f.list,
    isDelta: r.f.isDelta,
    terminalIndex,
    firstDeltaIndex: r.firstDeltaIndex,
    visibleText,
  };
}

function wordsToPieces(text: string): Piece[] {
  const words = text.match(/\s*\S+/g) ?? [];
  return words.map(makePiece);
}

/** Argument deltas of about 6 characters, like the small pieces the real API streams. */
function splitArgs(args: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i += 6) out.push(args.slice(i, i + 6));
  return out;
}

/**
 * A deterministic arguments object that fits a simple JSON schema: the `required` properties when
 * the schema lists them (models leave optional parameters out), every property otherwise.
 */
function argumentsFor(schema: unknown, depth = 0): Obj {
  const out: Obj = {};
  if (!isObj(schema) || !isObj(schema.properties)) return out;
  const required = Array.isArray(schema.required) ? new Set(schema.required) : undefined;
  for (const [key, prop] of Object.entries(schema.properties)) {
    if (required === undefined || required.has(key)) out[key] = sampleValue(prop, depth);
  }
  return out;
}

function sampleValue(prop: unknown, depth: number): unknown {
  if (!isObj(prop)) return null;
  if (Array.isArray(prop.enum) && prop.enum.length > 0) return prop.enum[0];
  const type = Array.isArray(prop.type) ? prop.type[0] : prop.type;
  switch (type) {
    case 'string':
      return 'sim';
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'array':
      return [];
    case 'object':
      return depth < 4 ? argumentsFor(prop, depth + 1) : {};
    default:
      return null;
  }
}
