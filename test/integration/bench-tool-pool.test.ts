// `npm run bench -- --scenario pool` end to end, for real but tiny: the same billing gateway with one
// vendor deployment and with two (a second pair of simulators on other ports of the same process,
// the base URLs as one comma-separated list), on both text lanes, under load; the second simulators
// take traffic only from the gateway that has two deployments; the ledgers are audited after the load; the pool goals are the
// difference of the reported CPU figures. Checks the figures are consistent, not how fast anything is.
import t from 'tap';
import { bench, checkRatiosAndGoals, checkRun, checkStopped } from '../helpers/bench-tool.js';

// Starting the simulators and two gateways as processes takes a while on a busy machine.
t.setTimeout(240_000);

const ONE = 'inkgate (one deployment)';
const TWO = 'inkgate (two deployments)';

t.test('pool: one deployment against two, both lanes, requests and streams', async (t) => {
  const { rep, pid } = await bench(t, ['--seconds', '1', '--warmup-seconds', '0.2', '--scenario', 'pool', '--connections', '4', '--json']);
  t.notOk(
    rep.processes.some((p) => p.name === 'inkgate' || p.name === 'inkgate (billing off)'),
    'no shared gateway started for this scenario alone',
  );
  const kinds = rep.runs.map((r) => `${r.lane}/${r.kind}/${r.connections}/${r.target}`);
  const want = ['messages', 'responses'].flatMap((lane) => ['request', 'stream'].flatMap((kind) => [ONE, TWO].map((g) => `${lane}/${kind}/4/${g}`)));
  t.same(kinds, want, 'one deployment then two, requests then streams, on each lane');
  for (const r of rep.runs) {
    checkRun(t, r);
    // Requests each simulator received in the window: Anthropic, OpenAI, then the second pair.
    const served = r.processes.find((p) => p.name === 'simulators')!.served!;
    t.equal(served.length, 4, `${r.id}: four simulators, two per vendor`);
    const [first, second] = r.lane === 'messages' ? [served[0]!, served[2]!] : [served[1]!, served[3]!];
    if (r.target === ONE) t.equal(served[2]! + served[3]!, 0, `${r.id}: the second pair gets nothing from the one-deployment gateway`);
    // Chosen among two by requests in flight: each deployment takes a share of the window's load.
    else t.ok(first > 0 && second > 0, `${r.id}: both deployments answered (${first} and ${second})`);
    t.equal(r.processes.find((p) => p.name === TWO)!.served, null, `${r.id}: a gateway has no served counts (only the simulators do)`);
  }
  checkRatiosAndGoals(t, rep);
  for (const lane of ['messages', 'responses'] as const) {
    for (const [kind, mode] of [
      ['request', 'non-streaming'],
      ['stream', 'streaming'],
    ] as const) {
      const goal = rep.goals.find((g) => g.lane === lane && g.goal === `pool: CPU per request, two deployments less one (${mode})`)!;
      const run = (target: string) => rep.runs.find((r) => r.lane === lane && r.kind === kind && r.target === target)!;
      t.equal(goal.value, run(TWO).own!.cpuUsPerRequest - run(ONE).own!.cpuUsPerRequest, `${lane} ${mode}: the goal is the difference of the reported figures`);
      t.equal(goal.limit, 2);
      t.ok(
        rep.ratios.some((q) => q.lane === lane && q.kind === kind && q.of === TWO && q.vs === ONE && q.metric === 'own.cpuUsPerRequest'),
        `${lane} ${mode}: CPU per request, two deployments against one`,
      );
    }
  }
  // Both billing gateways audited: nothing open, nothing broken, nothing logged.
  t.same(rep.audits.map((a) => a.process).sort(), [ONE, TWO]);
  for (const a of rep.audits) {
    t.equal(a.openHolds, 0, `${a.process}: no hold left open`);
    t.equal(a.invariantViolations, 0, `${a.process}: the ledger invariant holds`);
    t.equal(a.errorsLogged, 0, `${a.process}: no error logged ${a.firstErrors.join(' ')}`);
  }
  await checkStopped(t, rep, pid);
});
