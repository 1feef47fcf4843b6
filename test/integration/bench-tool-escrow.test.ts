// `npm run bench` end to end for the escrow scenarios (stream saturation, many tenants, durability
// modes), for real but tiny, with every billing gateway's ledger audited after the load.
import t from 'tap';
import { bench, checkRatiosAndGoals, checkRun, checkStopped } from '../helpers/bench-tool.js';
import { testRedisUrl } from '../helpers/env.js';

// Several bench runs, each starting the simulators, gateways and the plain proxy as processes:
// more than tap's default per-file limit on a busy machine (the limit is there to catch hangs).
t.setTimeout(240_000);

t.test('stream saturation, many tenants and durability on the messages lane, with the ledger audited', async (t) => {
  const { rep, pid } = await bench(t, [
    '--seconds',
    '1',
    '--warmup-seconds',
    '0.2',
    '--scenario',
    'stream-saturation,many-tenants,durability',
    '--lane',
    'messages',
    '--connections',
    '6',
    '--tenant-accounts',
    '5',
    '--tenant-keys',
    '20',
    '--json',
  ]);
  const kinds = rep.runs.map((r) => `${r.scenario}/${r.kind}/${r.connections}/${r.target}`);
  for (const want of [
    'stream-saturation/stream/6/direct',
    'stream-saturation/stream/6/plain proxy',
    'stream-saturation/stream/6/inkgate',
    'stream-saturation/stream/6/inkgate (billing off)',
    'many-tenants/request/6/inkgate (one key)',
    'many-tenants/request/6/inkgate (many tenants)',
    'many-tenants/stream/6/inkgate (many tenants)',
    'durability/request/6/inkgate',
    'durability/request/6/inkgate (sync)',
    'durability/stream/6/inkgate (sync)',
  ])
    t.ok(kinds.includes(want), `run ${want}`);
  for (const r of rep.runs) checkRun(t, r);
  checkRatiosAndGoals(t, rep);
  t.equal(rep.tenantsLimiter, testRedisUrl ? 'redis' : 'in-process', 'the many-tenants gateway uses the configured limiter');
  // Every billing gateway is audited after the load: nothing open, nothing logged.
  t.same(rep.audits.map((a) => a.process).sort(), ['inkgate', 'inkgate (sync)', 'inkgate (tenants)']);
  for (const a of rep.audits) {
    t.equal(a.openHolds, 0, `${a.process}: no hold left open`);
    t.equal(a.invariantViolations, 0, `${a.process}: the ledger invariant holds`);
    t.equal(a.errorsLogged, 0, `${a.process}: no error logged ${a.firstErrors.join(' ')}`);
    t.ok(a.requests > 0, `${a.process}: requests recorded (${a.requests})`);
  }
  const tenants = rep.audits.find((a) => a.process === 'inkgate (tenants)')!;
  t.equal(tenants.keysUsed, 21, 'the many-tenants runs spread over all 20 keys (and the one-key run used its own)');
  const billedRequests = rep.runs.filter((r) => r.target === 'inkgate (one key)' || r.target === 'inkgate (many tenants)').reduce((n, r) => n + r.requests, 0);
  t.ok(tenants.requests >= billedRequests, `every measured answer was billed (${tenants.requests} >= ${billedRequests})`);
  for (const goal of [
    'stream saturation: billing on vs billing off',
    'many tenants vs one key (non-streaming)',
    'Postgres CPU per billed stream (saturation)',
  ]) {
    t.ok(
      rep.goals.some((g) => g.goal === goal && g.value !== null),
      `goal measured: ${goal}`,
    );
  }
  t.ok(
    rep.goals.some((g) => g.lane === 'all' && g.goal === 'inkgate (sync): holds left open after the bench' && g.pass === true),
    'audit goals reported',
  );
  await checkStopped(t, rep, pid);
});
