// The ledger's invariant (src/ledger/invariant.ts), asserted against the real tables after every
// ledger test, plus the few rows a ledger test needs (account, wallet, keys).
import { randomBytes } from 'node:crypto';
import type { Test } from 'tap';
import { checkLedger } from '../../src/ledger/invariant.js';
import type { Pool } from '../../src/store/pool.js';

/** Asserts every ledger rule over the whole schema; returns the number of violations. */
export async function assertLedgerInvariant(t: Test, pool: Pool): Promise<number> {
  const found = await checkLedger(pool);
  for (const v of found) t.fail(`ledger invariant: ${v.rule}`, { found: v.rows });
  if (found.length === 0) t.pass('ledger invariant holds');
  return found.reduce((n, v) => n + v.count, 0);
}

/** Same rules, for property tests: the violations as text, without asserting. */
export async function ledgerViolations(pool: Pool): Promise<string[]> {
  return (await checkLedger(pool, 3)).map((v) => `${v.rule}: ${JSON.stringify(v.rows)}`);
}

let seq = 0;
const uniq = (): string => `${process.pid.toString(36)}${(++seq).toString(36)}${randomBytes(4).toString('hex')}`;

export interface SeededAccount {
  accountId: string;
  keyIds: string[];
}

/**
 * An account with a wallet and keys, credited through the journal (grant and top-up rows) so the
 * invariant holds from the start. `keyLimits[i]` is key i's cap (null: none).
 */
export async function seedAccount(
  pool: Pool,
  opts: { plan?: string; grantInk?: number; paygInk?: number; keyLimits?: Array<number | null> } = {},
): Promise<SeededAccount> {
  const accountId = `usr_${uniq()}`;
  const grant = opts.grantInk ?? 0;
  const payg = opts.paygInk ?? 0;
  const limits = opts.keyLimits ?? [null];
  const keyIds = limits.map(() => `key_${uniq()}`);
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('INSERT INTO accounts (id, name, plan_id) VALUES ($1, $2, $3)', [accountId, 'ledger test', opts.plan ?? 'pro']);
    await c.query('INSERT INTO wallets (account_id, grant_ink, payg_ink, credited_ink, topups_completed) VALUES ($1, $2, $3, $4, $5)', [
      accountId,
      grant,
      payg,
      grant + payg,
      payg > 0 ? 1 : 0,
    ]);
    if (grant > 0) {
      await c.query(
        `INSERT INTO ledger_journal (at, kind, account_id, amount_ink, grant_ink, credited_ink, note) VALUES (now(), 'grant', $1, $2, $2, $2, 'seed')`,
        [accountId, grant],
      );
    }
    if (payg > 0) {
      await c.query(
        `INSERT INTO ledger_journal (at, kind, account_id, amount_ink, payg_ink, credited_ink, note) VALUES (now(), 'topup', $1, $2, $2, $2, 'seed')`,
        [accountId, payg],
      );
    }
    for (let i = 0; i < keyIds.length; i++) {
      const id = keyIds[i]!;
      await c.query(`INSERT INTO api_keys (id, account_id, name, key_hash, prefix, last4, ink_limit) VALUES ($1, $2, 'test', $3, $4, 'abcd', $5)`, [
        id,
        accountId,
        randomBytes(32),
        'svc_' + randomBytes(4).toString('hex'),
        limits[i],
      ]);
    }
    await c.query('COMMIT');
  } catch (e) {
    await c.query('ROLLBACK');
    throw e;
  } finally {
    c.release();
  }
  return { accountId, keyIds };
}

export interface WalletRow {
  grant_ink: number;
  payg_ink: number;
  leased_grant_ink: number;
  leased_payg_ink: number;
  held_grant_ink: number;
  held_payg_ink: number;
  charged_ink: number;
  expired_ink: number;
  credited_ink: number;
}

export async function walletOf(pool: Pool, accountId: string): Promise<WalletRow> {
  const { rows } = await pool.query<WalletRow>(
    'SELECT grant_ink, payg_ink, leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, charged_ink, expired_ink, credited_ink FROM wallets WHERE account_id = $1',
    [accountId],
  );
  return rows[0]!;
}

export async function keyOf(pool: Pool, keyId: string): Promise<{ ink_limit: number | null; ink_charged: number; ink_reserved: number }> {
  const { rows } = await pool.query('SELECT ink_limit, ink_charged, ink_reserved FROM api_keys WHERE id = $1', [keyId]);
  return rows[0];
}

export const newRequestId = (): string => `req_${uniq()}`;
