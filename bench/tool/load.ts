// Load generators: closed loop (N connections, next request when the answer is read), open loop
// (a fixed schedule; latency counted from the scheduled send time, so a stalled target cannot
// hide behind the requests it delayed: no coordinated omission), and a wave of paced streams.
// Every run: an unmeasured warm-up, then a measured window bracketed by `window.start()` and
// `window.end()` (the caller reads process CPU there), bounded in time and in requests.
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import type { Histogram } from 'hdr-histogram-js';
import { newHistogram, recordMs } from './histogram.js';

export interface Request {
  readonly origin: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: string;
  /** Closed loop: header sets taken in turn, one per request (many tenants: one key each), over `headers`. */
  readonly rotate?: ReadonlyArray<Record<string, string>>;
}

export interface Window {
  start(): Promise<void>;
  end(): Promise<void>;
}

export const noWindow: Window = { start: async () => undefined, end: async () => undefined };

export interface Tally {
  /** Answers measured (any status). */
  requests: number;
  statuses: Record<string, number>;
  /** Transport failures (no HTTP answer, or the body broke off), by undici error code. */
  errors: Record<string, number>;
  /** The first few answers other than 200, status and body start. */
  failureSamples: string[];
  /** SSE events received (blank-line terminated), streaming runs only. */
  chunks: number;
  /** Measured window, s. */
  seconds: number;
  readonly latency: Histogram;
  /** Streams: time to the first content delta. */
  readonly ttft: Histogram;
}

const newTally = (): Tally => ({
  requests: 0,
  statuses: {},
  errors: {},
  failureSamples: [],
  chunks: 0,
  seconds: 0,
  latency: newHistogram(),
  ttft: newHistogram(),
});

/** Every wait on a target is bounded: a target that hangs fails the request, not the bench. */
const TARGET_TIMEOUT_MS = 60_000;
/** After a run's window ends, requests still out get this long before their connections are cut. */
const DRAIN_MS = 10_000;

const FAILURE_SAMPLES = 5;
/** A rotation's warm-up (every key once) is bounded too: a slow target still gets measured. */
const ROTATION_WARMUP_MAX_MS = 60_000;
const FAILURE_SAMPLE_CHARS = 300;

const countStatus = (t: Tally, a: OneAnswer) => {
  t.statuses[a.status] = (t.statuses[a.status] ?? 0) + 1;
  if (a.failure !== null && t.failureSamples.length < FAILURE_SAMPLES) t.failureSamples.push(a.failure);
};

const countError = (t: Tally, e: unknown) => {
  const code = String((e as { code?: unknown } | null)?.code ?? (e as Error | null)?.name ?? 'error');
  t.errors[code] = (t.errors[code] ?? 0) + 1;
};

function pool(origin: string, connections: number): Pool {
  return new Pool(origin, { connections, pipelining: 1, headersTimeout: TARGET_TIMEOUT_MS, bodyTimeout: TARGET_TIMEOUT_MS, keepAliveTimeout: 10_000 });
}

/** Waits for `p` at most `ms`; true when it settled in time. The timer never outlives the wait. */
export async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)));
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

async function closePool(p: Pool, inflight: Promise<unknown>): Promise<void> {
  const drained = await within(inflight, DRAIN_MS);
  if (drained) {
    await p.close();
    return;
  }
  await p.destroy();
  // Destroyed connections fail their requests at once; wait (bounded) so they are counted.
  await within(inflight, 1000);
}

/** Counts SSE event ends ("\n\n"), also across a chunk boundary (`prevLf`: the previous chunk ended in LF). */
export function countEventEnds(buf: Uint8Array, prevLf: boolean): number {
  let n = prevLf && buf[0] === 10 ? 1 : 0;
  const b = Buffer.isBuffer(buf) ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  let i = b.indexOf('\n\n');
  while (i !== -1) {
    n++;
    i = b.indexOf('\n\n', i + 2);
  }
  return n;
}

interface OneAnswer {
  status: number;
  /** The start of the body of an answer other than 200 (what went wrong, for the report). */
  failure: string | null;
  ttftMs: number;
  chunks: number;
  maxGapMs: number;
}

