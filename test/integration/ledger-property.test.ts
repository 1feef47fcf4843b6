// Property test: random sequences of reserve / settle / release / refund / usage-unknown / top-up /
// grant / roll-over / cap edits against a small in-memory model, some steps run as concurrent
// groups spread over two ledgers (one batching, one not). After every step the database must agree
// with the model and the ledger invariant must hold.
//
// Sequential steps are predicted exactly (outcome, split, every balance). A concurrent group's
// outcome depends on the interleaving, so the model takes the outcomes the database reports and
// checks they are possible: each resolved hold wins once, splits add up, no pool goes below zero,
// a key that took a hold in the group ends within its cap, and every balance then matches.
import fc from 'fast-check';
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { Ledger, type Hold, type ResolveResult } from '../../src/ledger/ledger.js';
import { testDb } from '../helpers/db.js';
import { keyOf, ledgerViolations, newRequestId, seedAccount, walletOf, type WalletRow } from '../helpers/ledger-invariant.js';

const db = await testDb(t);
const pool = db.pool;
const PLAN_GRANT = 1000; // the 'starter' plan's period grant

type Op =
  | { op: 'reserve'; key: number; hold: number }
  | { op: 'settle'; pick: number; charge: number }
  | { op: 'release'; pick: number }
  | { op: 'refund'; pick: number }
  | { op: 'unknown'; pick: number }
  | { op: 'topup'; ink: number }
  | { op: 'grant'; ink: number }
  | { op: 'roll' }
  | { op: 'limit'; key: number; limit: number | null };
type Step = { kind: 'one' | 'group'; ops: Op[] };

const pick = fc.nat({ max: 1000 });
const concurrentOp: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('reserve' as const),
      key: fc.integer({ min: 0, max: 1 }),
      hold: fc.integer({ min: 0, max: 30 }).map((x) => x * 10),
    }),
  },
  // (Multiples of 10 make exact fits, at the wallet and at the cap, common.)
  { weight: 3, arbitrary: fc.record({ op: fc.constant('settle' as const), pick, charge: fc.integer({ min: 0, max: 40 }).map((x) => x * 10) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('release' as const), pick }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('refund' as const), pick }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('unknown' as const), pick }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('topup' as const), ink: fc.integer({ min: 1, max: 30 }).map((x) => x * 10) }) },
);
const soloOp: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('roll' as const) }),
  fc.record({ op: fc.constant('grant' as const), ink: fc.integer({ min: 1, max: 20 }).map((x) => x * 10) }),
  fc.record({
    op: fc.constant('limit' as const),
    key: fc.integer({ min: 0, max: 1 }),
    limit: fc.option(
      fc.integer({ min: 0, max: 150 }).map((x) => x * 10),
      { nil: null },
    ),
  }),
);
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: concurrentOp.map((o) => ({ kind: 'one' as const, ops: [o] })) },
  { weight: 1, arbitrary: soloOp.map((o) => ({ kind: 'one' as const, ops: [o] })) },
  { weight: 2, arbitrary: fc.array(concurrentOp, { minLength: 2, maxLength: 8 }).map((ops) => ({ kind: 'group' as const, ops })) },
);

interface MHold {
  id: string;
  key: number;
  hold: number;
  g: number;
  p: number;
  period: number;
  open: boolean;
}

