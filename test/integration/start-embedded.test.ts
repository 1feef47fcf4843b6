// `npm start` as a new user runs it: no DATABASE_URL, no REDIS_URL, a fresh data dir. The gateway
// starts an embedded PostgreSQL, creates the demo account and key, and serves /v1/me with it.
// Then the process is SIGKILLed (orphaning its postmaster) and started again on the same data dir.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { call } from '../helpers/gateway.js';

const root = new URL('../..', import.meta.url).pathname;

function start(
  dataDir: string,
  o: { args?: string[]; configFile?: string; env?: Record<string, string> } = {},
): Promise<{ child: ChildProcess; url: string; output: () => string }> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !['DATABASE_URL', 'REDIS_URL', 'INKGATE_CONFIG'].includes(k) && !k.startsWith('INKGATE_')) env[k] = v;
  // Admin port 0: the default 9464 may be taken by another gateway on the machine, or by tap's other job.
  Object.assign(
    env,
    { INKGATE_DATA_DIR: dataDir, INKGATE_PORT: '0', INKGATE_ADMIN_PORT: '0' },
    o.configFile ? { INKGATE_CONFIG: o.configFile } : {},
    o.env ?? {},
  );
  const child = spawn(process.execPath, [join(root, 'bin/start.js'), ...(o.args ?? [])], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGTERM'); // not left running (with its cluster) once this test has given up on it
      reject(new Error(`no listening line within 90 s:\n${out}`));
    }, 90_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /"url":"(http:\/\/[^"\s]+)","msg":"gateway\.listening"/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ child, url: m[1]!, output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (d: Buffer) => void (out += d.toString()));
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited ${code} before listening:\n${out}`));
    });
  });
}

t.test('npm start on a fresh machine, then after a SIGKILL', { timeout: 240_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-start-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const a = await start(dir);
  // Should a check below throw before the SIGKILL, the gateway and its cluster still go.
  t.teardown(async () => {
    if (a.child.exitCode !== null || a.child.signalCode !== null) return;
    const bye = new Promise((r) => a.child.once('exit', r));
    a.child.kill('SIGTERM');
    await bye;
  });
  t.match(a.output(), /"kind":"embedded","dir":"[^"]+","msg":"store\.opened"/);
  t.match(a.output(), /"kind":"memory","msg":"limits\.backend"/);
  const keyFile = join(dir, 'demo-key');
  t.equal(statSync(keyFile).mode & 0o777, 0o600, 'demo-key is 0600');
  const key = readFileSync(keyFile, 'utf8').trim();
  t.ok(a.output().includes(key), 'the key is printed once');
  const me = await call(a.url, 'GET', '/v1/me', { key });
  t.equal(me.status, 200);
  // A second start on the same data dir is refused before it touches the first one's cluster.
  await t.rejects(start(dir), /exited 1 before listening[\s\S]*another inkgate \(pid \d+\) serves the data dir/, 'a second gateway on the data dir is refused');
  t.equal((await call(a.url, 'GET', '/v1/me', { key })).status, 200, 'and the first still serves from its cluster');
  t.equal(me.json.ink.payg_balance, 5000, 'demo account: 50 USD of pay-as-you-go Ink');
  t.equal((await call(a.url, 'GET', '/v1/models')).status, 200);
  // Plain `npm start` configures no vendor: a newcomer's first text call is told what opens the lane.
  const closed = await call(a.url, 'POST', '/v1/messages', { key, body: { model: 'sonnet', max_tokens: 20, messages: [{ role: 'user', content: 'Hello' }] } });
  t.equal(closed.status, 503);
  t.match(closed.json.error.message, /no vendor configured.*inkgate lane enable messages.*npm run demo/, 'the 503 says how to open the lane');

  // SIGKILL leaves the postmaster running with the data dir locked: the next start must cope.
  const gone = new Promise((r) => a.child.once('exit', r));
  a.child.kill('SIGKILL');
  await gone;
  const b = await start(dir);
  t.teardown(async () => {
    const bye = new Promise((r) => b.child.once('exit', r));
    b.child.kill('SIGTERM');
    await bye;
  });
  t.notOk(b.output().includes('Demo account created'), 'no second demo account');
  const again = await call(b.url, 'GET', '/v1/me', { key });
  t.equal(again.status, 200, 'same data, same key after the restart');
});

t.test('SIGTERM with the embedded Postgres: the journal is written before the cluster stops', { timeout: 240_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-start-term-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // A group commit far away: the settlement below is still only in memory when SIGTERM arrives.
  const configFile = join(dir, 'config.json');
  writeFileSync(configFile, JSON.stringify({ ledger: { flushMs: 10_000 } }));
  const a = await start(dir, { args: ['--demo'], configFile });
  const started =
    a
      .output()
      .split('\n')
      .find((l) => l.includes('"msg":"demo.vendors_started"')) ?? '';
  for (const sim of ['anthropic', 'openai', 'ark', 'gemini'])
    t.match(started, new RegExp(`"${sim}":"http`), `the demo's start-up log lists the ${sim} simulator`);
  const key = readFileSync(join(dir, 'demo-key'), 'utf8').trim();
  const r = await call(a.url, 'POST', '/v1/messages', { key, body: { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] } });
  t.equal(r.status, 200, r.status === 200 ? 'the request is answered' : r.text);
  const charged = Number(r.headers['x-service-ink-charged']);
  t.ok(charged > 0, `charged ${charged} Ink, in memory only`);
  const exited = new Promise<number | null>((res) => a.child.once('exit', (code) => res(code)));
  a.child.kill('SIGTERM');
  await exited;
  t.notMatch(a.output(), /close_unwritten|recall_bus_error|shutdown step failed/, 'nothing left unwritten, no connection cut under the drain');

  const b = await start(dir, { configFile });
  t.teardown(async () => {
    const bye = new Promise((res) => b.child.once('exit', res));
    b.child.kill('SIGTERM');
    await bye;
  });
  const me = await call(b.url, 'GET', '/v1/me', { key });
  t.equal(me.json.key.ink_charged, charged, 'the charge told before SIGTERM is in Postgres after the restart');
  t.equal(me.json.key.ink_reserved, 0, 'no hold left open');
});
