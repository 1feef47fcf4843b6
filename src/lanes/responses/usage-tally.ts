// Usage tally for the OpenAI Responses protocol: reads the vendor's SSE bytes on the side of the
// pass-through (tee, don't transform) and keeps what settlement needs: the terminal event, the
// usage receipt of the terminal snapshot, error events, the vendor response id, the highest
// sequence_number and how much visible text has gone by (for the lane's visible-output cap).
//
// "Not reported" is not zero: every usage bucket is `number | undefined`, undefined meaning the
// vendor did not send that field (or sent something that is not a non-negative integer).
//
// Outcome (what settlement does with the stream), decided by `outcome()`:
//   'complete'          a terminal event (`response.completed`, `response.incomplete` or
//                       `response.failed`) arrived and its `response.usage` is usable: an object
//                       with `input_tokens` and `output_tokens` both non-negative safe integers.
//                       The other buckets may still be undefined (not reported).
//   'usage_unknown'     a terminal event arrived without usable usage (usage null, missing, or
//                       missing either of the two required counts), or no terminal event arrived
//                       but an `error` event did (error events never carry usage). The vendor ran
//                       something; what it cost is unknown, so the hold stays until reconciled.
//   'incomplete_stream' neither a terminal event nor an `error` event arrived: the stream ended
//                       (or the parser gave up on an oversized event) before the receipt.
// Only the first terminal event counts; events after it still move `maxSequenceNumber`, nothing
// else. `data: [DONE]` (OpenAI-compatible servers, the SDK's own test streams) is tolerated and
// noted in `sawDone`; it is not a receipt. An event is only seen once its blank line arrives:
// a stream cut after a terminal event's `data:` line but before the blank line has not delivered
// that event (the official SDK discards it as well).
//
// Parsing cost: JSON.parse runs only for events that carry something we keep (terminal events,
// `error`, `response.created` (and `response.in_progress` / `response.queued` while
// the response id is still unknown), and data-only frames whose type is unknown until parsed). Other named events (item and part
// snapshots, argument deltas, reasoning) only have their sequence_number read by a scan, and text
// deltas their sequence_number and text length (`scanTextDeltaChars`).
// With `keepOutput` (the Responses lane), `output_item.added` / `content_part.added` /
// `output_item.done` are parsed too, and each text delta's escaped text is kept (see RelayedOutput).

import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import { count, isObject } from './raw-json.js';
import { type DeltaSpan, scanSequenceNumber, scanTextDelta } from './delta-scan.js';
import { SEQUENCE_NUMBER_KEY, scanCountBytes, scanTextDeltaBytes } from './delta-scan-bytes.js';
import { eventOpening, splitEvents } from '../sse-plain-event.js';
import { TallyText } from '../tally-text.js';
import {
  emptyUsage,
  str,
  readErrorEvent,
  readResponseError,
  readResponsesUsage,
  type ResponsesErrorInfo,
  type ResponsesTallyOutcome,
  type ResponsesTallyResult,
  type ResponsesTerminalEvent,
  type ResponsesUsage,
} from './usage-fields.js';

export { scanTextDeltaChars } from './delta-scan.js';
export type { ResponsesTallyResult, ResponsesUsage } from './usage-fields.js';
import { KEPT_ITEM_EVENTS, RelayedOutput } from './relayed-output.js';

export interface ResponsesUsageTallyOptions {
  /**
   * Most characters the SSE parser may hold across feeds (an unfinished line plus the data of an
   * unfinished event) before tallying gives up. Snapshots echo `instructions` (a request body is
   * at most 4 MiB) plus the whole output text, so one event can legitimately be several MB.
   */
  maxEventChars?: number;
  /**
   * Keep what the stream relayed of the output (see RelayedOutput) until the terminal event, so a
   * stream the service stops at its own cap can end with a response that carries it.
   */
  keepOutput?: boolean;
}

const DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024;

