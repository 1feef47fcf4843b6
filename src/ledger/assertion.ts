// A broken money rule is a bug in this program, never a client's mistake nor an outage. It is
// thrown as LedgerAssertionError, carries every figure it compared, and is never caught to carry
// on: whoever meets one hands it to the fail-stop (fail-stop.ts), which stops the instance.

/** Figures a violated rule compared, logged with it (all numbers or short ids). */
export type LedgerFigures = Readonly<Record<string, number | string | boolean | null>>;

export class LedgerAssertionError extends Error {
  constructor(
    message: string,
    readonly figures: LedgerFigures = {},
  ) {
    super(message);
    this.name = 'LedgerAssertionError';
  }
}

/** Throws LedgerAssertionError unless `ok`. `figures` is built only when the rule is broken. */
export function assertLedger(ok: boolean, message: string | (() => string), figures?: () => LedgerFigures): asserts ok {
  if (!ok) throw new LedgerAssertionError(typeof message === 'string' ? message : message(), figures?.() ?? {});
}

export function isLedgerAssertion(e: unknown): e is LedgerAssertionError {
  return e instanceof LedgerAssertionError;
}

/** Whole Ink: a safe integer, never negative. */
export const wholeNonNegative = (n: number): boolean => Number.isSafeInteger(n) && n >= 0;
