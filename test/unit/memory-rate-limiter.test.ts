import t from 'tap';
import fc from 'fast-check';
import { MemoryRateLimiter, retryAfterSeconds } from '../../src/limits/memory-rate-limiter.js';
import { createRateLimiter } from '../../src/limits/create-rate-limiter.js';
import type { RateDecision } from '../../src/limits/rate-limiter.js';

const MINUTE = 60_000;

/** A limiter on a clock the test moves. */
function clocked(opts: { windowMs?: number; maxBuckets?: number } = {}) {
  const clock = { ms: 1_000_000 };
  const limiter = new MemoryRateLimiter({ ...opts, now: () => clock.ms });
  return { clock, limiter };
}

t.test('60 allowed, the 61st denied with the time until the oldest leaves the window', async (t) => {
  const { clock, limiter } = clocked();
  const remaining: number[] = [];
  for (let i = 0; i < 60; i++) {
    const d = await limiter.take('key:a', 60);
    t.ok(d.allowed, `request ${i + 1} allowed`);
    if (d.allowed) remaining.push(d.remaining);
  }
  t.same(
    remaining,
    Array.from({ length: 60 }, (_, i) => 59 - i),
  );
  t.same(await limiter.take('key:a', 60), { allowed: false, retryAfterS: 60 });
  clock.ms += 59_001;
  t.same(await limiter.take('key:a', 60), { allowed: false, retryAfterS: 1 }, 'rounds up, at least 1');
  clock.ms += 998; // 1 ms before the first 60 expire
  t.same(await limiter.take('key:a', 60), { allowed: false, retryAfterS: 1 });
  clock.ms += 1; // exactly one window later: all 60 have left
  t.same(await limiter.take('key:a', 60), { allowed: true, remaining: 59 });
});

t.test('the window slides (not a fixed window): 30 + 30, then 30 more after the first 30 leave', async (t) => {
  const { clock, limiter } = clocked();
  for (let i = 0; i < 30; i++) t.ok((await limiter.take('k', 60)).allowed);
  clock.ms += 30_000;
  for (let i = 0; i < 30; i++) t.ok((await limiter.take('k', 60)).allowed);
  t.same(await limiter.take('k', 60), { allowed: false, retryAfterS: 30 });
  clock.ms += 30_000; // the first 30 leave, the second 30 are still inside
  let n = 0;
  let last: RateDecision | undefined;
  for (let i = 0; i < 100; i++) {
    last = await limiter.take('k', 60);
    if (!last.allowed) break;
    n++;
  }
  t.equal(n, 30, 'exactly the 30 freed slots');
  t.same(last, { allowed: false, retryAfterS: 30 });
});

t.test('one request a second: each slot frees exactly one window after it was used', async (t) => {
  const { clock, limiter } = clocked();
  for (let i = 0; i < 60; i++) {
    t.ok((await limiter.take('k', 60)).allowed);
    clock.ms += 1000;
  }
  // now = start + 60 s: the request at start has just left
  t.same(await limiter.take('k', 60), { allowed: true, remaining: 0 });
  clock.ms += 500;
  t.same(await limiter.take('k', 60), { allowed: false, retryAfterS: 1 });
});

t.test('10 keys at 100 req/s for 2 minutes: exactly 60 per key in each minute, never 61 in any 60 s', async (t) => {
  const { clock, limiter } = clocked();
  const start = clock.ms;
  const allowedAt = new Map<string, number[]>();
  const keys = Array.from({ length: 10 }, (_, i) => `key:${i}`);
  for (const k of keys) allowedAt.set(k, []);
  for (let step = 0; step < 12_000; step++) {
    // 100 req/s per key: every 10 ms each key sends one
    clock.ms = start + step * 10;
    for (const k of keys) {
      const d = await limiter.take(k, 60);
      if (d.allowed) allowedAt.get(k)!.push(clock.ms);
    }
  }
  for (const k of keys) {
    const times = allowedAt.get(k)!;
    t.equal(times.filter((x) => x < start + MINUTE).length, 60, `${k}: 60 in the first minute`);
    t.equal(times.filter((x) => x >= start + MINUTE && x < start + 2 * MINUTE).length, 60, `${k}: 60 in the second`);
    let worst = Infinity;
    for (let i = 0; i + 60 < times.length; i++) worst = Math.min(worst, times[i + 60]! - times[i]!);
    t.ok(worst >= MINUTE, `${k}: any 61 allowed span at least a minute (shortest ${worst} ms)`);
  }
});

t.test('buckets are independent, and the limit is per call', async (t) => {
  const { limiter } = clocked();
  for (let i = 0; i < 5; i++) t.ok((await limiter.take('ip:1', 5)).allowed);
  t.notOk((await limiter.take('ip:1', 5)).allowed);
  t.ok((await limiter.take('ip:2', 5)).allowed, 'another bucket is untouched');
  t.ok((await limiter.take('ip:1', 6)).allowed, 'a higher limit lets one more in');
});

t.test('a lowered limit waits for enough entries to leave, not just the oldest', async (t) => {
  const { clock, limiter } = clocked();
  for (let i = 0; i < 10; i++) {
    t.ok((await limiter.take('k', 10)).allowed);
    clock.ms += 1000;
  }
  // now = start + 10 s, log holds start+0..start+9 s; with limit 5 the 6th oldest (start+5 s) must leave
  t.same(await limiter.take('k', 5), { allowed: false, retryAfterS: 55 });
});

