// POST /v1/messages: the Anthropic Messages protocol, proxied to the vendor through the shared
// text proxy. Only what differs lives here: request parsing, vendor headers, tally, frames.
import { vendorUserHash } from '../../accounts/api-key.js';
import type { Catalog } from '../../catalog/models.js';
import type { Config } from '../../config/config.js';
import { messagesHoldInk, textChargeInk } from '../../catalog/pricing.js';
import type { BodyResult, ParsedTextRequest, StreamTally, TextLane } from '../text-lane.js';
import type { UsageFrame } from '../../accounts/usage-frame.js';
import { usageFrameText } from '../usage-frame.js';
import { forwardedBetaHeader, parseMessagesRequest } from './request.js';
import { MessagesUsageTally, tallyMessageBody, type MessagesUsage } from './usage-tally.js';
import type { TextModel } from '../../catalog/models.js';

/** Prices a Messages receipt; input and output must be reported, absent cache buckets mean none used. */
function charge(model: TextModel, usage: MessagesUsage): number | undefined {
  if (usage.inputTokens === undefined || usage.outputTokens === undefined) return undefined;
  try {
    return textChargeInk(model, {
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      cacheReadTokens: usage.cacheReadTokens ?? 0,
      cacheWriteTokens: usage.cacheWriteTokens ?? 0,
    });
  } catch {
    return undefined; // a receipt outside any sane range is not usable
  }
}

function sseEvent(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}

export function messagesLane(cfg: Config, catalog: Catalog): TextLane {
  return {
    product: 'messages',
    lane: 'messages',
    vendorPath: '/v1/messages',
    promptParam: 'messages',
    vendorHeaders: Object.freeze({
      // The protocol version header toward the vendor is ours; a client's value is never forwarded.
      'anthropic-version': cfg.vendors.anthropic.version,
      'content-type': 'application/json',
      accept: 'application/json',
      // We read and relay the bytes as they are: no compressed answers (an absent Accept-Encoding
      // would allow any coding, RFC 9110 12.5.3).
      'accept-encoding': 'identity',
    }),
    keyHeader: (key) => ['x-api-key', key],
    parse(body, ctx): ParsedTextRequest {
      // metadata.user_id on the wire: a hash of the key id, stable per key, meaningless outside.
      const keyUserId = vendorUserHash(ctx.auth!.keyId);
      const r = parseMessagesRequest(body, catalog, { keyUserId });
      // The interface also names the header `vendor-beta` (docs/api/messages.md); the protocol's own name is `anthropic-beta`.
      const beta = forwardedBetaHeader(ctx.header('anthropic-beta') ?? ctx.header('vendor-beta'));
      return {
        model: r.model,
        stream: r.stream,
        holdInk: messagesHoldInk(r.model, r.promptTokensEstimate, r.maxTokens),
        vendorBody: r.vendorBody,
        extraHeaders: beta ? { 'anthropic-beta': beta } : undefined,
        maxTokens: r.maxTokens,
      };
    },
    newTally: messagesTally,
    finishBody(json, req): BodyResult {
      const t = tallyMessageBody(json);
      if (json && typeof json === 'object' && 'model' in json) (json as Record<string, unknown>).model = req.model.id;
      return {
        chargeInk: t.hasUsageReceipt ? charge(req.model, t.usage) : undefined,
        usage: t.usage,
        vendorRequestId: t.vendorMessageId,
        clientBody: JSON.stringify(json),
        finishReason: t.stopReason,
      };
    },
    // The form as asked: the named event by default; clients that refuse unknown event types
    // (the Vercel AI SDK's Anthropic provider) ask for the comment or for none.
    usageFrame: chargeFrame,
    // Never reached while `capped` stays false; were it reached, the charge is said as ever.
    cappedFrame: chargeFrame,
    errorFrame(code, message, requestId, tally) {
      // The protocol's error event shape, with our code and request id inside `error`. A vendor
      // error (e.g. overloaded_error) is passed on here, in the one final error event.
      const v = tally.vendorError();
      const type = v?.type ?? 'provider_error';
      const text = v?.message ? `${v.message} (${message})` : message;
      return sseEvent('error', { type: 'error', error: { type, code, message: text, request_id: requestId } });
    },
  };
}

/** The stream tally: usage on the side. The service puts no cap of its own on a Messages stream (max_tokens bounds it at the vendor). */
function messagesTally(req: ParsedTextRequest): StreamTally {
  const t = new MessagesUsageTally();
  return {
    push: (events) => t.pushEvents(events),
    mayCap: () => false,
    capped: false,
    get sawTerminal(): boolean {
      return t.state.messageStop;
    },
    end: () => t.end(),
    outcome: () => t.outcome(),
    chargeInk: () => charge(req.model, t.usage()),
    usage: () => t.usage(),
    vendorRequestId: () => t.vendorMessageId,
    vendorError: () => t.errorEvent,
    finishReason: () => t.stopReason,
  };
}

/** The closing frame that says the charge, in the form the request asked for. */
function chargeFrame(inkCharged: number, requestId: string, _tally: StreamTally, form: UsageFrame): string {
  return usageFrameText(form, inkCharged, requestId);
}
