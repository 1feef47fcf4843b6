// Usage tally for the Messages lane: parses the forwarded vendor SSE alongside the byte
// pass-through and records what the vendor reported, so the call can be settled.
//
// Anthropic semantics (the Messages API's documented usage fields):
// - `message_start.message.usage` carries input_tokens, cache_creation_input_tokens,
//   cache_read_input_tokens and a small placeholder output_tokens.
// - `message_delta.usage.output_tokens` is the cumulative output total (thinking included);
//   newer API versions repeat cumulative input/cache fields there too. Every field is a
//   whole-message total, so the latest value seen wins (never add), as the official SDK does.
// - `message_stop` is the terminal event; `error` (e.g. overloaded_error) can arrive mid-stream.
// "Not reported" is not zero: each bucket stays `undefined` until the vendor sends an integer
// for it (a null, negative, fractional or non-number value counts as not reported).
//
// Only the four events that matter are JSON-parsed; content_block_delta (the bulk of the
// stream) is skipped by its event name, so the tally costs one SSE line scan per chunk and a
// UTF-8 decode of the events it reads. An SSE event with no `event:` field is parsed to read its `type`.

import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { eventOpening, splitEvents } from '../sse-plain-event.js';
import { TallyText } from '../tally-text.js';

/** Events the tally never reads, passed over from their bytes when they have the usual shape (pushEvents). */
const SKIPPED_OPENINGS: readonly Buffer[] = ['content_block_delta', 'ping', 'content_block_start', 'content_block_stop'].map(eventOpening);
const passOver = (): boolean => true;

export interface MessagesUsage {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
}

export interface MessagesStreamState {
  messageStart: boolean;
  messageDelta: boolean;
  messageStop: boolean;
  error: boolean;
}

export interface MessagesErrorEvent {
  type: string | undefined;
  message: string | undefined;
}

/**
 * How a stream ended, for settlement (docs/api/messages.md, streaming failures):
 * - `complete`: `message_stop` was seen and a `message_delta` reported an integer
 *   `usage.output_tokens` (the usage receipt). Settle on `usage()`.
 * - `usage_unknown`: no usage receipt, i.e. no `message_delta` with integer output_tokens,
 *   whatever else arrived (cut before message_delta, mid-stream `error` before it, nothing at
 *   all). The `message_start` placeholder output_tokens is not a receipt. Keep the hold.
 * - `incomplete_stream`: the receipt arrived but `message_stop` did not (cut after
 *   message_delta, or an `error` event after it).
 * Events after `message_stop` do not change the outcome (the vendor finished and reported).
 * An `error` event therefore never yields `complete` unless it follows `message_stop`.
 */
export type MessagesOutcome = 'complete' | 'usage_unknown' | 'incomplete_stream';

/** Default cap on characters eventsource-parser may buffer for one incomplete line/event. */
export const DEFAULT_TALLY_MAX_BUFFER_CHARS = 1 << 20;

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

export class MessagesUsageTally {
  inputTokens: number | undefined = undefined;
  outputTokens: number | undefined = undefined;
  cacheReadTokens: number | undefined = undefined;
  cacheWriteTokens: number | undefined = undefined;

  readonly state: MessagesStreamState = { messageStart: false, messageDelta: false, messageStop: false, error: false };
  /** True once a `message_delta` carried an integer `usage.output_tokens`. */
  hasUsageReceipt = false;
  stopReason: string | undefined = undefined;
  vendorMessageId: string | undefined = undefined;
  /** The vendor model id from `message_start.message.model`. */
  vendorModel: string | undefined = undefined;
  errorEvent: MessagesErrorEvent | undefined = undefined;
  /** Events whose JSON could not be parsed (they are otherwise ignored). */
  malformedEvents = 0;
  /** True when the SSE parser hit its buffer cap; the tally stops reading after that. */
  overflowed = false;

  private readonly parser: EventSourceParser;
  private readonly text: TallyText;
  private ended = false;
  /** Events pushEvents passed over from their bytes, not through the parser. */
  plainEvents = 0;

  constructor(maxBufferChars: number = DEFAULT_TALLY_MAX_BUFFER_CHARS) {
    this.parser = createParser({
      maxBufferSize: maxBufferChars,
      onEvent: (ev) => this.onEvent(ev),
      onError: (err) => {
        if (err.type === 'max-buffer-size-exceeded') this.overflowed = true;
      },
    });
    this.text = new TallyText(this.parser);
  }

  /** Feeds forwarded bytes (any chunking). */
  push(chunk: Buffer | Uint8Array): void {
    if (this.ended || this.overflowed) return;
    this.text.feedBytes(chunk);
  }

  private pushWhole(bytes: Buffer): void {
    if (this.ended || this.overflowed) return;
    this.text.feedWhole(bytes);
  }

