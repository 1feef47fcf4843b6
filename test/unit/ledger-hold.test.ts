// The hold's life: every legal transition, every illegal one refused with a LedgerAssertionError,
// and the postconditions (grant part + payg part = hold; charged + released = hold, source by source).
import t from 'tap';
import { CheckedHold, LedgerAssertionError, type HoldState } from '../../src/ledger/hold.js';

const STATES: readonly HoldState[] = ['reserved', 'dispatched', 'settled', 'released', 'unknown'];
const LEGAL = new Set(['reserved>dispatched', 'reserved>released', 'dispatched>settled', 'dispatched>released', 'dispatched>unknown']);

/** A hold brought to `state` by legal moves. */
function holdIn(state: HoldState): CheckedHold {
  const h = new CheckedHold('req_t', 10, 4, 6);
  if (state === 'reserved') return h;
  if (state === 'released') {
    h.release();
    return h;
  }
  h.dispatch();
  if (state === 'settled') h.settle(3);
  if (state === 'unknown') h.markUnknown();
  return h;
}

function moveTo(h: CheckedHold, to: HoldState): void {
  if (to === 'dispatched') h.dispatch();
  else if (to === 'settled') h.settle(1);
  else if (to === 'released') h.release();
  else if (to === 'unknown') h.markUnknown();
  // No method moves a hold back to reserved: the last test below checks the class has none.
}

t.test('every pair of states: legal moves move, the rest throw and leave the hold as it was', async (t) => {
  for (const from of STATES) {
    for (const to of STATES) {
      const h = holdIn(from);
      t.equal(h.state, from);
      if (to === 'reserved') continue; // no such move to call (checked below)
      if (LEGAL.has(`${from}>${to}`)) {
        moveTo(h, to);
        t.equal(h.state, to, `${from} -> ${to}`);
      } else {
        t.throws(() => moveTo(h, to), LedgerAssertionError, `${from} -> ${to} is refused`);
        t.equal(h.state, from, `${from} stays ${from}`);
      }
    }
  }
  t.ok(holdIn('settled').ended && holdIn('released').ended && holdIn('unknown').ended);
  t.notOk(holdIn('reserved').ended || holdIn('dispatched').ended);
});

t.test('a settle charges grant first; charged + released = hold, source by source', async (t) => {
  for (let charge = 0; charge <= 10; charge++) {
    const h = holdIn('dispatched');
    const o = h.settle(charge);
    t.equal(o.chargedInk + o.releasedInk, 10);
    t.equal(o.chargedGrantInk, Math.min(charge, 4));
    t.equal(o.releasedGrantInk + o.releasedPaygInk, o.releasedInk);
    t.equal(o.releasedGrantInk, 4 - Math.min(charge, 4));
  }
  t.same(holdIn('reserved').release(), { chargedInk: 0, releasedInk: 10, chargedGrantInk: 0, releasedGrantInk: 4, releasedPaygInk: 6 });
});

t.test('amounts that break the rules are refused', async (t) => {
  t.throws(() => new CheckedHold('req_a', 10, 4, 5), LedgerAssertionError, 'grant + payg != hold');
  t.throws(() => new CheckedHold('req_b', 10, -1, 11), LedgerAssertionError, 'a negative part');
  t.throws(() => new CheckedHold('req_c', 1.5, 1.5, 0), LedgerAssertionError, 'not whole Ink');
  t.throws(() => holdIn('dispatched').settle(11), LedgerAssertionError, 'a charge above the hold');
  t.throws(() => holdIn('dispatched').settle(-1), LedgerAssertionError, 'a negative charge');
  const h = holdIn('dispatched');
  t.throws(() => h.settle(2.5), LedgerAssertionError);
  t.equal(h.state, 'dispatched', 'a refused settle moves nothing');
});

t.test('a hold has no way back to reserved: its only moves are dispatch, settle, release and markUnknown', async (t) => {
  const methods = Object.getOwnPropertyNames(CheckedHold.prototype).filter(
    (n) => n !== 'constructor' && typeof Object.getOwnPropertyDescriptor(CheckedHold.prototype, n)?.value === 'function',
  );
  // checkEnd and figures read the hold and move nothing (checked below); assertMove and outcome are private checks.
  t.same(methods.filter((n) => !['assertMove', 'outcome', 'checkEnd', 'figures'].includes(n)).sort(), ['dispatch', 'markUnknown', 'release', 'settle']);
  for (const from of STATES) t.equal(holdIn(from).state, from, `${from} reached only forwards from reserved`);
});

t.test('checkEnd asserts an end without making it', async (t) => {
  for (const from of STATES) {
    const h = holdIn(from);
    const legalSettle = from === 'reserved' || from === 'dispatched';
    if (legalSettle) t.same(h.checkEnd('settle', 3), { chargedInk: 3, releasedInk: 7, chargedGrantInk: 3, releasedGrantInk: 1, releasedPaygInk: 6 });
    else t.throws(() => h.checkEnd('settle', 3), LedgerAssertionError, `${from}: no settle`);
    if (LEGAL.has(`${from}>released`)) t.equal(h.checkEnd('release', 0).releasedInk, 10);
    else t.throws(() => h.checkEnd('release', 0), LedgerAssertionError, `${from}: no release`);
    t.equal(h.state, from, `${from}: checkEnd moved nothing`);
  }
  t.throws(() => holdIn('dispatched').checkEnd('release', 1), LedgerAssertionError, 'a release that charges');
  t.throws(() => holdIn('dispatched').checkEnd('settle', 11), LedgerAssertionError, 'a charge above the hold');
  const e = t.throws(() => holdIn('dispatched').checkEnd('settle', 11)) as unknown as LedgerAssertionError;
  t.match(e.figures, { request_id: 'req_t', hold_ink: 10, charge_ink: 11 }, 'the violation carries its figures');
});
