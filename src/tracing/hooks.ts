// OpenTelemetry traces, seen from the rest of the gateway. Everything here is our own vocabulary
// (a request's trace, its steps, the vendor call, a journal flush, a generation's job): the
// OpenTelemetry SDK and its exporter live in otel-tracing.ts, which tracing.ts imports only when
// traces are on (`tracing.endpoint` set). Off, nothing of the SDK is loaded and every hook is an
// `undefined` checked with `?.`: the hot path pays one property read per hook.

import type { EventLog } from '../util/log.js';

/** A child span of a request: the authentication, the limits, the hold, the settle... */
export type StepName = 'auth' | 'limits' | 'reserve' | 'settle' | 'release' | 'usage_unknown';

/** A span in progress; `end` with the error that ended the step, if one did. */
export interface StepSpan {
  end(error?: unknown): void;
}

/** What the vendor span says about the call (never the prompt, the output or a header). */
export interface VendorCall {
  /** `anthropic` or `openai` (gen_ai.system). */
  readonly system: string;
  /** The vendor's model id sent (gen_ai.request.model). */
  readonly model: string;
  readonly maxTokens: number | undefined;
}

/** What the vendor reported at the end of a call. */
export interface VendorResult {
  /** The lane's usage record: `inputTokens`/`outputTokens` or `input_tokens`/`output_tokens`. */
  readonly usage: object | undefined;
  readonly finishReason: string | undefined;
}

/** One request's server span and what hangs under it. */
export interface RequestTrace {
  /** The server span as a W3C traceparent value when it is recorded (a generation keeps it for its job spans). */
  traceparent(): string | undefined;
  /** Starts a child span of the server span. */
  step(name: StepName): StepSpan;
  /** The Ink held and charged (inkgate.ink.held, inkgate.ink.charged) on the server span. */
  held(ink: number): void;
  charged(ink: number): void;
  /** Starts the vendor CLIENT span; returns the headers (`traceparent`) the vendor receives. */
  vendorCall(call: VendorCall): Record<string, string>;
  /** An event on the vendor span when the stream's first event is relayed. */
  firstToken(): void;
  /** Ends the vendor span: the vendor's status (undefined: no answer), what it reported, the error that ended it. */
  vendorDone(status: number | undefined, result: VendorResult | undefined, error?: unknown): void;
  /** Ends the server span (once): the status sent, the route label, the error code answered, the key's prefix. */
  end(status: number, route: string, errorCode: string | undefined, keyPrefix: string | undefined): void;
}

/** A generation row as the job spans read it. */
export interface TracedJob {
  readonly id: string;
  readonly kind: string;
  readonly state: string;
  readonly model: string;
  readonly request_id: string;
  /** The submit's server span (traceparent form), null when the submit was not traced. */
  readonly trace_parent: string | null;
}

/** A journal record as the flush span reads it. */
export interface FlushedRecord {
  readonly requestId: string;
  readonly end: string | null;
}

export interface Tracing {
  /** The server span of a request that just arrived; an incoming `traceparent` is continued. */
  startRequest(method: string, path: string, headers: Readonly<Record<string, string>>, requestId: string): RequestTrace;
  /**
   * A journal flush starting: a span linked to the request spans whose records it carries, or
   * undefined when it carries none that was traced. The returned function ends it.
   */
  startFlush(batch: readonly FlushedRecord[]): ((error?: unknown) => void) | undefined;
  /** A claimed generation row being worked (poll, run): a span linked to its submit; undefined when the submit was not traced. */
  startJob(row: TracedJob): StepSpan | undefined;
  /** The finish of a generation (settle or refund with its row's move), under the row's job span. */
  jobStep(row: TracedJob, name: 'finish'): StepSpan | undefined;
  /** Exports the finished spans now (tests; an operator's flush before a planned stop). */
  forceFlush(): Promise<void>;
  /** Sends what is queued (within `timeoutMs`) and stops; an endpoint away never holds it longer. */
  shutdown(timeoutMs: number): Promise<void>;
}

/** Ends `span` when `work` settles (with its error when it fails); with no span, `work` itself. */
export function within<T>(span: StepSpan | undefined, work: Promise<T>): Promise<T> {
  if (span === undefined) return work;
  return work.then(
    (value) => {
      span.end();
      return value;
    },
    (error: unknown) => {
      span.end(error);
      throw error;
    },
  );
}

/** Where tracing tells the operator about itself (its log events). */
export type TracingLog = EventLog;
