// Request reading and reply planning for the Anthropic Messages simulator. Pure: no I/O.
// Reads a request body once, validates what the real API would refuse, counts input tokens,
// parses the `[[sim:...]]` directives and plans the reply (thinking, text, tool_use, stop
// reason, usage). simulator.ts renders the plan as SSE frames or a JSON body and does the HTTP.
//
// Deterministic numbers:
//   input tokens (total) = 4 + Σ segment tokens, in prompt-prefix order tools, system, messages:
//     tool segment     = ceil(bytes(JSON.stringify(tool without cache_control)) / 4)
//     system segment   = ceil(bytes(text) / 4) per text block (a string system is one block)
//     message segment  = 3 per message (on its first block) + ceil(bytes(block text) / 4) per block,
//                        block text: text.text, thinking.thinking, redacted_thinking.data,
//                        tool_use name + JSON(input), tool_result string content or its text
//                        blocks, anything else JSON.stringify(block). bytes = UTF-8 bytes.
//     Monotone: adding text, blocks, messages or tools never lowers it. Directives count as text.
//   prompt caching: the prefix up to and including the last block carrying `cache_control`
//     (a top-level `cache_control` marks the last block of the last message) is the cached
//     prefix when its tokens >= cacheMinTokens. The first request with a given prefix (model +
//     prefix JSON) reports it as cache_creation_input_tokens (5m or 1h by the breakpoint's ttl);
//     later ones as cache_read_input_tokens. input_tokens = total - cached prefix.
//     `[[sim:cache=write]]` / `[[sim:cache=read]]` force the bucket, `[[sim:cache=none]]` disables.
//   output tokens = number of non-empty delta pieces generated (thinking_delta, text_delta and
//     input_json_delta pieces; signature_delta and the leading empty input_json_delta are free).
//     Thinking pieces come first, then text, then the tool_use block, all within max_tokens; a
//     tool_use block that does not fit entirely is left out and the reply stops with max_tokens.

import { createHash } from 'node:crypto';

type Obj = Record<string, any>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

export type StopMode = 'cut' | 'reset' | 'stall';

export interface SimDirectives {
  /** Answer this HTTP error status before any byte. */
  status: number | undefined;
  retryAfterS: number | undefined;
  /** 400 invalid_request_error "prompt is too long: N tokens > 200000 maximum". */
  promptTooLong: boolean;
  /** `event: error` overloaded_error after half of the content deltas (stream); 529 (non-stream). */
  overloadedMidstream: boolean;
  /** Where the stream stops: before message_delta, before message_stop, or after N frames. */
  stop: { mode: StopMode; at: 'before-delta' | 'before-stop' | number } | undefined;
  stallBeforeHeaders: boolean;
  stallAfterHeaders: boolean;
  /** Write size in bytes (1 = one byte per write); undefined = one write per event. */
  chunkBytes: number | undefined;
  /** Split writes at every CR and LF (before and after it). */
  splitAtLineEnds: boolean;
  lineEnding: 'lf' | 'crlf' | 'cr' | undefined;
  paceMs: number | undefined;
  tokens: number | undefined;
  thinkingTokens: number | undefined;
  /** Force tool use: true = first tool (or tool_choice's), a string = that tool. */
  tool: true | string | undefined;
  cache: 'write' | 'read' | 'none' | undefined;
  /** message_delta usage with only output_tokens (older API form). */
  deltaUsageOutputOnly: boolean;
}

export const MAX_SIM_TOKENS = 100_000;
const MAX_DIRECTIVES = 32;
const DIRECTIVE_RE = /\[\[sim:([a-z0-9-]+)(?:=([^\]\s]{1,64}))?\]\]/g;

export function emptyDirectives(): SimDirectives {
  return {
    status: undefined,
    retryAfterS: undefined,
    promptTooLong: false,
    overloadedMidstream: false,
    stop: undefined,
    stallBeforeHeaders: false,
    stallAfterHeaders: false,
    chunkBytes: undefined,
    splitAtLineEnds: false,
    lineEnding: undefined,
    paceMs: undefined,
    tokens: undefined,
    thinkingTokens: undefined,
    tool: undefined,
    cache: undefined,
    deltaUsageOutputOnly: false,
  };
}

