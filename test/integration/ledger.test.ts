// The ledger's money rules against the real Postgres: splits, settle, release, refund, caps,
// exactly-once resolution, unknown usage and reconciliation, credits and roll-over.
import type { QueryConfig } from 'pg';
import t, { type Test } from 'tap';
import { readAccountObject } from '../../src/accounts/routes.js';
import { ApiError } from '../../src/errors.js';
import { Ledger, type LedgerOptions, type RequestRecord } from '../../src/ledger/ledger.js';
import { testDb } from '../helpers/db.js';
import { watchQueries } from '../helpers/query-watch.js';
import { assertLedgerInvariant, keyOf, newRequestId, seedAccount, walletOf } from '../helpers/ledger-invariant.js';

const db = await testDb(t);
const pool = db.pool;

interface Ctx {
  ledger: Ledger;
  logs: Array<{ msg: string; fields?: object }>;
  /** The path options of this run, for any extra Ledger a test makes. */
  opts: LedgerOptions;
}

// A lone move goes through ledger_reserve_one / ledger_resolve_one, a group through the batch
// functions (ledger_reserve / ledger_resolve). Every test runs both ways.
const PATHS: ReadonlyArray<[string, LedgerOptions]> = [
  ['single-move function', {}],
  ['batch function', { functionForSingles: true }],
];

/** A test with its own Ledger, once per path; the invariant is checked over the whole schema when it ends. */
function ledgerTest(name: string, fn: (t: Test, c: Ctx) => Promise<void>, extra: LedgerOptions = {}): void {
  for (const [path, pathOpts] of PATHS) {
    t.test(`${name} [${path}]`, async (t) => {
      const logs: Ctx['logs'] = [];
      const opts = { ...pathOpts, ...extra };
      const ledger = new Ledger(pool, { log: (fields, msg) => logs.push({ msg, fields }), ...opts });
      try {
        await fn(t, { ledger, logs, opts });
      } finally {
        await ledger.close();
      }
      await assertLedgerInvariant(t, pool);
    });
  }
}

const reserveOf = (a: { accountId: string; keyIds: string[] }, holdInk: number, key = 0, product: 'messages' | 'video' = 'messages') => ({
  requestId: newRequestId(),
  accountId: a.accountId,
  keyId: a.keyIds[key]!,
  product,
  model: product === 'video' ? 'clip-2.5' : 'assistant-opus-5',
  holdInk,
});

const journalOf = async (requestId: string) =>
  (
    await pool.query(
      `SELECT kind, amount_ink, grant_ink, payg_ink, held_grant_ink, held_payg_ink, charged_ink, expired_ink, credited_ink
         FROM ledger_journal WHERE request_id = $1 ORDER BY id`,
      [requestId],
    )
  ).rows;

const requestOf = async (requestId: string): Promise<RequestRecord | undefined> =>
  (await pool.query<RequestRecord>('SELECT * FROM requests WHERE id = $1', [requestId])).rows[0];

ledgerTest('reserve takes grant first and records the split; settle charges grant first and returns the rest where it came from', async (t, { ledger }) => {
  const a = await seedAccount(pool, { grantInk: 40, paygInk: 100 });
  const input = reserveOf(a, 60);
  const hold = await ledger.reserve(input);
  t.same(hold, { requestId: input.requestId, holdInk: 60, grantInk: 40, paygInk: 20 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 0, payg_ink: 80, held_grant_ink: 40, held_payg_ink: 20, charged_ink: 0 });
  t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: null, ink_charged: 0, ink_reserved: 60 });

  const res = await ledger.settle(input.requestId, 25, { usage: { inputTokens: 1000, outputTokens: 200 }, vendorRequestId: 'msg_1' });
  t.same(res, { resolved: true, chargedInk: 25, releasedInk: 35, expiredInk: 0 });
  // 25 charged from the grant part, 15 back to the grant, all 20 back to pay-as-you-go.
  t.match(await walletOf(pool, a.accountId), { grant_ink: 15, payg_ink: 100, held_grant_ink: 0, held_payg_ink: 0, charged_ink: 25, credited_ink: 140 });
  t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: null, ink_charged: 25, ink_reserved: 0 });
  const req = await requestOf(input.requestId);
  t.match(req, { status: 'settled', hold_state: 'settled', charged_ink: 25, charged_grant_ink: 25, charged_payg_ink: 0, vendor_request_id: 'msg_1' });
  t.same(req!.usage, { input_tokens: 1000, output_tokens: 200 });
  t.same(await journalOf(input.requestId), [
    { kind: 'reserve', amount_ink: 60, grant_ink: -40, payg_ink: -20, held_grant_ink: 40, held_payg_ink: 20, charged_ink: 0, expired_ink: 0, credited_ink: 0 },
    { kind: 'settle', amount_ink: 25, grant_ink: 15, payg_ink: 20, held_grant_ink: -40, held_payg_ink: -20, charged_ink: 25, expired_ink: 0, credited_ink: 0 },
  ]);
});

