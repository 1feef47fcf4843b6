// "10 keys at 100 requests/s: each key gets exactly its 60 per minute", the CI variant of
// the rate part of test/soak.ts. The real 60-s window (limits.requestsPerMinute = 60), run for
// 63 s so the window rolls once: each key's first 60 requests pass in its first 0.6 s, the rest
// are refused until each of them leaves the window 60 s later, then 60 pass again. Shorter windows
// would test another configuration than the one we ship. A private Postgres and a private
// redis-server (the Redis limiter, on Redis server time), the gateway in its own process.
// How each key is checked (never over, never under, total as the sliding log allows) is in
// test/helpers/soak-rate.ts.
import t from 'tap';
import { checkKey, formatRate, runRateExact, slidingLogAllows } from '../helpers/soak-rate.js';

t.setTimeout(120_000); // ~8 s set-up, 63 s of traffic, teardown

t.test('the checker itself: it catches a 61st request in a window and a wrong refusal', async (t) => {
  const ok = Array.from({ length: 60 }, (_, i) => ({ sendMs: i * 10, recvMs: i * 10 + 2, status: 200, code: '' }));
  const refused = { sendMs: 700, recvMs: 702, status: 429, code: 'rate_limit_exceeded' };
  const good = checkKey([...ok, refused], 60, 60_000);
  t.same([good.accepted, good.expected, good.overQuota, good.wronglyRefused], [60, 60, 0, 0]);
  const over = checkKey([...ok, { ...refused, status: 200, code: '' }], 60, 60_000);
  t.ok(over.overQuota > 0, 'a 61st accepted request inside 60 s is caught');
  const under = checkKey([...ok.slice(0, 59), refused], 60, 60_000);
  t.equal(under.wronglyRefused, 1, 'a refusal with 59 in the window is caught');
  t.equal(slidingLogAllows([0, 1, 2, 60_000, 60_001, 60_002, 60_003], 3, 60_000), 6, 'slots free one window after their own request');
});

t.test('10 keys at 100 requests/s for 63 s: exactly the quota in every 60-s span', async (t) => {
  // Exactness is the behaviour here, not Redis's timeout (store-faults tests keep the shipped 200 ms):
  // on a two-core machine running other suites, a gateway tick longer than 200 ms between a
  // command's send and its reply made a 503 rate_limiter_unavailable the sliding log never caused.
  const r = await runRateExact({ keys: 10, perKeyPerS: 100, durationMs: 63_000, redisCommandTimeoutMs: 2_000, log: (m) => t.comment(m) });
  for (const l of formatRate(r)) t.comment(l);
  t.equal(r.quota, 60, 'the shipped quota');
  t.ok(r.sent >= 10 * 100 * 63 * 0.9, `${r.sent} requests offered`);
  r.perKey.forEach((k, i) => {
    t.equal(k.accepted, 120, `key ${i}: 120 accepted = 60 in the first window + 60 after it rolled`);
    t.equal(k.accepted, k.expected, `key ${i}: what the sliding log allows for the requests offered`);
    t.equal(k.overQuota, 0, `key ${i}: no 60-s span with more than 60`);
    t.equal(k.wronglyRefused, 0, `key ${i}: no refusal while the window had room`);
    t.same(k.other, {}, `key ${i}: nothing but 200 and 429 rate_limit_exceeded`);
  });
  t.same(r.failures, []);
});
