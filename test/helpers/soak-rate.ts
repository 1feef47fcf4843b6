// N keys at R requests/s each against the per-key limit (README "Rate limits": a sliding log, any
// 60-s span holds at most `requestsPerMinute` allowed requests, refused ones are not counted).
// Cheap keyed requests (GET /v1/me: key lookup, then the limiter) to a gateway in its own process
// on a private Postgres and a private redis-server (the Redis limiter, server time).
//
// What is checked, per key, from the client's send and receive times (the limiter's own timestamp
// lies between them; Date.now() and Redis TIME read the same wall clock):
//   1. never over: any 61 accepted requests span >= 60 s, i.e. max(receive) - min(send) >= 60 s;
//   2. never under: a refused request had, even counting generously, 60 accepted in its window;
//   3. the total equals what the sliding log allows for the requests offered (simulated on the
//      midpoint of each request's send and receive times).
import { Agent } from 'undici';
import { startSoakStack } from './soak-stack.js';

export interface RateOptions {
  keys: number;
  perKeyPerS: number;
  durationMs: number;
  /** The gateway's Redis command timeout (the shipped 200 ms unless given). */
  redisCommandTimeoutMs?: number;
  log?: (m: string) => void;
}

export interface RateKeyReport {
  accepted: number;
  refused: number;
  other: Record<string, number>;
  expected: number;
  /** Most accepted requests whose limiter time certainly fell in one 60-s span (from the bounds). */
  maxCertainInWindow: number;
  overQuota: number;
  wronglyRefused: number;
}

export interface RateReport {
  setup: string[];
  quota: number;
  windowMs: number;
  durationS: number;
  sent: number;
  perKey: RateKeyReport[];
  failures: string[];
}

interface Sample {
  sendMs: number;
  recvMs: number;
  status: number;
  code: string;
}

const TOLERANCE_MS = 2; // Date.now() is whole milliseconds

/** How many of `times` (sorted) the sliding log allows: at most `quota` in any (t - window, t]. */
export function slidingLogAllows(times: number[], quota: number, windowMs: number): number {
  const acc: number[] = [];
  let head = 0;
  for (const t of times) {
    while (head < acc.length && acc[head]! <= t - windowMs) head++;
    if (acc.length - head < quota) acc.push(t);
  }
  return acc.length;
}

export function checkKey(samples: Sample[], quota: number, windowMs: number): RateKeyReport {
  const acc = samples.filter((s) => s.status === 200).sort((a, b) => a.sendMs - b.sendMs);
  const ref = samples.filter((s) => s.status === 429 && s.code === 'rate_limit_exceeded');
  const other: Record<string, number> = {};
  for (const s of samples) {
    if (s.status === 200 || (s.status === 429 && s.code === 'rate_limit_exceeded')) continue;
    const k = `${s.status} ${s.code}`;
    other[k] = (other[k] ?? 0) + 1;
  }
  // 1. For each accepted k as the earliest sender, the quota+1 earliest receivers sent at or after it.
  let overQuota = 0;
  for (let k = 0; k < acc.length; k++) {
    const recvs = acc
      .slice(k)
      .map((s) => s.recvMs)
      .sort((a, b) => a - b);
    if (recvs.length > quota && recvs[quota]! - acc[k]!.sendMs < windowMs - TOLERANCE_MS) overQuota++;
  }
  // Certainly in one window: sent at or after a start, received before start + window.
  let maxCertainInWindow = 0;
  for (const a of acc) {
    const n = acc.filter((s) => s.sendMs >= a.sendMs && s.recvMs < a.sendMs + windowMs - TOLERANCE_MS).length;
    if (n > maxCertainInWindow) maxCertainInWindow = n;
  }
  // 2. Generous count for a refusal: every accepted request that could lie in (s_r - W, s_r].
  let wronglyRefused = 0;
  for (const r of ref) {
    const n = acc.filter((s) => s.sendMs <= r.recvMs + TOLERANCE_MS && s.recvMs > r.sendMs - windowMs - TOLERANCE_MS).length;
    if (n < quota) wronglyRefused++;
  }
  // 3. The limiter's verdicts are what it allows, given every request offered (refused ones too).
  const offered = samples
    .filter((s) => s.status === 200 || (s.status === 429 && s.code === 'rate_limit_exceeded'))
    .map((s) => (s.sendMs + s.recvMs) / 2)
    .sort((a, b) => a - b);
  const expected = slidingLogAllows(offered, quota, windowMs);
  return { accepted: acc.length, refused: ref.length, other, expected, maxCertainInWindow, overQuota, wronglyRefused };
}