ledgerTest('a charge larger than the grant part takes the rest from the pay-as-you-go part', async (t, { ledger }) => {
  const a = await seedAccount(pool, { grantInk: 40, paygInk: 100 });
  const input = reserveOf(a, 60);
  await ledger.reserve(input);
  t.same(await ledger.settle(input.requestId, 50), { resolved: true, chargedInk: 50, releasedInk: 10, expiredInk: 0 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 0, payg_ink: 90, charged_ink: 50 });
  t.match(await requestOf(input.requestId), { charged_grant_ink: 40, charged_payg_ink: 10 });
});

ledgerTest('usage reported as zero settles to 0 and releases everything; an unreported bucket stays absent', async (t, { ledger }) => {
  const a = await seedAccount(pool, { grantInk: 10, paygInk: 100 });
  const input = reserveOf(a, 50);
  await ledger.reserve(input);
  const res = await ledger.settle(input.requestId, 0, { usage: { inputTokens: 0, outputTokens: 0, cacheReadTokens: undefined } });
  t.same(res, { resolved: true, chargedInk: 0, releasedInk: 50, expiredInk: 0 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 10, payg_ink: 100, charged_ink: 0, held_grant_ink: 0, held_payg_ink: 0 });
  const req = await requestOf(input.requestId);
  t.same(req!.usage, { input_tokens: 0, output_tokens: 0 }, 'zero is stored as zero, the unreported bucket is absent');
  t.equal(req!.status, 'settled');
});

ledgerTest('usage above the hold charges the hold, never more, and is logged', async (t, { ledger, logs }) => {
  const a = await seedAccount(pool, { paygInk: 1000 });
  const input = reserveOf(a, 60);
  await ledger.reserve(input);
  t.same(await ledger.settle(input.requestId, 500), { resolved: true, chargedInk: 60, releasedInk: 0, expiredInk: 0 });
  t.match(await walletOf(pool, a.accountId), { payg_ink: 940, charged_ink: 60 });
  t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: null, ink_charged: 60, ink_reserved: 0 });
  const over = logs.filter((l) => l.msg === 'ledger.charge_above_hold');
  t.equal(over.length, 1);
  t.match(over[0]!.fields, { requestId: input.requestId, chargeInk: 500, holdInk: 60 });
});

ledgerTest('a wallet that cannot cover the hold answers insufficient_ink naming both amounts, and nothing happens', async (t, { ledger }) => {
  const a = await seedAccount(pool, { grantInk: 20, paygInk: 30 });
  const before = await walletOf(pool, a.accountId);
  const input = reserveOf(a, 60);
  const err = await ledger.reserve(input).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof ApiError);
  t.match(err, { code: 'insufficient_ink', status: 402 });
  t.match((err as Error).message, /needs 60 Ink/);
  t.match((err as Error).message, /has 50 Ink available/);
  t.same(await walletOf(pool, a.accountId), before);
  t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: null, ink_charged: 0, ink_reserved: 0 });
  t.equal(await requestOf(input.requestId), undefined);
  t.same(await journalOf(input.requestId), []);
  // Exactly the balance is enough.
  t.match(await ledger.reserve(reserveOf(a, 50)), { grantInk: 20, paygInk: 30 });
});

ledgerTest("a key's cap counts charged plus reserved; crossing it answers key_ink_limit_reached and other keys keep working", async (t, { ledger }) => {
  const a = await seedAccount(pool, { paygInk: 10_000, keyLimits: [100, null] });
  const first = reserveOf(a, 70);
  await ledger.reserve(first);
  await ledger.settle(first.requestId, 40); // charged 40, reserved 0
  await ledger.reserve(reserveOf(a, 30)); // charged 40 + reserved 30 = 70
  const err = await ledger.reserve(reserveOf(a, 31)).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.match(err, { code: 'key_ink_limit_reached', status: 402 });
  t.match((err as Error).message, /needs 31 Ink and the key has 30 Ink left/);
  t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: 100, ink_charged: 40, ink_reserved: 30 });
  t.match(await ledger.reserve(reserveOf(a, 30)), { holdInk: 30 }, 'exactly up to the cap is allowed');
  t.match(await ledger.reserve(reserveOf(a, 500, 1)), { holdInk: 500 }, 'the uncapped key of the same account still works');
});

