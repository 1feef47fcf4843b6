// POST /v1/responses: the OpenAI Responses protocol for text-6-astra through the shared text proxy.
// The usage frame is an SSE comment after the terminal event: the official SDK (6.45+, 7.x) throws
// on any event type it does not know in responses.stream(), but every version ignores comments. So
// a key or request asking for the named event gets the comment here too; `none` omits it.
import { vendorUserHash } from '../../accounts/api-key.js';
import type { Catalog, TextModel } from '../../catalog/models.js';
import type { Config } from '../../config/config.js';
import type { UsageFrame } from '../../accounts/usage-frame.js';
import { responsesHoldInk, textChargeInk, textUsageFromResponses } from '../../catalog/pricing.js';
import type { BodyResult, ParsedTextRequest, StreamTally, TextLane } from '../text-lane.js';
import { usageFrameText } from '../usage-frame.js';
import { finishResponsesRequest, prepareResponsesRequest, type ResponsesRequest } from './request.js';
import { countRequestTexts } from './token-count-pool.js';
import { tallyResponseBody } from './body-tally.js';
import { ResponsesUsageTally, type ResponsesUsage } from './usage-tally.js';
import { turnBody } from './ws-turn.js';

function toParsed(request: ResponsesRequest): ParsedTextRequest {
  return {
    model: request.model,
    stream: request.stream,
    holdInk: responsesHoldInk(request.promptTokensForHold, request.maxOutputTokens, request.model),
    vendorBody: request.vendorBody,
    maxTokens: request.maxOutputTokens,
  };
}

/** Prices a Responses receipt (input includes the cached and cache-write parts); undefined when unusable. */
function charge(model: TextModel, usage: ResponsesUsage): number | undefined {
  if (usage.inputTokens === undefined || usage.outputTokens === undefined) return undefined;
  try {
    return textChargeInk(
      model,
      textUsageFromResponses({
        inputTokens: usage.inputTokens,
        cachedTokens: usage.cachedTokens ?? 0,
        cacheWriteTokens: usage.cacheWriteTokens ?? 0,
        outputTokens: usage.outputTokens,
      }),
    );
  } catch {
    return undefined;
  }
}

function usageRecord(usage: ResponsesUsage): Record<string, number> {
  const r: Record<string, number> = {};
  if (usage.inputTokens !== undefined) r.input_tokens = usage.inputTokens;
  if (usage.cachedTokens !== undefined) r.cached_tokens = usage.cachedTokens;
  if (usage.cacheWriteTokens !== undefined) r.cache_write_tokens = usage.cacheWriteTokens;
  if (usage.outputTokens !== undefined) r.output_tokens = usage.outputTokens;
  if (usage.reasoningTokens !== undefined) r.reasoning_tokens = usage.reasoningTokens;
  return r;
}

/** The comment whatever was asked, except none: a named event would stop the OpenAI SDK. */
const usageComment = (form: UsageFrame, ink: number, requestId: string): string => usageFrameText(form === 'none' ? 'none' : 'comment', ink, requestId);

export function responsesLane(cfg: Config, catalog: Catalog): TextLane {
  const capChars = cfg.responses.visibleOutputCapChars;
  return {
    product: 'responses',
    lane: 'responses',
    vendorPath: '/responses',
    promptParam: 'input',
    vendorHeaders: Object.freeze({
      'content-type': 'application/json',
      accept: 'application/json',
      // We read and relay the bytes as they are: no compressed answers (an absent Accept-Encoding
      // would allow any coding, RFC 9110 12.5.3).
      'accept-encoding': 'identity',
    }),
    keyHeader: (key) => ['authorization', `Bearer ${key}`],
    parse(body, ctx): ParsedTextRequest | Promise<ParsedTextRequest> {
      const userHash = vendorUserHash(ctx.auth!.keyId);
      // A WebSocket turn's `response.create` event: its envelope off, then the POST's own rules.
      const p = prepareResponsesRequest(ctx.transport === 'websocket' ? turnBody(body) : body, catalog, { userHash });
      // A long prompt is counted off the event loop (token-count-pool.ts); a short one here.
      const counts = countRequestTexts(p.verbatimTexts, p.holdTexts, p.countChars);
      return counts instanceof Promise ? counts.then((c) => toParsed(finishResponsesRequest(p, c))) : toParsed(finishResponsesRequest(p, counts));
    },
    newTally: (req) => responsesTally(req, capChars),
    finishBody: finishResponsesBody,
    usageFrame: (inkCharged, requestId, _tally, form) => usageComment(form, inkCharged, requestId),
    errorFrame: responsesErrorFrame,
    cappedFrame: responsesCappedFrame,
  };
}

