// What a text lane (Messages, Responses) supplies to the shared proxy (text-proxy.ts): its parse,
// its tally of a stream and of a body, and its frames. The proxy does the rest, the same for both.
// Every hook is required (a lane without a cap says so: `mayCap` false, `capped` false), and the
// proxy calls them in one fixed order, the request's lifecycle:
//   1. `parse` the body (refusals here hold nothing);        the proxy holds `holdInk`, sends.
//   2. A 200 stream: `newTally`, then per vendor chunk, framed to whole events:
//      `mayCap(bytes)` (true: the chunk goes event by event), `push(events)`, then `capped` (true:
//      the proxy stops reading and relays nothing more), `sawTerminal` (the receipt was relayed).
//   3. At the stream's end: `end`, then `finishReason`, `usage`, `outcome` (or `capped`),
//      `chargeInk`, `vendorRequestId`; the proxy settles.
//   4. The last frame: `usageFrame` (settled), `cappedFrame` (settled at the cap), or `errorFrame`
//      (no charge recorded, or no terminal event), which reads `vendorError`.
//   A 200 body instead: `finishBody`, then the proxy settles and sends it.
import type { UsageFrame } from '../accounts/usage-frame.js';
import type { TextModel } from '../catalog/models.js';
import type { Lane } from '../deployment/state.js';
import type { HttpContext } from '../server/http-context.js';
import type { VendorHeaders } from './vendor-send.js';

export interface ParsedTextRequest {
  readonly model: TextModel;
  readonly stream: boolean;
  readonly holdInk: number;
  readonly vendorBody: string;
  /** Per-request vendor headers the lane allows (already filtered). */
  readonly extraHeaders?: Readonly<Record<string, string>>;
  /** The output token cap sent to the vendor (a trace's gen_ai.request.max_tokens). */
  readonly maxTokens?: number;
}

export type StreamOutcome = 'complete' | 'usage_unknown' | 'incomplete_stream';

export interface StreamTally {
  push(chunk: Buffer): void;
  end(): void;
  outcome(): StreamOutcome;
  /** Whole Ink for what the vendor reported; undefined when the receipt cannot be priced. */
  chargeInk(): number | undefined;
  /** Usage buckets for the request record (unknown buckets absent). */
  usage(): object;
  vendorRequestId(): string | undefined;
  /** The vendor's own error event, when one arrived (passed on inside our final error frame). */
  vendorError(): { type?: string; message?: string } | undefined;
  /** True when the lane wants the proxy to stop reading (the service's own output cap; false for a lane without one). */
  readonly capped: boolean;
  /** Why the vendor stopped (stop_reason, a response's status), for a trace's gen_ai.response.finish_reasons. */
  finishReason(): string | undefined;
  /** True once the stream's terminal event has been read. */
  readonly sawTerminal: boolean;
  /**
   * True when `bytes` more bytes of stream could cross the lane's cap (always false for a lane
   * without one). The proxy then feeds that chunk event by event, so the events before the one
   * that crosses are still relayed (the first ones carry `response.created`, which the SDK needs).
   */
  mayCap(bytes: number): boolean;
}

export interface BodyResult {
  /** undefined when the body carries no usable usage receipt */
  readonly chargeInk: number | undefined;
  readonly usage: object;
  readonly vendorRequestId: string | undefined;
  /** The body the client receives (model ids rewritten). */
  readonly clientBody: string;
  /** Why the vendor stopped, as in StreamTally.finishReason. */
  readonly finishReason?: string;
}

export interface TextLane extends VendorHeaders {
  readonly product: 'messages' | 'responses';
  readonly lane: Lane;
  /** Path on the vendor, appended to the base URL's path. */
  readonly vendorPath: string;
  /** The request field that carries the prompt (`param` of a 413). */
  readonly promptParam: string;
  /** A promise when the parse takes work off the event loop (a long Responses prompt's token count). */
  parse(body: Record<string, unknown>, ctx: HttpContext): ParsedTextRequest | Promise<ParsedTextRequest>;
  newTally(req: ParsedTextRequest): StreamTally;
  finishBody(json: unknown, req: ParsedTextRequest): BodyResult;
  /** The closing usage frame in the form the request asked for (the lane may map it to one it can send); '' for none. */
  usageFrame(inkCharged: number, requestId: string, tally: StreamTally, form: UsageFrame): string;
  errorFrame(code: 'usage_unknown' | 'incomplete_stream', message: string, requestId: string, tally: StreamTally): string;
  /** The last frame of a stream the service stopped at its own cap (a lane without a cap never gets here). */
  cappedFrame(inkCharged: number, requestId: string, tally: StreamTally, form: UsageFrame): string;
}

/** Said to whoever calls a closed lane, often someone who just ran `npm start`: what opens it. */
export function closedLaneMessage(lane: Pick<TextLane, 'product' | 'lane'>, configured: boolean): string {
  return !configured
    ? `The ${lane.product} lane has no vendor configured on this deployment. An operator sets the vendor's base URL and key, then runs \`inkgate lane enable ${lane.lane}\`; \`npm run demo\` does both against local simulators.`
    : `The ${lane.product} lane is not enabled on this deployment. An operator opens it with \`inkgate lane enable ${lane.lane}\`; \`npm run demo\` runs every lane against local simulators.`;
}
