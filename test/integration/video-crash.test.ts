// Real crashes: a gateway in a child process (its own job runner on real timers) is SIGKILLed while
// a vendor create is in flight, and while it is downloading a finished result. This process then
// plays "the instance that survived": once the dead one's leases lapse, tick() fails and refunds
// the first (whether the vendor made a task is unknown) and finishes and settles the second.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { dirname, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { holdNextCreate } from '../helpers/generations.js';
import { TS_LOADER } from '../helpers/product-code.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { RENDER_MS, rowOf, runToEnd, startVideoHarness, walletOf } from './video-harness.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const src = (p: string) => pathToFileURL(resolve(root, 'src', p)).href;

const CHILD = `
import { loadConfig } from '${src('config/config.js')}';
import { createGateway } from '${src('gateway.js')}';
import { silentLogger } from '${src('util/log.js')}';
const cfg = loadConfig({}, JSON.parse(process.env.CHILD_CONFIG));
const fetch = { allowList: new Set(JSON.parse(process.env.CHILD_ALLOW)), ca: process.env.CHILD_CA };
const gw = await createGateway(cfg, { skipMigrate: true, log: silentLogger, jobs: { owner: 'child-instance', fetch, runner: { timers: true } } });
process.stdout.write('READY ' + gw.url + '\\n');
`;

const h = await startVideoHarness(t);
const pool = h.services.pool;
const LEASE_MS = h.config.jobs.leaseMs;

async function startChild(t: Test): Promise<{ child: ChildProcess; url: string }> {
  const tsLoader = ['--import', TS_LOADER];
  const config = {
    ...h.config,
    server: { ...h.config.server, port: 0 },
    // Real time in the child: poll every 50 ms so it reaches the download quickly.
    jobs: { ...h.config.jobs, tickMs: 20, pollIntervalMs: 50, maxPollIntervalMs: 100 },
  };
  const child = spawn(process.execPath, [...tsLoader, '--input-type=module', '-e', CHILD], {
    cwd: root,
    env: {
      ...process.env,
      CHILD_CONFIG: JSON.stringify(config),
      CHILD_ALLOW: JSON.stringify([...h.deps.fetch.allowList!]),
      CHILD_CA: h.deps.fetch.ca,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  const url = await new Promise<string>((resolveUrl, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /READY (\S+)/.exec(out);
      if (m) resolveUrl(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`child exited (${code}) before it was ready: ${out}`)));
  });
  return { child, url };
}

async function kill(child: ChildProcess): Promise<void> {
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

t.test('SIGKILL during the vendor create: failed and refunded after the lease lapses, no second task', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const { child, url } = await startChild(t);
  const create = holdNextCreate(h.sim);
  const creates = h.sim.creates.length;
  const submit = request(url + '/v1/video/generations', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'clip-2.0-fast', prompt: 'killed mid-create' }),
  }).then(
    (r) => r.body.text().then(() => r.statusCode),
    (e: Error) => e,
  );
  await create.entered;
  await kill(child);
  create.release();
  const outcome = await submit;
  t.ok(outcome instanceof Error, 'the client saw the connection drop, not an answer');
  const rows = (await pool.query('SELECT id, state, lease_owner FROM generations WHERE account_id = $1', [accountId])).rows;
  t.equal(rows.length, 1);
  t.same([rows[0].state, rows[0].lease_owner], ['creating', 'child-instance'], 'the dead instance left it mid-create under its lease');
  t.equal((await walletOf(h, accountId)).held, (await rowOf(h, rows[0].id)).hold_ink, 'the hold is still open');

  await h.engine.tick();
  t.equal((await rowOf(h, rows[0].id)).state, 'creating', 'not taken while the lease could still be live');
  h.advance(LEASE_MS + 1_000);
  await h.engine.tick();
  const g = (await h.get(key, rows[0].id)).json;
  t.equal(g.status, 'failed');
  t.equal(g.error.code, 'provider_failed');
  t.equal(g.ink_charged, 0);
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 }, 'refunded in full');
  t.equal(h.sim.creates.length, creates + 1, 'recovery did not start a second task');
  const next = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'next' });
  t.equal(next.status, 202, 'the slot is free again');
  t.equal((await runToEnd(h, key, next.json.id)).status, 'succeeded');
  await assertLedgerInvariant(t, pool);
});

t.test('SIGKILL mid-download: another instance downloads again and settles once', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const { child, url } = await startChild(t);
  const r = await request(url + '/v1/video/generations', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'clip-2.0-fast', prompt: 'killed mid-download', duration: 6 }),
  });
  const g = (await r.body.json()) as { id: string; ink_reserved: number };
  t.equal(r.statusCode, 202);
  let entered!: () => void;
  const inDownload = new Promise<void>((res) => (entered = res));
  h.sim.beforeDownload = () => {
    entered();
    return new Promise<void>(() => undefined); // never sends: the child is killed while it waits
  };
  h.advance(RENDER_MS + 1_000); // the vendor finishes; the child's engine polls and starts the download
  await inDownload;
  await kill(child);
  h.sim.beforeDownload = undefined;
  let row = await rowOf(h, g.id);
  t.ok(['queued', 'running'].includes(row.state), `left ${row.state}`);
  t.equal(row.lease_owner, 'child-instance');
  t.equal(row.hold_state, 'open');
  const downloads = h.sim.downloads();
  h.advance(LEASE_MS + 1_000);
  await pool.query('UPDATE generations SET next_poll_at = least(next_poll_at, $2) WHERE id = $1', [g.id, new Date(h.sim.now())]);
  t.equal(await h.engine.tick(), 1);
  row = await rowOf(h, g.id);
  t.equal(row.state, 'succeeded');
  t.equal(row.hold_state, 'settled');
  t.equal(row.ledger_charged, g.ink_reserved);
  t.equal(h.sim.downloads(), downloads + 1, 'downloaded again by the survivor');
  t.same(await walletOf(h, accountId), { balance: 1_000 - g.ink_reserved, held: 0, charged: g.ink_reserved });
  const c = await h.content(key, g.id);
  t.equal(c.status, 302);
  await assertLedgerInvariant(t, pool);
});