/** The stream tally: usage on the side, and the service's visible-output cap (`capChars`). */
function responsesTally(req: ParsedTextRequest, capChars: number): StreamTally {
  const t = new ResponsesUsageTally({ keepOutput: true });
  const tally = {
    capped: false,
    push: (chunk: Buffer) => {
      t.markOutput();
      t.feedEvents(chunk);
      if (t.visibleTextChars > capChars && !t.sawTerminal) {
        tally.capped = true;
        // The proxy does not relay the chunk that passed the cap: the final response must not carry it either.
        t.rewindOutput();
      }
    },
    // Text deltas add at most one character (UTF-16 unit) per byte of their event, so a chunk
    // shorter than what is left under the cap cannot cross it.
    mayCap: (bytes: number) => !t.sawTerminal && t.visibleTextChars + bytes > capChars,
    get sawTerminal(): boolean {
      return t.sawTerminal;
    },
    end: () => t.end(),
    outcome: () => t.outcome(),
    chargeInk: () => (t.usageUsable ? charge(req.model, t.usage) : undefined),
    usage: () => usageRecord(t.usage),
    vendorRequestId: () => t.responseId,
    // An incomplete response says why (max_output_tokens, content_filter); else its status.
    finishReason: () => t.incompleteReason ?? t.status,
    // A Responses stream passes the vendor's error events on as they come (no final error to carry).
    vendorError: () => undefined,
    inner: t,
    model: req.model.id,
  };
  return tally;
}

function finishResponsesBody(json: unknown, req: ParsedTextRequest): BodyResult {
  const t = tallyResponseBody(json);
  if (json && typeof json === 'object' && 'model' in json) (json as Record<string, unknown>).model = req.model.id;
  // The statuses of the stream's three terminal events: a `failed` response that reports its
  // usage settles on it, as `response.failed` with usage does on the stream (docs/api/billing.md: a
  // text call settles to what the vendor reports); the client gets the vendor's failed
  // response, as the stream passes `response.failed` on. Other statuses (queued, in_progress,
  // cancelled: background mode, which we refuse) are not a receipt.
  const usable = t.usageUsable && (t.status === 'completed' || t.status === 'incomplete' || t.status === 'failed');
  return {
    chargeInk: usable ? charge(req.model, t.usage) : undefined,
    usage: usageRecord(t.usage),
    vendorRequestId: t.responseId,
    clientBody: JSON.stringify(json),
    finishReason: t.incompleteReason ?? t.status,
  };
}

/** The stream's single final `error` event: ours, carrying the vendor's message when it sent one. */
function responsesErrorFrame(code: 'usage_unknown' | 'incomplete_stream', message: string, requestId: string, tally: StreamTally): string {
  const inner = (tally as unknown as { inner: ResponsesUsageTally }).inner;
  const seq = inner.maxSequenceNumber + 1;
  const vendor = inner.error ?? inner.responseError;
  if (vendor?.message) message = `${vendor.message} (${message})`;
  // Nested `error` (the first-party shape) makes the SDK raise a typed APIError; the flat
  // fields keep clients that read `code`/`message` at the top level working too.
  return `event: error\ndata: ${JSON.stringify({
    type: 'error',
    sequence_number: seq,
    code,
    message,
    param: null,
    error: { type: 'provider_error', code, message, param: null, request_id: requestId },
  })}\n\n`;
}

/** Ends a stream the service stopped at its visible-output cap: an `incomplete` response, then the usage comment (unless none). */
function responsesCappedFrame(inkCharged: number, requestId: string, tally: StreamTally, form: UsageFrame): string {
  const inner = (tally as unknown as { inner: ResponsesUsageTally; model: string }).inner;
  const seq = inner.maxSequenceNumber + 1;
  // The SDK's final response is this snapshot (it replaces what the deltas built), so it
  // carries what was relayed: the first snapshot's fields, the finished items, and the open
  // message items with the text relayed so far.
  const kept = inner.relayedOutput();
  const response = {
    ...kept?.snapshot,
    id: inner.responseId ?? null,
    object: 'response',
    status: 'incomplete',
    error: null,
    incomplete_details: { reason: 'max_output_tokens' },
    model: (tally as unknown as { model: string }).model,
    output: kept?.output ?? [],
    // null, not counts: the vendor's receipt never came (we stopped reading), and the charge
    // is the hold (docs/api/responses.md), which is not a token count: it prices the prompt as cache writes and
    // the output at max_output_tokens floored at 32,768. Counts that priced to it would be
    // invented; the request record's usage is empty for the same reason. What was charged is
    // in the service.usage comment that follows.
    usage: null,
  };
  return (
    `event: response.incomplete\ndata: ${JSON.stringify({ type: 'response.incomplete', sequence_number: seq, response })}\n\n` +
    usageComment(form, inkCharged, requestId)
  );
}
