// The vendor pool's parts on their own: the weighted choice that prefers the deployment with fewer
// requests in flight, the cooldown state machine on an injected clock, and the retry rule (which
// failure points and statuses may move a try to another deployment).
import t from 'tap';
import type { Dispatcher } from 'undici';
import type { VendorDeployment } from '../../src/config/config.js';
import { DeploymentHealth } from '../../src/vendors/pool/cooldown.js';
import { keyPrefixOf, VendorPool } from '../../src/vendors/pool/pool.js';
import { movableError, movableStatus } from '../../src/vendors/pool/retry-rule.js';
import { tryDeployments } from '../../src/vendors/pool/try-loop.js';

const COOL = { failures: 3, minMs: 1000, maxMs: 8000 };
const dep = (name: string, weight = 1, maxConcurrent: number | null = null): VendorDeployment => ({
  name,
  baseUrl: `http://127.0.0.1:${1000 + name.length}`,
  apiKey: `sk-${name}-secret-key`,
  weight,
  maxConcurrent,
});

/** A pool whose clock the test moves. */
function poolOf(deployments: VendorDeployment[], random?: () => number) {
  const clock = { now: 0 };
  const changes: string[] = [];
  const pool = new VendorPool('anthropic', deployments, (d) => d.name, {
    cooldown: COOL,
    clock: () => clock.now,
    random,
    onChange: (c, m) => changes.push(`${m.name}:${c}`),
  });
  return { pool, clock, changes };
}

t.test('weights are honoured over many picks when nothing is in flight', async (t) => {
  const { pool } = poolOf([dep('a', 1), dep('bb', 3), dep('ccc', 6)]);
  const counts = [0, 0, 0];
  const picks = 100_000;
  for (let i = 0; i < picks; i++) counts[pool.pick(0)]!++;
  // Expected shares 0.1, 0.3, 0.6; a binomial's standard deviation here is under 0.0016, so 0.01 is over 6 of them.
  for (const [i, share] of [0.1, 0.3, 0.6].entries()) t.ok(Math.abs(counts[i]! / picks - share) < 0.01, `member ${i}: ${counts[i]! / picks} near ${share}`);
});

t.test('of the two drawn, the one with fewer requests in flight is taken', async (t) => {
  const { pool } = poolOf([dep('a'), dep('bb')]);
  for (let i = 0; i < 5; i++) pool.begin(0);
  const counts = [0, 0];
  for (let i = 0; i < 10_000; i++) counts[pool.pick(0)]!++;
  // Only a draw of the loaded one twice picks it: a quarter of the time.
  t.ok(counts[1]! / 10_000 > 0.7 && counts[1]! / 10_000 < 0.8, `the idle one taken ${counts[1]} of 10000`);
  const fixed = poolOf([dep('a', 1, 1), dep('bb')], () => 0.1).pool; // both draws land on a
  t.equal(fixed.pick(0), 0, 'both draws on one member: it is taken');
  fixed.begin(0);
  t.equal(fixed.pick(0), 1, 'both draws on a full member: the scan finds another');
  fixed.end(0);
  t.equal(fixed.pick(0b01), 1, 'a member already tried is never picked again');
  t.equal(fixed.pick(0b11), -1, 'every member tried: none');
});

t.test('maxConcurrent: a full deployment is passed over', async (t) => {
  const { pool } = poolOf([dep('a', 1, 1), dep('bb', 1, 1)]);
  pool.begin(0);
  for (let i = 0; i < 100; i++) t.equal(pool.pick(0), 1);
  pool.begin(1);
  t.equal(pool.pick(0), -1, 'both full');
});

