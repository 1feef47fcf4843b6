// One request's spans with the OpenTelemetry API (loaded only when traces are on): the SERVER span,
// its steps, and the vendor CLIENT span whose context goes to the vendor as `traceparent`.
// Parents are passed explicitly (no context manager, no async hooks on the hot path).
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Context, type Span, type TextMapPropagator, type Tracer } from '@opentelemetry/api';
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_URL_PATH,
  errorType,
  FIRST_TOKEN_EVENT,
  GEN_AI_OPERATION_NAME,
  GEN_AI_PROVIDER_NAME,
  GEN_AI_REQUEST_MAX_TOKENS,
  GEN_AI_REQUEST_MODEL,
  GEN_AI_RESPONSE_FINISH_REASONS,
  GEN_AI_RESPONSE_MODEL,
  GEN_AI_SYSTEM,
  GEN_AI_USAGE_INPUT_TOKENS,
  GEN_AI_USAGE_OUTPUT_TOKENS,
  INK_CHARGED,
  INK_HELD,
  KEY_PREFIX,
  REQUEST_ID,
  tokenCount,
} from './attributes.js';
import type { RequestTrace, StepName, StepSpan, VendorCall, VendorResult } from './hooks.js';

/** Unmatched requests carry no http.route (there is no route template). */
const UNMATCHED = 'unmatched';

/** The step spans' names, made once. */
const STEP_SPAN_NAMES: Readonly<Record<StepName, string>> = Object.freeze({
  auth: 'inkgate.auth',
  limits: 'inkgate.limits',
  reserve: 'inkgate.reserve',
  settle: 'inkgate.settle',
  release: 'inkgate.release',
  usage_unknown: 'inkgate.usage_unknown',
});

const NO_STEP: StepSpan = { end: () => undefined };
const SERVER_SPAN = Object.freeze({ kind: SpanKind.SERVER });

/** What every request's trace shares: made once, by the tracer. */
export interface RequestTraceEnv {
  readonly tracer: Tracer;
  readonly propagator: TextMapPropagator;
  /** Told the request id and server span of a recorded request whose hold may go through the journal. */
  readonly carried: (requestId: string, span: Span) => void;
}