class Model {
  w: WalletRow;
  period = 0;
  keys: Array<{ limit: number | null; charged: number; reserved: number }>;
  holds: MHold[] = [];
  constructor(grant: number, payg: number, limits: Array<number | null>) {
    this.w = {
      grant_ink: grant,
      payg_ink: payg,
      leased_grant_ink: 0,
      leased_payg_ink: 0,
      held_grant_ink: 0,
      held_payg_ink: 0,
      charged_ink: 0,
      expired_ink: 0,
      credited_ink: grant + payg,
    };
    this.keys = limits.map((limit) => ({ limit, charged: 0, reserved: 0 }));
  }
  /** What a reserve must do when it runs alone. */
  predictReserve(key: number, hold: number): 'key_ink_limit_reached' | 'insufficient_ink' | { g: number; p: number } {
    const k = this.keys[key]!;
    if (k.limit !== null && k.charged + k.reserved + hold > k.limit) return 'key_ink_limit_reached';
    if (this.w.grant_ink + this.w.payg_ink < hold) return 'insufficient_ink';
    const g = Math.min(this.w.grant_ink, hold);
    return { g, p: hold - g };
  }
  applyReserve(id: string, key: number, hold: number, g: number, p: number): void {
    if (g + p !== hold || g < 0 || p < 0) throw new Error(`split ${g}+${p} is not ${hold}`);
    this.w.grant_ink -= g;
    this.w.payg_ink -= p;
    this.w.held_grant_ink += g;
    this.w.held_payg_ink += p;
    this.keys[key]!.reserved += hold;
    this.holds.push({ id, key, hold, g, p, period: this.period, open: true });
  }
  /** Resolves an open hold; returns what the ledger must report. */
  applyResolve(h: MHold, kind: 'settle' | 'release' | 'refund', charge: number): ResolveResult {
    if (!h.open) throw new Error(`${h.id} resolved twice`);
    h.open = false;
    const c = kind === 'settle' ? Math.min(charge, h.hold) : 0;
    const cg = Math.min(c, h.g);
    const cp = c - cg;
    let bg = h.g - cg;
    const bp = h.p - cp;
    let ex = 0;
    if (h.period !== this.period) {
      ex = bg;
      bg = 0;
    }
    this.w.grant_ink += bg;
    this.w.payg_ink += bp;
    this.w.held_grant_ink -= h.g;
    this.w.held_payg_ink -= h.p;
    this.w.charged_ink += c;
    this.w.expired_ink += ex;
    const k = this.keys[h.key]!;
    k.reserved -= h.hold;
    k.charged += c;
    return { resolved: true, chargedInk: c, releasedInk: bg + bp, expiredInk: ex };
  }
  checkNonNegative(): void {
    for (const [name, v] of Object.entries(this.w)) if (v < 0) throw new Error(`model pool ${name} below zero: ${v}`);
  }
}

async function compare(m: Model, accountId: string, keyIds: string[], where: string): Promise<void> {
  const w = await walletOf(pool, accountId);
  if (JSON.stringify(w) !== JSON.stringify(m.w)) throw new Error(`${where}: wallet ${JSON.stringify(w)} != model ${JSON.stringify(m.w)}`);
  for (let i = 0; i < keyIds.length; i++) {
    const k = await keyOf(pool, keyIds[i]!);
    const mk = m.keys[i]!;
    if (k.ink_limit !== mk.limit || k.ink_charged !== mk.charged || k.ink_reserved !== mk.reserved) {
      throw new Error(`${where}: key ${i} ${JSON.stringify(k)} != model ${JSON.stringify(mk)}`);
    }
  }
  const v = await ledgerViolations(pool);
  if (v.length > 0) throw new Error(`${where}: invariant broken: ${v.join('; ')}`);
}

const code = (e: unknown): string => (e instanceof ApiError ? e.code : `unexpected ${String(e)}`);

