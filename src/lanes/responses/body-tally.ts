// The Responses tally of a non-streaming answer: the response object the vendor returned, read
// for what settlement needs (the streaming twin is usage-tally.ts).
import { isObject } from './raw-json.js';
import { emptyUsage, readResponseError, readResponsesUsage, str, type ResponsesTallyResult } from './usage-fields.js';

/**
 * Tallies a non-streaming Responses body (the response object). Accepts the raw bytes/text or an
 * already-parsed value. Outcome: 'complete' when usage is usable, otherwise 'usage_unknown' (a
 * 2xx body that is not a response object, or not JSON, is also 'usage_unknown': the vendor was
 * reached and may have run). `terminalEvent` stays undefined; visibleTextChars sums the
 * `output_text` parts of message items.
 */
export function tallyResponseBody(body: Uint8Array | string | unknown): ResponsesTallyResult {
  const result: ResponsesTallyResult = {
    outcome: 'usage_unknown',
    terminalEvent: undefined,
    status: undefined,
    usage: emptyUsage(),
    usageUsable: false,
    responseId: undefined,
    model: undefined,
    incompleteReason: undefined,
    error: undefined,
    responseError: undefined,
    maxSequenceNumber: -1,
    visibleTextChars: 0,
    eventCount: 0,
    sawDone: false,
    parseError: undefined,
  };
  let value: unknown = body;
  if (typeof body === 'string' || body instanceof Uint8Array) {
    const text = typeof body === 'string' ? body : new TextDecoder('utf-8').decode(body);
    try {
      value = JSON.parse(text);
    } catch {
      result.parseError = 'body is not JSON';
      return result;
    }
  }
  if (!isObject(value)) {
    result.parseError = 'body is not a JSON object';
    return result;
  }
  result.responseId = str(value.id);
  result.model = str(value.model);
  result.status = str(value.status);
  const { usage, usable } = readResponsesUsage(value.usage);
  result.usage = usage;
  result.usageUsable = usable;
  if (isObject(value.incomplete_details)) result.incompleteReason = str(value.incomplete_details.reason);
  result.responseError = readResponseError(value.error);
  if (Array.isArray(value.output)) {
    for (const item of value.output) {
      if (!isObject(item) || item.type !== 'message' || !Array.isArray(item.content)) continue;
      for (const part of item.content) {
        if (isObject(part) && part.type === 'output_text' && typeof part.text === 'string') {
          result.visibleTextChars += part.text.length;
        }
      }
    }
  }
  result.outcome = usable ? 'complete' : 'usage_unknown';
  return result;
}