export async function runRateExact(o: RateOptions): Promise<RateReport> {
  const log = o.log ?? (() => undefined);
  const stack = await startSoakStack({ keys: o.keys, inkPerKey: 1_000, redisCommandTimeoutMs: o.redisCommandTimeoutMs });
  try {
    const quota = stack.config.limits.requestsPerMinute;
    const windowMs = 60_000;
    const agent = new Agent({ connections: 64, headersTimeout: 10_000, bodyTimeout: 10_000 });
    const perKey: Sample[][] = stack.keys.map(() => []);
    const pending = new Set<Promise<void>>();
    const intervalMs = 1000 / o.perKeyPerS;
    const t0 = Date.now();
    let sent = 0;
    let i = 0;
    const one = async (k: number) => {
      const s: Sample = { sendMs: Date.now(), recvMs: 0, status: 0, code: '' };
      perKey[k]!.push(s);
      try {
        const r = await agent.request({ origin: stack.gatewayUrl, path: '/v1/me', method: 'GET', headers: { authorization: `Bearer ${stack.keys[k]!.key}` } });
        const text = await r.body.text();
        s.recvMs = Date.now();
        s.status = r.statusCode;
        if (r.statusCode !== 200) s.code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? 'no-code';
      } catch (e) {
        s.recvMs = Date.now();
        s.code = `wire:${(e as { code?: string }).code ?? (e as Error).name}`;
      }
    };
    let lastLog = t0;
    while (Date.now() - t0 < o.durationMs) {
      const due = Math.floor((Date.now() - t0) / intervalMs);
      for (; i <= due; i++) {
        for (let k = 0; k < stack.keys.length; k++) {
          sent++;
          const p = one(k).finally(() => pending.delete(p));
          pending.add(p);
        }
      }
      if (Date.now() - lastLog >= 15_000) {
        lastLog = Date.now();
        log(`# ${((lastLog - t0) / 1000).toFixed(0)} s: ${sent} sent, ${perKey.reduce((n, s) => n + s.filter((x) => x.status === 200).length, 0)} accepted`);
      }
      await new Promise((r) => setTimeout(r, 2)); // the pacing tick of an open-loop generator
    }
    const durationS = (Date.now() - t0) / 1000;
    await Promise.all([...pending]);
    await agent.close();
    const reports = perKey.map((s) => checkKey(s, quota, windowMs));
    const failures: string[] = [];
    reports.forEach((r, k) => {
      if (r.overQuota > 0) failures.push(`key ${k}: ${r.overQuota} spans of 60 s with more than ${quota} accepted`);
      if (r.wronglyRefused > 0) failures.push(`key ${k}: ${r.wronglyRefused} refusals with fewer than ${quota} accepted in their window`);
      if (r.accepted !== r.expected) failures.push(`key ${k}: ${r.accepted} accepted, the sliding log allows ${r.expected}`);
      if (Object.keys(r.other).length > 0) failures.push(`key ${k}: other answers ${JSON.stringify(r.other)}`);
    });
    return { setup: stack.describe().slice(0, 4), quota, windowMs, durationS: Math.round(durationS * 10) / 10, sent, perKey: reports, failures };
  } finally {
    await stack.stop();
  }
}

export function formatRate(r: RateReport): string[] {
  const out = [...r.setup.map((s) => `uses: ${s}`)];
  out.push(`rate: ${r.perKey.length} keys, ${r.sent} requests in ${r.durationS} s, quota ${r.quota} per ${r.windowMs / 1000} s`);
  r.perKey.forEach((k, i) => {
    out.push(
      `  key ${i}: accepted ${k.accepted} (sliding log allows ${k.expected}), refused ${k.refused}, most certainly in one 60-s span ${k.maxCertainInWindow}, over-quota spans ${k.overQuota}, wrong refusals ${k.wronglyRefused}${Object.keys(k.other).length ? ', other ' + JSON.stringify(k.other) : ''}`,
    );
  });
  out.push(...(r.failures.length ? r.failures.map((f) => `FAIL: ${f}`) : ['rate: all goals met']));
  return out;
}