t.test('the cooldown state machine', async (t) => {
  const h = new DeploymentHealth(COOL);
  t.equal(h.failed(0), false);
  t.equal(h.failed(0), false);
  t.equal(h.answered(), false, 'an answer resets the run of failures');
  t.equal(h.failed(0), false);
  t.equal(h.failed(0), false);
  t.equal(h.failed(100), true, 'the third failure in a row cools it down');
  t.same([h.state, h.reopensAtMs, h.reason], ['cooling', 1100, 'failures']);
  t.equal(h.usable(1099), false, 'skipped until the back-off ends');
  t.equal(h.usable(1100), true, 'then half-open');
  t.equal(h.state, 'half_open');
  h.started();
  t.equal(h.usable(1100), false, 'one trial request only');
  t.equal(h.failed(1200), true, 'the trial fails: cooling again');
  t.equal(h.reopensAtMs, 3200, 'for twice as long');
  t.ok(h.usable(3200));
  h.started();
  t.equal(h.failed(3200), true);
  t.equal(h.reopensAtMs, 7200, 'doubled again');
  t.ok(h.usable(7200));
  h.started();
  t.equal(h.failed(7200), true);
  t.equal(h.reopensAtMs, 15_200, 'capped at maxMs');
  t.equal(h.answered(), false, 'an answer to a request sent earlier does not end a cooldown');
  t.ok(h.usable(15_200));
  h.started();
  t.equal(h.answered(), true, 'the trial answered: ready again');
  t.equal(h.state, 'ready');
  t.equal(h.failed(20_000), false, 'and the run of failures starts over');

  const r = new DeploymentHealth(COOL);
  t.equal(r.retryAfter(0, 30_000), true, 'Retry-After cools it at once');
  t.same([r.state, r.reopensAtMs, r.reason], ['cooling', 30_000, 'retry_after']);
  t.equal(r.retryAfter(10, 5000), false, 'a shorter one later does not shorten it');
  t.equal(r.reopensAtMs, 30_000);
  t.equal(r.usable(29_999), false);
  t.equal(r.usable(30_000), true);
});

t.test('a pool reports its changes, counts its cooldowns and gives the soonest reopening', async (t) => {
  const { pool, clock, changes } = poolOf([dep('a'), dep('bb')]);
  pool.retryAfter(0, 30_000);
  for (let i = 0; i < 3; i++) pool.failed(1);
  t.same(changes, ['a:cooling', 'bb:cooling']);
  t.same(
    pool.members.map((m) => m.cooldowns),
    [
      { retry_after: 1, failures: 0 },
      { retry_after: 0, failures: 1 },
    ],
  );
  t.equal(pool.pick(0), -1, 'every deployment cooling');
  clock.now = 200;
  t.equal(pool.retryAfterS(), 1, "the failing one's back-off (800 ms left) rounds up to 1 s");
  clock.now = 1000;
  t.equal(pool.pick(0), 1, 'its back-off over: half-open');
  pool.begin(1);
  t.equal(pool.pick(0), -1, 'while its trial is out nothing else goes to it');
  pool.answered(1);
  t.same(changes.at(-1), 'bb:recovered');
  t.same(
    pool.view().map((v) => [v.name, v.state, v.reopensInS]),
    [
      ['a', 'cooling', 29],
      ['bb', 'ready', 0],
    ],
  );
  t.equal(keyPrefixOf('sk-ant-api03-abcdefghijklmnop'), 'sk-ant…', 'a few characters of a key, never the key');
  t.equal(keyPrefixOf('abc'), '…');
});

t.test('a pool of one is the single URL of before: always tried, never cooled', async (t) => {
  const { pool } = poolOf([dep('only')]);
  pool.retryAfter(0, 30_000);
  for (let i = 0; i < 10; i++) pool.failed(0);
  t.equal(pool.pick(0), 0);
  t.equal(pool.members[0]!.health.state, 'ready');
});

