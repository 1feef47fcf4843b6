// Video and image jobs over vendor pools, with real processes: the gateway, the Ark and Gemini
// simulators, and a first deployment that refuses connections. A task is created on the deployment
// that answers, its name is stored on the row, and every poll and the download go to that one
// (after the submits, a counting server takes the refusing deployment's port, so a stray poll would
// be seen). Metrics, /readyz and `inkgate vendor list` show the Ark deployments. With every deployment down a video submit answers 503 provider_unavailable with
// Retry-After and holds nothing. Gemini has no vendor task (the call is the whole generation), so
// an image records the deployment that made it and nothing else goes back to it.
import { createServer } from 'node:http';
import t, { type Test } from 'tap';
import { freePort } from '../../src/util/process.js';
import { startAdminServer } from '../../src/ops/admin-server.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { seriesValue } from '../helpers/prometheus.js';
import { operatorCli } from '../helpers/operator-cli.js';
import { refusingUrl } from '../helpers/pool-vendors.js';
import { runToEnd as runImageToEnd, startImageHarness } from './image-harness.js';
import { rowOf, runToEnd, startVideoHarness, walletOf } from './video-harness.js';

/** Listens on `port` (127.0.0.1) and counts every request, answering 404. */
async function countingServer(t: Test, port: number): Promise<{ count: () => number }> {
  let n = 0;
  const server = createServer((req, res) => {
    n++;
    req.resume();
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"code":"NotFound","message":"counting server"}}');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return { count: () => n };
}

t.test('video: the create moves off a refusing deployment; polls and the download stay on the one that created the task', async (t) => {
  const downPort = await freePort();
  // http results on the simulator's API origin: the download then goes through the creating
  // deployment's own client (downloadOwnResult), which another deployment's client would not take.
  const h = await startVideoHarness(t, {
    sim: { tls: undefined },
    // Weight 100 to 1: nearly every create tries the refusing one first (for three submits never to
    // try it is about a one-in-a-million draw).
    deployments: (url, apiKey) => [
      { name: 'ark-down', baseUrl: `http://127.0.0.1:${downPort}/api/v3`, apiKey, weight: 100 },
      { name: 'ark-up', baseUrl: url, apiKey },
    ],
  });
  const pool = h.deps.ark!;
  // One account per submit: an account runs at most two generations at once.
  const jobs: Array<{ key: string; accountId: string; id: string }> = [];
  for (let i = 0; i < 3; i++) {
    const { key, accountId } = await h.funded(10_000);
    const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: `a lighthouse ${i}` });
    t.equal(r.status, 202, `submit ${i} accepted`);
    jobs.push({ key, accountId, id: r.json.id });
  }
  const ids = jobs.map((j) => j.id);
  t.equal(h.sim.creates.length, 3, 'each task created once, on the healthy deployment');
  t.ok(pool.byName('ark-down')!.moved.connect >= 1, `tries moved off the refusing deployment: ${pool.byName('ark-down')!.moved.connect}`);
  t.equal(pool.byName('ark-up')!.requests, 3, 'three creates reached the healthy deployment');
  const { body: metrics } = await h.tg.gw.ops.metrics.scrape();
  const figure = (series: string) => seriesValue(metrics, series);
  t.equal(figure('inkgate_vendor_requests_total{vendor="ark",deployment="ark-up"}'), 3, 'metrics: the creates, by deployment');
  t.ok(figure('inkgate_vendor_tries_moved_total{vendor="ark",deployment="ark-down",reason="connect"}') >= 1, 'metrics: tries moved off the refusing one');
  const ready = await h.tg.gw.ops.readiness.check();
  t.same(
    ready.vendors.ark?.map((d) => d.name),
    ['ark-down', 'ark-up'],
    '/readyz lists the Ark deployments',
  );
  const admin = await startAdminServer({ host: '127.0.0.1', port: 0, metrics: h.tg.gw.ops.metrics, readiness: h.tg.gw.ops.readiness, log: h.services.log });
  t.teardown(() => admin.close());
  const listed = await operatorCli(h.config).cli('vendor', 'list', '--admin', admin.url);
  t.same(
    listed.filter((d: { vendor: string }) => d.vendor === 'ark').map((d: Record<string, unknown>) => [d.name, d.weight, d.state === 'unknown']),
    [
      ['ark-down', 100, false],
      ['ark-up', 1, false],
    ],
    '`inkgate vendor list` shows both, with the instance state',
  );
  const tasks: string[] = [];
  for (const id of ids) {
    const row = await rowOf(h, id);
    t.equal(row.vendor_deployment, 'ark-up', `${id} names the deployment that created it`);
    tasks.push(row.vendor_task_id);
  }

  // From here on the refusing deployment's port answers (and counts): a poll sent there would be seen.
  const stray = await countingServer(t, downPort);
  for (const j of jobs) t.equal((await runToEnd(h, j.key, j.id)).status, 'succeeded', `${j.id} succeeded`);
  t.equal(stray.count(), 0, 'no poll, cancel or download went to the other deployment');
  const gets = tasks.map((task) => h.sim.tasks.get(task)?.gets ?? 0);
  t.ok(
    gets.every((n) => n >= 2),
    `every task was polled on the deployment that created it (${gets.join(', ')})`,
  );
  t.equal(h.sim.downloads(), 3, 'each result downloaded once, from the creating deployment');
  for (const j of jobs) {
    const wallet = await walletOf(h, j.accountId);
    t.equal(wallet.held, 0, 'nothing held');
    t.ok(wallet.charged > 0 && wallet.balance === 10_000 - wallet.charged, `charged once: ${wallet.charged}`);
  }
  await assertLedgerInvariant(t, h.services.pool);
});