ledgerTest('release and refund return the whole hold to the pools it came from', async (t, { ledger }) => {
  const a = await seedAccount(pool, { grantInk: 100, paygInk: 500 });
  const text = reserveOf(a, 150);
  const video = reserveOf(a, 284, 0, 'video');
  t.match(await ledger.reserve(text), { grantInk: 100, paygInk: 50 });
  t.match(await ledger.reserve(video), { grantInk: 0, paygInk: 284 });
  t.same(await ledger.release(text.requestId, 'upstream_rejected'), { resolved: true, chargedInk: 0, releasedInk: 150, expiredInk: 0 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 100, payg_ink: 216 });
  t.same(await ledger.refund(video.requestId, 'provider_failed'), { resolved: true, chargedInk: 0, releasedInk: 284, expiredInk: 0 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 100, payg_ink: 500, charged_ink: 0, held_grant_ink: 0, held_payg_ink: 0 });
  t.match(await requestOf(text.requestId), { status: 'released', reason: 'upstream_rejected', charged_ink: 0 });
  t.match(await requestOf(video.requestId), { status: 'refunded', reason: 'provider_failed', charged_ink: 0 });
  t.same(
    (await journalOf(video.requestId)).map((r) => r.kind),
    ['reserve', 'refund'],
  );
});

ledgerTest('a hold resolves once: a second settle, release or refund is a no-op that says so', async (t, { ledger }) => {
  const a = await seedAccount(pool, { paygInk: 1000 });
  const input = reserveOf(a, 100);
  await ledger.reserve(input);
  t.same(await ledger.settle(input.requestId, 30), { resolved: true, chargedInk: 30, releasedInk: 70, expiredInk: 0 });
  const after = await walletOf(pool, a.accountId);
  t.same(await ledger.settle(input.requestId, 90), { resolved: false, reason: 'already_resolved' });
  t.same(await ledger.release(input.requestId, 'again'), { resolved: false, reason: 'already_resolved' });
  t.same(await ledger.refund(input.requestId, 'again'), { resolved: false, reason: 'already_resolved' });
  t.same(await ledger.settle(newRequestId(), 1), { resolved: false, reason: 'unknown_request' });
  t.same(await walletOf(pool, a.accountId), after);
  t.same(
    (await journalOf(input.requestId)).map((r) => r.kind),
    ['reserve', 'settle'],
  );
  t.match(await requestOf(input.requestId), { reason: null });
});

for (const mode of ['batched', 'unbatched', 'two gateway processes'] as const) {
  ledgerTest(
    `racing resolvers (settle vs release vs refund, ${mode}): exactly one wins per hold`,
    async (t, { ledger, opts }) => {
      const other = mode === 'unbatched' ? new Ledger(pool, { ...opts, batching: false }) : ledger;
      let otherPool: typeof pool | undefined;
      let third = ledger;
      if (mode === 'two gateway processes') {
        const { createPool } = await import('../../src/store/pool.js');
        otherPool = createPool({ ...db.dbConfig, url: db.url, poolMax: 8 });
        third = new Ledger(otherPool, opts);
      }
      try {
        const a = await seedAccount(pool, { grantInk: 300, paygInk: 3000 });
        const inputs = Array.from({ length: 20 }, () => reserveOf(a, 100));
        await Promise.all(inputs.map((i) => ledger.reserve(i)));
        const outcomes = await Promise.all(
          inputs.map((i) =>
            Promise.all([other.settle(i.requestId, 40), third.release(i.requestId, 'race'), other.refund(i.requestId, 'race'), third.settle(i.requestId, 10)]),
          ),
        );
        let charged = 0;
        for (const [idx, o] of outcomes.entries()) {
          const winners = o.filter((r) => r.resolved);
          t.equal(winners.length, 1, `hold ${idx}: one winner`);
          t.equal(o.filter((r) => !r.resolved && r.reason === 'already_resolved').length, 3);
          const w = winners[0]!;
          if (w.resolved) charged += w.chargedInk;
          const req = await requestOf(inputs[idx]!.requestId);
          const expectState = o[0]!.resolved ? 'settled' : o[1]!.resolved ? 'released' : o[2]!.resolved ? 'refunded' : 'settled';
          t.equal(req!.status, expectState);
        }
        t.match(await walletOf(pool, a.accountId), { charged_ink: charged, held_grant_ink: 0, held_payg_ink: 0 });
        t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: null, ink_charged: charged, ink_reserved: 0 });
      } finally {
        if (other !== ledger) await other.close();
        if (third !== ledger) await third.close();
        await otherPool?.end();
      }
    },
    mode === 'unbatched' ? { batching: false } : {},
  );
}