function int(arg: string | undefined, min: number, max: number): number | undefined {
  if (arg === undefined || !/^\d{1,9}$/.test(arg)) return undefined;
  const n = Number(arg);
  return n < min ? undefined : Math.min(n, max);
}

/** Applies one directive to `d`; false when its argument is malformed. */
type DirectiveHandler = (d: SimDirectives, arg: string | undefined) => boolean;

const flag =
  (set: (d: SimDirectives) => void): DirectiveHandler =>
  (d) => (set(d), true);
/** A directive that takes a whole number in [min, max]. */
const numeric =
  (min: number, max: number, set: (d: SimDirectives, n: number) => void): DirectiveHandler =>
  (d, arg) => {
    const n = int(arg, min, max);
    if (n === undefined) return false;
    set(d, n);
    return true;
  };
const stopAt = (mode: StopMode, at: 'before-delta' | 'before-stop'): DirectiveHandler => flag((d) => (d.stop = { mode, at }));
const stopAfterFrames = (mode: StopMode): DirectiveHandler => numeric(0, 1_000_000, (d, n) => (d.stop = { mode, at: n }));
const lineEnding = (ending: 'lf' | 'crlf' | 'cr'): DirectiveHandler => flag((d) => (d.lineEnding = ending));

function chunking(d: SimDirectives, arg: string | undefined): boolean {
  if (arg === 'byte') d.chunkBytes = 1;
  else if (arg === 'split') d.splitAtLineEnds = true;
  else if (arg === 'event') {
    d.chunkBytes = undefined;
    d.splitAtLineEnds = false;
  } else return false;
  return true;
}

/** Every directive the simulator knows; any other name is an error (a typo must not pass silently). */
const DIRECTIVES: Readonly<Record<string, DirectiveHandler>> = {
  status: numeric(400, 599, (d, n) => (d.status = n)),
  'retry-after': numeric(0, 3600, (d, n) => (d.retryAfterS = n)),
  chunk: numeric(1, 65_536, (d, n) => (d.chunkBytes = n)),
  pace: numeric(0, 60_000, (d, n) => (d.paceMs = n)),
  tokens: numeric(1, MAX_SIM_TOKENS, (d, n) => (d.tokens = n)),
  'thinking-tokens': numeric(1, MAX_SIM_TOKENS, (d, n) => (d.thinkingTokens = n)),
  'prompt-too-long': flag((d) => (d.promptTooLong = true)),
  'overloaded-midstream': flag((d) => (d.overloadedMidstream = true)),
  'cut-before-delta': stopAt('cut', 'before-delta'),
  'reset-before-delta': stopAt('reset', 'before-delta'),
  'stall-before-delta': stopAt('stall', 'before-delta'),
  'cut-before-stop': stopAt('cut', 'before-stop'),
  'reset-before-stop': stopAt('reset', 'before-stop'),
  'stall-before-stop': stopAt('stall', 'before-stop'),
  cut: stopAfterFrames('cut'),
  reset: stopAfterFrames('reset'),
  stall: stopAfterFrames('stall'),
  'stall-midstream': flag((d) => (d.stop = { mode: 'stall', at: -1 })),
  'stall-before-headers': flag((d) => (d.stallBeforeHeaders = true)),
  'stall-after-headers': flag((d) => (d.stallAfterHeaders = true)),
  'stall-headers': flag((d) => (d.stallAfterHeaders = true)),
  chunking,
  split: flag((d) => (d.splitAtLineEnds = true)),
  crlf: lineEnding('crlf'),
  cr: lineEnding('cr'),
  lf: lineEnding('lf'),
  tool: (d, arg) => ((d.tool = arg ?? true), true),
  cache: (d, arg) => {
    if (arg !== 'write' && arg !== 'read' && arg !== 'none') return false;
    d.cache = arg;
    return true;
  },
  'delta-usage': (d, arg) => {
    if (arg !== 'output' && arg !== 'full') return false;
    d.deltaUsageOutputOnly = arg === 'output';
    return true;
  },
};