t.test('video: every deployment down answers 503 provider_unavailable with Retry-After, and holds nothing', async (t) => {
  const down = [await refusingUrl(), await refusingUrl()];
  const h = await startVideoHarness(t, {
    deployments: (_url, apiKey) => down.map((u, i) => ({ name: `down-${i}`, baseUrl: `${u}/api/v3`, apiKey })),
  });
  const { key, accountId } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'provider_unavailable');
  t.ok(Number(r.headers['retry-after']) >= 1, `Retry-After: ${r.headers['retry-after']}`);
  t.equal(h.sim.creates.length, 0, 'no task anywhere');
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 }, 'nothing held, nothing charged');
  const rows = await h.services.pool.query('SELECT state, vendor_deployment FROM generations WHERE account_id = $1', [accountId]);
  t.same(rows.rows, [{ state: 'voided', vendor_deployment: null }]);
  const tried = h.deps.ark!.members.map((m) => m.moved.connect);
  t.same(tried, [1, 1], 'each deployment tried once');
  await assertLedgerInvariant(t, h.services.pool);
});

t.test('image: the call moves off a refusing deployment; the row names the one that made the image', async (t) => {
  const down = await refusingUrl();
  const h = await startImageHarness(t, {
    deployments: (url, apiKey) => [
      { name: 'gemini-down', baseUrl: `${down}/v1beta`, apiKey, weight: 100 },
      { name: 'gemini-up', baseUrl: url, apiKey },
    ],
  });
  const pool = h.deps.gemini!;
  const jobs: Array<{ key: string; accountId: string; id: string }> = [];
  for (let i = 0; i < 3; i++) {
    const { key, accountId } = await h.funded(10_000);
    const r = await h.submit(key, { model: 'image-1', prompt: `a lighthouse ${i}` });
    t.equal(r.status, 202, `submit ${i} accepted`);
    jobs.push({ key, accountId, id: r.json.id });
  }
  for (const j of jobs) t.equal((await runImageToEnd(h, j.key, j.id)).status, 'succeeded', `${j.id} succeeded`);
  t.equal(h.sim.calls.length, 3, 'each image made once');
  t.ok(pool.byName('gemini-down')!.moved.connect >= 1, `tries moved off the refusing deployment: ${pool.byName('gemini-down')!.moved.connect}`);
  for (const j of jobs) {
    t.equal((await rowOf(h, j.id)).vendor_deployment, 'gemini-up', `${j.id} names the deployment that made it`);
    t.equal((await walletOf(h, j.accountId)).held, 0, 'nothing held');
  }
  await assertLedgerInvariant(t, h.services.pool);
});

t.test('video: a row with no deployment name polls the first deployment; a name no longer configured fails and refunds', async (t) => {
  const h = await startVideoHarness(t);
  const legacy = await h.funded(1_000);
  const gone = await h.funded(1_000);
  const a = await h.submit(legacy.key, { model: 'clip-2.0-fast', prompt: 'from before pooled jobs' });
  const b = await h.submit(gone.key, { model: 'clip-2.0-fast', prompt: 'its deployment was removed' });
  t.equal((await rowOf(h, a.json.id)).vendor_deployment, new URL(h.sim.url).host, 'a single URL: the deployment is named after its host');
  // As a row written before the column existed, and one whose deployment left the configuration.
  await h.services.pool.query('UPDATE generations SET vendor_deployment = NULL WHERE id = $1', [a.json.id]);
  await h.services.pool.query("UPDATE generations SET vendor_deployment = 'removed-region' WHERE id = $1", [b.json.id]);
  t.equal((await runToEnd(h, legacy.key, a.json.id)).status, 'succeeded', 'no name: polled on the first deployment');
  const failed = await runToEnd(h, gone.key, b.json.id);
  t.equal(failed.status, 'failed');
  t.equal(failed.error.code, 'provider_failed');
  t.match(failed.error.message, /no longer configured/);
  t.same(await walletOf(h, gone.accountId), { balance: 1_000, held: 0, charged: 0 }, 'refunded in full');
  t.equal(h.sim.tasks.get((await rowOf(h, b.json.id)).vendor_task_id)?.gets, 0, 'never polled elsewhere');
  await assertLedgerInvariant(t, h.services.pool);
});
