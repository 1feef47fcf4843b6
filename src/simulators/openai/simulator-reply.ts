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

function applyDirective(d: SimDirectives, name: string, arg: number | undefined): void {
  switch (name) {
    case 'status':
      if (arg !== undefined && arg >= 400 && arg <= 599) d.status = arg;
      return;
    case 'retry-after':
      if (arg !== undefined) d.retryAfterS = Math.min(arg, 3600);
      return;
    case 'failed':
      d.failed = true;
      return;
    case 'error-flat':
      d.errorFlat = true;
      return;
    case 'cut':
    case 'reset':
    case 'stall':
      d.stop ??= { mode: name, afterFrames: arg };
      return;
    case 'stall-headers':
      d.stallHeaders = true;
      return;
    case 'no-usage':
      d.noUsage = true;
      return;
    case 'chunk':
      if (arg !== undefined && arg >= 1) d.chunkBytes = Math.min(arg, 65_536);
      return;
    case 'crlf':
      d.crlf = true;
      return;
    case 'pace':
      if (arg !== undefined) d.paceMs = Math.min(arg, 10_000);
      return;
    case 'tokens':
      if (arg !== undefined && arg >= 1) d.tokens = Math.min(arg, MAX_SIM_TOKENS);
      return;
    case 'reasoning':
      if (arg !== undefined) d.reasoningTokens = Math.min(arg, MAX_SIM_TOKENS);
      return;
    case 'cached':
      if (arg !== undefined) d.cachedTokens = arg;
      return;
    case 'cache-write':
      if (arg !== undefined) d.cacheWriteTokens = arg;
      return;
    case 'trailer-comment':
      d.trailerComment = true;
      return;
    case 'trailer-event':
      d.trailerEvent = true;
      return;
    case 'done':
      d.done = true;
      return;
    default:
      return; // unknown directives are ignored, like unknown words
  }
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
  const directives = emptyDirectives();
  let seen = 0;
  for (const text of texts) {
    chars += text.length;
    if (seen >= MAX_DIRECTIVES || text.indexOf('[[sim:') === -1) continue;
    DIRECTIVE_RE.lastIndex = 0;
    for (let m = DIRECTIVE_RE.exec(text); m !== null && seen < MAX_DIRECTIVES; m = DIRECTIVE_RE.exec(text)) {
      seen++;
      applyDirective(directives, m[1]!, m[2] === undefined ? undefined : Number(m[2]));
    }
  }
  if (Array.isArray(body.tools) && body.tools.length > 0) chars += JSON.stringify(body.tools).length;
  return { chars, items, hasInstructions, directives, lastUserText, lastToolOutput };
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
  ' This', ' is', ' a', ' simulated', ' reply', ' from', ' the', ' vendor.', ' It', ' streams', ' one',
  ' piece', ' per', ' output', ' token,', ' so', ' counts', ' stay', ' exact', ' and', ' easy', ' to',
  ' check;', ' the', ' words', ' repeat', ' after', ' thirty', ' two', ' pieces', ' in', ' order.',
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

/**
 * Plans the whole reply for a validated body. `stream` selects whether frames are rendered
 * (the non-stream path only needs finalJson).
 */
export function planReply(body: Obj, facts: RequestFacts, ctx: PlanContext, stream: boolean): ReplyPlan {
  const d = facts.directives;
  const model = ctx.modelSuffix ? `${body.model as string}-${ctx.modelSuffix}` : (body.model as string);
  const idCore = ctx.ids.next();
  const responseId = `resp_${idCore}`;

  // --- numbers
  const inputTokens = inputTokensOf(facts);
  const cacheKey = typeof body.prompt_cache_key === 'string' && body.prompt_cache_key.length > 0;
  const cached = d.cachedTokens !== undefined ? Math.min(d.cachedTokens, inputTokens) : cacheKey ? Math.floor(inputTokens / 2) : 0;
  const cacheWrite = d.cacheWriteTokens !== undefined ? Math.min(d.cacheWriteTokens, inputTokens - cached) : undefined;

  const reasoningReq = isObj(body.reasoning) ? body.reasoning : undefined;
  const effort = reasoningReq && typeof reasoningReq.effort === 'string' ? reasoningReq.effort : undefined;
  const summaryMode = reasoningReq && typeof reasoningReq.summary === 'string' ? reasoningReq.summary : undefined;
  const wantsReasoning =
    d.reasoningTokens !== undefined || (reasoningReq !== undefined && effort !== 'none' && (effort !== undefined || summaryMode !== undefined));
  let reasoning = d.reasoningTokens ?? (wantsReasoning ? (EFFORT_TOKENS[effort ?? 'medium'] ?? 16) : 0);
  const wantSummary = wantsReasoning && summaryMode !== undefined && summaryMode !== 'none';

  const tools = Array.isArray(body.tools) ? (body.tools as unknown[]) : [];
  const fnTools = tools.filter((x): x is Obj => isObj(x) && x.type === 'function' && typeof x.name === 'string');
  const toolChoice = body.tool_choice;
  const forced = toolChoice === 'required' || (isObj(toolChoice) && toolChoice.type === 'function');
  const callTool =
    !d.failed &&
    fnTools.length > 0 &&
    toolChoice !== 'none' &&
    (forced || (facts.lastUserText !== undefined && /use the tool/i.test(facts.lastUserText)));

  const maxOut = typeof body.max_output_tokens === 'number' ? body.max_output_tokens : Infinity;

  // --- content pieces
  let textPieces: Piece[] | undefined;
  let fnName = '';
  let fnArgs = '';
  let argPieces: string[] = [];
  if (d.failed) {
    reasoning = 0;
  } else if (callTool) {
    const tool =
      isObj(toolChoice) && typeof toolChoice.name === 'string'
        ? (fnTools.find((x) => x.name === toolChoice.name) ?? fnTools[0]!)
        : fnTools[0]!;
    fnName = tool.name as string;
    fnArgs = J(argumentsFor(tool.parameters));
    argPieces = splitArgs(fnArgs);
  } else if (facts.lastToolOutput !== undefined && d.tokens === undefined) {
    textPieces = wordsToPieces(`Tool result: ${facts.lastToolOutput.slice(0, 200)}`);
  } else {
    const n = d.tokens ?? DEFAULT_REPLY_TOKENS;
    textPieces = new Array<Piece>(n);
    for (let i = 0; i < n; i++) textPieces[i] = pieceAt(i);
  }

  // --- budget: reasoning first, then visible pieces
  let incomplete = false;
  if (reasoning > maxOut) {
    reasoning = maxOut;
    incomplete = true;
  }
  const room = maxOut - reasoning;
  let contentPieces = textPieces ? textPieces.length : argPieces.length;
  if (contentPieces > room) {
    contentPieces = room;
    incomplete = true;
  }
  const showContent = !d.failed && contentPieces > 0;
  const outputTokens = d.failed ? 0 : reasoning + contentPieces;
  const status: ReplyPlan['status'] = d.failed ? 'failed' : incomplete ? 'incomplete' : 'completed';

  // --- snapshot pieces (stringified once per request)
  const tier = typeof body.service_tier === 'string' ? body.service_tier : 'auto';
  const reasoningEcho = { effort: effort ?? null, summary: summaryMode ?? null };
  const pre =
    `{"id":"${responseId}","object":"response","created_at":${ctx.createdAtS},"status":"`;
  const afterStatus = `","background":${J(body.background === true)},"error":`;
  const mid1 =
    `,"instructions":${J(body.instructions ?? null)},"max_output_tokens":${J(body.max_output_tokens ?? null)}` +
    `,"max_tool_calls":${J(body.max_tool_calls ?? null)},"model":${J(model)},"output":`;
  const mid2 = (serviceTier: string): string =>
    `,"parallel_tool_calls":${J(body.parallel_tool_calls ?? true)},"previous_response_id":${J(body.previous_response_id ?? null)}` +
    `,"prompt_cache_key":${J(body.prompt_cache_key ?? null)},"reasoning":${J(reasoningEcho)}` +
    `,"safety_identifier":${J(body.safety_identifier ?? null)},"service_tier":${J(serviceTier)},"store":${J(body.store ?? true)}` +
    `,"temperature":${J(body.temperature ?? 1)},"text":${J(body.text ?? { format: { type: 'text' }, verbosity: 'medium' })}` +
    `,"tool_choice":${J(toolChoice ?? 'auto')},"tools":${J(tools)},"top_logprobs":${J(body.top_logprobs ?? 0)}` +
    `,"top_p":${J(body.top_p ?? 1)},"truncation":${J(body.truncation ?? 'disabled')},"usage":`;
  const tail = `,"user":${J(body.user ?? null)},"metadata":${J(body.metadata ?? {})}}`;
  const snapshot = (st: string, err: string, inc: string, output: string, mid: string, usage: string): string =>
    pre + st + afterStatus + err + ',"incomplete_details":' + inc + mid1 + output + mid + usage + tail;

  const usage = d.noUsage || d.failed
    ? undefined
    : { input: inputTokens, cached, cacheWrite, output: outputTokens, reasoning };
  const usageJson = usage
    ? `{"input_tokens":${usage.input},"input_tokens_details":{"cached_tokens":${usage.cached}` +
      (usage.cacheWrite !== undefined ? `,"cache_write_tokens":${usage.cacheWrite}` : '') +
      `},"output_tokens":${usage.output},"output_tokens_details":{"reasoning_tokens":${usage.reasoning}},"total_tokens":${usage.input + usage.output}}`
    : 'null';

  // --- output items
  const items: string[] = [];
  const f = new Frames();
  const obf = !(isObj(body.stream_options) && body.stream_options.include_obfuscation === false);
  const startMid = mid2(tier);
  const inProgress = snapshot('in_progress', 'null', 'null', '[]', startMid, 'null');
  if (stream) {
    f.push('response.created', `,"response":${inProgress}}\n\n`);
    f.push('response.in_progress', `,"response":${inProgress}}\n\n`);
  }

  let visibleText = '';
  let firstDeltaIndex = -1;
  let outputIndex = 0;
  if (wantsReasoning && !d.failed) {
    const rsId = `rs_${idCore}`;
    const summaryText = wantSummary ? SUMMARY_PIECES.map((p) => p.text).join('') : '';
    // Asked for (`include: ["reasoning.encrypted_content"]`, as stateless clients and inkgate do),
    // the item carries the opaque reasoning a client sends back on the next turn.
    const wantsEncrypted = Array.isArray(body.include) && body.include.includes('reasoning.encrypted_content');
    const encrypted = wantsEncrypted ? `"encrypted_content":${J('gAAAAAsim' + Buffer.from(rsId).toString('base64'))},` : '';
    const doneItem = `{"id":"${rsId}","type":"reasoning",${encrypted}"summary":${wantSummary ? `[{"type":"summary_text","text":${J(summaryText)}}]` : '[]'}}`;
    items.push(doneItem);
    if (stream) {
      const oi = `,"output_index":${outputIndex}`;
      f.push('response.output_item.added', `${oi},"item":{"id":"${rsId}","type":"reasoning","summary":[]}}\n\n`);
      if (wantSummary) {
        const ids = `,"item_id":"${rsId}"${oi},"summary_index":0`;
        f.push('response.reasoning_summary_part.added', `${ids},"part":{"type":"summary_text","text":""}}\n\n`);
        for (const p of SUMMARY_PIECES) f.push('response.reasoning_summary_text.delta', ids + (obf ? p.summaryTailObf : p.summaryTailPlain));
        f.push('response.reasoning_summary_text.done', `${ids},"text":${J(summaryText)}}\n\n`);
        f.push('response.reasoning_summary_part.done', `${ids},"part":{"type":"summary_text","text":${J(summaryText)}}}\n\n`);
      }
      f.push('response.output_item.done', `${oi},"item":${doneItem}}\n\n`);
    }
    outputIndex++;
  }

  if (showContent && textPieces) {
    const msgId = `msg_${idCore}`;
    let text = '';
    for (let i = 0; i < contentPieces; i++) text += textPieces[i]!.text;
    visibleText = text;
    const textJ = J(text);
    const part = `{"type":"output_text","annotations":[],"logprobs":[],"text":${textJ}}`;
    const doneItem = `{"id":"${msgId}","type":"message","status":"${incomplete ? 'incomplete' : 'completed'}","content":[${part}],"role":"assistant"}`;
    items.push(doneItem);
    if (stream) {
      const oi = `,"output_index":${outputIndex}`;
      const ids = `,"item_id":"${msgId}"${oi},"content_index":0`;
      f.push('response.output_item.added', `${oi},"item":{"id":"${msgId}","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n`);
      f.push('response.content_part.added', `${ids},"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n`);
      for (let i = 0; i < contentPieces; i++) {
        if (firstDeltaIndex === -1) firstDeltaIndex = f.list.length;
        const p = textPieces[i]!;
        f.push('response.output_text.delta', ids + (obf ? p.textTailObf : p.textTailPlain), true);
      }
      f.push('response.output_text.done', `${ids},"text":${textJ},"logprobs":[]}\n\n`);
      f.push('response.content_part.done', `${ids},"part":${part}}\n\n`);
      f.push('response.output_item.done', `${oi},"item":${doneItem}}\n\n`);
    }
    outputIndex++;
  } else if (showContent && callTool) {
    const fcId = `fc_${idCore}`;
    const callId = `call_${idCore.slice(-24)}`;
    const args = argPieces.slice(0, contentPieces).join('');
    const argsJ = J(args);
    const itemHead = `{"id":"${fcId}","type":"function_call","status":"`;
    const itemTail = `,"call_id":"${callId}","name":${J(fnName)}}`;
    const doneItem = `${itemHead}${incomplete ? 'incomplete' : 'completed'}","arguments":${argsJ}${itemTail}`;
    items.push(doneItem);
    if (stream) {
      const oi = `,"output_index":${outputIndex}`;
      const ids = `,"item_id":"${fcId}"${oi}`;
      f.push('response.output_item.added', `${oi},"item":${itemHead}in_progress","arguments":""${itemTail}}\n\n`);
      for (let i = 0; i < contentPieces; i++) {
        if (firstDeltaIndex === -1) firstDeltaIndex = f.list.length;
        const piece = argPieces[i]!;
        f.push(
          'response.function_call_arguments.delta',
          `${ids},"delta":${J(piece)}${obf ? `,"obfuscation":"${obfuscationFor(piece)}"` : ''}}\n\n`,
          true,
        );
      }
      f.push('response.function_call_arguments.done', `${ids},"name":${J(fnName)},"arguments":${argsJ}}\n\n`);
      f.push('response.output_item.done', `${oi},"item":${doneItem}}\n\n`);
    }
    outputIndex++;
  }

  const output = `[${items.join(',')}]`;
  const endMid = mid2(tier === 'auto' ? 'default' : tier);
  let finalJson: string;
  if (d.failed) {
    const errJson = '{"code":"server_error","message":"The model failed to generate a response. (simulated)"}';
    finalJson = snapshot('failed', errJson, 'null', output, endMid, 'null');
    if (stream) {
      if (d.errorFlat) {
        f.push('error', ',"code":"server_error","message":"The model failed to generate a response. (simulated)","param":null}\n\n');
      } else {
        // First-party shape, as in the recorded prism__stream-unknown-error-responses-1 stream.
        f.push('error', ',"error":{"code":"server_error","message":"The model failed to generate a response. (simulated)","param":null}}\n\n');
      }
    }
  } else {
    finalJson = snapshot(status, 'null', incomplete ? '{"reason":"max_output_tokens"}' : 'null', output, endMid, usageJson);
  }
  let terminalIndex = -1;
  if (stream) {
    terminalIndex = f.list.length;
    const type = status === 'failed' ? 'response.failed' : status === 'incomplete' ? 'response.incomplete' : 'response.completed';
    f.push(type, `,"response":${finalJson}}\n\n`);
    const trailer = `{"type":"service.usage","ink_charged":1,"usd_payg_charged":0.01,"request_id":"req_sim"}`;
    if (d.trailerComment) {
      f.list.push(`: service.usage ${trailer}\n\n`);
      f.isDelta.push(false);
    }
    if (d.trailerEvent) {
      f.list.push(`event: service.usage\ndata: ${trailer}\n\n`);
      f.isDelta.push(false);
    }
    if (d.done) {
      f.list.push('data: [DONE]\n\n');
      f.isDelta.push(false);
    }
  }
  return {
    model,
    responseId,
    status,
    usage,
    finalJson,
    frames: f.list,
    isDelta: f.isDelta,
    terminalIndex,
    firstDeltaIndex,
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

/** A deterministic arguments object that fits a simple JSON schema. */
function argumentsFor(schema: unknown, depth = 0): Obj {
  const out: Obj = {};
  if (!isObj(schema) || !isObj(schema.properties)) return out;
  for (const [key, prop] of Object.entries(schema.properties)) {
    out[key] = sampleValue(prop, depth);
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
