// Prompt-size bounds for a Messages request, computed without the vendor's tokenizer.
//
// The hold must never be below what the vendor then reports (input + cache writes + cache reads),
// so the estimate is an upper bound, not a guess:
//
//   upper = bodyBytes
//         + REQUEST_OVERHEAD_TOKENS
//         + MESSAGE_OVERHEAD_TOKENS x messages
//         + BLOCK_OVERHEAD_TOKENS   x content blocks (tool_use / tool_result framing)
//         + TOOL_OVERHEAD_TOKENS    x tools
//         + TOOL_USE_SYSTEM_PROMPT_TOKENS       when any tool is declared
//         + OUTPUT_FORMAT_SYSTEM_PROMPT_TOKENS  when output_config.format is set
//   capped at the model's context (maxInputTokens).
//
// Why it holds: the vendor's tokenizer is a byte-level BPE, so every token covers at least one
// UTF-8 byte of the text it encodes; tokens <= bytes. `bodyBytes` is the UTF-8 length of the
// vendor body JSON, which contains every string the prompt carries (system, message text,
// tool_use input, tool_result content, thinking text and signatures, redacted_thinking data, tool
// names, descriptions and schemas) at no less than its own byte length (JSON escaping only
// lengthens), plus the JSON punctuation and keys, which are margin. What the vendor adds that is
// not in the body is budgeted separately: role/turn markers per message, framing per block and
// per tool, and the hidden system prompts it injects for tool use (documented at 300-350 tokens;
// we budget 1,000) and for structured output. Counting the body rather than walking each text
// keeps this to one native pass over the string we send anyway.
//
// The cap is safe because a prompt the vendor accepts is at most its context (200,000 tokens);
// a larger one is refused before running and its hold released.
//
// Lower bound: nothing is strictly provable without the vendor's vocabulary. A token can cover
// many bytes (cl100k_base and o200k_base both have 128-byte tokens, runs of spaces), and the
// vendor merges consecutive same-role turns and drops earlier turns' thinking, so neither
// messages nor blocks are a floor. The only floor is  ceil(verbatimChars / MAX_BYTES_PER_TOKEN)
// under the stated assumption that no vendor token spans more than 256 bytes (twice the longest
// token of the known public byte-level vocabularies). `verbatimChars` counts UTF-16 code units
// of text the vendor certainly tokenizes as written (string content, text blocks, system text,
// tool_result text); UTF-8 bytes >= UTF-16 units, so counting units keeps the floor valid and
// costs nothing (`.length`). With the 4 MiB body limit this floor never exceeds ~16,400 tokens,
// so a 413 for an over-context prompt in practice comes from mapping the vendor's own
// "prompt is too long" refusal; the check here only matters if the body limit is raised.

/** Fixed margin per request for the vendor's framing (turn start, thinking/mode switches). */
export const REQUEST_OVERHEAD_TOKENS = 32;
/** Role and turn markers per message. */
export const MESSAGE_OVERHEAD_TOKENS = 8;
/** Framing per content block (tool_use / tool_result / thinking wrappers). */
export const BLOCK_OVERHEAD_TOKENS = 8;
/** Framing per declared tool around its name, description and schema. */
export const TOOL_OVERHEAD_TOKENS = 16;
/** The vendor's hidden tool-use system prompt (documented at ~350 tokens; budgeted generously). */
export const TOOL_USE_SYSTEM_PROMPT_TOKENS = 1_000;
/** The vendor's hidden instructions for structured output (`output_config.format`); not published, budgeted like tools. */
export const OUTPUT_FORMAT_SYSTEM_PROMPT_TOKENS = 1_000;
/** Assumed longest vendor token in bytes; see the lower-bound note above. */
export const MAX_BYTES_PER_TOKEN = 256;

export interface PromptShape {
  /** UTF-8 bytes of the vendor body JSON. */
  readonly bodyBytes: number;
  readonly messages: number;
  /** Content blocks across all messages (a string content counts as none). */
  readonly blocks: number;
  readonly tools: number;
  readonly hasOutputFormat: boolean;
}

/** An upper bound on the vendor's prompt token count (formula above), capped at `maxInputTokens`. */
export function promptTokensUpperBound(shape: PromptShape, maxInputTokens: number): number {
  const raw =
    shape.bodyBytes +
    REQUEST_OVERHEAD_TOKENS +
    MESSAGE_OVERHEAD_TOKENS * shape.messages +
    BLOCK_OVERHEAD_TOKENS * shape.blocks +
    TOOL_OVERHEAD_TOKENS * shape.tools +
    (shape.tools > 0 ? TOOL_USE_SYSTEM_PROMPT_TOKENS : 0) +
    (shape.hasOutputFormat ? OUTPUT_FORMAT_SYSTEM_PROMPT_TOKENS : 0);
  return Math.min(raw, maxInputTokens);
}

/**
 * A floor under the vendor's prompt token count, given the UTF-16 length of text the vendor
 * tokenizes verbatim. Valid under the MAX_BYTES_PER_TOKEN assumption only (see above).
 */
export function promptTokensLowerBound(verbatimChars: number): number {
  return Math.ceil(verbatimChars / MAX_BYTES_PER_TOKEN);
}
