// Overspend under concurrency: parallel reservations against one wallet and one key cap, in every
// way the gateway can run them (grouped into batches, one statement each, two gateway processes
// with their own pools racing). Exactness: the number that fit is the number that succeed.
import t, { type Test } from 'tap';
import type { ApiError } from '../../src/errors.js';
import { Ledger, type LedgerOptions } from '../../src/ledger/ledger.js';
import { createPool, type Pool } from '../../src/store/pool.js';
import { testDb } from '../helpers/db.js';
import { assertLedgerInvariant, keyOf, newRequestId, seedAccount, walletOf } from '../helpers/ledger-invariant.js';

const db = await testDb(t);
const pool = db.pool;

interface Mode {
  name: string;
  /** The ledgers the parallel calls are spread over (round robin). */
  make: () => Promise<{ ledgers: Ledger[]; done: () => Promise<void> }>;
}

const single =
  (opts: LedgerOptions): Mode['make'] =>
  async () => {
    const l = new Ledger(pool, opts);
    return { ledgers: [l], done: () => l.close() };
  };

const MODES: Mode[] = [
  { name: 'grouped into batches', make: single({}) },
  { name: 'small batches racing each other', make: single({ batchMaxItems: 4, batchMaxInFlight: 4 }) },
  { name: 'one statement per reserve', make: single({ batching: false }) },
  { name: 'one batch-function call per reserve', make: single({ batching: false, functionForSingles: true }) },
  {
    name: 'two gateway processes (two pools)',
    make: async () => {
      const other: Pool = createPool({ ...db.dbConfig, url: db.url, poolMax: 10 });
      const a = new Ledger(pool);
      const b = new Ledger(other, { batchMaxItems: 3 });
      const c = new Ledger(other, { batching: false });
      return {
        ledgers: [a, b, c],
        done: async () => {
          await Promise.all([a.close(), b.close(), c.close()]);
          await other.end();
        },
      };
    },
  },
];

async function race(ledgers: Ledger[], inputs: Array<Parameters<Ledger['reserve']>[0]>) {
  const settled = await Promise.allSettled(inputs.map((i, n) => ledgers[n % ledgers.length]!.reserve(i)));
  const ok = settled.filter((s) => s.status === 'fulfilled').length;
  const codes = settled.flatMap((s) => (s.status === 'rejected' ? [(s.reason as ApiError).code ?? String(s.reason)] : []));
  return { ok, codes };
}

const input = (accountId: string, keyId: string, holdInk: number) => ({
  requestId: newRequestId(),
  accountId,
  keyId,
  product: 'messages' as const,
  model: 'assistant-sonnet-5',
  holdInk,
});