ledgerTest(
  'unknown usage keeps the hold open and visible; reconcile settles or releases it; an old hold with no record is listed, not charged',
  async (t, { ledger, opts }) => {
    const v = (name: string) => `${name}_${newRequestId().slice(4)}`; // vendor ids unique per run
    const [vLost, vZero, vBad, vNobody] = [v('msg_lost'), v('msg_zero'), v('msg_bad'), v('msg_nobody')];
    const a = await seedAccount(pool, { grantInk: 50, paygInk: 1000 });
    const lost = reserveOf(a, 120);
    const zero = reserveOf(a, 80);
    const orphan = reserveOf(a, 33);
    const skippedHold = reserveOf(a, 10);
    for (const i of [lost, zero, orphan, skippedHold]) await ledger.reserve(i);
    await ledger.setVendorRequestId(lost.requestId, vLost);
    await ledger.markUsageUnknown(lost.requestId, { reason: 'stream ended without a usage receipt' });
    await ledger.markUsageUnknown(zero.requestId, { vendorRequestId: vZero });
    await ledger.setVendorRequestId(skippedHold.requestId, vBad);
    t.match(await requestOf(lost.requestId), {
      status: 'usage_unknown',
      hold_state: 'open',
      vendor_request_id: vLost,
      reason: 'stream ended without a usage receipt',
    });
    const view = (await readAccountObject(pool, a.keyIds[0]!))!;
    t.equal(view.key.ink_reserved, 243, 'the open holds are visible as ink_reserved');

    // The records arrive two hours later (injected clock): the orphan is old and has no record.
    const later = new Ledger(pool, { ...opts, now: () => new Date(Date.now() + 2 * 3600_000) });
    try {
      const seen: string[] = [];
      const report = await later.reconcile(
        [
          { vendorRequestId: vLost, usage: { inputTokens: 1000, outputTokens: 300 }, chargeInk: 7 },
          { vendorRequestId: vZero, usage: { inputTokens: 0, outputTokens: 0 } },
          { vendorRequestId: vNobody },
          { vendorRequestId: vBad },
        ],
        {
          olderThanMs: 3600_000,
          chargeFor: (req, rec) => {
            seen.push(req.id);
            if (rec.vendorRequestId === vBad) throw new RangeError('record has no usable usage');
            return rec.chargeInk ?? 0;
          },
        },
      );
      t.same(seen.sort(), [lost.requestId, zero.requestId, skippedHold.requestId].sort());
      t.equal(report.recordsRead, 4);
      t.same(report.settled, {
        count: 1,
        items: [{ requestId: lost.requestId, vendorRequestId: vLost, holdInk: 120, chargedInk: 7, releasedInk: 113, expiredInk: 0 }],
      });
      t.same(report.released, {
        count: 1,
        items: [{ requestId: zero.requestId, vendorRequestId: vZero, holdInk: 80, chargedInk: 0, releasedInk: 80, expiredInk: 0 }],
      });
      t.same(report.unmatched, { count: 1, items: [{ vendorRequestId: vNobody, reason: 'no_request' }] });
      t.match(report.skipped, { count: 1, items: [{ vendorRequestId: vBad, requestId: skippedHold.requestId, reason: /no usable usage/ }] });
      // Only the orphan: the skipped hold had a record (it is in `skipped`), the others are resolved.
      // (Other tests in this schema leave open holds too: look at this account's.)
      const stale = report.stale.items.filter((r) => r.account_id === a.accountId);
      t.same(
        stale.map((r) => [r.id, r.hold_ink, r.status]),
        [[orphan.requestId, 33, 'running']],
      );
      t.ok(report.stale.count >= 1);

      t.match(await requestOf(lost.requestId), { status: 'settled', charged_ink: 7, usage: { input_tokens: 1000, output_tokens: 300 } });
      t.match(await requestOf(orphan.requestId), { status: 'running', hold_state: 'open', charged_ink: 0 });
      t.same(
        (await journalOf(lost.requestId)).map((r) => r.kind),
        ['reserve', 'reconcile'],
      );
      t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: null, ink_charged: 7, ink_reserved: 43 });

      // Running it again resolves nothing twice.
      const again = await later.reconcile([{ vendorRequestId: vLost, chargeInk: 9 }], { olderThanMs: 3600_000, chargeFor: (_r, rec) => rec.chargeInk! });
      t.same(again.unmatched.items, [{ vendorRequestId: vLost, reason: 'already_resolved' }]);
      t.equal(again.settled.count, 0);

      // With the real clock nothing is old yet: no stale holds are listed.
      const now = await ledger.reconcile([], { olderThanMs: 3600_000, chargeFor: () => 0 });
      t.equal(now.stale.items.filter((r) => r.account_id === a.accountId).length, 0);
    } finally {
      await later.close();
    }
  },
);

