// Mixed traffic at a steady rate against the soak stack (test/helpers/soak-stack.ts), optionally
// pausing Redis and Postgres (SIGSTOP ... SIGCONT) on a schedule, then the checks: status counts,
// what happened around each pause, RSS and open descriptors of the gateway, open holds, vendor
// calls against holds, and the ledger invariant. Shared by test/soak.ts and
// test/reliability/soak.test.ts; it decides pass/fail itself (`failures`), the callers print.
import { Agent } from 'undici';
import { ledgerViolations } from './ledger-invariant.js';
import { parseSse, sseComments } from './sse.js';
import type { SoakStack } from './soak-stack.js';

export type Kind = 'messages' | 'messages-stream' | 'responses' | 'responses-stream' | 'video' | 'image' | 'poll';

/** Share of each kind in 100 request starts. */
const MIX: ReadonlyArray<readonly [Kind, number]> = [
  ['messages', 20],
  ['messages-stream', 20],
  ['responses', 17],
  ['responses-stream', 17],
  ['video', 4],
  ['image', 6],
  ['poll', 16],
];

export interface SoakOptions {
  durationMs: number;
  /** Request starts per second, all kinds together (open loop: a slow answer does not slow the rate). */
  ratePerS: number;
  /** Pause Redis and Postgres in turn, one every `everyMs` (so each every 2 x everyMs), for `pauseMs`. */
  pauses?: { everyMs: number; pauseMs: number } | null;
  /** Gateway RSS / fd sampling period. */
  sampleEveryMs: number;
  /** After SIGCONT the first 2xx must come within this (default 5000 ms); 503s are expected until then. */
  recoveryBudgetMs?: number;
  /**
   * No leak: the V8 heap's floor (its least in-use bytes after a full collection, every 5 s) in the
   * last quarter <= its floor in the second quarter x (1 + heapSlack) (default 0.2), or + heapSlackMb
   * (default 8) when that is more: in a 50-s run that catches a leak of about 10 KB a request; the
   * 10-minute soak is the finer check. (Without the full collections the floor rose 45 -> 55 and
   * 56 -> 76 MB on Node 24, which let garbage pile up; collected, it is flat: 51.8 -> 52.9 MB.) ...
   */
  heapSlack?: number;
  heapSlackMb?: number;
  /**
   * ... and RSS bounded: last-quarter median <= second-quarter median x (1 + rssSlack) (default 0.5).
   * RSS is not the leak measure: it follows the requests in flight (a pause piles them up) and
   * whenever the allocator and V8 hand pages back, which Node 24 does later than Node 20.
   */
  rssSlack?: number;
  /** ... and last-quarter median fds (client and pooled sockets excluded) <= second-quarter median + fdSlack (default 5). */
  fdSlack?: number;
  /** Requests in flight above this are not started (counted as `skipped`): a hung gateway cannot eat the client's memory. */
  maxInFlight?: number;
  log?: (m: string) => void;
}

interface Rec {
  kind: Kind;
  startMs: number;
  endMs: number;
  status: number; // 0: the request failed on the wire
  code: string; // error code, stream outcome, or '' for a plain success
  requestId?: string; // kept for answers that say the settle was not written
}

export interface PauseReport {
  target: 'redis' | 'postgres';
  atS: number;
  pauseMs: number;
  /** SIGCONT to the end of the first 2xx of a request sent after it. */
  firstOkAfterMs: number | null;
  /** SIGCONT to the end of the last 503 of a request sent after it (0: none). */
  last503AfterMs: number;
  /** 503s of requests that overlapped this pause (until SIGCONT + the recovery budget). */
  n503: number;
  codes503: Record<string, number>;
}

export interface Quartiles {
  samples: number;
  secondQuarterMedian: number;
  lastQuarterMedian: number;
  min: number;
  max: number;
  flat: boolean;
}

