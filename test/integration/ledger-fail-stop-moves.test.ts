// Fail-stop on the durable ledger's own moves (reserve, settle, release, refund, top-up, grant,
// roll-over), on the real Postgres. A code-only fault (LedgerOptions.faults) skews one figure a
// move's statement answered, inside its transaction: the move's check must fail *before COMMIT*,
// so the database is exactly as it was (no request row, no journal row, the wallet and the key
// unchanged), the fail-stop hears of it once, and the caller gets the LedgerAssertionError. Every
// path is covered: a lone move, a group-committed batch (whose neighbours roll back with it and
// are not re-run one by one), the batch function for a lone move, and a caller's transaction.
// Rules: docs/ledger.md (Fail-stop on a broken money rule), docs/api/billing.md.
import t, { type Test } from 'tap';
import { isLedgerAssertion, type LedgerAssertionError } from '../../src/ledger/assertion.js';
import { Ledger, type LedgerOptions, type ReserveInput } from '../../src/ledger/ledger.js';
import { withTx } from '../../src/store/pool.js';
import { testDb } from '../helpers/db.js';
import { assertLedgerInvariant, keyOf, newRequestId, seedAccount, walletOf, type SeededAccount } from '../helpers/ledger-invariant.js';

const db = await testDb(t);
const pool = db.pool;

const input = (a: SeededAccount, holdInk = 40): ReserveInput => ({
  requestId: newRequestId(),
  accountId: a.accountId,
  keyId: a.keyIds[0]!,
  product: 'messages',
  model: 'assistant-sonnet-5',
  holdInk,
});

/** A ledger whose statements answer one figure wrong for the ids in `broken`; `trips` collects what the fail-stop was told. */
function faultyLedger(t: Test, broken: Set<string>, opts: LedgerOptions = {}): { ledger: Ledger; trips: LedgerAssertionError[] } {
  const trips: LedgerAssertionError[] = [];
  const ledger = new Ledger(pool, { ...opts, failStop: (e) => void trips.push(e), faults: { skewFigure: (_move, id) => (broken.has(id) ? 1 : undefined) } });
  t.teardown(() => ledger.close());
  return { ledger, trips };
}

/** Everything a move could have changed for one account and request. */
async function snapshot(a: SeededAccount, requestId: string) {
  const rows = await pool.query('SELECT hold_state, status, charged_ink FROM requests WHERE id = $1', [requestId]);
  const journal = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM ledger_journal WHERE account_id = $1', [a.accountId]);
  return { wallet: await walletOf(pool, a.accountId), key: await keyOf(pool, a.keyIds[0]!), request: rows.rows[0] ?? null, journal: journal.rows[0]!.n };
}

async function rejectsWithViolation(t: Test, p: Promise<unknown>, pattern: RegExp): Promise<void> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  t.ok(isLedgerAssertion(e), `a LedgerAssertionError, not ${String(e)}`);
  t.match((e as Error).message, pattern);
}

const MODES: Array<[string, LedgerOptions]> = [
  ['group commit', {}],
  ['unbatched', { batching: false }],
  ['batch function for a lone move', { batching: false, functionForSingles: true }],
];

for (const [mode, opts] of MODES) {
  t.test(`reserve (${mode}): a wrong split rolls back before COMMIT and goes to the fail-stop`, async (t) => {
    const a = await seedAccount(pool, { grantInk: 30, paygInk: 100 });
    const bad = input(a);
    const { ledger, trips } = faultyLedger(t, new Set([bad.requestId]), opts);
    const before = await snapshot(a, bad.requestId);
    await rejectsWithViolation(t, ledger.reserve(bad), /reserve .*grant 30 \+ payg 11 != 40/);
    t.same(await snapshot(a, bad.requestId), before, 'no request row, no journal row, wallet and key unchanged');
    t.equal(trips.length, 1, 'the fail-stop was told once');
    t.equal(trips[0]!.figures.request_id, bad.requestId);
    await assertLedgerInvariant(t, pool);
  });

  t.test(`settle and release (${mode}): a wrong resolution rolls back, the hold stays open`, async (t) => {
    const a = await seedAccount(pool, { grantInk: 30, paygInk: 100 });
    const broken = new Set<string>();
    const { ledger, trips } = faultyLedger(t, broken, opts);
    const settled = input(a),
      released = input(a);
    await ledger.reserve(settled);
    await ledger.reserve(released);
    broken.add(settled.requestId).add(released.requestId);
    const before = await snapshot(a, settled.requestId);
    await rejectsWithViolation(t, ledger.settle(settled.requestId, 25), /resolve .*settle.*charged 25/);
    await rejectsWithViolation(t, ledger.release(released.requestId, 'vendor 400'), /resolve .*release/);
    t.same(await snapshot(a, settled.requestId), before, 'the settle left nothing: the hold open, wallet, key and journal as they were');
    t.match((await snapshot(a, released.requestId)).request, { hold_state: 'open' }, 'the release left its hold open');
    t.equal(trips.length, 2, 'each violation went to the fail-stop');
    broken.clear();
    t.match(await ledger.settle(settled.requestId, 25), { resolved: true, chargedInk: 25, releasedInk: 15 }, 'the hold is still there to settle');
    t.match(await ledger.release(released.requestId, 'vendor 400'), { resolved: true, chargedInk: 0, releasedInk: 40 });
    await assertLedgerInvariant(t, pool);
  });
}