/** Applies one directive; returns an error message when it is unknown or malformed. */
function applyDirective(d: SimDirectives, name: string, arg: string | undefined): string | undefined {
  if (!Object.hasOwn(DIRECTIVES, name)) return `unknown simulator directive [[sim:${name}]]`;
  if (DIRECTIVES[name]!(d, arg)) return undefined;
  return `malformed simulator directive [[sim:${name}${arg === undefined ? '' : '=' + arg}]]`;
}

/** Parses directives in `text` into `d`; returns an error message for an unknown/malformed one. */
export function parseDirectives(text: string, d: SimDirectives): string | undefined {
  if (!text.includes('[[sim:')) return undefined;
  let n = 0;
  for (const m of text.matchAll(DIRECTIVE_RE)) {
    if (++n > MAX_DIRECTIVES) return 'too many simulator directives';
    const err = applyDirective(d, m[1]!, m[2]);
    if (err !== undefined) return err;
  }
  return undefined;
}

export const stripDirectives = (text: string): string => (text.includes('[[sim:') ? text.replace(DIRECTIVE_RE, ' ') : text);

// ---------------------------------------------------------------------------------------------
// Validation: the refusals of the real API that a gateway must pass through or map.

export class SimRequestError extends Error {
  constructor(
    readonly status: number,
    readonly errorType: string,
    message: string,
  ) {
    super(message);
  }
}

const invalid = (message: string): SimRequestError => new SimRequestError(400, 'invalid_request_error', message);

const THINKING_MIN_BUDGET = 1024;

export function thinkingSignature(thinking: string): string {
  const h = createHash('sha256').update('sim-thinking\0').update(thinking).digest();
  return Buffer.concat([Buffer.from('EqQBsim'), h]).toString('base64');
}

/** Throws SimRequestError for what the real API refuses with 400 (the checks a gateway meets). */
export function validateMessagesBody(body: unknown, countTokensOnly = false): asserts body is Obj {
  if (!isObj(body)) throw invalid('Request body must be a JSON object.');
  if (typeof body.model !== 'string' || body.model.length === 0) throw invalid('model: Field required');
  if (!countTokensOnly) {
    if (body.max_tokens === undefined) throw invalid('max_tokens: Field required');
    if (!Number.isInteger(body.max_tokens) || body.max_tokens < 1) throw invalid('max_tokens: Input should be a valid integer greater than or equal to 1');
  }
  const messages = body.messages;
  if (!Array.isArray(messages)) throw invalid('messages: Field required');
  if (messages.length === 0) throw invalid('messages: at least one message is required');
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!isObj(m) || (m.role !== 'user' && m.role !== 'assistant')) throw invalid(`messages.${i}.role: Input should be 'user' or 'assistant'`);
    if (typeof m.content !== 'string' && !Array.isArray(m.content)) throw invalid(`messages.${i}.content: Input should be a valid list`);
    if (Array.isArray(m.content)) {
      for (let j = 0; j < m.content.length; j++) {
        if (!isObj(m.content[j]) || typeof m.content[j].type !== 'string') throw invalid(`messages.${i}.content.${j}.type: Field required`);
        if (m.content[j].type === 'text' && m.content[j].text === '') throw invalid('messages: text content blocks must be non-empty');
      }
    }
  }
  // Sampling ranges, as the API states them (0 to 1 for temperature and top_p; top_k a count).
  for (const f of ['temperature', 'top_p'] as const) {
    const v = body[f];
    if (v !== undefined && (typeof v !== 'number' || v < 0 || v > 1)) throw invalid(`${f}: range: 0..1`);
  }
  if (body.top_k !== undefined && (!Number.isInteger(body.top_k) || (body.top_k as number) < 0)) {
    throw invalid('top_k: Input should be greater than or equal to 0');
  }
  const thinking = body.thinking;
  const thinkingOn = isObj(thinking) && (thinking.type === 'enabled' || thinking.type === 'adaptive');
  if (isObj(thinking) && thinking.type === 'enabled') {
    if (!Number.isInteger(thinking.budget_tokens) || thinking.budget_tokens < THINKING_MIN_BUDGET) {
      throw invalid(`thinking.enabled.budget_tokens: Input should be greater than or equal to ${THINKING_MIN_BUDGET}`);
    }
    // The budget must stay below max_tokens on the opus and sonnet models (docs/api/messages.md); fable is exempt.
    if (!countTokensOnly && thinking.budget_tokens >= body.max_tokens && !body.model.includes('fable')) {
      throw invalid(
        '`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size',
      );
    }
  }
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) throw invalid('tools: Input should be a valid list');
    for (let i = 0; i < body.tools.length; i++) {
      if (!isObj(body.tools[i]) || typeof body.tools[i].name !== 'string') throw invalid(`tools.${i}.custom.name: Field required`);
    }
  }
  checkToolTurns(messages, thinkingOn);
}