export interface SoakReport {
  setup: string[];
  durationS: number;
  ratePerS: number;
  requests: number;
  achievedPerS: number;
  skipped: number;
  statusCounts: Record<string, number>;
  byKind: Record<string, Record<string, number>>;
  latencyMs: Record<string, { p50: number; p99: number; max: number }>;
  pauses: PauseReport[];
  rssMb: Quartiles;
  /** The gateway's V8 heap in use: its floor (least value) in the second and in the last quarter. */
  heapFloorMb: { secondQuarter: number; lastQuarter: number; samples: number; flat: boolean };
  /** Every descriptor, client connections included (they follow the load). */
  fds: Quartiles;
  /** Descriptors less our client's connections and the pooled sockets: what a leak would grow. */
  ownFds: Quartiles;
  /** The same once the client closed its connections and the gateway let go of them. */
  finalOwnFds: number;
  /** Most sockets seen to each pooled peer (bounded by db.poolMax and upstream.connections). */
  maxPooled: Record<string, number>;
  /** 503 rate_limiter_unavailable outside every pause, during a measured stall of the gateway's loop. */
  stall503: number;
  maxLoopLagMs: number;
  socketsAtEnd: Record<string, number>;
  /** Open holds left for reconciliation whose status is still `running`: their usage_unknown mark failed too. */
  openUnmarked: number;
  rssSeries: number[];
  fdSeries: number[];
  generations: Record<string, number>;
  /**
   * Per product: holds, abandoned reserves, open holds; `unstarted` counts generations refunded
   * before any vendor task or call was on record (a submit cut by a Postgres pause and recovered:
   * video without a task id, images without a call); their vendor call may or may not have gone out.
   */
  holds: Array<{ product: string; holds: number; abandoned: number; open: number; usageUnknown: number; running: number; unstarted: number }>;
  vendorCalls: Record<string, number>;
  invariantViolations: string[];
  failures: string[];
  gatewayErrors: string[];
}

const median = (xs: number[]): number => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** The least value of the second and of the last quarter of `series`: a heap's floor, what collections leave. */
/** The second and the last quarter of `series`: the load has settled in the first, the last shows a drift. */
function secondAndLastQuarter(series: number[]): [number[], number[]] {
  const n = series.length;
  return [series.slice(Math.floor(n / 4), Math.floor(n / 2)), series.slice(Math.floor((3 * n) / 4))];
}

function heapFloors(series: number[], slack: number, slackMb: number): SoakReport['heapFloorMb'] {
  const [second, last] = secondAndLastQuarter(series);
  const q2 = Math.min(...second);
  const q4 = Math.min(...last);
  return { secondQuarter: q2, lastQuarter: q4, samples: series.length, flat: series.length >= 8 && q4 <= Math.max(q2 * (1 + slack), q2 + slackMb) };
}

function quartiles(series: number[], flat: (q2: number, q4: number) => boolean): Quartiles {
  const n = series.length;
  const [q2, q4] = secondAndLastQuarter(series);
  const a = median(q2);
  const b = median(q4);
  return { samples: n, secondQuarterMedian: a, lastQuarterMedian: b, min: Math.min(...series), max: Math.max(...series), flat: n >= 8 && flat(a, b) };
}

const POLL_EVERY_MS = 1_000;
const POOLED: ReadonlySet<string> = new Set(['postgres', 'anthropic', 'openai', 'ark', 'ark-content', 'gemini']);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, ms)));

/** Polls `probe` until it returns true or `ms` pass; returns whether it did. */
async function until(ms: number, probe: () => Promise<boolean>): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await probe()) return true;
    if (Date.now() > end) return false;
    await sleep(200); // polling the database for quiescence, bounded by `ms`
  }
}

/** The kinds in a fixed interleaved order, so every second of traffic has the same mix. */
function schedule(): Kind[] {
  const slots: Kind[] = [];
  for (const [k, n] of MIX) for (let i = 0; i < n; i++) slots.push(k);
  const out: Kind[] = [];
  for (let i = 0; i < slots.length; i++) out.push(slots[(i * 37) % slots.length]!); // 37 is coprime to 100
  return out;
}

/** What a stream ended with: 'complete' (usage frame), the code of its final error event, or 'truncated'. */
function streamOutcome(kind: Kind, text: string): string {
  const events = parseSse(text);
  const err = events.find((e) => e.event === 'error');
  if (err) {
    try {
      const d = JSON.parse(err.data) as { code?: string; error?: { code?: string; type?: string } };
      return `stream-error:${d.code ?? d.error?.code ?? d.error?.type ?? 'unknown'}`;
    } catch {
      return 'stream-error:unparsable';
    }
  }
  if (kind === 'messages-stream') return events.some((e) => e.event === 'service.usage') ? 'complete' : 'truncated';
  return sseComments(text).some((c) => c.startsWith('service.usage')) ? 'complete' : 'truncated';
}

