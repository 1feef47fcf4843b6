// A key's change is in force on every instance when `inkgate key revoke` returns. A gateway in a
// process of its own serves the key from an Ink lease (a hold from a lease reads no key row), then
// is stopped (SIGSTOP), so it can hear of nothing:
//   - heard late: the CLI waits, says on stderr that it waits for one instance, and returns only
//     once that instance, continued, has stopped holding from the lease; the very next request
//     there is refused 401 with nothing sent to the vendor and nothing held;
//   - never heard: an instance that stays stopped is waited for until its lease expires (its own
//     deadline is earlier), then the command returns; continued, the instance refuses the key.
// The command is the shipped binary, its exit status and output read as a script would.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { testDb } from '../helpers/db.js';
import { call } from '../helpers/gateway.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { cliEnvironment, INKGATE_BIN, operatorCli } from '../helpers/operator-cli.js';
import { procStat, signal } from '../helpers/proc.js';

const VENDOR_KEY = 'sk-ant-in-force';
/** A bound on each wait for something another process does; reaching it fails the test. */
const WAIT_MS = 60_000;

const db = await testDb(t);
await setLane(db.pool, 'messages', true);
const anthropic = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
t.teardown(() => anthropic.close());
const { operatorKey } = operatorCli(loadConfig({}, { db: { url: db.url, schema: db.schema } }));
const body = { model: 'sonnet', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] };

/** The gateway process and the CLI share one configuration, as an operator's instances and tools do. */
function settings(t: Test, lease: DeepPartial<Config['ledger']['lease']>) {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-in-force-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const shared = { db: { schema: db.schema }, ledger: { lease } };
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify(shared));
  const gateway: DeepPartial<Config> = {
    ...shared,
    dataDir: join(dir, 'gateway'),
    server: { host: '127.0.0.1', port: 0 },
    db: { url: db.url, schema: db.schema },
    redis: { url: null },
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: VENDOR_KEY } },
  };
  const cliEnv = cliEnvironment({ DATABASE_URL: db.url, INKGATE_CONFIG: file, INKGATE_DATA_DIR: join(dir, 'cli') });
  return { gateway, cliEnv };
}

