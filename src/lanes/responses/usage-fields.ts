// What a Responses tally reports and how it reads the vendor's objects: the usage buckets
// ("not reported" is undefined, never 0), error events in both shapes, a failed response's error.
import { count, isObject } from './raw-json.js';

export type ResponsesTerminalEvent = 'response.completed' | 'response.incomplete' | 'response.failed';
export type ResponsesTallyOutcome = 'complete' | 'usage_unknown' | 'incomplete_stream';

/** Usage buckets as the vendor reported them; undefined = not reported (never read as 0). */
export interface ResponsesUsage {
  inputTokens: number | undefined;
  /** `input_tokens_details.cached_tokens`: a part of inputTokens, read from cache. */
  cachedTokens: number | undefined;
  /** `input_tokens_details.cache_write_tokens` (listed in openai 6.49 types); a part of inputTokens. */
  cacheWriteTokens: number | undefined;
  outputTokens: number | undefined;
  /** `output_tokens_details.reasoning_tokens`: a part of outputTokens. */
  reasoningTokens: number | undefined;
  totalTokens: number | undefined;
}

export interface ResponsesErrorInfo {
  code: string | null;
  message: string;
  param: string | null;
  /** 'flat' = SDK type `{type:"error",code,message,param}`; 'nested' = first-party `{type:"error",error:{…}}`. */
  shape: 'flat' | 'nested';
}

/** Plain-data result of a tally, for logging and settlement. */
export interface ResponsesTallyResult {
  outcome: ResponsesTallyOutcome;
  terminalEvent: ResponsesTerminalEvent | undefined;
  /** `response.status` of the terminal snapshot (or of the non-stream body). */
  status: string | undefined;
  usage: ResponsesUsage;
  /** True when usage had both input_tokens and output_tokens as non-negative integers. */
  usageUsable: boolean;
  responseId: string | undefined;
  model: string | undefined;
  incompleteReason: string | undefined;
  /** First `error` event of the stream. */
  error: ResponsesErrorInfo | undefined;
  /** `response.error` of a failed terminal snapshot (or non-stream body). */
  responseError: { code: string | null; message: string } | undefined;
  /** Highest sequence_number seen; -1 when none. */
  maxSequenceNumber: number;
  /** Sum of `.length` (UTF-16 code units) of all `response.output_text.delta` deltas. */
  visibleTextChars: number;
  eventCount: number;
  sawDone: boolean;
  /**
   * First parse problem: an event whose data is not JSON (skipped, tallying goes on) or an event
   * larger than maxEventChars (tallying stops there).
   */
  parseError: string | undefined;
}

export function emptyUsage(): ResponsesUsage {
  return {
    inputTokens: undefined,
    cachedTokens: undefined,
    cacheWriteTokens: undefined,
    outputTokens: undefined,
    reasoningTokens: undefined,
    totalTokens: undefined,
  };
}

export function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function strOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

/** Reads a Responses `usage` object; returns the buckets and whether they are usable for settlement. */
export function readResponsesUsage(raw: unknown): { usage: ResponsesUsage; usable: boolean } {
  const usage = emptyUsage();
  if (!isObject(raw)) return { usage, usable: false };
  usage.inputTokens = count(raw.input_tokens);
  usage.outputTokens = count(raw.output_tokens);
  usage.totalTokens = count(raw.total_tokens);
  const inDetails = raw.input_tokens_details;
  if (isObject(inDetails)) {
    usage.cachedTokens = count(inDetails.cached_tokens);
    usage.cacheWriteTokens = count(inDetails.cache_write_tokens);
  }
  const outDetails = raw.output_tokens_details;
  if (isObject(outDetails)) usage.reasoningTokens = count(outDetails.reasoning_tokens);
  return { usage, usable: usage.inputTokens !== undefined && usage.outputTokens !== undefined };
}

export function readErrorEvent(data: Record<string, unknown>): ResponsesErrorInfo {
  const nested = data.error;
  if (isObject(nested)) {
    return {
      code: strOrNull(nested.code),
      message: str(nested.message) ?? '',
      param: strOrNull(nested.param),
      shape: 'nested',
    };
  }
  return { code: strOrNull(data.code), message: str(data.message) ?? '', param: strOrNull(data.param), shape: 'flat' };
}

export function readResponseError(error: unknown): { code: string | null; message: string } | undefined {
  if (!isObject(error)) return undefined;
  return { code: strOrNull(error.code), message: str(error.message) ?? '' };
}
