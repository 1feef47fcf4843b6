// The lease guards itself: every move that would break a bound throws LedgerAssertionError before it
// changes anything (the figures after a refusal are the figures before it), and every legal move
// keeps took = spare + in flight + spent, source by source.
import t, { type Test } from 'tap';
import { LedgerAssertionError } from '../../src/ledger/assertion.js';
import { LocalLease } from '../../src/ledger/lease.js';
import { FAIL_STOP_EXIT_CODE, FailStop } from '../../src/ledger/fail-stop.js';

const FAR_MS = Number.MAX_SAFE_INTEGER;

/** A live lease holding 40 grant + 60 pay-as-you-go Ink. */
function lease(): LocalLease {
  const l = new LocalLease(7, 'acc_1', 'key_1', 1, FAR_MS);
  l.add(40, 60);
  return l;
}

/** Asserts `move` throws LedgerAssertionError naming `bound`, and leaves every figure as it was. */
function refuses(t: Test, l: LocalLease, bound: RegExp, move: () => unknown): void {
  const before = l.figures();
  const e = t.throws(move, LedgerAssertionError) as unknown as LedgerAssertionError;
  t.match(e?.message, bound, `the message names the bound (${String(bound)})`);
  t.equal(e?.figures?.lease_id, 7, 'the figures name the lease');
  t.same(l.figures(), before, 'nothing changed');
}

t.test('take: grant first; spare never negative; only a live lease in time', async (t) => {
  const l = lease();
  t.same(l.take(50, 0), { grantInk: 40, paygInk: 10 });
  t.same([l.spareGrantInk, l.sparePaygInk, l.inFlight], [0, 50, 1]);
  t.equal(l.take(51, 0), undefined, 'more than spare: no hold, nothing moved');
  t.equal(l.spareInk, 50);
  refuses(t, l, /take: the hold is not whole Ink/, () => l.take(1.5, 0));
  refuses(t, l, /take: the hold is not whole Ink/, () => l.take(-1, 0));
  t.equal(l.take(1, FAR_MS), undefined, 'past its deadline: no hold');
  l.drain();
  t.equal(l.take(1, 0), undefined, 'draining: no hold');
});

t.test('end: gives back exactly what the hold released, or refuses before any change', async (t) => {
  const l = lease();
  l.take(50, 0); // 40 grant + 10 payg in flight
  refuses(t, l, /end: the lease would give back 10 \+ 10, the hold released 0 \+ 10/, () => l.end('req_x', 40, 10, 30, 0, 10));
  refuses(t, l, /end:/, () => l.end('req_x', 40, 10, 51, 0, 0)); // a charge above the hold
  refuses(t, l, /end:/, () => l.end('req_x', 41, 10, 0, 41, 10)); // more grant than is in flight
  refuses(t, l, /end:/, () => l.end('req_x', 40, 10, -1, 41, 10));
  t.same(l.end('req_x', 40, 10, 30, 10, 10), { restGrantInk: 10, restPaygInk: 10 }, 'charge 30: grant first, 10 + 10 back');
  t.same([l.spareGrantInk, l.sparePaygInk, l.pendingInk, l.inFlight], [10, 60, 20, 0]);
  refuses(t, l, /end:/, () => l.end('req_y', 0, 0, 0, 0, 0)); // no hold in flight
  refuses(t, l, /endKept: no such hold in flight/, () => l.endKept('req_y', 0, 0));
});

t.test('endKept: the whole hold leaves, nothing comes back', async (t) => {
  const l = lease();
  l.take(20, 0);
  refuses(t, l, /endKept/, () => l.endKept('req_k', 21, 0));
  t.same(l.endKept('req_k', 20, 0), { restGrantInk: 0, restPaygInk: 0 });
  t.same([l.spareGrantInk, l.sparePaygInk, l.inFlight, l.pendingInk], [20, 60, 0, 0]);
});

t.test('written: never more than is pending, never more records than were taken', async (t) => {
  const l = lease();
  l.take(10, 0);
  l.end('req_w', 10, 0, 4, 6, 0);
  refuses(t, l, /written: more written back than is pending/, () => l.written(7, 0));
  refuses(t, l, /written:/, () => l.written(0, 1));
  l.written(6, 0);
  t.equal(l.pendingInk, 0);
  t.equal(l.unwritten, 0);
  refuses(t, l, /written:/, () => l.written(0, 0)); // no record left to write
});

t.test('returns: only spare above pending leaves; an undone return comes back whole', async (t) => {
  const l = lease();
  l.take(30, 0);
  l.end('req_r', 30, 0, 0, 30, 0); // 30 grant back, pending
  const r = l.beginReturn();
  t.same(r, { grantInk: 10, paygInk: 60 }, 'pending Ink stays until its end is written');
  t.same([l.spareGrantInk, l.sparePaygInk], [30, 0]);
  l.undoReturn(r.grantInk, r.paygInk);
  t.same([l.spareGrantInk, l.sparePaygInk], [40, 60]);
  refuses(t, l, /add: not whole Ink/, () => l.add(-1, 0));
  refuses(t, l, /undoReturn: not whole Ink/, () => l.undoReturn(0.5, 0));
  l.close();
  refuses(t, l, /add: not whole Ink, or the lease is closed/, () => l.add(1, 0));
});

t.test('the fail-stop: one trip, logged with figures, halt before exit, exit non-zero', async (t) => {
  const steps: string[] = [];
  const lines: Array<{ msg: string; fields: Record<string, unknown> }> = [];
  const fs = new FailStop({
    log: (fields, msg) => void lines.push({ msg, fields }),
    halt: async () => void steps.push('halt'),
    exit: (code) => void steps.push(`exit ${code}`),
  });
  t.notOk(fs.stopped);
  const e = new LedgerAssertionError('lease 7: broken', { lease_id: 7, spare_grant_ink: -1 });
  fs.trip(e);
  t.ok(fs.stopped, 'stopped at once, before the halt ran');
  fs.trip(new LedgerAssertionError('a second one'));
  await fs.finished;
  t.same(steps, ['halt', `exit ${FAIL_STOP_EXIT_CODE}`], 'halt, then one exit');
  t.not(FAIL_STOP_EXIT_CODE, 0, 'non-zero');
  t.equal(fs.violation, e, 'the first violation is the one kept');
  t.match(lines[0], { msg: 'ledger.fail_stop', fields: { figures: { lease_id: 7, spare_grant_ink: -1 } } });
  t.match(lines[1], { msg: 'ledger.assertion_after_fail_stop' });
});