export function endStep(span: Span, error: unknown): void {
  if (error !== undefined) {
    span.setAttribute(ATTR_ERROR_TYPE, errorType(error));
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}

/** A step as a StepSpan. */
export function stepOf(span: Span): StepSpan {
  return { end: (error?: unknown) => endStep(span, error) };
}

export class OtelRequestTrace implements RequestTrace {
  private readonly span: Span;
  /** The server span's context, the parent of every child. */
  private readonly parent: Context;
  private readonly recording: boolean;
  private vendor: Span | undefined;
  private ended = false;

  constructor(
    private readonly env: RequestTraceEnv,
    private readonly requestId: string,
    private readonly method: string,
    path: string,
    headers: Readonly<Record<string, string>>,
  ) {
    const incoming = headers.traceparent === undefined ? ROOT_CONTEXT : env.propagator.extract(ROOT_CONTEXT, headers, HEADER_GETTER);
    // Attributes only once the sampler said yes: an unsampled request (most, at a low ratio) then
    // costs its ids and the sampler's decision, not the SDK's attribute checks.
    this.span = env.tracer.startSpan(method, SERVER_SPAN, incoming);
    this.parent = trace.setSpan(incoming, this.span);
    this.recording = this.span.isRecording();
    if (this.recording) {
      this.span.setAttribute(ATTR_HTTP_REQUEST_METHOD, method);
      this.span.setAttribute(ATTR_URL_PATH, path);
      this.span.setAttribute(REQUEST_ID, requestId);
    }
  }

  traceparent(): string | undefined {
    if (!this.recording) return undefined;
    const c = this.span.spanContext();
    return `00-${c.traceId}-${c.spanId}-0${c.traceFlags & 1}`;
  }

  step(name: StepName): StepSpan {
    if (!this.recording) return NO_STEP;
    if (name === 'reserve') this.env.carried(this.requestId, this.span);
    return stepOf(this.env.tracer.startSpan(STEP_SPAN_NAMES[name], undefined, this.parent));
  }

  held(ink: number): void {
    if (this.recording) this.span.setAttribute(INK_HELD, ink);
  }

  charged(ink: number): void {
    if (this.recording) this.span.setAttribute(INK_CHARGED, ink);
  }

  vendorCall(call: VendorCall): Record<string, string> {
    const out: Record<string, string> = {};
    if (!this.recording) {
      // Not sampled here: the vendor still gets the trace (its flags say not sampled).
      this.env.propagator.inject(this.parent, out, HEADER_SETTER);
      return out;
    }
    const attributes: Record<string, string | number> = {
      [GEN_AI_OPERATION_NAME]: 'chat',
      [GEN_AI_SYSTEM]: call.system,
      [GEN_AI_PROVIDER_NAME]: call.system,
      [GEN_AI_REQUEST_MODEL]: call.model,
      [ATTR_HTTP_REQUEST_METHOD]: 'POST',
    };
    if (call.maxTokens !== undefined) attributes[GEN_AI_REQUEST_MAX_TOKENS] = call.maxTokens;
    this.vendor = this.env.tracer.startSpan(`chat ${call.model}`, { kind: SpanKind.CLIENT, attributes }, this.parent);
    this.vendor.setAttribute(GEN_AI_RESPONSE_MODEL, call.model);
    this.env.propagator.inject(trace.setSpan(ROOT_CONTEXT, this.vendor), out, HEADER_SETTER);
    return out;
  }

  firstToken(): void {
    this.vendor?.addEvent(FIRST_TOKEN_EVENT);
  }

  vendorDone(status: number | undefined, result: VendorResult | undefined, error?: unknown): void {
    const v = this.vendor;
    if (v === undefined) return;
    this.vendor = undefined;
    if (status !== undefined) v.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
    const input = tokenCount(result?.usage, 'inputTokens', 'input_tokens');
    const output = tokenCount(result?.usage, 'outputTokens', 'output_tokens');
    if (input !== undefined) v.setAttribute(GEN_AI_USAGE_INPUT_TOKENS, input);
    if (output !== undefined) v.setAttribute(GEN_AI_USAGE_OUTPUT_TOKENS, output);
    const reason = result?.finishReason;
    if (reason !== undefined) v.setAttribute(GEN_AI_RESPONSE_FINISH_REASONS, [reason.slice(0, 64)]);
    if (error === undefined && status !== undefined && status >= 400) {
      v.setAttribute(ATTR_ERROR_TYPE, String(status));
      v.setStatus({ code: SpanStatusCode.ERROR });
      v.end();
    } else endStep(v, error);
  }

  end(status: number, route: string, errorCode: string | undefined, keyPrefix: string | undefined): void {
    if (this.ended) return;
    this.ended = true;
    if (this.vendor !== undefined) this.vendorDone(undefined, undefined, new Error('request ended'));
    if (!this.recording) {
      this.span.end();
      return;
    }
    const s = this.span;
    if (route !== UNMATCHED) {
      s.updateName(`${this.method} ${route}`);
      s.setAttribute(ATTR_HTTP_ROUTE, route);
    }
    if (status !== 0) s.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
    if (keyPrefix !== undefined) s.setAttribute(KEY_PREFIX, keyPrefix);
    if (errorCode !== undefined) s.setAttribute(ATTR_ERROR_TYPE, errorCode);
    // A server span is an error only for a 5xx: a 4xx is the client's mistake, answered as designed.
    if (status >= 500) s.setStatus({ code: SpanStatusCode.ERROR });
    s.end();
  }
}

/** Headers are a plain object with lower-case names (server/http-context.ts). */
const HEADER_GETTER = {
  keys: (carrier: Readonly<Record<string, string>>) => Object.keys(carrier),
  get: (carrier: Readonly<Record<string, string>>, key: string) => carrier[key],
};
const HEADER_SETTER = {
  set: (carrier: Record<string, string>, key: string, value: string) => {
    carrier[key] = value;
  },
};