/** The key's leases an instance may hold from (live, not drained, not expired). */
async function leasesHolding(keyId: string): Promise<number> {
  const r = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM leases WHERE key_id = $1 AND state = 'live' AND drained_at IS NULL AND expires_at > now()`,
    [keyId],
  );
  return r.rows[0]!.n;
}

/** Stops the process and resolves once /proc shows it stopped; continued at the end whatever happens. */
async function pause(t: Test, gw: GatewayProcess): Promise<() => void> {
  let continued = false;
  const resume = () => {
    if (!continued) signal(gw.pid, 'SIGCONT');
    continued = true;
  };
  t.teardown(resume);
  signal(gw.pid, 'SIGSTOP');
  // SIGSTOP is delivered asynchronously.
  for (const end = performance.now() + WAIT_MS; procStat(gw.pid)?.state !== 'T'; ) {
    if (performance.now() > end) throw new Error(`the gateway (pid ${gw.pid}) did not stop`);
    await new Promise((r) => setImmediate(r));
  }
  return resume;
}

interface RunningCli {
  /** Resolves once stderr holds `what` (rejects if the command ends first). */
  saysOnStderr(what: string): Promise<void>;
  ended: Promise<{ code: number | null; stdout: string; stderr: string }>;
  running(): boolean;
}

function startCli(t: Test, env: NodeJS.ProcessEnv, argv: string[]): RunningCli {
  const child = spawn(process.execPath, [INKGATE_BIN, ...argv], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  let listeners: Array<() => void> = [];
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
    for (const l of listeners) l();
  });
  let done = false;
  const ended = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`inkgate ${argv.join(' ')} did not end; stderr: ${stderr}`)), WAIT_MS);
    child.once('close', (code) => {
      clearTimeout(timer);
      done = true;
      for (const l of listeners) l();
      resolve({ code, stdout, stderr });
    });
  });
  return {
    ended,
    running: () => !done,
    saysOnStderr: (what) =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (stderr.includes(what)) resolve();
          else if (done) reject(new Error(`the command ended without saying ${JSON.stringify(what)}; stdout: ${stdout} stderr: ${stderr}`));
        };
        listeners = [...listeners, check];
        check();
      }),
  };
}

/** A key served once by the gateway, from a lease it took for it. */
async function servedFromLease(t: Test, gw: GatewayProcess) {
  const k = await operatorKey('in-force', 20);
  const ok = await call(gw.url, 'POST', '/v1/messages', { key: k.key, body });
  t.equal(ok.status, 200, 'served before the change');
  t.equal(await leasesHolding(k.keyId), 1, 'the instance holds a lease for the key');
  const wallet = async () => {
    const w = (await db.pool.query('SELECT held_grant_ink + held_payg_ink AS held, charged_ink FROM wallets WHERE account_id = $1', [k.accountId])).rows[0];
    return [Number(w.held), Number(w.charged_ink)];
  };
  return { ...k, charged: Number(ok.headers['x-service-ink-charged']), wallet };
}

async function assertRefused(t: Test, gw: GatewayProcess, k: Awaited<ReturnType<typeof servedFromLease>>) {
  const vendorCalls = anthropic.requestCount;
  const r = await call(gw.url, 'POST', '/v1/messages', { key: k.key, body });
  t.equal(r.status, 401, 'the next request there: 401');
  t.equal(r.json?.error?.code, 'invalid_api_key');
  t.equal(anthropic.requestCount, vendorCalls, 'nothing sent to the vendor');
  await gw.stop();
  t.same(await k.wallet(), [0, k.charged], 'nothing held, nothing charged after the revoke');
  await assertLedgerInvariant(t, db.pool);
}

t.test('an instance that hears late: the revoke returns once it stopped holding from the lease', async (t) => {
  const { gateway, cliEnv } = settings(t, { ttlMs: 60_000 });
  const gw = await startGatewayProcess(t, gateway);
  const k = await servedFromLease(t, gw);
  const resume = await pause(t, gw);
  const revoke = startCli(t, cliEnv, ['key', 'revoke', k.keyId, '--json']);
  await revoke.saysOnStderr('waiting for 1 instance(s) to stop holding Ink for key');
  t.ok(revoke.running(), 'the command waits while the instance has not heard');
  t.equal(await leasesHolding(k.keyId), 1, 'the lease is still live and undrained');
  resume();
  const r = await revoke.ended;
  t.equal(r.code, 0, 'exit 0 once the change is in force');
  t.match(JSON.parse(r.stdout), { id: k.keyId, revoked: true, in_force: true });
  t.equal(await leasesHolding(k.keyId), 0, 'no lease of the key left to hold from');
  await assertRefused(t, gw, k);
});

t.test('an instance that stays stopped: the revoke returns once its lease expired', async (t) => {
  // Short leases, so the wait is a few seconds; the owner stops holding deadlineMarginMs before expiry.
  const { gateway, cliEnv } = settings(t, { ttlMs: 3_000, heartbeatMs: 500, deadlineMarginMs: 1_000 });
  const gw = await startGatewayProcess(t, gateway);
  const k = await servedFromLease(t, gw);
  const resume = await pause(t, gw);
  const expiresAt = (await db.pool.query<{ at: Date }>(`SELECT max(expires_at) AS at FROM leases WHERE key_id = $1 AND state = 'live'`, [k.keyId])).rows[0]!.at;
  const r = await startCli(t, cliEnv, ['key', 'revoke', k.keyId, '--json']).ended;
  const now = (await db.pool.query<{ now: Date }>('SELECT now() AS now')).rows[0]!.now;
  t.equal(r.code, 0, 'exit 0');
  t.match(JSON.parse(r.stdout), { in_force: true });
  t.match(r.stderr, /waiting for 1 instance\(s\)/, 'it said what it waited for');
  t.ok(now.getTime() >= expiresAt.getTime(), 'it returned only once the lease had expired');
  resume();
  await assertRefused(t, gw, k);
});

t.test('a wait past its bound (a CLI told of shorter leases than the instances use): exit 1, the change saved', async (t) => {
  const { gateway } = settings(t, { ttlMs: 60_000 });
  // The CLI's own configuration says leases live 1 s: it waits at most 1 s and two heartbeats.
  const { cliEnv } = settings(t, { ttlMs: 1_000, heartbeatMs: 200, deadlineMarginMs: 300 });
  const gw = await startGatewayProcess(t, gateway);
  const k = await servedFromLease(t, gw);
  const resume = await pause(t, gw);
  const r = await startCli(t, cliEnv, ['key', 'revoke', k.keyId, '--json']).ended;
  t.equal(r.code, 1, 'exit 1: not known to be in force');
  t.match(JSON.parse(r.stdout), { error: { message: /the change is saved, but 1 instance\(s\) still hold Ink for key/ } });
  t.equal(await leasesHolding(k.keyId), 1, 'the stopped instance still has its lease');
  const revoked = (await db.pool.query('SELECT revoked_at FROM api_keys WHERE id = $1', [k.keyId])).rows[0];
  t.ok(revoked.revoked_at, 'the revoke is saved');
  resume();
  await assertRefused(t, gw, k);
});
