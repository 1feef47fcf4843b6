// What the Responses request checks share: the body's shape helpers, the one refusal, and the
// count one walk over the body collects (the texts to count and the hold's extra tokens). The
// checks themselves are request.ts (the top level), request-input.ts (input items) and
// request-tools.ts (tools and tool_choice).
import { ApiError, type ErrorCode } from '../../errors.js';

/** Hold framing: per input item (role and turn markers), per tool, per request. */
export const HOLD_ITEM_OVERHEAD_TOKENS = 4;
export const HOLD_TOOL_OVERHEAD_TOKENS = 8;
export const HOLD_REQUEST_OVERHEAD_TOKENS = 32;
/** Hold margin over the count: +2% + 64 tokens. */
export const HOLD_MARGIN_PERCENT = 2;
export const HOLD_MARGIN_TOKENS = 64;
/** The hold assumes at least one token per this many characters of verbatim text. */
export const HOLD_CHARS_PER_TOKEN = 4;
/** Characters of a reasoning item's encrypted_content per token assumed for the hold. */
export const HOLD_ENCRYPTED_CHARS_PER_TOKEN = 4;
/** The one `include` value accepted; always sent (store is false). */
export const INCLUDE_ENCRYPTED_REASONING = 'reasoning.encrypted_content';

export type Obj = Record<string, unknown>;

export function fail(code: ErrorCode, param: string, message: string): never {
  throw new ApiError(code, { param, message });
}

/** The field's value, with null read as absent. */
export function optional(body: Obj, key: string): unknown {
  const v = body[key];
  return v === null ? undefined : v;
}

/** What the one walk over the body collects for counting: the counts themselves come after it. */
export interface Count {
  /** Text the vendor reads verbatim: its exact tokens are the envelope count. */
  verbatimTexts: string[];
  /** UTF-16 code units of that verbatim text (for the hold's four-characters-per-token floor). */
  chars: number;
  /** Text the hold budgets in some form (schemas, summaries): see holdTokensOf. */
  holdTexts: string[];
  /** Extra tokens the hold assumes beyond the verbatim count, before the margin and holdTexts. */
  extra: number;
}

/** Counts text the vendor reads verbatim: its exact tokens and its length. */
export function addVerbatim(count: Count, text: string): void {
  count.verbatimTexts.push(text);
  count.chars += text.length;
}
