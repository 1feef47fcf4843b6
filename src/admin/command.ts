// The shape of an operator command: the lead's CLI (cli.ts) parses argv, opens the database and
// runs one of these; a command returns something JSON-serialisable and throws Error with one
// clear line when it cannot do what was asked.
import type { Catalog } from '../catalog/models.js';
import type { Config } from '../config/config.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Pool } from '../store/pool.js';

export interface AdminContext {
  pool: Pool;
  ledger: Ledger;
  config: Config;
  /** The model catalogue, loaded on first use. */
  catalog: () => Catalog;
}

export interface AdminCommand {
  /** One line: the command and its flags, e.g. `topup --account A --usd X`. */
  usage: string;
  summary: string;
  run(args: { flags: Record<string, string | true>; positional: string[] }, ctx: AdminContext): Promise<unknown>;
  /** The exit status for a result (default 0): a check that finds a problem exits 1 after printing it. */
  exitCode?(result: unknown): number;
}