ledgerTest('top-up credits pay-as-you-go and counts; grant extends the period grant; the /v1/me numbers follow', async (t, { ledger }) => {
  const a = await seedAccount(pool, { keyLimits: [500] });
  await ledger.topUp(a.accountId, 1234, 'card');
  await ledger.grant(a.accountId, 100);
  t.match(await ledger.walletView(a.accountId), { payg_ink: 1234, grant_ink: 100, credited_ink: 1334, topups_completed: 1 });
  const r = reserveOf(a, 150);
  await ledger.reserve(r);
  await ledger.settle(r.requestId, 120);
  t.match(await readAccountObject(pool, a.keyIds[0]!), {
    user_id: a.accountId,
    key: { ink_limit: 500, ink_charged: 120, ink_reserved: 0 },
    ink: { balance: 1214, period_grant_remaining: 0, payg_balance: 1214, usd_payg_equivalent: 12.14 },
  });
  const kinds = (await pool.query('SELECT kind, amount_ink, note FROM ledger_journal WHERE account_id = $1 AND request_id IS NULL ORDER BY id', [a.accountId]))
    .rows;
  t.same(kinds, [
    { kind: 'topup', amount_ink: 1234, note: 'card' },
    { kind: 'grant', amount_ink: 100, note: 'admin grant' },
  ]);
  await t.rejects(ledger.topUp(a.accountId, 0), RangeError);
  await t.rejects(ledger.topUp(a.accountId, 1.5), RangeError);
  await t.rejects(ledger.topUp('usr_nobody', 10), /unknown account/);
  t.equal(await readAccountObject(pool, 'key_nobody'), undefined);
});

ledgerTest('roll-over: the unspent grant lapses, the plan grant is credited; an open old-period hold lapses its unused grant part', async (t, { ledger }) => {
  const a = await seedAccount(pool, { plan: 'starter', grantInk: 40, paygInk: 100 }); // starter grants 1000 a period
  const old = reserveOf(a, 60);
  t.match(await ledger.reserve(old), { grantInk: 40, paygInk: 20 });
  const spare = reserveOf(a, 10);
  await ledger.reserve(spare); // payg 10
  t.same(await ledger.rollPeriod(a.accountId), { expiredInk: 0, grantInk: 1000 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 1000, payg_ink: 70, expired_ink: 0, credited_ink: 1140 });

  // Charged 30 of the old hold: from its grant part; the other 10 of the old grant lapse, the 20 payg go back.
  t.same(await ledger.settle(old.requestId, 30), { resolved: true, chargedInk: 30, releasedInk: 20, expiredInk: 10 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 1000, payg_ink: 90, expired_ink: 10, charged_ink: 30 });
  t.match(await requestOf(old.requestId), { expired_ink: 10, charged_grant_ink: 30 });

  // A hold taken in the new period returns to the new grant as usual.
  const fresh = reserveOf(a, 100);
  t.match(await ledger.reserve(fresh), { grantInk: 100, paygInk: 0 });
  t.same(await ledger.release(fresh.requestId, 'upstream_rejected'), { resolved: true, chargedInk: 0, releasedInk: 100, expiredInk: 0 });

  // The next roll lapses the unspent grant (1000) and credits 1000 again.
  t.same(await ledger.rollPeriod(a.accountId), { expiredInk: 1000, grantInk: 1000 });
  t.match(await walletOf(pool, a.accountId), { grant_ink: 1000, expired_ink: 1010, credited_ink: 2140 });
  // A payg-only hold across a roll loses nothing.
  t.same(await ledger.release(spare.requestId, 'cancelled'), { resolved: true, chargedInk: 0, releasedInk: 10, expiredInk: 0 });
  t.match(await walletOf(pool, a.accountId), { payg_ink: 100 });
});