/** One request, body read to the end; for streams, the first `marker` and event ends are noted. */
async function once(p: Pool, r: Request, t0: number, marker: Buffer | null): Promise<OneAnswer> {
  const res = await p.request({ path: r.path, method: 'POST', headers: r.headers, body: r.body });
  let ttftMs = NaN;
  let chunks = 0;
  let maxGapMs = 0;
  let last = 0;
  let prevLf = false;
  if (res.statusCode !== 200) {
    const text = await res.body.text();
    return { status: res.statusCode, failure: `${res.statusCode} ${text.slice(0, FAILURE_SAMPLE_CHARS)}`, ttftMs, chunks, maxGapMs };
  }
  for await (const c of res.body as AsyncIterable<Buffer>) {
    if (marker === null) continue;
    const now = performance.now();
    if (last !== 0 && now - last > maxGapMs) maxGapMs = now - last;
    last = now;
    if (Number.isNaN(ttftMs) && c.includes(marker)) ttftMs = now - t0;
    chunks += countEventEnds(c, prevLf);
    prevLf = c[c.length - 1] === 10;
  }
  return { status: res.statusCode, failure: null, ttftMs, chunks, maxGapMs };
}

export interface ClosedLoopOptions {
  readonly request: Request;
  readonly connections: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly maxRequests: number;
  /** Streams: the bytes of the first content delta (time to first token); null for JSON answers. */
  readonly marker: Buffer | null;
  readonly window?: Window;
}

/** N workers, each sending its next request when the previous answer is fully read. */
export async function closedLoop(o: ClosedLoopOptions): Promise<Tally> {
  const t = newTally();
  const p = pool(o.request.origin, o.connections);
  const window = o.window ?? noWindow;
  let recording = false;
  let stop = false;
  let full: () => void = () => undefined;
  const reachedMax = new Promise<void>((r) => (full = r));
  // Rotation: every request of every worker takes the next header set (built once, not per request).
  const rotated = o.request.rotate?.map((h) => ({ ...o.request, headers: { ...o.request.headers, ...h } })) ?? [o.request];
  let turn = 0;
  // With many tenants the warm-up lasts until every key has been used once (each has met its
  // first request's costs: key lookup, first lease), so the window measures the steady state.
  let allUsed: () => void = () => undefined;
  const everyKeyUsed = new Promise<void>((r) => (allUsed = r));
  if (rotated.length === 1) allUsed();
  const worker = async () => {
    while (!stop) {
      const t0 = performance.now();
      const r = rotated[turn++ % rotated.length]!;
      if (turn === rotated.length) allUsed();
      try {
        const a = await once(p, r, t0, o.marker);
        if (!recording) continue;
        t.requests++;
        countStatus(t, a);
        recordMs(t.latency, performance.now() - t0);
        if (o.marker) {
          t.chunks += a.chunks;
          if (!Number.isNaN(a.ttftMs)) recordMs(t.ttft, a.ttftMs);
        }
        if (t.requests >= o.maxRequests) full();
      } catch (e) {
        if (recording) countError(t, e);
        // A refused connection fails at once: do not spin on it.
        await sleep(5);
      }
    }
  };
  const workers = Promise.all(Array.from({ length: o.connections }, worker));
  await sleep(o.warmupMs);
  await within(everyKeyUsed, ROTATION_WARMUP_MAX_MS);
  await window.start();
  recording = true;
  const w0 = performance.now();
  await within(reachedMax, o.durationMs);
  recording = false;
  t.seconds = (performance.now() - w0) / 1000;
  await window.end();
  stop = true;
  await closePool(p, workers);
  return t;
}

export interface OpenLoopOptions {
  readonly request: Request;
  /** Requests per second, on a fixed schedule from the start of the warm-up. */
  readonly rate: number;
  /** Requests out at once at most; a send beyond waits (and its wait counts in its latency). */
  readonly maxInFlight: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  readonly maxRequests: number;
  readonly window?: Window;
}

export interface OpenLoopTally extends Tally {
  /** Measured sends dispatched more than `lateMs` after their scheduled time. */
  lateSends: number;
  readonly lateMs: number;
  scheduled: number;
  /** Latency from the actual send (what a naive generator reports), for comparison. */
  readonly serviceTime: Histogram;
}

/**
 * Fixed-rate sends. Latency is completion minus *scheduled* send time: when the target stalls,
 * the sends it held back still count from when they were due, so the stall shows in p99 and max
 * (the correction wrk2 makes). `serviceTime` is the uncorrected figure.
 */
