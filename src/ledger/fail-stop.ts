// Fail-stop on a broken money rule. A LedgerAssertionError means this process's picture of the
// money is wrong; carrying on would move Ink on a wrong picture. So the first one stops the
// instance, once, the way a kill would but tidier:
//
//   1. billed admissions are refused at once (503 provider_unavailable with Retry-After);
//   2. the violation is logged at error level with every figure it compared;
//   3. the journal records already known good are written (the move that broke never made one);
//   4. the instance's leases are NOT returned: they expire and recovery, on another instance or
//      at the next start under the same instance id, turns them into durable holds as after a kill;
//   5. the process exits non-zero (FAIL_STOP_EXIT_CODE).
//
// Operational errors (a database away, a timeout) never come here: they keep their own paths.
import { ApiError } from '../errors.js';
import type { LedgerAssertionError } from './assertion.js';
import type { EventLog } from '../util/log.js';

/** EX_SOFTWARE (sysexits.h): an internal software error. A supervisor restarts the process. */
export const FAIL_STOP_EXIT_CODE = 70;

/** The answer to a billed request once the instance stopped: another instance serves it. */
export function stoppedAnswer(): ApiError {
  return new ApiError('provider_unavailable', {
    message: 'This gateway instance stopped on an internal ledger fault; retry on another instance.',
    retryAfterS: 1,
  });
}

export interface FailStopOptions {
  readonly log: EventLog;
  /** Stops admissions and moves, writes the known-good journal, keeps the leases (Escrow.halt). Bounded by its own timeouts. */
  readonly halt: () => Promise<void>;
  /** Ends the process (main.ts: process.exit); tests inject one to observe it. */
  readonly exit: (code: number) => void;
}

export class FailStop {
  private first: LedgerAssertionError | undefined;
  private done: Promise<void> | undefined;

  constructor(private readonly options: FailStopOptions) {}

  /** True once a money rule broke: nothing billed is admitted any more. */
  get stopped(): boolean {
    return this.first !== undefined;
  }

  /** The violation that stopped the instance. */
  get violation(): LedgerAssertionError | undefined {
    return this.first;
  }

  /** Resolves once the halt ran and exit was called (undefined while nothing broke). */
  get finished(): Promise<void> | undefined {
    return this.done;
  }

  /** The one handler: idempotent, never throws (its callers are catch blocks). */
  trip(err: LedgerAssertionError): void {
    if (this.first !== undefined) {
      this.options.log({ err: err.message, figures: err.figures }, 'ledger.assertion_after_fail_stop');
      return;
    }
    this.first = err;
    this.options.log(
      { err: err.message, figures: err.figures, stack: err.stack, note: 'admissions stopped; leases left for recovery; exiting' },
      'ledger.fail_stop',
    );
    this.done = (async () => {
      try {
        await this.options.halt();
      } catch (e) {
        this.options.log({ err: (e as Error).message }, 'ledger.fail_stop_halt_failed');
      }
      this.options.exit(FAIL_STOP_EXIT_CODE);
    })();
  }
}