ledgerTest('the journal is append-only: UPDATE, DELETE and TRUNCATE are refused', async (t, { ledger }) => {
  const a = await seedAccount(pool, { paygInk: 100 });
  await ledger.reserve(reserveOf(a, 10));
  await t.rejects(pool.query('UPDATE ledger_journal SET amount_ink = 0 WHERE account_id = $1', [a.accountId]), /append-only/);
  await t.rejects(pool.query('DELETE FROM ledger_journal WHERE account_id = $1', [a.accountId]), /append-only/);
  // TRUNCATE needs the table's exclusive lock, which waits for every session that touched the
  // table (earlier tests' background clean-ups included) and can lose a deadlock check to one:
  // it runs on its own connection with room to wait, and a lock conflict (not the answer under
  // test) is tried again. The refusal itself must come from the trigger.
  let refusal: Error | undefined;
  for (let attempt = 0; attempt < 3 && refusal === undefined; attempt++) {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query("SET LOCAL lock_timeout = '15s'");
      await c.query({ text: 'TRUNCATE ledger_journal CASCADE', query_timeout: 20_000 } as QueryConfig);
      await c.query('ROLLBACK');
      t.fail('TRUNCATE was not refused');
      break;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      const code = (e as { code?: string }).code;
      if (code !== '40P01' && code !== '55P03') refusal = e as Error;
      else t.comment(`TRUNCATE attempt ${attempt + 1}: ${(e as Error).message}`);
    } finally {
      c.release();
    }
  }
  t.match(refusal?.message, /append-only/, 'TRUNCATE refused by the journal trigger');
  // A second resolution row for one hold is refused by the database itself.
  const r = reserveOf(a, 10);
  await ledger.reserve(r);
  await ledger.release(r.requestId, 'x');
  await t.rejects(
    pool.query(`INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink) VALUES (now(), 'settle', $1, $2, $3, 0)`, [
      a.accountId,
      a.keyIds[0],
      r.requestId,
    ]),
    /ledger_journal_one_resolution/,
  );
});

ledgerTest('listRequests shows the newest first with hold, charge and usage; bad input is refused before the database', async (t, { ledger, opts }) => {
  const a = await seedAccount(pool, { paygInk: 1000 });
  let clock = Date.parse('2026-09-01T00:00:00Z');
  const timed = new Ledger(pool, { ...opts, now: () => new Date((clock += 1000)) });
  try {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = reserveOf(a, 10 + i);
      ids.push(r.requestId);
      await timed.reserve(r);
    }
    await timed.settle(ids[0]!, 5, { usage: { outputTokens: 9 } });
    const list = await ledger.listRequests(a.accountId, { limit: 2 });
    t.same(
      list.map((r) => r.id),
      [ids[2], ids[1]],
    );
    t.match(list[0], { product: 'messages', model: 'assistant-opus-5', status: 'running', hold_ink: 12, charged_ink: 0, usage: null });
    const all = await ledger.listRequests(a.accountId);
    t.match(all[2], { id: ids[0], status: 'settled', charged_ink: 5, usage: { output_tokens: 9 } });
    await t.rejects(ledger.listRequests(a.accountId, { limit: 0 }), RangeError);
  } finally {
    await timed.close();
  }
  await t.rejects(ledger.reserve({ ...reserveOf(a, 10), requestId: 'bad id' }), RangeError);
  await t.rejects(ledger.reserve({ ...reserveOf(a, 10), holdInk: -1 }), RangeError);
  await t.rejects(ledger.reserve({ ...reserveOf(a, 10), holdInk: 2.5 }), RangeError);
  await t.rejects(ledger.settle(newRequestId(), -3), RangeError);
  const dup = reserveOf(a, 1);
  await ledger.reserve(dup);
  await t.rejects(ledger.reserve(dup), /already exists/);
  await t.rejects(ledger.reserve({ ...reserveOf(a, 1), keyId: 'key_other' }), /not a key of account/);
});

