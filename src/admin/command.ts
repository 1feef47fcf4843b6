// The shape of an operator command: the CLI (cli.ts) parses argv, opens the database and runs one
// of these; a command returns something JSON-serialisable and throws Error with one clear line when
// it cannot do what was asked (exit 1), or UsageError when the command line itself is wrong (exit 2).
import type { Catalog } from '../catalog/models.js';
import type { Config } from '../config/config.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Pool } from '../store/pool.js';

/** The command line is wrong (an unknown command, a missing or bad flag or argument): exit status 2. */
export class UsageError extends Error {}

export interface AdminContext {
  pool: Pool;
  ledger: Ledger;
  config: Config;
  /** The model catalogue, loaded on first use. */
  catalog: () => Catalog;
  /** One line for the operator on stderr, beside the result (e.g. which setting a value came from). */
  note?: (line: string) => void;
}

export interface AdminCommand {
  /** One line: the command and its flags, e.g. `topup --account A --usd X`; required flags unbracketed. */
  usage: string;
  summary: string;
  /** Only a command that initialises a database may create the embedded one (every other refuses without one). */
  createsDatabase?: true;
  run(args: { flags: Record<string, string | true>; positional: string[] }, ctx: AdminContext): Promise<unknown>;
  /**
   * A check that finds a problem still prints its whole result; this names the problem in one line
   * (stderr) and makes the exit status 1. Undefined: the result is a success.
   */
  failure?(result: unknown): string | undefined;
}
