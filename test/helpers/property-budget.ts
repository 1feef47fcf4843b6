// A time budget for a fast-check property. Past the budget, further runs (and shrink attempts) are
// skipped rather than run, so a slow machine ends the property instead of tap's timeout; and a
// property that passed with runs skipped FAILS: its runs are its strength, and a budget that
// silently cut them would report a weaker test as passing. Every property with a time budget uses
// this, so they all fail the same way.
import type { Test } from 'tap';

export interface PropertyBudget {
  /** True (and the run counted as skipped) once the budget is spent: the property body returns at once. */
  spent(): boolean;
  /** Passes when every one of `runs` ran; fails naming how many the budget cut. */
  check(t: Test, label: string, runs: number): void;
}

export function propertyBudget(budgetMs: number): PropertyBudget {
  const until = performance.now() + budgetMs;
  let skipped = 0;
  return {
    spent() {
      if (performance.now() <= until) return false;
      skipped++;
      return true;
    },
    check(t, label, runs) {
      if (skipped > 0) t.fail(`${label}: only ${runs - skipped} of ${runs} runs within the ${budgetMs / 1000} s budget`);
      else t.pass(`${label}: every property held, ${runs} runs`);
    },
  };
}