t.test('the retry rule: which failure points and statuses move a try', async (t) => {
  const moved: Array<[string, string | undefined]> = [
    ['ECONNREFUSED', 'connect'],
    ['ENOTFOUND', 'connect'],
    ['EHOSTUNREACH', 'connect'],
    ['UND_ERR_CONNECT_TIMEOUT', 'connect'],
    ['ECONNRESET', undefined],
    ['EPIPE', undefined],
    ['UND_ERR_SOCKET', undefined],
    ['UND_ERR_HEADERS_TIMEOUT', undefined],
    ['UND_ERR_BODY_TIMEOUT', undefined],
    ['UND_ERR_CLOSED', undefined],
  ];
  for (const [code, want] of moved) t.equal(movableError(Object.assign(new Error(code), { code })), want, `error ${code}`);
  const statuses: Array<[number, string | undefined]> = [
    [200, undefined],
    [400, undefined],
    [401, undefined],
    [403, undefined],
    [404, undefined],
    [413, undefined],
    [422, undefined],
    [429, 'status_429'],
    [500, undefined],
    [502, undefined],
    [503, 'status_503'],
    [504, undefined],
    [529, 'status_529'],
  ];
  for (const [status, want] of statuses) t.equal(movableStatus(status), want, `status ${status}`);
});

/** A vendor answer as undici gives it, for the loop's bookkeeping (the body is never read here). */
const answer = (statusCode: number, headers: Record<string, string> = {}) => {
  let dumped = false;
  const res = { statusCode, headers, body: { dump: () => ((dumped = true), Promise.resolve()) } } as unknown as Dispatcher.ResponseData;
  return { res, dumped: () => dumped };
};
const refused = () => Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });

t.test('the try loop: moves on the rule, stops at maxTries, answers none with the soonest reopening', async (t) => {
  const { pool } = poolOf([dep('a'), dep('bb'), dep('ccc')], () => 0); // every draw lands on a; the scan takes the rest in order
  const busy = answer(429, { 'retry-after': '30' });
  const script = new Map<string, () => Promise<Dispatcher.ResponseData>>([
    ['a', () => Promise.reject(refused())],
    ['bb', () => Promise.resolve(busy.res)],
    ['ccc', () => Promise.resolve(answer(200).res)],
  ]);
  const sent: string[] = [];
  const send = (m: { client: string }) => (sent.push(m.client), script.get(m.client)!());
  const limits = { maxTries: 3, deadlineMs: performance.now() + 60_000 };
  const r = await tryDeployments(pool, limits, send);
  t.same([r.kind, r.tries, sent], ['answer', 3, ['a', 'bb', 'ccc']]);
  t.ok(busy.dumped(), "the 429's body is drained, not read");
  t.same([pool.members[0]!.moved.connect, pool.members[1]!.moved.status_429], [1, 1]);
  t.same(
    pool.members.map((m) => m.inFlight),
    [0, 0, 1],
    'only the answering one stays in flight, until the caller ends it',
  );
  pool.end(2);
  t.equal(pool.members[1]!.health.state, 'cooling', 'the 429 with Retry-After cooled its deployment');

  sent.length = 0;
  const two = await tryDeployments(pool, { ...limits, maxTries: 1 }, send);
  t.same([two.kind, two.tries, sent], ['none', 1, ['a']], 'maxTries reached after a refused connection: none');

  script.set('ccc', () => Promise.resolve(answer(500).res));
  sent.length = 0;
  const five = await tryDeployments(pool, limits, send);
  t.same([five.kind, sent], ['answer', ['a', 'ccc']], 'a 500 is passed on, never moved (the vendor may have run)');
  if (five.kind === 'answer') pool.end(five.member);
  script.set('ccc', () => Promise.reject(Object.assign(new Error('reset'), { code: 'ECONNRESET' })));
  sent.length = 0;
  const reset = await tryDeployments(pool, limits, send);
  t.same([reset.kind, sent], ['error', ['ccc']], 'a reset after sending is not moved (and a, refused three times in a row, is cooling)');
  t.equal(pool.members[0]!.health.state, 'cooling');
  const late = await tryDeployments(pool, { maxTries: 3, deadlineMs: performance.now() - 1 }, send);
  t.equal(late.kind, 'none', 'no try starts past the deadline');
  t.same(
    pool.members.map((m) => m.inFlight),
    [0, 0, 0],
  );
});
