// The OpenTelemetry SDK behind tracing.ts, imported only when traces are on: one tracer provider,
// the configured sampler, a batch processor and the official OTLP/HTTP (JSON) exporter. Export
// runs off the request path: a full queue drops spans, an endpoint away fails an export (logged,
// never retried past its timeout), and no request ever waits for either.
import {
  SpanKind,
  TraceFlags,
  trace,
  ROOT_CONTEXT,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api';
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type ReadableSpan,
  type Sampler,
  type SamplingResult,
  type SpanExporter,
} from '@opentelemetry/sdk-trace';
import { type Config, packageVersion } from '../config/config.js';
import {
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  GENERATION_ID,
  GENERATION_KIND,
  GENERATION_STATE,
  GEN_AI_REQUEST_MODEL,
  JOURNAL_RECORDS,
  JOURNAL_TRACED,
  REQUEST_ID,
} from './attributes.js';
import { OtelRequestTrace, stepOf, type RequestTraceEnv } from './request-trace.js';
import type { FlushedRecord, RequestTrace, StepSpan, TracedJob, Tracing, TracingLog } from './hooks.js';
import { shownUrl } from '../config/http-url.js';

/**
 * Request spans remembered for the journal flush that will carry their records. A hold taken on
 * the exact path never goes through the journal, so the map is bounded: past this, the oldest
 * entry goes (its flush then carries no link to it).
 */
const MAX_CARRIED = 16_384;
/** Links on one flush span: a batch can carry up to ledger.flushMaxRecords records. */
const MAX_LINKS = 2048;
/** How much longer than the exporter's own timeout the batch processor waits for an export. */
const EXPORT_BACKSTOP_MS = 1000;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The standard sampler by its OTEL_TRACES_SAMPLER name. */
function namedSampler(name: Config['tracing']['sampler'], arg: number | null): Sampler {
  const ratio = () => new TraceIdRatioBasedSampler(arg ?? 1);
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
  }
}

const RECORD: SamplingResult = Object.freeze({ decision: SamplingDecision.RECORD_AND_SAMPLED });

/**
 * A span linked to a sampled span is sampled: a journal flush or a generation's job is recorded
 * exactly when a request it carries (or its submit) was. Everything else: the configured sampler.
 */
class LinkedSampler implements Sampler {
  constructor(private readonly inner: Sampler) {}
  shouldSample(context: Context, traceId: string, name: string, kind: SpanKind, attributes: Attributes, links: Link[]): SamplingResult {
    for (let i = 0; i < links.length; i++) if ((links[i]!.context.traceFlags & TraceFlags.SAMPLED) !== 0) return RECORD;
    return this.inner.shouldSample(context, traceId, name, kind, attributes, links);
  }
  toString(): string {
    return `LinkedSampler{${this.inner.toString()}}`;
  }
}

/** The official exporter, with its failures told to the operator (the first, then every 100th). */
class LoggedExporter implements SpanExporter {
  private failures = 0;
  constructor(
    private readonly inner: SpanExporter,
    private readonly log: TracingLog,
    private readonly endpoint: string,
  ) {}
  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) {
        this.failures++;
        if (this.failures === 1 || this.failures % 100 === 0)
          this.log({ endpoint: this.endpoint, spans: spans.length, failures: this.failures, err: result.error?.message }, 'tracing.export_failed');
      } else this.failures = 0;
      done(result);
    });
  }
  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** A W3C traceparent as a remote span context, or undefined. */
function remoteContext(traceparent: string | null): SpanContext | undefined {
  const m = traceparent === null ? null : TRACEPARENT.exec(traceparent);
  if (m === null) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: Number.parseInt(m[3]!, 16), isRemote: true };
}

export class OtelTracing implements Tracing {
  private readonly provider: TracerProvider;
  private readonly tracer: Tracer;
  private readonly env: RequestTraceEnv;
  private readonly carried = new Map<string, SpanContext>();
  /** The job span of each generation row being worked (its finish hangs under it). */
  private readonly jobs = new WeakMap<TracedJob, Span>();

