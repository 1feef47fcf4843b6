// A store timeout the gateway logs says how late its own event loop ran at that moment
// (`loopDelayMs`, src/util/loop-delay.ts), so a stall of the gateway is never read as a slow
// database: a paused Postgres (behind a TCP proxy that stops forwarding) times out with the loop
// running freely, and a timeout that fires after a long synchronous step carries that step's length.
import t from 'tap';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { loadConfig } from '../../src/config/config.js';
import { createGateway } from '../../src/gateway.js';
import { testDb } from '../helpers/db.js';
import { recordingLogger, type LoggedLine } from '../helpers/log-lines.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';
import { boundedTeardown } from '../helpers/teardown.js';

/** The gateway's own stall in the second case: longer than anything a loaded machine adds by itself. */
const STALL_MS = 600;

/** Blocks this thread (the gateway's serving thread: it runs in the test's process) for `ms`. */
function stallFor(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

const heartbeatFailures = (lines: readonly LoggedLine[], from: number) => lines.slice(from).filter((l) => l.msg === 'ledger.heartbeat_failed');

t.test('a logged store timeout and a 5xx access line carry the event loop delay of that moment', async (t) => {
  const db = await testDb(t);
  const target = new URL(db.url);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
  t.teardown(() => proxy.close());
  const viaProxy = `postgres://${target.username}@127.0.0.1:${proxy.port}${target.pathname}`;
  const config = loadConfig({}, { server: { port: 0, host: '127.0.0.1' }, db: { url: viaProxy, schema: db.schema }, redis: { url: null } });
  const { log, lines } = recordingLogger('info');
  const gw = await createGateway(config, { log, skipMigrate: true });
  boundedTeardown(
    t,
    'gateway close',
    async () => {
      proxy.thaw();
      await gw.close();
    },
    45_000,
  );
  const acc = await createAccount(db.pool, { name: 'loop delay', planId: 'pro' });
  const known = await createKey(db.pool, { accountId: acc.id, name: 'known' });
  const never = await createKey(db.pool, { accountId: acc.id, name: 'never seen' });
  const me = (key: string) => fetch(`${gw.url}/v1/me`, { headers: { authorization: `Bearer ${key}` } });
  const before = await me(known.key);
  t.equal(before.status, 200);
  await before.text();

  proxy.freeze();
  let from = lines.length;
  await gw.services.escrow.beatNow();
  const paused = heartbeatFailures(lines, from);
  t.ok(paused.length >= 1, 'the heartbeat against a paused store failed and was logged');
  t.type(paused[0]?.loopDelayMs, 'number', 'and says how late the event loop ran then');

  const res = await me(never.key);
  t.equal(res.status, 503, 'a key never seen cannot be looked up: 503');
  await res.text();
  const access = lines.find((l) => l.msg === 'http.request' && l.status === 503);
  t.type(access?.loopDelayMs, 'number', "the 503's access line carries the loop delay too");
  const ok = lines.find((l) => l.msg === 'http.request' && l.status === 200);
  t.equal(ok?.loopDelayMs, undefined, 'an answer below 500 does not');

  from = lines.length;
  const beat = gw.services.escrow.beatNow();
  stallFor(STALL_MS);
  await beat;
  const stalled = heartbeatFailures(lines, from);
  t.ok(stalled.length >= 1, 'the heartbeat timed out again');
  t.ok(
    (stalled.at(-1)?.loopDelayMs as number) >= STALL_MS - 50,
    `after a ${STALL_MS} ms stall of the gateway's own thread, the timeout says so (loopDelayMs ${String(stalled.at(-1)?.loopDelayMs)})`,
  );
});
