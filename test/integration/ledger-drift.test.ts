// The drift gauge (src/ledger/drift.ts) on real gateways over one schema: one instance holds the
// advisory lock and runs the checks, the other does not; a wallet row broken on purpose (its
// balance moved into its leased pool with no lease behind it, which the row's own CHECK allows)
// is found once the account is touched again, shown on /metrics, counted until it is repaired;
// a hold open for more than a day is counted as stale; a live lease long past its expiry too.
import t from 'tap';
import { createGateway } from '../../src/gateway.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { silentLogger } from '../../src/util/log.js';
import { fundedKey, startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant, newRequestId } from '../helpers/ledger-invariant.js';
import { parseExposition } from '../helpers/prometheus.js';

const DAY_MS = 86_400_000;

// Heartbeats far apart: a lease expired on purpose below stays unrecovered until the test recovers it.
const tg = await startTestGateway(t, { ledger: { lease: { heartbeatMs: 600_000 } } });
const gw1 = tg.gw;
const gw2 = await createGateway(tg.config, { log: silentLogger, skipMigrate: true });
t.teardown(() => gw2.close());
/** One gauge as /metrics shows it (read alone: the process metrics' own values are not this test's). */
const gauge = async (name: string) => parseExposition(await gw1.ops.metrics.registry.getSingleMetricAsString(name)).value(name);

t.test('one instance holds the lock and runs; a clean ledger shows no drift', async (t) => {
  await fundedKey(gw1, 'drift clean', 1000);
  const a = await gw1.ops.drift.checkNow();
  const b = await gw2.ops.drift.checkNow();
  t.match(a, { leader: true, driftAccounts: 0, staleHolds: 0, expiredLeases: 0 }, 'the first gateway runs the checks');
  t.ok(a.lastCheckS > 0, 'and stamps the time');
  t.match(b, { leader: false, lastCheckS: 0 }, 'the second does not while the first holds the lock');
  t.equal(await gauge('inkgate_ledger_drift_leader'), 1);
  t.equal(await gauge('inkgate_ledger_drift_accounts'), 0);
  t.equal(await gauge('inkgate_ledger_drift_last_check_timestamp_seconds'), a.lastCheckS);
});

t.test('a broken wallet row raises the gauge once the account moves, until it is repaired', async (t) => {
  const k = await fundedKey(gw1, 'drift broken', 1000);
  t.equal((await gw1.ops.drift.checkNow()).driftAccounts, 0, 'clean before the break');
  await tg.db.pool.query('UPDATE wallets SET payg_ink = payg_ink - 5, leased_payg_ink = leased_payg_ink + 5 WHERE account_id = $1', [k.accountId]);
  t.equal((await gw1.ops.drift.checkNow()).driftAccounts, 0, 'not touched since the last run: not looked at (the check stays cheap)');
  await gw1.services.ledger.topUp(k.accountId, 10, 'drift touch');
  t.equal((await gw1.ops.drift.checkNow()).driftAccounts, 1, 'touched: found');
  t.equal(await gauge('inkgate_ledger_drift_accounts'), 1, 'on /metrics');
  t.equal((await gw1.ops.drift.checkNow()).driftAccounts, 1, 'still counted on the next run, untouched');
  await tg.db.pool.query('UPDATE wallets SET payg_ink = payg_ink + 5, leased_payg_ink = leased_payg_ink - 5 WHERE account_id = $1', [k.accountId]);
  t.equal((await gw1.ops.drift.checkNow()).driftAccounts, 0, 'repaired: gone');
});

t.test('a hold open for more than a day is stale', async (t) => {
  const k = await fundedKey(gw1, 'drift stale', 1000);
  const old = new Ledger(tg.db.pool, { now: () => new Date(Date.now() - 2 * DAY_MS), batching: false });
  t.teardown(() => old.close());
  const requestId = newRequestId();
  await old.reserve({ requestId, accountId: k.accountId, keyId: k.keyId, product: 'messages', model: 'sonnet', holdInk: 50 });
  t.equal((await gw1.ops.drift.checkNow()).staleHolds, 1, 'counted');
  t.equal(await gauge('inkgate_ledger_stale_holds'), 1, 'on /metrics');
  await gw1.services.ledger.release(requestId, 'test done');
  t.equal((await gw1.ops.drift.checkNow()).staleHolds, 0, 'released: gone');
});

t.test('a live lease more than a minute past its expiry is counted until it is recovered', async (t) => {
  const k = await fundedKey(gw1, 'drift lease', 100_000);
  const escrow = gw1.services.escrow;
  const requestId = newRequestId();
  await escrow.reserve({ requestId, accountId: k.accountId, keyId: k.keyId, product: 'messages', model: 'sonnet', holdInk: 50 });
  await escrow.settle(requestId, 20);
  await escrow.beforeView(); // the settlement is written: the lease holds only spare Ink
  const live = await tg.db.pool.query<{ id: number }>(
    `UPDATE leases SET expires_at = now() - interval '2 minutes' WHERE state = 'live' AND account_id = $1 RETURNING id`,
    [k.accountId],
  );
  t.equal(live.rows.length, 1, 'the lease is there, expired');
  t.equal((await gw1.ops.drift.checkNow()).expiredLeases, 1, 'counted');
  t.equal(await gauge('inkgate_ledger_expired_leases'), 1, 'on /metrics');
  t.equal(await escrow.recoverExpired(), 1, 'recovered');
  t.equal((await gw1.ops.drift.checkNow()).expiredLeases, 0, 'gone');
  t.equal((await gw1.ops.drift.checkNow()).driftAccounts, 0, 'and the wallet agrees with its leases');
});

t.test('the lock passes on when its holder stops', async (t) => {
  await gw1.close();
  t.match(await gw2.ops.drift.checkNow(), { leader: true, driftAccounts: 0 }, 'the second gateway takes over');
  await assertLedgerInvariant(t, tg.db.pool);
});