t.test('a batch with one broken item: the whole statement rolls back and no item is re-run alone', async (t) => {
  const a = await seedAccount(pool, { paygInk: 1000 });
  const bad = input(a),
    good = input(a);
  const { ledger, trips } = faultyLedger(t, new Set([bad.requestId]), { batchMaxItems: 8 });
  const before = await walletOf(pool, a.accountId);
  // Same tick: one statement carries both.
  const [rb, rg] = await Promise.allSettled([ledger.reserve(bad), ledger.reserve(good)]);
  t.ok(rb.status === 'rejected' && isLedgerAssertion(rb.reason), 'the broken item fails with the violation');
  t.ok(rg.status === 'rejected' && isLedgerAssertion(rg.reason), 'its neighbour shares the rolled-back statement: no hold, never retried alone');
  t.match(ledger.batchStats()!.reserve, { batches: 1, items: 2 }, 'one statement carried both');
  t.same(await walletOf(pool, a.accountId), before, 'the wallet is as it was');
  const n = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM requests WHERE id = ANY($1)', [[bad.requestId, good.requestId]]);
  t.equal(n.rows[0]!.n, 0, 'no request row for either');
  t.equal(trips.length, 1);
  await assertLedgerInvariant(t, pool);
});

t.test("a move in the caller's transaction: the check throws before the caller can COMMIT", async (t) => {
  const a = await seedAccount(pool, { paygInk: 500 });
  const bad = input(a);
  const { ledger, trips } = faultyLedger(t, new Set([bad.requestId]));
  const before = await snapshot(a, bad.requestId);
  let committed = false;
  const e = await withTx(pool, async (c) => {
    await ledger.using(c).reserve(bad);
    committed = true;
  }).then(
    () => undefined,
    (err: unknown) => err,
  );
  t.ok(isLedgerAssertion(e));
  t.notOk(committed, 'the caller never reached its own COMMIT');
  t.same(await snapshot(a, bad.requestId), before);
  t.equal(trips.length, 1);

  const ok = input(a);
  const { ledger: refunds, trips: refundTrips } = faultyLedger(t, new Set([ok.requestId]));
  await new Ledger(pool, { batching: false }).reserve(ok);
  const held = await snapshot(a, ok.requestId);
  const r = await withTx(pool, (c) => refunds.using(c).refund(ok.requestId, 'job failed')).then(
    () => undefined,
    (err: unknown) => err,
  );
  t.ok(isLedgerAssertion(r), 'a refund in a transaction too');
  t.same(await snapshot(a, ok.requestId), held, 'the hold is still open and the wallet unchanged');
  t.equal(refundTrips.length, 1);
  await assertLedgerInvariant(t, pool);
});

t.test('credits: a top-up, a grant and a roll-over whose figures are wrong roll back', async (t) => {
  const a = await seedAccount(pool, { grantInk: 70, paygInk: 100 });
  const broken = new Set([a.accountId]);
  const { ledger, trips } = faultyLedger(t, broken);
  const before = await snapshot(a, 'req_none');
  await rejectsWithViolation(t, ledger.topUp(a.accountId, 500, 'card'), /top-up .*credited_ink/);
  await rejectsWithViolation(t, ledger.grant(a.accountId, 50), /grant .*credited_ink/);
  await rejectsWithViolation(t, ledger.rollPeriod(a.accountId), /roll-over .*credited_ink/);
  t.same(await snapshot(a, 'req_none'), before, 'wallet and journal as they were');
  t.equal(trips.length, 3);
  broken.clear();
  await ledger.topUp(a.accountId, 500, 'card');
  t.match(await ledger.rollPeriod(a.accountId), { expiredInk: 70 }, 'without the fault every credit passes its own check');
  await assertLedgerInvariant(t, pool);
});

t.test('the schema refusing a move (a CHECK) is a broken rule: rolled back, handed to the fail-stop, the caller gets it', async (t) => {
  const a = await seedAccount(pool, { grantInk: 30, paygInk: 100 });
  // A rule only this account's wallet breaks once more than 5 Ink of pay-as-you-go is held: the
  // reserve's statement itself is refused by the database, with no fault in the code's figures.
  await pool.query(`ALTER TABLE wallets ADD CONSTRAINT test_payg_held_cap CHECK (account_id <> '${a.accountId}' OR held_payg_ink <= 5)`);
  t.teardown(() => pool.query('ALTER TABLE wallets DROP CONSTRAINT IF EXISTS test_payg_held_cap'));
  for (const [mode, opts] of MODES) {
    const { ledger, trips } = faultyLedger(t, new Set(), opts);
    const refused = input(a);
    const before = await snapshot(a, refused.requestId);
    await rejectsWithViolation(t, ledger.reserve(refused), /a ledger move broke an integrity rule of the schema/);
    t.equal(trips.length, 1, `${mode}: the fail-stop was told once`);
    t.match(trips[0]!.figures, { sqlstate: '23514', constraint: 'test_payg_held_cap' }, `${mode}: with the SQLSTATE and the constraint`);
    t.same(await snapshot(a, refused.requestId), before, `${mode}: nothing written`);
  }
  const { ledger, trips } = faultyLedger(t, new Set());
  const first = input(a, 20);
  t.match(await ledger.reserve(first), { grantInk: 20 }, 'a hold the rule allows still passes');
  const dup = await ledger.reserve({ ...first }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.notOk(isLedgerAssertion(dup), 'a request id reserved twice is the duplicate answer, not a broken rule');
  t.equal(trips.length, 0);
  await pool.query('ALTER TABLE wallets DROP CONSTRAINT test_payg_held_cap');
  await assertLedgerInvariant(t, pool);
});