t.test('many buckets', async (t) => {
  const { limiter } = clocked();
  let ok = 0;
  for (let i = 0; i < 20_000; i++) if ((await limiter.take(`key:${i}`, 60)).allowed) ok++;
  t.equal(ok, 20_000);
  t.equal(limiter.size, 20_000);
  for (let i = 0; i < 20_000; i += 997) {
    const d = await limiter.take(`key:${i}`, 60);
    t.same(d, { allowed: true, remaining: 58 }, `key:${i} remembered its first request`);
  }
});

t.test('the bucket cap holds; the least recently used bucket is the one forgotten', async (t) => {
  const { limiter } = clocked({ maxBuckets: 100 });
  for (let i = 0; i < 1000; i++) {
    await limiter.take(`key:${i}`, 1);
    t.ok(limiter.size <= 100, 'never above the cap');
  }
  t.equal(limiter.size, 100);
  t.same(await limiter.take('key:999', 1), { allowed: false, retryAfterS: 60 }, 'recent bucket kept');
  t.same(await limiter.take('key:900', 1), { allowed: false, retryAfterS: 60 }, 'the 100th most recent kept');
  t.same(await limiter.take('key:0', 1), { allowed: true, remaining: 0 }, 'an evicted bucket starts afresh');
});

t.test('a take touches its bucket, so a busy bucket survives eviction', async (t) => {
  const { limiter } = clocked({ maxBuckets: 10 });
  await limiter.take('hot', 1);
  for (let i = 0; i < 100; i++) {
    await limiter.take(`cold:${i}`, 1);
    t.notOk((await limiter.take('hot', 1)).allowed, 'hot bucket still counted');
  }
});

t.test('expired buckets are reaped as traffic goes on, without a timer', async (t) => {
  const { clock, limiter } = clocked();
  for (let i = 0; i < 500; i++) await limiter.take(`key:${i}`, 60);
  t.equal(limiter.size, 500);
  clock.ms += MINUTE; // every log is now out of the window
  for (let i = 0; i < 250; i++) await limiter.take('hot', 1_000_000);
  t.equal(limiter.size, 1, 'only the live bucket is left');
});

t.test('a live bucket blocks reaping of the ones behind it only until it expires', async (t) => {
  const { clock, limiter } = clocked();
  await limiter.take('a', 60);
  clock.ms += 30_000;
  await limiter.take('b', 60);
  clock.ms += 30_000; // a expired, b live
  await limiter.take('c', 60);
  t.equal(limiter.size, 2, 'a reaped, b kept');
  t.same(await limiter.take('b', 60), { allowed: true, remaining: 58 });
});

t.test('matches a naive sliding-log model on random traffic', async (t) => {
  const windowMs = 1000;
  const op = fc.record({
    // exact window multiples hit the boundary (an entry exactly one window old has left)
    dtMs: fc.oneof(fc.constantFrom(0, 1, 250, 500, 999, 1000), fc.integer({ min: 0, max: 400 })),
    bucket: fc.integer({ min: 0, max: 3 }),
    limit: fc.integer({ min: 1, max: 12 }),
  });
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 300 }), async (ops) => {
      const { clock, limiter } = clocked({ windowMs });
      const model = new Map<number, number[]>();
      for (const o of ops) {
        clock.ms += o.dtMs;
        const live = (model.get(o.bucket) ?? []).filter((x) => x > clock.ms - windowMs);
        let expected: RateDecision;
        if (live.length < o.limit) {
          live.push(clock.ms);
          expected = { allowed: true, remaining: o.limit - live.length };
        } else {
          const waitMs = live[live.length - o.limit]! + windowMs - clock.ms;
          expected = { allowed: false, retryAfterS: retryAfterSeconds(waitMs, windowMs) };
        }
        model.set(o.bucket, live);
        const got = await limiter.take(`b${o.bucket}`, o.limit);
        if (JSON.stringify(got) !== JSON.stringify(expected)) {
          throw new Error(`at ${clock.ms}: got ${JSON.stringify(got)}, expected ${JSON.stringify(expected)}`);
        }
      }
    }),
    { numRuns: 300 },
  );
  t.pass('300 random traffic runs agree with the model');
});

t.test('bad arguments are programming errors', async (t) => {
  const { limiter } = clocked();
  t.throws(() => limiter.takeSync('', 60), TypeError);
  t.throws(() => limiter.takeSync('x'.repeat(513), 60), TypeError);
  t.throws(() => limiter.takeSync('k', 0), TypeError);
  t.throws(() => limiter.takeSync('k', 1.5), TypeError);
  t.throws(() => new MemoryRateLimiter({ windowMs: 0 }), TypeError);
  t.throws(() => new MemoryRateLimiter({ maxBuckets: 0 }), TypeError);
});

t.test('Retry-After is whole seconds, at least 1, at most one window', async (t) => {
  t.equal(retryAfterSeconds(0, MINUTE), 1);
  t.equal(retryAfterSeconds(1, MINUTE), 1);
  t.equal(retryAfterSeconds(1000, MINUTE), 1);
  t.equal(retryAfterSeconds(1001, MINUTE), 2);
  t.equal(retryAfterSeconds(3_600_000, MINUTE), 60, 'a clock step back does not ask for an hour');
});

t.test('the factory picks memory without a Redis URL', async (t) => {
  const limiter = createRateLimiter({ redisUrl: null });
  t.equal(limiter.kind, 'memory');
  t.same(await limiter.take('k', 60), { allowed: true, remaining: 59 });
  await limiter.close();
});
