// `npm run bench -- --scenario engines` end to end, for real but tiny: the plain proxy and one
// billing gateway per HTTP engine (server.engine uws and node; node alone where uWS does not load
// on this Node) in one run, each gateway serving with the engine it asked for, its ledger audited
// after the load, and a CPU profile of every run's target with --cpu-prof. Checks the figures are
// sane and consistent with each other, not how fast anything is.
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { bench, checkRatiosAndGoals, checkRun, checkStopped } from '../helpers/bench-tool.js';
import { loadUws } from '../../src/server/uws-loader.js';

// Starting the simulators, two gateways and the plain proxy as processes takes a while on a busy machine.
t.setTimeout(240_000);

t.test('engines on the responses lane: each engine and the plain proxy, with CPU profiles', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'bench-engines-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const { rep, pid } = await bench(t, [
    '--seconds',
    '1',
    '--warmup-seconds',
    '0.2',
    '--scenario',
    'engines',
    '--lane',
    'responses',
    '--connections',
    '4',
    '--cpu-prof',
    dir,
    '--json',
  ]);
  const uws = loadUws().ok;
  const engines = uws ? ['uws', 'node'] : ['node'];
  const gateways = engines.map((e) => `inkgate (${e})`);
  t.same(
    rep.engines,
    engines.map((e) => ({ process: `inkgate (${e})`, engine: e })),
    'each gateway serves with the engine it asked for',
  );
  if (uws) t.same(rep.notes, []);
  else t.match(rep.notes, [/the uws engine cannot run here.*node engine only/], 'says uws could not run');
  t.notOk(
    rep.processes.some((p) => p.name === 'inkgate' || p.name === 'inkgate (billing off)'),
    'no shared gateway started for this scenario alone',
  );
  const kinds = rep.runs.map((r) => `${r.kind}/${r.connections}/${r.target}`);
  const want = [
    ...['direct', 'plain proxy', ...gateways].flatMap((g) => [`request/1/${g}`, `stream/1/${g}`]),
    ...['plain proxy', ...gateways].flatMap((g) => [`request/4/${g}`, `stream/4/${g}`]),
  ];
  t.same([...kinds].sort(), [...want].sort(), 'every engine and the plain proxy under load; the simulator called directly too at concurrency 1');
  for (const r of rep.runs) checkRun(t, r);
  checkRatiosAndGoals(t, rep);
  for (const g of gateways) {
    t.ok(
      rep.ratios.some((q) => q.of === g && q.vs === 'plain proxy' && q.connections === 4 && q.kind === 'stream' && q.metric === 'own.cpuUsPerRequest'),
      `${g}: CPU per stream against the plain proxy`,
    );
  }
  const engineGoals = rep.goals.filter((g) => g.lane === 'responses' && g.goal.startsWith('engines:'));
  for (const g of engineGoals) {
    const measured = g.goal.includes('uws') ? uws : true;
    t.equal(g.value !== null, measured, `${g.goal}: ${measured ? 'measured' : 'not measured (no uws)'}`);
  }
  const added = engineGoals.find((g) => g.goal === "engines: node added latency c=1 p50 over the plain proxy's (non-streaming)")!;
  const c1 = (target: string) => rep.runs.find((r) => r.kind === 'request' && r.connections === 1 && r.target === target)!;
  t.equal(added.value, c1('inkgate (node)').latency.p50Ms - c1('plain proxy').latency.p50Ms, "added latency over the proxy's = gateway p50 - proxy p50");
  t.equal(engineGoals.find((g) => g.goal === 'engines: failed requests, every run')!.value, 0);
  // Every billing gateway audited: nothing open, nothing broken, nothing logged.
  t.same(rep.audits.map((a) => a.process).sort(), [...gateways].sort());
  for (const a of rep.audits) {
    t.equal(a.openHolds, 0, `${a.process}: no hold left open`);
    t.equal(a.invariantViolations, 0, `${a.process}: the ledger invariant holds`);
    t.equal(a.errorsLogged, 0, `${a.process}: no error logged ${a.firstErrors.join(' ')}`);
  }
  // One profile per run, of the target's own process, over its window.
  t.same(readdirSync(dir).sort(), rep.runs.map((r) => r.cpuProfile!.slice(dir.length + 1)).sort(), 'one profile per run');
  for (const r of rep.runs.filter((x) => x.connections > 1)) {
    const p = JSON.parse(readFileSync(r.cpuProfile!, 'utf8')) as { nodes: unknown[]; samples: number[]; startTime: number; endTime: number };
    t.ok(p.nodes.length > 10 && p.samples.length > 10 && p.endTime > p.startTime, `${r.id}: a CPU profile with samples`);
  }
  await checkStopped(t, rep, pid);
});