/** The one event read from the relayed bytes (feedEvents): a text delta of the usual shape. */
const TEXT_DELTA_OPENING: readonly Buffer[] = [eventOpening('response.output_text.delta')];

// Events whose JSON we parse; everything else named only has its sequence_number scanned.
const PARSED_EVENTS: ReadonlySet<string> = new Set([
  'response.created',
  'response.in_progress',
  'response.queued',
  'response.completed',
  'response.incomplete',
  'response.failed',
  'response.output_text.delta',
  'error',
]);

/**
 * Streaming tally. Feed it the upstream bytes as they pass (whole events or any split), then
 * call `end()` when the upstream body ends. Never throws from `feed`/`end`.
 */
export class ResponsesUsageTally {
  private readonly parser: EventSourceParser;
  private readonly text: TallyText;
  private ended = false;
  private stopped = false;

  private _terminalEvent: ResponsesTerminalEvent | undefined;
  private _status: string | undefined;
  private _usage: ResponsesUsage = emptyUsage();
  private _usageUsable = false;
  private _responseId: string | undefined;
  private _model: string | undefined;
  private _incompleteReason: string | undefined;
  private _error: ResponsesErrorInfo | undefined;
  private _responseError: { code: string | null; message: string } | undefined;
  private _maxSequenceNumber = -1;
  private _visibleTextChars = 0;
  private _eventCount = 0;
  private _sawDone = false;
  private _parseError: string | undefined;
  /** Until the terminal event (then dropped: a stream that has its receipt is never capped). */
  private kept: RelayedOutput | undefined;
  private readonly span: DeltaSpan = { start: 0, end: 0 };
  /** Events feedEvents read from their bytes, not through the parser. */
  plainEvents = 0;

  constructor(opts: ResponsesUsageTallyOptions = {}) {
    if (opts.keepOutput) this.kept = new RelayedOutput();
    this.parser = createParser({
      onEvent: (ev) => this.onEvent(ev),
      onError: (err) => {
        if (err.type === 'max-buffer-size-exceeded') this.stop(`event larger than ${opts.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS} characters`);
        // 'unknown-field' / 'invalid-retry' lines are ignored, as browsers and the SDK do.
      },
      maxBufferSize: opts.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS,
    });
    this.text = new TallyText(this.parser);
  }

  /** Feeds upstream bytes (or already-decoded text; do not mix the two in one stream). */
  feed(chunk: Uint8Array | string): void {
    if (this.stopped || this.ended) return;
    if (typeof chunk === 'string') this.text.feed(chunk);
    else this.text.feedBytes(chunk);
  }

  private feedWhole(bytes: Buffer): void {
    if (this.stopped || this.ended) return;
    this.text.feedWhole(bytes);
  }

  /**
   * Feeds the relay's whole events (the framer's chunks): text deltas of the usual shape are read
   * from their bytes, the rest goes to the parser in order, so the tally ends as `feed` leaves it.
   */
  feedEvents(events: Buffer): void {
    if (this.stopped || this.ended) return;
    // A CR the parser holds may still end an event: the parser must see the next byte first.
    if (this.text.heldCr) this.feedWhole(events);
    else this.plainEvents += splitEvents(events, TEXT_DELTA_OPENING, this.readPlainDelta, this.feedParsed);
  }

  private readonly feedParsed = (bytes: Buffer): void => this.feedWhole(bytes);

  /** A text delta read from its bytes, as onEvent and scannedTextDelta read it decoded; false: parse it. */
  private readonly readPlainDelta = (bytes: Buffer, dataStart: number, dataEnd: number): boolean => {
    if (this.stopped) return false;
    const chars = scanTextDeltaBytes(bytes, dataStart, dataEnd, this.span);
    if (chars === -1) return false;
    this._eventCount++;
    if (this.countedDelta(chars, scanCountBytes(bytes, dataStart, dataEnd, SEQUENCE_NUMBER_KEY))) this.kept?.deltaBytes(bytes, dataStart, dataEnd, this.span);
    return true;
  };