ledgerTest("inside the caller's transaction: a rolled-back reserve holds nothing, a committed one holds", async (t, { ledger }) => {
  const a = await seedAccount(pool, { grantInk: 10, paygInk: 100 });
  const before = await walletOf(pool, a.accountId);
  const gone = reserveOf(a, 30);
  const kept = reserveOf(a, 30);
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    t.match(await ledger.using(c).reserve(gone), { grantInk: 10, paygInk: 20 });
    await c.query('ROLLBACK');
    t.same(await walletOf(pool, a.accountId), before);
    t.equal(await requestOf(gone.requestId), undefined);

    await c.query('BEGIN');
    await ledger.using(c).reserve(kept);
    await c.query('COMMIT');
    await c.query('BEGIN');
    await t.rejects(ledger.using(c).reserve(reserveOf(a, 1000)), { code: 'insufficient_ink' });
    t.same(await ledger.using(c).settle(kept.requestId, 12), { resolved: true, chargedInk: 12, releasedInk: 18, expiredInk: 0 });
    t.same(await ledger.using(c).release(kept.requestId, 'x'), { resolved: false, reason: 'already_resolved' });
    await c.query('COMMIT');
  } finally {
    c.release();
  }
  t.match(await walletOf(pool, a.accountId), { grant_ink: 0, payg_ink: 98, charged_ink: 12 });
});

for (const batching of [true, false]) {
  t.test(`vendor ids named mid-stream by many streams at once are all recorded (batching ${batching})`, async (t) => {
    const ledger = new Ledger(pool, { batching });
    t.teardown(() => ledger.close());
    const a = await seedAccount(pool, { paygInk: 100_000 });
    const inputs = Array.from({ length: 60 }, () => reserveOf(a, 10));
    await Promise.all(inputs.map((i) => ledger.reserve(i)));
    const vid = (id: string) => `msg_${id.slice(4)}`;
    const watch = watchQueries(t, pool, (q) => q.name?.startsWith('ledger_set_vendor') === true);
    await Promise.all(inputs.map((i) => ledger.setVendorRequestId(i.requestId, vid(i.requestId))));
    watch.stop();
    const sent = watch.seen.map((q) => q.name);
    const { rows } = await pool.query<{ id: string; vendor_request_id: string; hold_state: string }>(
      'SELECT id, vendor_request_id, hold_state FROM requests WHERE id = ANY($1)',
      [inputs.map((i) => i.requestId)],
    );
    t.equal(rows.length, 60);
    for (const r of rows) t.same([r.vendor_request_id, r.hold_state], [vid(r.id), 'open'], `${r.id}: vendor id recorded, hold untouched`);
    if (batching)
      t.ok(sent.length >= 1 && sent.length < 60 && sent.every((n) => n === 'ledger_set_vendor_request_ids'), `${sent.length} statement(s) for 60 ids`);
    else t.equal(sent.length, 60, 'one statement per id without batching');
    for (const i of inputs) await ledger.release(i.requestId, 'test');
    await assertLedgerInvariant(t, pool);
  });
}

{
  // The instance stopped on a broken money rule (fail-stop.ts): no reserve, direct or inside a
  // caller's transaction (a generation submit), touches the store; it answers 503 at once.
  let stopped = false;
  ledgerTest(
    'once the instance is stopped, every reserve answers 503 and moves nothing',
    async (t, { ledger }) => {
      const a = await seedAccount(pool, { grantInk: 0, paygInk: 100 });
      stopped = false;
      const before = reserveOf(a, 10);
      await ledger.reserve(before);
      stopped = true;
      const direct = reserveOf(a, 10);
      await t.rejects(ledger.reserve(direct), { code: 'provider_unavailable', status: 503, retryAfterS: 1 });
      const inTx = reserveOf(a, 10);
      await t.rejects(ledger.using(pool).reserve(inTx), { code: 'provider_unavailable', status: 503 });
      t.equal(await requestOf(direct.requestId), undefined, 'no record of the refused reserve');
      t.equal(await requestOf(inTx.requestId), undefined, 'nor of the one in a transaction');
      t.match(await walletOf(pool, a.accountId), { payg_ink: 90, held_payg_ink: 10 }, 'only the hold taken before the stop');
      // Ending what is open stays possible (a running request may still settle before the exit).
      t.match(await ledger.release(before.requestId, 'test'), { resolved: true });
    },
    { stopped: () => stopped },
  );
}
