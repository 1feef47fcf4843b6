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

/** Throws LedgerAssertionError unless `condition`. `figures` is built only when the rule is broken. */
export function assertLedger(condition: boolean, message: string | (() => string), figures?: () => LedgerFigures): asserts condition {
  if (!condition) throw new LedgerAssertionError(typeof message === 'string' ? message : message(), figures?.() ?? {});
}

export function isLedgerAssertion(error: unknown): error is LedgerAssertionError {
  return error instanceof LedgerAssertionError;
}

/**
 * A Postgres integrity refusal (SQLSTATE class 23: a CHECK, foreign key, unique or not-null rule of
 * the schema) met by a money move, as the broken rule it is: the schema caught what the code should
 * never have sent. Undefined for any other failure (an outage, a lock timeout: operational) and for
 * a unique violation on one of `races` (constraints a concurrent insert may trip, which the caller
 * answers itself).
 */
export function schemaViolation(
  error: unknown,
  what: string,
  figures: LedgerFigures = {},
  races: ReadonlySet<string> = NO_RACES,
): LedgerAssertionError | undefined {
  const err = error as { code?: unknown; message?: unknown; constraint?: unknown; table?: unknown } | null;
  const code = err?.code;
  if (typeof code !== 'string' || !/^23[0-9A-Z]{3}$/.test(code)) return undefined;
  const text = (v: unknown) => (typeof v === 'string' ? v : null);
  const constraint = text(err!.constraint);
  if (code === '23505' && constraint !== null && races.has(constraint)) return undefined;
  return new LedgerAssertionError(`${what} broke an integrity rule of the schema: ${text(err!.message) ?? code}`, {
    sqlstate: code,
    constraint,
    table: text(err!.table),
    ...figures,
  });
}
const NO_RACES: ReadonlySet<string> = new Set();

/** Whole Ink: a safe integer, never negative. */
export const wholeNonNegative = (n: number): boolean => Number.isSafeInteger(n) && n >= 0;