export async function runSoak(stack: SoakStack, o: SoakOptions): Promise<SoakReport> {
  const log = o.log ?? (() => undefined);
  const base = stack.gatewayUrl;
  const budgetMs = o.recoveryBudgetMs ?? 5_000;
  const maxInFlight = o.maxInFlight ?? 400;
  const agent = new Agent({ connections: 256, headersTimeout: 30_000, bodyTimeout: 30_000, keepAliveTimeout: 10_000 });
  const recs: Rec[] = [];
  // Generations to poll, each at most once a second (its key's budget is 60 a minute).
  const pending: Array<{ kind: 'video' | 'image'; id: string; key: string; dueMs: number }> = [];
  const takeDue = () => {
    const i = pending.findIndex((p) => p.dueMs <= now());
    return i === -1 ? undefined : pending.splice(i, 1)[0];
  };
  const again = (p: (typeof pending)[number]) => {
    p.dueMs = now() + POLL_EVERY_MS;
    pending.push(p);
  };
  const genOutcomes: Record<string, number> = {};
  let inFlight = 0;
  let skipped = 0;
  const inFlightSet = new Set<Promise<void>>();
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  let keyIdx = 0;
  const nextKey = () => stack.keys[keyIdx++ % stack.keys.length]!;

  const one = async (kind: Kind): Promise<void> => {
    let method = 'POST';
    let path: string;
    let body: unknown;
    let key = nextKey().key;
    let polled: (typeof pending)[number] | undefined;
    switch (kind) {
      case 'messages':
      case 'messages-stream':
        path = '/v1/messages';
        body = { model: 'sonnet', max_tokens: 64, stream: kind === 'messages-stream', messages: [{ role: 'user', content: 'soak: say hello' }] };
        break;
      case 'responses':
      case 'responses-stream':
        path = '/v1/responses';
        body = { model: 'astra', input: 'soak: say hello', max_output_tokens: 64, stream: kind === 'responses-stream' };
        break;
      case 'video':
        path = '/v1/video/generations';
        body = { model: 'clip-2.0-fast', prompt: 'soak: a kite over dunes', duration: 4 };
        break;
      case 'image':
        path = '/v1/images/generations';
        body = { model: 'image-1', prompt: 'soak: a lighthouse at dusk' };
        break;
      case 'poll':
        polled = takeDue();
        method = 'GET';
        if (polled) {
          key = polled.key;
          path = `/v1/${polled.kind === 'video' ? 'video' : 'images'}/generations/${polled.id}`;
        } else {
          path = '/v1/me'; // nothing to poll yet: still a keyed, limited, database-backed read
        }
        break;
    }
    const rec: Rec = { kind, startMs: now(), endMs: 0, status: 0, code: '' };
    recs.push(rec);
    try {
      const r = await agent.request({
        origin: base,
        path,
        method: method as 'GET' | 'POST',
        headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await r.body.text();
      rec.status = r.statusCode;
      if (r.statusCode >= 400) {
        try {
          rec.code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? 'no-code';
        } catch {
          rec.code = 'not-json';
        }
      } else if (kind === 'messages-stream' || kind === 'responses-stream') {
        rec.code = streamOutcome(kind, text);
        if (rec.code !== 'complete') rec.requestId = String(r.headers['x-request-id']);
      } else if (kind === 'messages' || kind === 'responses') {
        // No charge header on a 200: the settle could not be written (hold kept, usage_unknown).
        if (r.headers['x-service-ink-charged'] === undefined) {
          rec.code = 'no-charge-header';
          rec.requestId = String(r.headers['x-request-id']);
        }
      } else if (kind === 'video' || kind === 'image') {
        const g = JSON.parse(text) as { id: string };
        if (r.statusCode === 202) pending.push({ kind, id: g.id, key, dueMs: now() + POLL_EVERY_MS });
      } else if (polled) {
        const g = JSON.parse(text) as { status: string };
        if (g.status === 'succeeded' || g.status === 'failed') {
          const k = `${polled.kind} ${g.status}`;
          genOutcomes[k] = (genOutcomes[k] ?? 0) + 1;
        } else again(polled);
      }
    } catch (e) {
      rec.code = `wire:${(e as { code?: string }).code ?? (e as Error).name}`;
      if (polled) again(polled);
    } finally {
      rec.endMs = now();
    }
    if (polled && rec.status !== 200 && rec.status !== 0) again(polled); // 503 during a pause: poll again later
  };

  // --- Samplers and the pause schedule.
  const rssSeries: number[] = [];
  const fdSeries: number[] = [];
  const ownFdSeries: number[] = [];
  const maxPooled: Record<string, number> = {};
  let gatewayGone = false;
  const sampledFromMs = now();
  const sampler = setInterval(() => {
    const s = stack.sample();
    if (!s) {
      gatewayGone = true;
      return;
    }
    rssSeries.push(s.rssBytes / 1048576);
    fdSeries.push(s.fds);
    // Pooled sockets (Postgres pool, vendor keep-alive pools) grow to their bounds with load and
    // pauses; a leak shows in what is left. The pools are checked against their bounds instead.
    const by = stack.sockets();
    let pooled = 0;
    for (const [peer, n] of Object.entries(by)) {
      if (peer === 'client') continue;
      if (POOLED.has(peer)) {
        pooled += n;
        maxPooled[peer] = Math.max(maxPooled[peer] ?? 0, n);
      }
    }
    ownFdSeries.push(s.fds - s.clientFds - pooled);
  }, o.sampleEveryMs);

  const pauseLog: Array<{ target: 'redis' | 'postgres'; atMs: number; resumedMs: number; pauseMs: number }> = [];
  const pauser = (async () => {
    if (!o.pauses) return;
    const { everyMs, pauseMs } = o.pauses;
    let target: 'redis' | 'postgres' = 'redis';
    // Leave the recovery budget plus a few seconds of clean traffic after the last pause.
    for (let at = everyMs; at + pauseMs + budgetMs + 2_000 <= o.durationMs; at += everyMs) {
      await sleep(at - now());
      const atMs = now();
      if (target === 'redis') stack.redis.pause();
      else stack.pg.pause();
      log(`# ${(atMs / 1000).toFixed(1)} s: SIGSTOP ${target}`);
      await sleep(pauseMs);
      if (target === 'redis') stack.redis.resume();
      else stack.pg.resume();
      const resumedMs = now();
      log(`# ${(resumedMs / 1000).toFixed(1)} s: SIGCONT ${target}`);
      pauseLog.push({ target, atMs, resumedMs, pauseMs: resumedMs - atMs });
      target = target === 'redis' ? 'postgres' : 'redis';
    }
  })();

  // --- The open-loop driver: request i starts at i / rate seconds, whatever the answers do.
  const kinds = schedule();
  const intervalMs = 1000 / o.ratePerS;
  let i = 0;
  let lastProgress = 0;
  while (now() < o.durationMs) {
    const due = Math.floor(now() / intervalMs);
    for (; i <= due; i++) {
      if (inFlight >= maxInFlight) {
        skipped++;
        continue;
      }
      inFlight++;
      const p = one(kinds[i % kinds.length]!).finally(() => {
        inFlight--;
        inFlightSet.delete(p);
      });
      inFlightSet.add(p);
    }
    if (now() - lastProgress >= 30_000) {
      lastProgress = now();
      const s = stack.sample();
      log(
        `# ${(now() / 1000).toFixed(0)} s: ${recs.length} requests, ${inFlight} in flight, RSS ${s ? (s.rssBytes / 1048576).toFixed(0) : '?'} MB, fds ${s?.fds ?? '?'}`,
      );
    }
    await sleep(Math.min(intervalMs, 20)); // the pacing tick of an open-loop generator
  }
  const sentMs = now();
  await pauser;
  // In-flight requests end by themselves (every wait in the gateway is bounded; the client's too).
  await Promise.race([Promise.all([...inFlightSet]), sleep(60_000)]);
  clearInterval(sampler);
  const sampledToMs = now();

  // --- Quiescence: generations finish (the gateway's engine runs on), no text hold is still running.
  const genDone = await until(60_000, async () => {
    const r = await stack.pool.query(`SELECT count(*)::int AS n FROM generations WHERE state IN ('submitting', 'creating', 'queued', 'running')`);
    return r.rows[0].n === 0;
  });
  // Text holds still running: none but those the client was told stay open (see below).
  const told = new Set(recs.filter((r) => r.requestId !== undefined).map((r) => r.requestId!));
  const textDone = await until(20_000, async () => {
    const r = await stack.pool.query(`SELECT id FROM requests WHERE hold_state = 'open' AND status = 'running' LIMIT 10000`);
    return r.rows.every((row: { id: string }) => told.has(row.id));
  });
  const vendorCalls = stack.vendorCalls();
  // Our client's connections closed, the gateway must let go of their sockets too.
  await agent.close();
  let finalSample = stack.sample();
  await until(15_000, async () => {
    finalSample = stack.sample();
    return finalSample !== undefined && finalSample.clientFds === 0;
  });

  // --- Analysis.
  const failures: string[] = [];
  const statusCounts: Record<string, number> = {};
  const byKind: Record<string, Record<string, number>> = {};
  const lat: Record<string, number[]> = {};
  for (const r of recs) {
    const label = r.status === 0 ? r.code : r.code && r.status >= 400 ? `${r.status} ${r.code}` : r.code ? `${r.status} ${r.code}` : String(r.status);
    statusCounts[r.status === 0 ? 'wire error' : String(r.status)] = (statusCounts[r.status === 0 ? 'wire error' : String(r.status)] ?? 0) + 1;
    const k = (byKind[r.kind] ??= {});
    k[label] = (k[label] ?? 0) + 1;
    (lat[r.kind] ??= []).push(r.endMs - r.startMs);
  }
  const latencyMs: SoakReport['latencyMs'] = {};
  for (const [k, xs] of Object.entries(lat)) {
    xs.sort((a, b) => a - b);
    latencyMs[k] = { p50: xs[Math.floor(xs.length * 0.5)]!, p99: xs[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))]!, max: xs[xs.length - 1]! };
  }

  // A request is "in a pause" when it overlaps [SIGSTOP, SIGCONT + budget]; a Postgres pause also
  // explains a settle that could not be written (a 200 without a charge, a usage_unknown frame).
  const overlapping = (r: Rec, target?: 'redis' | 'postgres') =>
    pauseLog.some((p) => (!target || p.target === target) && r.startMs <= p.resumedMs + budgetMs && r.endMs >= p.atMs);
  // A 503 rate_limiter_unavailable with nothing paused is explained only by a stall of the
  // gateway's own event loop longer than the Redis command timeout (CPU starvation on a shared
  // machine), measured in the gateway (`LAG` lines) within a second of it: counted apart, not hidden.
  const lags = stack.lags().map((l) => ({ atMs: l.atMs - t0, lagMs: l.lagMs, heapBytes: l.heapBytes }));
  const stallMs = stack.config.redis.commandTimeoutMs * 0.75;
  const stalled = (r: Rec) => lags.some((l) => l.lagMs >= stallMs && l.atMs >= r.startMs - 1_000 && l.atMs <= r.endMs + 2_000);
  let stall503 = 0;
  let unexplained503 = 0;
  const bad5xx: string[] = [];
  for (const r of recs) {
    if (r.status >= 500 && r.status !== 503) bad5xx.push(`${r.kind} ${r.status} ${r.code} at ${(r.startMs / 1000).toFixed(1)} s`);
    if (r.status === 503 && !overlapping(r) && r.code === 'rate_limiter_unavailable' && stalled(r)) {
      stall503++;
      continue;
    }
    if (r.status === 503 && !overlapping(r)) {
      unexplained503++;
      if (unexplained503 <= 5) bad5xx.push(`${r.kind} 503 ${r.code} at ${(r.startMs / 1000).toFixed(1)} s, outside every pause`);
    }
    if (r.status === 0) bad5xx.push(`${r.kind} ${r.code} at ${(r.startMs / 1000).toFixed(1)} s`);
    const settleLost = r.code === 'no-charge-header' || r.code.startsWith('stream-error') || r.code === 'truncated';
    if (settleLost && !overlapping(r, 'postgres'))
      failures.push(`${r.kind} ended '${r.code}' at ${(r.startMs / 1000).toFixed(1)} s, outside every Postgres pause`);
  }
  if (bad5xx.length > 0) failures.push(`${bad5xx.length} answers that are a 5xx other than a pause's 503, or a wire error: ${bad5xx.slice(0, 10).join('; ')}`);
  // The only 4xx the mix can earn: an account's third generation while two run (keys are paced
  // well under their per-minute budget, bodies are valid).
  const bad4xx = recs.filter((r) => r.status >= 400 && r.status < 500 && !(r.status === 429 && r.code === 'concurrency_limit'));
  if (bad4xx.length > 0)
    failures.push(
      `${bad4xx.length} unexpected 4xx: ${bad4xx
        .slice(0, 5)
        .map((r) => `${r.kind} ${r.status} ${r.code} at ${(r.startMs / 1000).toFixed(1)} s`)
        .join('; ')}`,
    );
  const allowed503 = new Set(['rate_limiter_unavailable', 'provider_unavailable']);
  for (const r of recs) if (r.status === 503 && !allowed503.has(r.code)) failures.push(`503 with code ${r.code} (${r.kind})`);

  const pauses: PauseReport[] = pauseLog.map((p) => {
    const after = recs.filter((r) => r.startMs >= p.resumedMs && r.status >= 200 && r.status < 300);
    const firstOk = after.length ? Math.min(...after.map((r) => r.endMs)) - p.resumedMs : null;
    const next = pauseLog.find((q) => q.atMs > p.atMs)?.atMs ?? Infinity;
    const code = p.target === 'redis' ? 'rate_limiter_unavailable' : 'provider_unavailable';
    const late503 = recs.filter((r) => r.startMs >= p.resumedMs && r.startMs < next && r.status === 503 && r.code === code);
    const last503 = late503.length ? Math.max(...late503.map((r) => r.endMs)) - p.resumedMs : 0;
    const during = recs.filter((r) => r.status === 503 && r.startMs <= p.resumedMs + budgetMs && r.endMs >= p.atMs);
    const codes503: Record<string, number> = {};
    for (const r of during) codes503[r.code] = (codes503[r.code] ?? 0) + 1;
    const rep = {
      target: p.target,
      atS: Math.round(p.atMs / 100) / 10,
      pauseMs: Math.round(p.pauseMs),
      firstOkAfterMs: firstOk === null ? null : Math.round(firstOk),
      last503AfterMs: Math.round(last503),
      n503: during.length,
      codes503,
    };
    if (firstOk === null || firstOk > budgetMs)
      failures.push(`${p.target} pause at ${rep.atS} s: no 2xx within ${budgetMs} ms of SIGCONT (first after ${firstOk ?? 'never'} ms)`);
    if (during.length === 0) failures.push(`${p.target} pause at ${rep.atS} s: no 503 at all (was the pause real?)`);
    return rep;
  });

  const rssMb = quartiles(rssSeries, (a, b) => b <= a * (1 + (o.rssSlack ?? 0.5)));
  const heapFloorMb = heapFloors(
    lags.filter((l) => l.heapBytes >= 0 && l.atMs >= sampledFromMs && l.atMs <= sampledToMs).map((l) => l.heapBytes / 1048576),
    o.heapSlack ?? 0.2,
    o.heapSlackMb ?? 8,
  );
  const fds = quartiles(fdSeries, () => true);
  const fdSlack = o.fdSlack ?? 5;
  const ownFds = quartiles(ownFdSeries, (a, b) => b <= a + fdSlack);
  const endBy = stack.sockets();
  const finalOwnFds = finalSample ? finalSample.fds - finalSample.clientFds - [...POOLED].reduce((n, p) => n + (endBy[p] ?? 0), 0) : NaN;
  const cfg = stack.config;
  for (const [peer, n] of Object.entries(maxPooled)) {
    // Postgres: the pool, plus the one connection that listens for lease recalls and key changes.
    const bound = peer === 'postgres' ? cfg.db.poolMax + 1 : cfg.upstream.connections;
    if (n > bound) failures.push(`${n} sockets to ${peer}, above its pool bound ${bound}`);
  }
  if (finalSample?.clientFds !== 0)
    failures.push(`the gateway still holds ${finalSample?.clientFds ?? '?'} client sockets 15 s after the client closed its connections`);
  if (!(finalOwnFds <= ownFds.secondQuarterMedian + fdSlack))
    failures.push(`open fds after the run: ${finalOwnFds}, second-quarter median under load ${ownFds.secondQuarterMedian} (allowed +${fdSlack})`);
  if (gatewayGone) failures.push('the gateway process went away during the soak');
  if (!heapFloorMb.flat)
    failures.push(
      `V8 heap floor grew: second quarter ${heapFloorMb.secondQuarter.toFixed(1)} MB, last quarter ${heapFloorMb.lastQuarter.toFixed(1)} MB (allowed +${((o.heapSlack ?? 0.2) * 100).toFixed(0)}% or +${o.heapSlackMb ?? 8} MB, ${heapFloorMb.samples} samples)`,
    );
  if (!rssMb.flat)
    failures.push(
      `RSS ran away: second-quarter median ${rssMb.secondQuarterMedian.toFixed(1)} MB, last-quarter ${rssMb.lastQuarterMedian.toFixed(1)} MB (allowed +${((o.rssSlack ?? 0.5) * 100).toFixed(0)}%, ${rssMb.samples} samples)`,
    );
  if (!ownFds.flat)
    failures.push(
      `open fds (client and pooled sockets excluded) not flat: second-quarter median ${ownFds.secondQuarterMedian}, last-quarter ${ownFds.lastQuarterMedian} (allowed +${fdSlack}, ${ownFds.samples} samples)`,
    );
  if (!genDone) failures.push('generations still unfinished 60 s after the traffic stopped');
  if (!textDone) failures.push('holds still running 20 s after the traffic stopped that the client was not told about');

  const holdsRows = (
    await stack.pool.query(
      `SELECT r.product, count(*) FILTER (WHERE r.hold_state <> 'void')::int AS holds,
              count(*) FILTER (WHERE r.hold_state <> 'void' AND r.reason = 'reserve_abandoned')::int AS abandoned,
              count(*) FILTER (WHERE r.hold_state = 'open')::int AS open,
              count(*) FILTER (WHERE r.hold_state = 'open' AND r.status = 'usage_unknown')::int AS "usageUnknown",
              count(*) FILTER (WHERE r.hold_state = 'open' AND r.status = 'running')::int AS running,
              count(*) FILTER (WHERE r.hold_state <> 'void' AND g.state = 'failed'
                                 AND ((g.kind = 'video' AND g.vendor_task_id IS NULL) OR (g.kind = 'image' AND g.polls = 0)))::int AS unstarted
         FROM requests r LEFT JOIN generations g ON g.request_id = r.id
        GROUP BY r.product ORDER BY r.product`,
    )
  ).rows as SoakReport['holds'];
  const callsOf: Record<string, number> = {
    messages: vendorCalls.anthropic,
    responses: vendorCalls.openai,
    video: vendorCalls.ark,
    images: vendorCalls.gemini,
  };
  for (const h of holdsRows) {
    const calls = callsOf[h.product] ?? 0;
    // Every hold but an abandoned reserve (its answer was lost in a pause, the gateway then
    // released it) led to exactly one vendor call, and no call came without a hold. Images alone
    // may call again: a row left `running` when its result could not be written (a Postgres pause)
    // is called again, by design at most MAX_VENDOR_CALLS (5) times, and charged once.
    // A generation refunded before its task or call was on record (`unstarted`) may or may not
    // have reached the vendor (the create or call can be cut by the pause after it was sent).
    if (!vendorCallsMatch(h, calls, o.pauses !== undefined)) {
      failures.push(
        `${h.product}: ${calls} vendor calls, ${h.holds} holds of which ${h.abandoned} abandoned reserves and ${h.unstarted} refunded before a task or call was on record`,
      );
    }
    if (h.usageUnknown > 0 && !o.pauses) failures.push(`${h.product}: ${h.usageUnknown} holds left usage_unknown without any pause`);
  }
  for (const p of ['messages', 'responses', 'video', 'images']) {
    if (!holdsRows.some((h) => h.product === p)) failures.push(`no ${p} request reached the ledger`);
  }
  // Every hold still open is one the client was told about (a 200 without a charge, a stream that
  // ended usage_unknown) in a Postgres pause: left for reconciliation on purpose, none forgotten.
  const openRows = (await stack.pool.query(`SELECT id, product, status FROM requests WHERE hold_state = 'open' LIMIT 10000`)).rows as Array<{
    id: string;
    product: string;
    status: string;
  }>;
  const untold = openRows.filter((h) => !told.has(h.id));
  if (untold.length > 0)
    failures.push(
      `${untold.length} open holds the client was never told about: ${untold
        .slice(0, 5)
        .map((h) => `${h.id} ${h.product} ${h.status}`)
        .join(', ')}`,
    );
  const openUnmarked = openRows.filter((h) => h.status !== 'usage_unknown').length;
  const invariantViolations = await ledgerViolations(stack.pool);
  for (const v of invariantViolations) failures.push(`ledger invariant: ${v}`);

  return {
    setup: stack.describe(),
    durationS: Math.round(sentMs / 100) / 10,
    ratePerS: o.ratePerS,
    requests: recs.length,
    achievedPerS: Math.round((recs.length / (sentMs / 1000)) * 10) / 10,
    skipped,
    statusCounts,
    byKind,
    latencyMs,
    pauses,
    rssMb,
    heapFloorMb,
    fds,
    ownFds,
    finalOwnFds,
    maxPooled,
    stall503,
    maxLoopLagMs: lags.reduce((m, l) => Math.max(m, l.lagMs), 0),
    socketsAtEnd: stack.sockets(),
    openUnmarked,
    rssSeries: rssSeries.map((x) => Math.round(x * 10) / 10),
    fdSeries,
    generations: genOutcomes,
    holds: holdsRows,
    vendorCalls,
    invariantViolations,
    failures,
    gatewayErrors: stack.gatewayErrors().slice(-10),
  };
}