export async function openLoop(o: OpenLoopOptions): Promise<OpenLoopTally> {
  const intervalMs = 1000 / o.rate;
  const lateMs = Math.max(1, intervalMs);
  const t: OpenLoopTally = { ...newTally(), lateSends: 0, lateMs, scheduled: 0, serviceTime: newHistogram() };
  const p = pool(o.request.origin, o.maxInFlight);
  const window = o.window ?? noWindow;
  const warmCount = Math.floor(o.warmupMs / intervalMs);
  const measuredCount = Math.max(1, Math.min(o.maxRequests, Math.floor(o.durationMs / intervalMs)));
  const total = warmCount + measuredCount;
  let inflight = 0;
  let freed: (() => void) | null = null;
  const out = new Set<Promise<void>>();
  const t0 = performance.now();
  const windowStartAt = t0 + warmCount * intervalMs;
  let windowStarted: Promise<void> | null = null;
  let lastDone = windowStartAt;
  for (let i = 0; i < total; i++) {
    const due = t0 + i * intervalMs;
    let now = performance.now();
    if (due > now) {
      await sleep(due - now);
      now = performance.now();
    }
    while (inflight >= o.maxInFlight) {
      await new Promise<void>((r) => (freed = r));
      now = performance.now();
    }
    const measured = i >= warmCount;
    if (measured && windowStarted === null) windowStarted = window.start();
    if (measured) {
      t.scheduled++;
      if (now - due > lateMs) t.lateSends++;
    }
    inflight++;
    const sentAt = now;
    const job = once(p, o.request, sentAt, null).then(
      (a) => {
        if (!measured) return;
        const done = performance.now();
        if (done > lastDone) lastDone = done;
        t.requests++;
        countStatus(t, a);
        recordMs(t.latency, done - due);
        recordMs(t.serviceTime, done - sentAt);
      },
      (e: unknown) => {
        if (measured) countError(t, e);
      },
    );
    const tracked = job.finally(() => {
      inflight--;
      out.delete(tracked);
      const f = freed;
      freed = null;
      f?.();
    });
    out.add(tracked);
  }
  const all = Promise.all([...out]).then(() => undefined);
  await within(all, TARGET_TIMEOUT_MS);
  t.seconds = Math.max(measuredCount * intervalMs, lastDone - windowStartAt) / 1000;
  await windowStarted;
  await window.end();
  await closePool(p, all);
  return t;
}

export interface PacedOptions {
  readonly request: Request;
  readonly streams: number;
  readonly warmupStreams: number;
  /** Bound on the whole wave; streams still open then are cut and counted as errors. */
  readonly deadlineMs: number;
  readonly marker: Buffer;
  readonly window?: Window;
}

export interface PacedTally extends Tally {
  /** Longest silence between two chunks of one stream, over all streams, ms. */
  maxGapMs: number;
  /** Streams that did not end with a 200 and a complete body. */
  failures: number;
}

/** All streams at once, each read to its end; latency is each stream's duration. */
export async function pacedWave(o: PacedOptions): Promise<PacedTally> {
  const t: PacedTally = { ...newTally(), maxGapMs: 0, failures: 0 };
  const p = pool(o.request.origin, o.streams);
  const window = o.window ?? noWindow;
  const wave = async (n: number, measured: boolean) => {
    await Promise.all(
      Array.from({ length: n }, async () => {
        const s0 = performance.now();
        try {
          const a = await once(p, o.request, s0, o.marker);
          if (!measured) return;
          t.requests++;
          countStatus(t, a);
          if (a.status !== 200) t.failures++;
          recordMs(t.latency, performance.now() - s0);
          if (!Number.isNaN(a.ttftMs)) recordMs(t.ttft, a.ttftMs);
          t.chunks += a.chunks;
          if (a.maxGapMs > t.maxGapMs) t.maxGapMs = a.maxGapMs;
        } catch (e) {
          if (!measured) return;
          t.failures++;
          countError(t, e);
        }
      }),
    );
  };
  const bounded = (w: Promise<void>) => within(w, o.deadlineMs);
  if (o.warmupStreams > 0) await bounded(wave(o.warmupStreams, false));
  await window.start();
  const w0 = performance.now();
  const measured = wave(o.streams, true);
  await bounded(measured);
  t.seconds = (performance.now() - w0) / 1000;
  await window.end();
  await closePool(p, measured);
  return t;
}
