// Teardown that cannot hang a test file. tap runs a test's teardowns last-registered first and
// stops at the first one that rejects: the ones registered before it (often the servers a stack
// started first) never run, their handles keep the process alive, and the file sits until tap's
// timeout. A bounded teardown races its work with a timer and reports a failure or an overrun as the
// test's failure (t.threw) without rejecting, so the teardowns before it still run.
import type { Test } from 'tap';

/** Resolves with `work`, or rejects after `ms` with an error naming `what` (the timer never outlives it). */
export async function withinMs<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Registers `fn` as a teardown of `t`, bounded by `ms`. A rejection or an overrun fails the test
 * with a message naming `what`; the teardowns registered before this one still run.
 */
export function boundedTeardown(t: Test, what: string, fn: () => unknown, ms: number): void {
  t.teardown(async () => {
    try {
      await withinMs(Promise.resolve().then(fn), ms, `teardown: ${what}`);
    } catch (e) {
      t.threw(e instanceof Error ? e : new Error(`teardown: ${what}: ${String(e)}`));
    }
  });
}