/** The report as readable lines (the script and the test print these). */
export function formatSoak(r: SoakReport): string[] {
  const f = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : String(x));
  const out = [...r.setup.map((s) => `uses: ${s}`)];
  out.push(`traffic: ${r.requests} requests in ${r.durationS} s (${r.achievedPerS}/s, target ${r.ratePerS}/s), ${r.skipped} skipped`);
  out.push(`statuses: ${JSON.stringify(r.statusCounts)}`);
  for (const [k, v] of Object.entries(r.byKind)) {
    const l = r.latencyMs[k]!;
    out.push(`  ${k.padEnd(17)} ${JSON.stringify(v)}  p50 ${f(l.p50)} ms, p99 ${f(l.p99)} ms, max ${f(l.max)} ms`);
  }
  out.push(`generations seen finished by polls: ${JSON.stringify(r.generations)}`);
  for (const p of r.pauses) {
    out.push(
      `pause ${p.target} at ${p.atS} s for ${p.pauseMs} ms: ${p.n503} x 503 ${JSON.stringify(p.codes503)}; first 2xx ${p.firstOkAfterMs} ms after SIGCONT; last 503 ${p.last503AfterMs} ms after`,
    );
  }
  out.push(
    `V8 heap floor MB: second quarter ${f(r.heapFloorMb.secondQuarter)}, last quarter ${f(r.heapFloorMb.lastQuarter)} (${r.heapFloorMb.samples} samples): ${r.heapFloorMb.flat ? 'flat' : 'GREW'}`,
  );
  out.push(
    `RSS MB: second-quarter median ${f(r.rssMb.secondQuarterMedian)}, last-quarter median ${f(r.rssMb.lastQuarterMedian)} (min ${f(r.rssMb.min)}, max ${f(r.rssMb.max)}, ${r.rssMb.samples} samples): ${r.rssMb.flat ? 'flat' : 'NOT flat'}`,
  );
  out.push(
    `open fds, all: second-quarter median ${r.fds.secondQuarterMedian}, last-quarter median ${r.fds.lastQuarterMedian} (min ${r.fds.min}, max ${r.fds.max})`,
  );
  out.push(`pooled sockets, most seen: ${JSON.stringify(r.maxPooled)} (bounds: postgres db.poolMax + 1 listener, vendors upstream.connections)`);
  out.push(
    `open fds less client and pooled sockets: second-quarter median ${r.ownFds.secondQuarterMedian}, last-quarter median ${r.ownFds.lastQuarterMedian} (min ${r.ownFds.min}, max ${r.ownFds.max}): ${r.ownFds.flat ? 'flat' : 'NOT flat'}; after the run ${r.finalOwnFds}`,
  );
  out.push(`gateway sockets after the run: ${JSON.stringify(r.socketsAtEnd)}`);
  out.push(`gateway event loop: worst delay in any second ${r.maxLoopLagMs} ms; 503s outside pauses during such a stall: ${r.stall503}`);
  out.push(`vendor calls: ${JSON.stringify(r.vendorCalls)}`);
  for (const h of r.holds)
    out.push(
      `holds ${h.product}: ${h.holds} (abandoned reserves ${h.abandoned}, refunded before a task or call ${h.unstarted}), open ${h.open} (usage_unknown ${h.usageUnknown}, running ${h.running})`,
    );
  if (r.openUnmarked > 0)
    out.push(
      `NOTE: ${r.openUnmarked} open holds kept status 'running': the settle and then the usage_unknown mark both failed in a Postgres pause (the client was told; reconciliation lists them by age)`,
    );
  out.push(`ledger invariant: ${r.invariantViolations.length === 0 ? 'holds' : r.invariantViolations.length + ' violations'}`);
  if (r.failures.length) out.push(...r.failures.map((x) => `FAIL: ${x}`));
  else out.push('all goals met');
  if (r.gatewayErrors.length) out.push(`gateway error log (last ${r.gatewayErrors.length}):`, ...r.gatewayErrors.map((l) => '  ' + l.slice(0, 300)));
  return out;
}

/**
 * Every hold but an abandoned reserve led to one vendor call, and no call came without a hold.
 * Images may call again after a lost write (at most 5 calls, charged once); a generation refunded
 * before its task or call was on record may have reached the vendor or not.
 */
export function vendorCallsMatch(h: { product: string; holds: number; abandoned: number; unstarted: number }, calls: number, paused: boolean): boolean {
  const held = h.holds - h.abandoned;
  const least = held - h.unstarted;
  const most = h.product === 'images' && paused ? held * 5 : held;
  return calls >= least && calls <= most;
}
