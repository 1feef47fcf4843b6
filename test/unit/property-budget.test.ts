// The property time budget (test/helpers/property-budget.ts): a property whose runs the budget cut
// fails, one that ran every run passes. The budget's clock is the real one; a budget of 0 is spent
// from the first run on and one of an hour never is, so no timing decides the outcome.
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { propertyBudget } from '../helpers/property-budget.js';

/** A Test stand-in that records what check() reported. */
function recorder(): { t: Test; said: string[] } {
  const said: string[] = [];
  const fake = { fail: (m: string) => said.push(`fail: ${m}`), pass: (m: string) => said.push(`pass: ${m}`) };
  return { t: fake as unknown as Test, said };
}

t.test('runs cut by the budget fail the property', async (t) => {
  const budget = propertyBudget(0);
  let ran = 0;
  await fc.assert(
    fc.asyncProperty(fc.integer(), async () => {
      if (budget.spent()) return;
      ran++;
    }),
    { numRuns: 20 },
  );
  const r = recorder();
  budget.check(r.t, 'cut', 20);
  t.equal(ran, 0, 'no run ran past the spent budget');
  t.same(r.said, ['fail: cut: only 0 of 20 runs within the 0 s budget']);
});

t.test('a property that ran every run within its budget passes', async (t) => {
  const budget = propertyBudget(3_600_000);
  let ran = 0;
  await fc.assert(
    fc.asyncProperty(fc.integer(), async () => {
      if (budget.spent()) return;
      ran++;
    }),
    { numRuns: 20 },
  );
  const r = recorder();
  budget.check(r.t, 'whole', 20);
  t.equal(ran, 20);
  t.same(r.said, ['pass: whole: every property held, 20 runs']);
});