t.test('random move sequences, some concurrent, agree with the model and keep the invariant', async (t) => {
  // Per run: one ledger that groups (small batches), one that sends each move alone; lone moves go
  // through the single-move functions or, in half the runs, through the batch functions.
  let ledgers: Ledger[] = [];
  let runs = 0;
  let groups = 0;

  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 0, max: 30 }).map((x) => x * 10),
      fc.integer({ min: 0, max: 60 }).map((x) => x * 10),
      fc.tuple(
        fc.option(
          fc.integer({ min: 0, max: 80 }).map((x) => x * 10),
          { nil: null },
        ),
        fc.option(
          fc.integer({ min: 0, max: 80 }).map((x) => x * 10),
          { nil: null },
        ),
      ),
      fc.array(step, { minLength: 1, maxLength: 30 }),
      fc.boolean(),
      async (grant, payg, limits, steps, functionForSingles) => {
        runs++;
        ledgers = [new Ledger(pool, { batchMaxItems: 3, functionForSingles }), new Ledger(pool, { batching: false, functionForSingles })];
        try {
          await oneRun(grant, payg, limits, steps);
        } finally {
          await Promise.all(ledgers.map((l) => l.close()));
        }
      },
    ),
    {
      numRuns: 30,
      examples: [
        // A cap edited below what the key already holds stops new holds; the holds it let in stand
        // (the invariant once took this for an overspend).
        [
          100,
          0,
          [null, null],
          [
            { kind: 'one', ops: [{ op: 'reserve', key: 0, hold: 50 }] },
            { kind: 'one', ops: [{ op: 'limit', key: 0, limit: 10 }] },
            { kind: 'one', ops: [{ op: 'reserve', key: 0, hold: 10 }] },
            { kind: 'one', ops: [{ op: 'settle', pick: 0, charge: 30 }] },
          ],
          false,
        ],
      ],
    },
  );
  t.equal(runs >= 30, true, `${runs} runs`);
  t.ok(groups > 0, `${groups} concurrent groups ran`);

  async function oneRun(grant: number, payg: number, limits: [number | null, number | null], steps: Step[]): Promise<void> {
    const a = await seedAccount(pool, { plan: 'starter', grantInk: grant, paygInk: payg, keyLimits: limits });
    const m = new Model(grant, payg, limits);
    for (const [si, s] of steps.entries()) {
      const where = `step ${si} ${JSON.stringify(s)}`;
      if (s.kind === 'one') await runAlone(s.ops[0]!, m, a, where, ledgers[si % 2]!);
      else {
        groups++;
        await runGroup(s.ops, m, a, where);
      }
      m.checkNonNegative();
      await compare(m, a.accountId, a.keyIds, where);
    }
  }

  async function runAlone(o: Op, m: Model, a: { accountId: string; keyIds: string[] }, where: string, ledger: Ledger): Promise<void> {
    switch (o.op) {
      case 'reserve': {
        const id = newRequestId();
        const want = m.predictReserve(o.key, o.hold);
        const got = await ledger
          .reserve({ requestId: id, accountId: a.accountId, keyId: a.keyIds[o.key]!, product: 'messages', model: 'assistant-sonnet-5', holdInk: o.hold })
          .then((h) => ({ g: h.grantInk, p: h.paygInk }), code);
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${where}: reserve got ${JSON.stringify(got)}, model ${JSON.stringify(want)}`);
        if (typeof want === 'object') m.applyReserve(id, o.key, o.hold, want.g, want.p);
        return;
      }
      case 'settle':
      case 'release':
      case 'refund': {
        const h = m.holds[o.pick % Math.max(m.holds.length, 1)];
        if (!h) return;
        const want: ResolveResult = h.open ? m.applyResolve(h, o.op, o.op === 'settle' ? o.charge : 0) : { resolved: false, reason: 'already_resolved' };
        const got = o.op === 'settle' ? await ledger.settle(h.id, o.charge) : await ledger[o.op](h.id, 'property');
        if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${where}: ${o.op} got ${JSON.stringify(got)}, model ${JSON.stringify(want)}`);
        return;
      }
      case 'unknown': {
        const h = m.holds[o.pick % Math.max(m.holds.length, 1)];
        if (h) await ledger.markUsageUnknown(h.id, { vendorRequestId: `v_${h.id}` });
        return;
      }
      case 'topup':
        await ledger.topUp(a.accountId, o.ink);
        m.w.payg_ink += o.ink;
        m.w.credited_ink += o.ink;
        return;
      case 'grant':
        await ledger.grant(a.accountId, o.ink);
        m.w.grant_ink += o.ink;
        m.w.credited_ink += o.ink;
        return;
      case 'roll':
        await ledger.rollPeriod(a.accountId);
        m.w.expired_ink += m.w.grant_ink;
        m.w.grant_ink = PLAN_GRANT;
        m.w.credited_ink += PLAN_GRANT;
        m.period++;
        return;
      case 'limit':
        await pool.query('UPDATE api_keys SET ink_limit = $2 WHERE id = $1', [a.keyIds[o.key], o.limit]);
        m.keys[o.key]!.limit = o.limit;
        return;
    }
  }

  async function runGroup(ops: Op[], m: Model, a: { accountId: string; keyIds: string[] }, where: string): Promise<void> {
    const before = m.holds.length;
    type Done = { o: Op; id: string; r: Hold | string } | { o: Op; h: MHold; r: ResolveResult } | { o: Op };
    const tasks = ops.map(async (o, n): Promise<Done> => {
      const ledger = ledgers[n % 2]!;
      switch (o.op) {
        case 'reserve': {
          const id = newRequestId();
          const r = await ledger
            .reserve({ requestId: id, accountId: a.accountId, keyId: a.keyIds[o.key]!, product: 'messages', model: 'assistant-sonnet-5', holdInk: o.hold })
            .then((h) => h, code);
          return { o, id, r };
        }
        case 'settle':
        case 'release':
        case 'refund': {
          const h = before > 0 ? m.holds[o.pick % before] : undefined;
          if (!h) return { o };
          const r = o.op === 'settle' ? await ledger.settle(h.id, o.charge) : await ledger[o.op](h.id, 'property');
          return { o, h, r };
        }
        case 'unknown': {
          const h = before > 0 ? m.holds[o.pick % before] : undefined;
          if (h) await ledger.markUsageUnknown(h.id);
          return { o };
        }
        case 'topup':
          await ledger.topUp(a.accountId, o.ink);
          return { o };
        default:
          throw new Error(`${o.op} is not a concurrent op`);
      }
    });
    const results = await Promise.all(tasks);
    const tookHold = new Set<number>();
    for (const res of results) {
      const o = res.o;
      if (o.op === 'topup') {
        m.w.payg_ink += o.ink;
        m.w.credited_ink += o.ink;
      } else if (o.op === 'reserve' && 'id' in res) {
        const r = res.r as Hold | string;
        if (typeof r === 'string') {
          if (r !== 'insufficient_ink' && r !== 'key_ink_limit_reached') throw new Error(`${where}: reserve failed with ${r}`);
        } else {
          m.applyReserve(res.id!, o.key, o.hold, r.grantInk, r.paygInk);
          tookHold.add(o.key);
        }
      } else if ((o.op === 'settle' || o.op === 'release' || o.op === 'refund') && 'h' in res && res.h) {
        const r = res.r as ResolveResult;
        if (r.resolved) {
          const want = m.applyResolve(res.h, o.op, o.op === 'settle' ? o.charge : 0); // throws if a second winner
          if (JSON.stringify(r) !== JSON.stringify(want)) throw new Error(`${where}: ${o.op} got ${JSON.stringify(r)}, model ${JSON.stringify(want)}`);
        } else if (r.reason !== 'already_resolved') {
          throw new Error(`${where}: ${o.op} said ${r.reason}`);
        }
      }
    }
    // Every resolver that lost did lose to someone: its hold is closed now.
    for (const res of results) {
      if ('h' in res && res.h && !(res.r as ResolveResult).resolved && res.h.open) throw new Error(`${where}: ${res.h.id} refused but still open`);
    }
    for (const k of tookHold) {
      const mk = m.keys[k]!;
      if (mk.limit !== null && mk.charged + mk.reserved > mk.limit) throw new Error(`${where}: key ${k} over its cap: ${JSON.stringify(mk)}`);
    }
  }
});