/** tool_use / tool_result pairing across turns, and thinking blocks sent back unchanged. */
function checkToolTurns(messages: unknown[], thinkingOn: boolean): void {
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Obj;
    if (m.role !== 'assistant' || !Array.isArray(m.content)) continue;
    const toolIds: string[] = [];
    for (let j = 0; j < m.content.length; j++) {
      const b = m.content[j] as Obj;
      if (b.type === 'tool_use') toolIds.push(String(b.id));
      if (b.type === 'thinking' && (typeof b.thinking !== 'string' || b.signature !== thinkingSignature(b.thinking))) {
        throw invalid(`messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`);
      }
    }
    if (toolIds.length === 0) continue;
    const next = messages[i + 1] as Obj | undefined;
    const answered = new Set<string>();
    if (next && next.role === 'user' && Array.isArray(next.content)) {
      for (const b of next.content as Obj[]) if (b.type === 'tool_result') answered.add(String(b.tool_use_id));
    }
    const missing = toolIds.filter((id) => !answered.has(id));
    if (missing.length > 0 && next !== undefined) {
      throw invalid(
        `messages.${i + 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
      );
    }
    const isLastToolTurn = i === messages.length - 2;
    if (thinkingOn && isLastToolTurn) {
      const first = m.content[0] as Obj;
      if (first.type !== 'thinking' && first.type !== 'redacted_thinking') {
        throw invalid(
          `messages.${i}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${String(first.type)}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking`,
        );
      }
    }
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as Obj;
    if (m.role !== 'user' || !Array.isArray(m.content)) continue;
    const prev = messages[i - 1] as Obj | undefined;
    const offered = new Set<string>();
    if (prev && prev.role === 'assistant' && Array.isArray(prev.content)) {
      for (const b of prev.content as Obj[]) if (b.type === 'tool_use') offered.add(String(b.id));
    }
    for (let j = 0; j < m.content.length; j++) {
      const b = m.content[j] as Obj;
      if (b.type === 'tool_result' && !offered.has(String(b.tool_use_id))) {
        throw invalid(
          `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(b.tool_use_id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
        );
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Input tokens and prompt caching.

const REQUEST_OVERHEAD_TOKENS = 4;
const MESSAGE_OVERHEAD_TOKENS = 3;
const tok = (s: string): number => Math.ceil(Buffer.byteLength(s, 'utf8') / 4);

function blockText(b: Obj): string {
  switch (b.type) {
    case 'text':
      return typeof b.text === 'string' ? b.text : '';
    case 'thinking':
      return typeof b.thinking === 'string' ? b.thinking : '';
    case 'redacted_thinking':
      return typeof b.data === 'string' ? b.data : '';
    case 'tool_use':
      return String(b.name) + JSON.stringify(b.input ?? {});
    case 'tool_result':
      return toolResultText(b);
    default: {
      const { cache_control: _cc, ...rest } = b;
      return JSON.stringify(rest);
    }
  }
}

function toolResultText(b: Obj): string {
  if (typeof b.content === 'string') return b.content;
  if (!Array.isArray(b.content)) return '';
  let s = '';
  for (const c of b.content) if (isObj(c) && c.type === 'text' && typeof c.text === 'string') s += c.text;
  return s;
}

export interface InputCount {
  /** All input tokens, cached or not (what count_tokens answers). */
  total: number;
  /** Tokens of the cacheable prefix (0 when no breakpoint). */
  prefixTokens: number;
  /** How many segments the prefix spans, for its cache key. */
  prefixSegments: number;
  prefixTtl: '5m' | '1h';
}

/** One walk over tools, system and messages in prefix order. */
export function countInput(body: Obj): InputCount {
  let total = REQUEST_OVERHEAD_TOKENS;
  let prefixTokens = 0;
  let prefixSegments = 0;
  let prefixTtl: '5m' | '1h' = '5m';
  let seg = 0;
  const mark = (b: unknown): void => {
    if (isObj(b) && isObj(b.cache_control)) {
      prefixTokens = total;
      prefixSegments = seg;
      prefixTtl = b.cache_control.ttl === '1h' ? '1h' : '5m';
    }
  };
  if (Array.isArray(body.tools)) {
    for (const t of body.tools) {
      if (!isObj(t)) continue;
      const { cache_control: _cc, ...rest } = t;
      total += tok(JSON.stringify(rest));
      seg++;
      mark(t);
    }
  }
  if (typeof body.system === 'string') {
    total += tok(body.system);
    seg++;
  } else if (Array.isArray(body.system)) {
    for (const b of body.system) {
      if (!isObj(b)) continue;
      total += tok(typeof b.text === 'string' ? b.text : '');
      seg++;
      mark(b);
    }
  }
  const messages: unknown[] = Array.isArray(body.messages) ? body.messages : [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!isObj(m)) continue;
    total += MESSAGE_OVERHEAD_TOKENS;
    if (typeof m.content === 'string') {
      total += tok(m.content);
      seg++;
    } else if (Array.isArray(m.content)) {
      for (const b of m.content) {
        if (!isObj(b)) continue;
        total += tok(blockText(b));
        seg++;
        mark(b);
      }
    }
  }
  if (isObj(body.cache_control) && messages.length > 0) {
    prefixTokens = total;
    prefixSegments = seg;
    prefixTtl = body.cache_control.ttl === '1h' ? '1h' : '5m';
  }
  return { total, prefixTokens, prefixSegments, prefixTtl };
}

/** Cache key of the first `segments` prefix segments (model + their JSON). */
export function prefixKey(body: Obj, segments: number): string {
  const h = createHash('sha256').update(String(body.model)).update('\0');
  let seg = 0;
  const add = (v: unknown): boolean => {
    if (seg >= segments) return false;
    h.update(JSON.stringify(v) ?? '');
    seg++;
    return true;
  };
  if (Array.isArray(body.tools)) for (const t of body.tools) if (isObj(t) && !add(t)) return h.digest('hex');
  if (typeof body.system === 'string') add(body.system);
  else if (Array.isArray(body.system)) for (const b of body.system) if (isObj(b) && !add(b)) return h.digest('hex');
  if (Array.isArray(body.messages)) {
    for (const m of body.messages) {
      if (!isObj(m)) continue;
      if (typeof m.content === 'string') {
        if (!add([m.role, m.content])) return h.digest('hex');
      } else if (Array.isArray(m.content)) {
        for (const b of m.content) if (isObj(b) && !add([m.role, b])) return h.digest('hex');
      }
    }
  }
  return h.digest('hex');
}

// ---------------------------------------------------------------------------------------------
// Reply planning.

export type PlannedBlock =
  | { type: 'thinking'; pieces: string[]; thinking: string; signature: string }
  | { type: 'text'; pieces: string[]; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Obj; pieces: string[] };

export interface ReplyPlan {
  blocks: PlannedBlock[];
  stopReason: 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';
  stopSequence: string | null;
  outputTokens: number;
}

export interface LastUserTurn {
  /** Text of the last user message's text blocks (or its string content), directives included. */
  text: string;
  /** Text of its tool_result blocks, when it answers a tool call. */
  toolResultText: string | undefined;
}

export function lastUserTurn(body: Obj): LastUserTurn {
  const messages: unknown[] = Array.isArray(body.messages) ? body.messages : [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (!isObj(m) || m.role !== 'user') continue;
    if (typeof m.content === 'string') return { text: m.content, toolResultText: undefined };
    let text = '';
    let result: string | undefined;
    if (Array.isArray(m.content)) {
      for (const b of m.content) {
        if (!isObj(b)) continue;
        if (b.type === 'text' && typeof b.text === 'string') text += (text ? ' ' : '') + b.text;
        else if (b.type === 'tool_result') result = (result ?? '') + toolResultText(b);
      }
    }
    return { text, toolResultText: result };
  }
  return { text: '', toolResultText: undefined };
}

const FILLER = ['lorem', 'ipsum', 'dolor', 'sit', 'amet', 'consectetur', 'adipiscing', 'elit', 'sed', 'do', 'eiusmod', 'tempor'];
const MAX_ECHO_WORDS = 32;

function words(text: string): string[] {
  const out: string[] = [];
  for (const w of stripDirectives(text).split(/\s+/)) {
    if (w.length === 0) continue;
    out.push(w.length > 40 ? w.slice(0, 40) : w);
    if (out.length >= MAX_ECHO_WORDS) break;
  }
  return out;
}

/** `n` word pieces: `lead` words first, then filler; every piece after the first has a leading space. */
function wordPieces(lead: string[], n: number): string[] {
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    const w = i < lead.length ? lead[i]! : FILLER[(i - lead.length) % FILLER.length]!;
    out[i] = i === 0 ? w : ' ' + w;
  }
  return out;
}

function sampleValue(name: string, schema: unknown): unknown {
  if (!isObj(schema)) return `${name} value`;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  switch (schema.type) {
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'array':
      return [];
    case 'object':
      return sampleInput(schema);
    default:
      return `${name} value`;
  }
}

/**
 * A value for each property a model would fill: the `required` ones when the schema lists them
 * (models leave optional parameters out, and an agent's tool may refuse a made-up optional value),
 * every property otherwise.
 */
function sampleInput(schema: unknown): Obj {
  const out: Obj = {};
  if (isObj(schema) && isObj(schema.properties)) {
    const required = Array.isArray(schema.required) ? new Set(schema.required) : undefined;
    for (const [k, v] of Object.entries(schema.properties)) if (required === undefined || required.has(k)) out[k] = sampleValue(k, v);
  }
  return out;
}

const JSON_PIECE_CHARS = 10;

export interface PlanDefaults {
  replyTokens: number;
  thinkingTokens: number;
}

/** The tool the reply calls, if any: asked for by directive, tool_choice, or "use the tool" in the turn. */
function chosenTool(body: Obj, turn: LastUserTurn, d: SimDirectives): Obj | undefined {
  const tools: Obj[] = Array.isArray(body.tools) ? body.tools.filter(isObj) : [];
  const choice = isObj(body.tool_choice) ? body.tool_choice : undefined;
  if (tools.length === 0 || choice?.type === 'none') return undefined;
  const wanted = typeof d.tool === 'string' ? d.tool : choice?.type === 'tool' && typeof choice.name === 'string' ? choice.name : undefined;
  const asked =
    d.tool !== undefined || choice?.type === 'any' || choice?.type === 'tool' || (turn.toolResultText === undefined && /\buse the tool\b/i.test(turn.text));
  if (!asked) return undefined;
  return wanted !== undefined ? (tools.find((t) => t.name === wanted) ?? tools[0]) : tools[0];
}

/** The pieces up to the first stop sequence (which may start in an earlier piece), and which one stopped them. */
function cutAtStopSequence(pieces: string[], stopSequences: unknown): { pieces: string[]; stopSequence: string | null } {
  const stops: string[] = Array.isArray(stopSequences) ? stopSequences.filter((s: unknown): s is string => typeof s === 'string' && s.length > 0) : [];
  if (stops.length === 0) return { pieces, stopSequence: null };
  let acc = '';
  for (let i = 0; i < pieces.length; i++) {
    const before = acc.length;
    acc += pieces[i];
    let hit = -1;
    let which = '';
    for (const s of stops) {
      const at = acc.indexOf(s, Math.max(0, before - s.length + 1));
      if (at !== -1 && (hit === -1 || at < hit)) {
        hit = at;
        which = s;
      }
    }
    if (hit === -1) continue;
    const kept: string[] = [];
    let pos = 0;
    for (let k = 0; k <= i && pos < hit; k++) {
      const p = pieces[k]!;
      const take = Math.min(p.length, hit - pos);
      kept.push(p.slice(0, take));
      pos += take;
    }
    return { pieces: kept, stopSequence: which };
  }
  return { pieces, stopSequence: null };
}

/** What is left of max_tokens while the reply is planned, and whether it ran out. */
interface Budget {
  left: number;
  truncated: boolean;
}

function planThinking(thinking: Obj, d: SimDirectives, defaults: PlanDefaults, promptWords: string[], budget: Budget): PlannedBlock {
  let n = d.thinkingTokens ?? defaults.thinkingTokens;
  if (thinking.type === 'enabled' && Number.isInteger(thinking.budget_tokens)) n = Math.min(n, thinking.budget_tokens);
  if (n > budget.left) {
    n = budget.left;
    budget.truncated = true;
  }
  const pieces = wordPieces(['Considering', 'the', 'request:', ...promptWords], n);
  const text = pieces.join('');
  budget.left -= n;
  return { type: 'thinking', pieces, thinking: text, signature: thinkingSignature(text) };
}

/** The text's leading words and its length in pieces: announcing a tool call, reading a tool result, or an echo. */
function textLead(tool: Obj | undefined, turn: LastUserTurn, d: SimDirectives, defaults: PlanDefaults, promptWords: string[]): { lead: string[]; n: number } {
  if (tool !== undefined) {
    const lead = ["I'll", 'use', 'the', String(tool.name), 'tool.'];
    return { lead, n: d.tokens ?? lead.length };
  }
  const lead = turn.toolResultText !== undefined ? ['The', 'tool', 'returned:', ...promptWords] : ['Echo:', ...promptWords];
  return { lead, n: d.tokens ?? defaults.replyTokens };
}

/** The text block (absent when empty), cut at the first stop sequence and at the budget. */
function planText(body: Obj, lead: string[], n: number, budget: Budget): { block: PlannedBlock | undefined; stopSequence: string | null } {
  const cut = cutAtStopSequence(wordPieces(lead, n), body.stop_sequences);
  let pieces = cut.pieces;
  if (pieces.length > budget.left) {
    pieces = pieces.slice(0, budget.left);
    budget.truncated = true;
  }
  budget.left -= pieces.length;
  return { block: pieces.length > 0 ? { type: 'text', pieces, text: pieces.join('') } : undefined, stopSequence: cut.stopSequence };
}

/** The tool_use block, whole or not at all: its input does not fit the budget means max_tokens. */
function planToolUse(tool: Obj, toolId: () => string, budget: Budget): PlannedBlock | undefined {
  const input = sampleInput(tool.input_schema);
  const json = JSON.stringify(input);
  // The leading empty input_json_delta is free.
  const pieces: string[] = [''];
  for (let i = 0; i < json.length; i += JSON_PIECE_CHARS) pieces.push(json.slice(i, i + JSON_PIECE_CHARS));
  if (pieces.length - 1 > budget.left) {
    budget.truncated = true;
    return undefined;
  }
  budget.left -= pieces.length - 1;
  return { type: 'tool_use', id: toolId(), name: String(tool.name), input, pieces };
}

export function planReply(body: Obj, turn: LastUserTurn, d: SimDirectives, defaults: PlanDefaults, toolId: () => string): ReplyPlan {
  const budget: Budget = { left: body.max_tokens, truncated: false };
  const blocks: PlannedBlock[] = [];
  const promptWords = words(turn.toolResultText !== undefined ? turn.toolResultText : turn.text);
  // Thinking first, then text, then the tool call.
  const thinking = body.thinking;
  if (isObj(thinking) && (thinking.type === 'enabled' || thinking.type === 'adaptive')) {
    blocks.push(planThinking(thinking, d, defaults, promptWords, budget));
  }
  const tool = chosenTool(body, turn, d);
  let stopSequence: string | null = null;
  if (!budget.truncated) {
    const { lead, n } = textLead(tool, turn, d, defaults, promptWords);
    const text = planText(body, lead, n, budget);
    if (text.block !== undefined) blocks.push(text.block);
    stopSequence = text.stopSequence;
  }
  if (tool !== undefined && !budget.truncated && stopSequence === null) {
    const use = planToolUse(tool, toolId, budget);
    if (use !== undefined) blocks.push(use);
  }
  const outputTokens = body.max_tokens - budget.left;
  const stopReason = budget.truncated
    ? 'max_tokens'
    : stopSequence !== null
      ? 'stop_sequence'
      : blocks.some((b) => b.type === 'tool_use')
        ? 'tool_use'
        : 'end_turn';
  return { blocks, stopReason, stopSequence: stopReason === 'stop_sequence' ? stopSequence : null, outputTokens };
}
