// The embedded default's first run: a demo account on a paid plan with some Ink and one key,
// printed once and written to $INKGATE_DATA_DIR/demo-key (0600) so curl works at once.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createAccount, createKey } from '../accounts/accounts.js';
import type { Config } from '../config/config.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Pool } from '../store/pool.js';

export const demoKeyPath = (cfg: Config): string => join(cfg.dataDir, 'demo-key');

/**
 * Whether this start may create the demo account: only under `npm run demo` or on the embedded
 * PostgreSQL this process (or a sibling) started. Never on a database named by DATABASE_URL: an
 * operator's fresh production database must not get a funded account with a key on disk.
 */
export function demoAccountAllowed(cfg: Config, start: { demo: boolean; dbKind: 'external' | 'embedded' | 'embedded-shared' }): boolean {
  return cfg.demo.createAccount && (start.demo || start.dbKind !== 'external');
}

/** Creates the demo account when the database has no accounts yet; returns the raw key when it did. */
export async function ensureDemoAccount(cfg: Config, pool: Pool, ledger: Ledger): Promise<string | undefined> {
  if (!cfg.demo.createAccount) return undefined;
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM accounts');
  if (rows[0]!.n > 0) return undefined;
  const acc = await createAccount(pool, { name: 'Demo', planId: 'pro' });
  if (cfg.demo.paygUsd > 0) await ledger.topUp(acc.id, cfg.demo.paygUsd * 100, 'demo account');
  if (cfg.demo.grantInk > 0) await ledger.grant(acc.id, cfg.demo.grantInk);
  const key = await createKey(pool, { accountId: acc.id, name: 'demo' });
  mkdirSync(cfg.dataDir, { recursive: true });
  writeFileSync(demoKeyPath(cfg), key.key + '\n', { mode: 0o600 });
  return key.key;
}

export const hasDemoKey = (cfg: Config): boolean => existsSync(demoKeyPath(cfg));