  /**
   * Feeds the relay's whole events (the framer's chunks): the events the tally never reads are
   * passed over from their bytes, the rest goes to the parser in order, as `push` would.
   */
  pushEvents(events: Buffer): void {
    if (this.ended || this.overflowed) return;
    // A CR the parser holds may still end an event: the parser must see the next byte first.
    if (this.text.heldCr) this.pushWhole(events);
    else this.plainEvents += splitEvents(events, SKIPPED_OPENINGS, passOver, this.pushParsed);
  }

  private readonly pushParsed = (bytes: Buffer): void => this.pushWhole(bytes);

  /**
   * Marks the end of the vendor stream. An incomplete trailing event (no blank line after it)
   * is discarded, as the SSE spec and the official SDK do: the client never sees it either.
   */
  end(): void {
    if (this.ended) return;
    if (!this.overflowed) this.text.feedRest();
    this.ended = true;
  }

  usage(): MessagesUsage {
    const u: MessagesUsage = {};
    if (this.inputTokens !== undefined) u.inputTokens = this.inputTokens;
    if (this.outputTokens !== undefined) u.outputTokens = this.outputTokens;
    if (this.cacheReadTokens !== undefined) u.cacheReadTokens = this.cacheReadTokens;
    if (this.cacheWriteTokens !== undefined) u.cacheWriteTokens = this.cacheWriteTokens;
    return u;
  }

  outcome(): MessagesOutcome {
    if (!this.hasUsageReceipt) return 'usage_unknown';
    return this.state.messageStop ? 'complete' : 'incomplete_stream';
  }

  private onEvent(event: EventSourceMessage): void {
    if (this.state.messageStop) return;
    const name = event.event;
    if (name !== undefined && name !== 'message_start' && name !== 'message_delta' && name !== 'message_stop' && name !== 'error') {
      return;
    }
    let data: any;
    try {
      data = JSON.parse(event.data);
    } catch {
      if (name === 'error') this.recordError(undefined);
      else this.malformedEvents++;
      return;
    }
    if (data === null || typeof data !== 'object') {
      this.malformedEvents++;
      return;
    }
    switch (name ?? data.type) {
      case 'message_start': {
        this.state.messageStart = true;
        const msg = data.message;
        if (msg && typeof msg === 'object') {
          this.vendorMessageId = str(msg.id) ?? this.vendorMessageId;
          this.vendorModel = str(msg.model) ?? this.vendorModel;
          this.takeUsage(msg.usage);
        }
        break;
      }
      case 'message_delta': {
        this.state.messageDelta = true;
        const delta = data.delta;
        if (delta && typeof delta === 'object' && typeof delta.stop_reason === 'string') this.stopReason = delta.stop_reason;
        const usage = data.usage;
        this.takeUsage(usage);
        if (usage && typeof usage === 'object' && count(usage.output_tokens) !== undefined) this.hasUsageReceipt = true;
        break;
      }
      case 'message_stop':
        this.state.messageStop = true;
        break;
      case 'error':
        this.recordError(data);
        break;
      default:
        break;
    }
  }

  private recordError(data: any): void {
    this.state.error = true;
    const e = data && typeof data === 'object' ? data.error : undefined;
    this.errorEvent = { type: e ? str(e.type) : undefined, message: e ? str(e.message) : undefined };
  }

  private takeUsage(usage: any): void {
    if (!usage || typeof usage !== 'object') return;
    this.inputTokens = count(usage.input_tokens) ?? this.inputTokens;
    this.outputTokens = count(usage.output_tokens) ?? this.outputTokens;
    this.cacheReadTokens = count(usage.cache_read_input_tokens) ?? this.cacheReadTokens;
    this.cacheWriteTokens = count(usage.cache_creation_input_tokens) ?? this.cacheWriteTokens;
  }
}

export interface MessageBodyTally {
  usage: MessagesUsage;
  /** True when `usage.output_tokens` is an integer: the body is a usage receipt. */
  hasUsageReceipt: boolean;
  stopReason: string | undefined;
  vendorMessageId: string | undefined;
  vendorModel: string | undefined;
}

/** Tallies a non-streaming Message body (already JSON-parsed). */
export function tallyMessageBody(body: unknown): MessageBodyTally {
  const b = body !== null && typeof body === 'object' ? (body as Record<string, any>) : {};
  const u = b.usage && typeof b.usage === 'object' ? b.usage : {};
  const usage: MessagesUsage = {};
  const input = count(u.input_tokens);
  const output = count(u.output_tokens);
  const read = count(u.cache_read_input_tokens);
  const write = count(u.cache_creation_input_tokens);
  if (input !== undefined) usage.inputTokens = input;
  if (output !== undefined) usage.outputTokens = output;
  if (read !== undefined) usage.cacheReadTokens = read;
  if (write !== undefined) usage.cacheWriteTokens = write;
  return {
    usage,
    hasUsageReceipt: output !== undefined,
    stopReason: str(b.stop_reason),
    vendorMessageId: str(b.id),
    vendorModel: str(b.model),
  };
}