  /** Marks the upstream body as ended; an event without its closing blank line is dropped. */
  end(): void {
    if (this.ended) return;
    if (!this.stopped) {
      this.text.feedRest();
      // eventsource-parser holds a trailing CR back in case LF follows; at EOF it is a complete
      // line break (CR-only streams end in "\r\r"). Feeding LF completes that same break.
      if (this.text.heldCr && !this.stopped) this.parser.feed('\n');
    }
    this.ended = true;
  }

  private stop(reason: string): void {
    if (this.stopped) return;
    this.stopped = true;
    this._parseError = reason;
  }

  /** True when an oversized event made the tally stop reading. */
  get stoppedEarly(): boolean {
    return this.stopped;
  }

  private onEvent(event: EventSourceMessage): void {
    if (this.stopped) return;
    const data = event.data;
    if (data === '[DONE]') {
      this._sawDone = true;
      return;
    }
    this._eventCount++;
    const name = event.event;
    if (this.skipped(name, data)) return;
    // Text deltas are most of a stream's events: count their text without building objects.
    if (name === 'response.output_text.delta' && this.scannedTextDelta(data)) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      // The client's SDK will choke on this event too; keep tallying so a later receipt still counts.
      if (this._parseError === undefined) this._parseError = `event ${name ?? '(unnamed)'} data is not JSON`;
      return;
    }
    if (!isObject(parsed)) return;
    const seq = count(parsed.sequence_number);
    if (seq !== undefined && seq > this._maxSequenceNumber) this._maxSequenceNumber = seq;
    const type = str(parsed.type) ?? name;
    if (this._terminalEvent !== undefined) return;
    this.applyEvent(type, parsed, data);
  }

  /**
   * True when the event is not parsed: only its sequence number is read. Snapshots before the
   * terminal one are parsed only until the response id is known.
   */
  private skipped(name: string | undefined, data: string): boolean {
    const skip =
      name !== undefined &&
      (!PARSED_EVENTS.has(name) || (this._responseId !== undefined && (name === 'response.in_progress' || name === 'response.queued'))) &&
      !(this.kept !== undefined && KEPT_ITEM_EVENTS.has(name));
    if (!skip) return false;
    const seq = scanSequenceNumber(data);
    if (seq > this._maxSequenceNumber) this._maxSequenceNumber = seq;
    return true;
  }

  /** Counts a text delta by scanning its JSON; false when the scan cannot read it (then it is parsed). */
  private scannedTextDelta(data: string): boolean {
    const chars = scanTextDelta(data, this.span);
    if (chars === -1) return false;
    if (this.countedDelta(chars, scanSequenceNumber(data))) this.kept?.delta(data, this.span.start, this.span.end);
    return true;
  }

  /** A scanned text delta's sequence number and characters; true when its text is kept (before the terminal event). */
  private countedDelta(chars: number, seq: number): boolean {
    if (seq > this._maxSequenceNumber) this._maxSequenceNumber = seq;
    if (this._terminalEvent !== undefined) return false;
    this._visibleTextChars += chars;
    return true;
  }

  /** What a parsed event before the terminal one changes. */
  private applyEvent(type: string | undefined, parsed: Record<string, unknown>, data: string): void {
    switch (type) {
      case 'response.output_text.delta': {
        const delta = parsed.delta;
        if (typeof delta === 'string') {
          this._visibleTextChars += delta.length;
          this.kept?.text(count(parsed.output_index) ?? -1, count(parsed.content_index) ?? -1, JSON.stringify(delta).slice(1, -1));
        }
        return;
      }
      case 'response.created':
      case 'response.in_progress':
      case 'response.queued':
        this.readSnapshotIdentity(parsed.response);
        this.kept?.snapshot(data);
        return;
      case 'response.output_item.added':
      case 'response.content_part.added':
      case 'response.output_item.done':
        this.kept?.itemEvent(type, parsed);
        return;
      case 'response.completed':
      case 'response.incomplete':
      case 'response.failed':
        this.onTerminal(type, parsed.response);
        return;
      case 'error':
        if (this._error === undefined) this._error = readErrorEvent(parsed);
        return;
      default:
        return;
    }
  }

  private readSnapshotIdentity(resp: unknown): void {
    if (!isObject(resp)) return;
    if (this._responseId === undefined) this._responseId = str(resp.id);
    if (this._model === undefined) this._model = str(resp.model);
  }

  private onTerminal(type: ResponsesTerminalEvent, resp: unknown): void {
    this._terminalEvent = type;
    this.kept = undefined;
    if (!isObject(resp)) return;
    this.readSnapshotIdentity(resp);
    this._status = str(resp.status);
    const { usage, usable } = readResponsesUsage(resp.usage);
    this._usage = usage;
    this._usageUsable = usable;
    const details = resp.incomplete_details;
    if (isObject(details)) this._incompleteReason = str(details.reason);
    this._responseError = readResponseError(resp.error);
  }

  get terminalEvent(): ResponsesTerminalEvent | undefined {
    return this._terminalEvent;
  }
  get status(): string | undefined {
    return this._status;
  }
  get usage(): Readonly<ResponsesUsage> {
    return this._usage;
  }
  get usageUsable(): boolean {
    return this._usageUsable;
  }
  get responseId(): string | undefined {
    return this._responseId;
  }
  get model(): string | undefined {
    return this._model;
  }
  get incompleteReason(): string | undefined {
    return this._incompleteReason;
  }
  get error(): ResponsesErrorInfo | undefined {
    return this._error;
  }
  get responseError(): { code: string | null; message: string } | undefined {
    return this._responseError;
  }
  get maxSequenceNumber(): number {
    return this._maxSequenceNumber;
  }
  /** Characters (UTF-16 code units) of visible text deltas so far; for the lane's visible-output cap. */
  get visibleTextChars(): number {
    return this._visibleTextChars;
  }
  get eventCount(): number {
    return this._eventCount;
  }
  get sawDone(): boolean {
    return this._sawDone;
  }
  get parseError(): string | undefined {
    return this._parseError;
  }
  /** Start of a chunk (with `keepOutput`): what was kept so far has been relayed. */
  markOutput(): void {
    this.kept?.mark();
  }

  /** The chunk since `markOutput()` is not relayed (the cap): take back what it added, keep no more. */
  rewindOutput(): void {
    this.kept?.rewind();
  }

  /** What was kept of the relayed output (with `keepOutput`, before the terminal event); else undefined. */
  relayedOutput(): ReturnType<RelayedOutput['build']> | undefined {
    return this.kept?.build();
  }

  /** True once a terminal event has been seen (the receipt, usable or not). */
  get sawTerminal(): boolean {
    return this._terminalEvent !== undefined;
  }

  /** See the file comment for the exact rules. Valid at any time; final after `end()`. */
  outcome(): ResponsesTallyOutcome {
    if (this._terminalEvent !== undefined) return this._usageUsable ? 'complete' : 'usage_unknown';
    if (this._error !== undefined) return 'usage_unknown';
    return 'incomplete_stream';
  }

  result(): ResponsesTallyResult {
    return {
      outcome: this.outcome(),
      terminalEvent: this._terminalEvent,
      status: this._status,
      usage: { ...this._usage },
      usageUsable: this._usageUsable,
      responseId: this._responseId,
      model: this._model,
      incompleteReason: this._incompleteReason,
      error: this._error,
      responseError: this._responseError,
      maxSequenceNumber: this._maxSequenceNumber,
      visibleTextChars: this._visibleTextChars,
      eventCount: this._eventCount,
      sawDone: this._sawDone,
      parseError: this._parseError,
    };
  }
}