for (const mode of MODES) {
  t.test(mode.name, async (t: Test) => {
    const { ledgers, done } = await mode.make();
    t.teardown(done);

    t.test('50 parallel reservations of 30 against 1,000 Ink: exactly 33 succeed', async (t) => {
      const a = await seedAccount(pool, { grantInk: 400, paygInk: 600 });
      const r = await race(
        ledgers,
        Array.from({ length: 50 }, () => input(a.accountId, a.keyIds[0]!, 30)),
      );
      t.equal(r.ok, 33);
      t.same(new Set(r.codes), new Set(['insufficient_ink']));
      const stats = ledgers[0]!.batchStats();
      if (stats && ledgers.length === 1) t.ok(stats.reserve.batches < stats.reserve.items, `grouped: ${JSON.stringify(stats.reserve)}`);
      t.match(await walletOf(pool, a.accountId), { grant_ink: 0, payg_ink: 10, held_grant_ink: 400, held_payg_ink: 590 });
      t.equal((await keyOf(pool, a.keyIds[0]!)).ink_reserved, 990);
      await assertLedgerInvariant(t, pool);
    });

    t.test('key cap 500 on a 10,000 wallet, 50 parallel x 30: exactly 16 succeed', async (t) => {
      const a = await seedAccount(pool, { paygInk: 10_000, keyLimits: [500] });
      const r = await race(
        ledgers,
        Array.from({ length: 50 }, () => input(a.accountId, a.keyIds[0]!, 30)),
      );
      t.equal(r.ok, 16);
      t.same(new Set(r.codes), new Set(['key_ink_limit_reached']));
      t.same(await keyOf(pool, a.keyIds[0]!), { ink_limit: 500, ink_charged: 0, ink_reserved: 480 });
      t.match(await walletOf(pool, a.accountId), { payg_ink: 10_000 - 480 });
      await assertLedgerInvariant(t, pool);
    });

    t.test('two keys of one account racing: neither the wallet nor either cap is exceeded', async (t) => {
      const a = await seedAccount(pool, { grantInk: 100, paygInk: 900, keyLimits: [600, 600] });
      const inputs = Array.from({ length: 60 }, (_, n) => input(a.accountId, a.keyIds[n % 2]!, 30));
      const r = await race(ledgers, inputs);
      // The wallet fits 33; each cap fits 20, so both caps together (40) never bind before the wallet.
      t.equal(r.ok, 33);
      const [k1, k2] = [await keyOf(pool, a.keyIds[0]!), await keyOf(pool, a.keyIds[1]!)];
      t.ok(k1.ink_reserved <= 600 && k2.ink_reserved <= 600, `caps hold: ${k1.ink_reserved}, ${k2.ink_reserved}`);
      t.equal(k1.ink_reserved + k2.ink_reserved, 990);
      t.match(await walletOf(pool, a.accountId), { grant_ink: 0, payg_ink: 10 });
      await assertLedgerInvariant(t, pool);
    });

    t.test('reserves, settles, releases and top-ups all racing on one wallet keep every rule', async (t) => {
      const a = await seedAccount(pool, { grantInk: 200, paygInk: 300, keyLimits: [700, null] });
      const ops: Array<Promise<unknown>> = [];
      for (let n = 0; n < 80; n++) {
        const i = input(a.accountId, a.keyIds[n % 2]!, 10 + (n % 7) * 5);
        ops.push(
          ledgers[n % ledgers.length]!.reserve(i).then(
            () => (n % 3 === 0 ? ledgers[(n + 1) % ledgers.length]!.settle(i.requestId, n % 50) : ledgers[0]!.release(i.requestId, 'x')),
            (e: ApiError) => t.ok(e.code === 'insufficient_ink' || e.code === 'key_ink_limit_reached', e.code),
          ),
        );
        if (n % 20 === 0) ops.push(ledgers[0]!.topUp(a.accountId, 50));
      }
      await Promise.all(ops);
      const w = await walletOf(pool, a.accountId);
      t.equal(w.held_grant_ink + w.held_payg_ink, 0, 'every hold resolved');
      t.equal(w.credited_ink, 500 + 4 * 50);
      const k1 = await keyOf(pool, a.keyIds[0]!);
      t.ok(k1.ink_charged <= 700, 'the cap holds for charges too');
      await assertLedgerInvariant(t, pool);
    });
  });
}

t.test('a full queue refuses at once with 503, leaving no hold; close() finishes what was submitted', async (t) => {
  const ledger = new Ledger(pool, { batchMaxItems: 1, batchMaxQueued: 1, batchMaxInFlight: 1 });
  const a = await seedAccount(pool, { paygInk: 1000 });
  const inputs = Array.from({ length: 4 }, () => input(a.accountId, a.keyIds[0]!, 10));
  const settled = await Promise.allSettled(inputs.map((i) => ledger.reserve(i)));
  const refused = settled.filter((s) => s.status === 'rejected');
  t.ok(refused.length >= 1, `${refused.length} refused`);
  for (const r of refused) t.match((r as PromiseRejectedResult).reason, { code: 'provider_unavailable', status: 503, message: /overloaded/ });
  const ok = settled.filter((s) => s.status === 'fulfilled').length;
  t.equal((await keyOf(pool, a.keyIds[0]!)).ink_reserved, ok * 10, 'only the accepted ones hold Ink');

  const pending = ledger.settle(inputs[0]!.requestId, 3);
  await ledger.close();
  t.match(await pending, { resolved: true, chargedInk: 3 }, 'a move submitted before close() completes');
  await t.rejects(ledger.reserve(input(a.accountId, a.keyIds[0]!, 1)), /closed/);
  const cleanup = new Ledger(pool);
  for (const [n, s] of settled.entries()) if (s.status === 'fulfilled' && n > 0) await cleanup.release(inputs[n]!.requestId, 'cleanup');
  await cleanup.close();
  await assertLedgerInvariant(t, pool);
});
