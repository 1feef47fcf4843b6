// The Idempotency-Key claim at the store, with each instance's own clock: a refused claim is taken
// over by a submit that saw that refusal at its first look, even when that submit's instance runs
// behind the one that recorded the refusal; never by one that did not see it (a duplicate of the
// refused submit, owed its refusal).
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { claimKey, keyState, settleClaim } from '../../src/generations/idempotency.js';
import { testDb } from '../helpers/db.js';
import { seedAccount } from '../helpers/ledger-invariant.js';

t.test('a refused claim: taken over by the submit that saw the refusal, whatever the clocks; not by one that did not', async (t) => {
  const db = await testDb(t);
  const { keyIds } = await seedAccount(db.pool, { paygInk: 1000 });
  const keyId = keyIds[0]!;
  const idemKey = 'skewed-clocks';
  const refusingMs = Date.parse('2026-11-28T12:00:00Z');
  // Instance A claims the key and its submit is refused (the refusal recorded on A's clock).
  t.ok(await claimKey(db.pool, keyId, 'video', idemKey, 'vgen_refused', refusingMs, 30_000, null), 'the first submit claims the key');
  const clock = () => refusingMs;
  await settleClaim(db.pool, { keyId, product: 'video', idemKey, clock, generationId: 'vgen_refused', committed: false }, new ApiError('insufficient_ink'));
  const st = await keyState(db.pool, keyId, 'video', idemKey, refusingMs);
  t.equal(st.kind, 'refused', 'the key holds the refusal');
  const refusedAt = st.kind === 'refused' ? st.refusedAt : null;

  // Instance B runs 5 s behind A. A submit that never saw the refusal is a duplicate: no takeover.
  const behindMs = refusingMs - 5_000;
  t.notOk(
    await claimKey(db.pool, keyId, 'video', idemKey, 'vgen_duplicate', behindMs, 30_000, null),
    'a submit that did not see the refusal does not take the key',
  );
  // A submit on B that saw this refusal at its first look came after it: it takes the key.
  t.ok(
    await claimKey(db.pool, keyId, 'video', idemKey, 'vgen_after', behindMs, 30_000, refusedAt),
    'the submit that saw the refusal takes the key, though its clock is behind',
  );
  const now = await keyState(db.pool, keyId, 'video', idemKey, behindMs);
  t.equal(now.kind, 'in_use', 'held by the new submit');
});
