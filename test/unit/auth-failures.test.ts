// The failed-authentication budget (src/limits/auth-failures.ts) on a clock the test moves, over the
// real in-process limiter: only counted failures are taken from the budget, the one that goes over
// is answered 429, and from then on the address is refused before its key is checked, until its
// Retry-After; a good key never touches the limiter.
import t from 'tap';
import { ApiError, isApiError } from '../../src/errors.js';
import { AuthFailureBudget, failureBucket } from '../../src/limits/auth-failures.js';
import { MemoryRateLimiter } from '../../src/limits/memory-rate-limiter.js';
import type { RateLimiter } from '../../src/limits/rate-limiter.js';

/** The 401 a store lookup gives (the only kind counted here). */
const NOT_FOUND = new Error('not found');
const lookedUp = () => new ApiError('invalid_api_key', { cause: NOT_FOUND });

function setup(perMinute = 3, limiterOverride?: RateLimiter) {
  const clock = { ms: 1_000_000 };
  const limiter = new MemoryRateLimiter({ now: () => clock.ms });
  const refusals = { n: 0 };
  const budget = new AuthFailureBudget({
    limiter: limiterOverride ?? limiter,
    perMinute,
    counts: (e) => isApiError(e) && e.cause === NOT_FOUND,
    nowMs: () => clock.ms,
    onRefused: () => refusals.n++,
  });
  const attempts = { n: 0 };
  const fail = (address: string) =>
    budget
      .guard(
        () => address,
        async () => {
          attempts.n++;
          throw lookedUp();
        },
      )
      .then(
        () => ({ status: 200, retryAfterS: undefined as number | undefined }),
        (e: ApiError) => ({ status: e.status, retryAfterS: e.retryAfterS, message: e.message }),
      );
  return { clock, limiter, budget, refusals, attempts, fail };
}

t.test('N failures answered 401, the next 429; then refused before the key is checked until Retry-After', async (t) => {
  const { clock, refusals, attempts, fail } = setup(3);
  for (let i = 0; i < 3; i++) t.equal((await fail('203.0.113.5')).status, 401, `failure ${i + 1}`);
  const over = await fail('203.0.113.5');
  t.equal(over.status, 429, 'the fourth failure in the minute is refused');
  t.equal(over.retryAfterS, 60, 'until the first failure leaves the window');
  t.match(over, { message: /failed authentications/ });
  t.equal(attempts.n, 4);
  clock.ms += 30_000;
  const blocked = await fail('203.0.113.5');
  t.same([blocked.status, blocked.retryAfterS], [429, 30], 'refused from memory, Retry-After counts down');
  t.equal(attempts.n, 4, 'the key was not checked (no lookup)');
  t.equal(refusals.n, 2, 'both refusals reported');
  t.equal((await fail('203.0.113.6')).status, 401, 'another address has its own budget');
  clock.ms += 30_000;
  // One window after the three failures (all at one instant): the budget is whole again.
  for (let i = 0; i < 3; i++) t.equal((await fail('203.0.113.5')).status, 401, `after the window: failure ${i + 1} checked`);
  t.equal(attempts.n, 8);
  t.equal((await fail('203.0.113.5')).status, 429, 'and the next is over again');
});

t.test('a good key and an uncounted 401 never touch the limiter', async (t) => {
  const { limiter, budget, fail } = setup(1);
  let reads = 0;
  t.equal(
    await budget.guard(
      () => (reads++, '203.0.113.9'),
      async () => 'ok',
    ),
    'ok',
  );
  t.equal(reads, 0, 'nor is the address resolved while no address is refused');
  const free = await budget
    .guard(
      () => '203.0.113.9',
      async () => Promise.reject(new ApiError('invalid_api_key')),
    )
    .catch((e: ApiError) => e.status);
  t.equal(free, 401, 'a 401 given from memory passes unchanged');
  const other = await budget
    .guard(
      () => '203.0.113.9',
      async () => Promise.reject(new ApiError('provider_unavailable')),
    )
    .catch((e: ApiError) => e.code);
  t.equal(other, 'provider_unavailable', 'any other error passes unchanged');
  t.equal(limiter.size, 0, 'no bucket was made');
  t.equal((await fail('203.0.113.9')).status, 401);
  t.equal(limiter.size, 1, 'a counted failure makes one');
  // Over budget: even a good key from that address is refused (the address is refused, not a key).
  t.equal((await fail('203.0.113.9')).status, 429);
  const good = await budget
    .guard(
      () => '203.0.113.9',
      async () => 'ok',
    )
    .catch((e: ApiError) => e.status);
  t.equal(good, 429);
  t.equal(
    await budget.guard(
      () => '198.51.100.1',
      async () => 'ok',
    ),
    'ok',
    'a good key from another address',
  );
});

t.test('the limiter unavailable: the failure keeps its 401', async (t) => {
  const down: RateLimiter = {
    kind: 'redis',
    take: () => Promise.reject(new ApiError('rate_limiter_unavailable')),
    waitReady: () => Promise.resolve(false),
    close: () => Promise.resolve(),
  };
  const { fail } = setup(1, down);
  for (let i = 0; i < 3; i++) t.equal((await fail('203.0.113.5')).status, 401);
});

t.test('the remembered refusals are bounded', async (t) => {
  const clock = { ms: 0 };
  const limiter = new MemoryRateLimiter({ now: () => clock.ms });
  const budget = new AuthFailureBudget({ limiter, perMinute: 1, counts: () => true, maxRefused: 2, nowMs: () => clock.ms });
  let checks = 0;
  const fail = (a: string) =>
    budget
      .guard(
        () => a,
        async () => {
          checks++;
          throw new ApiError('invalid_api_key');
        },
      )
      .catch((e: ApiError) => e.status);
  for (const a of ['10.0.0.1', '10.0.0.2', '10.0.0.3']) t.same([await fail(a), await fail(a)], [401, 429]);
  t.equal(checks, 6);
  t.equal(await fail('10.0.0.3'), 429);
  t.equal(checks, 6, 'the newest is still refused from memory');
  t.equal(await fail('10.0.0.1'), 429, 'the oldest was forgotten: checked once more, and the shared count refuses it');
  t.equal(checks, 7);
});

t.test('buckets: an address; an IPv6 one by its /64; an IPv4-mapped one as IPv4', async (t) => {
  t.equal(failureBucket('203.0.113.5'), 'authfail:203.0.113.5');
  t.equal(failureBucket('2001:db8:1:2:3:4:5:6'), 'authfail:2001:db8:1:2::/64');
  t.equal(failureBucket('2001:DB8:1:2::9'), 'authfail:2001:db8:1:2::/64', 'the same /64, another host');
  t.equal(failureBucket('2001:0db8:0001:0002:ffff::1'), 'authfail:2001:db8:1:2::/64', 'leading zeros');
  t.equal(failureBucket('2001:db8::1'), 'authfail:2001:db8:0:0::/64', 'compressed inside the /64');
  t.equal(failureBucket('::1'), 'authfail:0:0:0:0::/64');
  t.equal(failureBucket('fe80::1%eth0'), 'authfail:fe80:0:0:0::/64', 'a zone is dropped');
  t.equal(failureBucket('::ffff:198.51.100.7'), 'authfail:198.51.100.7');
  t.equal(failureBucket('64:ff9b::198.51.100.7'), 'authfail:64:ff9b:0:0::/64', 'a dotted tail counts as two groups');
  t.not(failureBucket('2001:db8:1:3::1'), failureBucket('2001:db8:1:2::1'), 'another /64');
});