  constructor(cfg: Config['tracing'], endpoint: string, log: TracingLog) {
    const version = packageVersion();
    const exporter = new OTLPTraceExporter({ url: endpoint, timeoutMillis: cfg.exportTimeoutMs });
    const shown = shownUrl(endpoint);
    this.provider = new TracerProvider({
      resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: cfg.serviceName, [ATTR_SERVICE_VERSION]: version }),
      sampler: new LinkedSampler(namedSampler(cfg.sampler, cfg.samplerArg)),
      spanLimits: { linkCountLimit: MAX_LINKS },
      spanProcessors: [
        new BatchSpanProcessor({
          exporter: new LoggedExporter(exporter, log, shown),
          maxQueueSize: cfg.maxQueueSpans,
          maxExportBatchSize: Math.min(512, cfg.maxQueueSpans),
          // A backstop only: the exporter gives up first, so its failure is the one logged.
          exportTimeoutMillis: cfg.exportTimeoutMs + EXPORT_BACKSTOP_MS,
        }),
      ],
    });
    this.tracer = this.provider.getTracer('inkgate', version);
    this.env = {
      tracer: this.tracer,
      propagator: new W3CTraceContextPropagator(),
      carried: (requestId, span) => this.remember(requestId, span.spanContext()),
    };
    log({ endpoint: shown, sampler: cfg.sampler, sampler_arg: cfg.samplerArg, service_name: cfg.serviceName }, 'tracing.started');
  }

  startRequest(method: string, path: string, headers: Readonly<Record<string, string>>, requestId: string): RequestTrace {
    return new OtelRequestTrace(this.env, requestId, method, path, headers);
  }

  private remember(requestId: string, spanContext: SpanContext): void {
    if (this.carried.size >= MAX_CARRIED) {
      const oldest = this.carried.keys().next();
      if (!oldest.done) this.carried.delete(oldest.value);
    }
    this.carried.set(requestId, spanContext);
  }

  startFlush(batch: readonly FlushedRecord[]): ((error?: unknown) => void) | undefined {
    if (this.carried.size === 0) return undefined;
    const links: Link[] = [];
    for (const r of batch) {
      const c = this.carried.get(r.requestId);
      if (c === undefined) continue;
      links.push({ context: c });
      // Its end is in this batch: no later flush carries more of it.
      if (r.end !== null) this.carried.delete(r.requestId);
    }
    if (links.length === 0) return undefined;
    const span = this.tracer.startSpan(
      'inkgate.journal.flush',
      { kind: SpanKind.INTERNAL, links, attributes: { [JOURNAL_RECORDS]: batch.length, [JOURNAL_TRACED]: links.length } },
      ROOT_CONTEXT,
    );
    return stepOf(span).end;
  }

  startJob(row: TracedJob): StepSpan | undefined {
    const submit = remoteContext(row.trace_parent);
    if (submit === undefined) return undefined;
    // A video job looks at the vendor's task (poll); an image job is the vendor call itself (run), as is a resumed submit.
    const polls = row.kind === 'video' && (row.state === 'queued' || row.state === 'running');
    const name = polls ? 'inkgate.generation.poll' : 'inkgate.generation.run';
    const span = this.tracer.startSpan(name, { kind: SpanKind.INTERNAL, links: [{ context: submit }], attributes: jobAttributes(row) }, ROOT_CONTEXT);
    this.jobs.set(row, span);
    return {
      end: (error?: unknown) => {
        this.jobs.delete(row);
        stepOf(span).end(error);
      },
    };
  }

  jobStep(row: TracedJob, name: 'finish'): StepSpan | undefined {
    const submit = remoteContext(row.trace_parent);
    if (submit === undefined) return undefined;
    const job = this.jobs.get(row);
    const parent = job === undefined ? ROOT_CONTEXT : trace.setSpan(ROOT_CONTEXT, job);
    const span = this.tracer.startSpan(
      `inkgate.generation.${name}`,
      { kind: SpanKind.INTERNAL, links: [{ context: submit }], attributes: jobAttributes(row) },
      parent,
    );
    return stepOf(span);
  }

  /** Exports what is queued now; a failed export is the exporter's to log, never the caller's error. */
  forceFlush(): Promise<void> {
    return this.provider.forceFlush().catch(() => undefined);
  }

  async shutdown(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref();
    });
    await Promise.race([this.provider.shutdown().catch(() => undefined), late]);
    clearTimeout(timer);
  }
}

function jobAttributes(row: TracedJob): Attributes {
  return {
    [GENERATION_ID]: row.id,
    [GENERATION_KIND]: row.kind,
    [GENERATION_STATE]: row.state,
    [GEN_AI_REQUEST_MODEL]: row.model,
    [REQUEST_ID]: row.request_id,
  };
}
