// Table reads and the engine-driving loop the video and image tests share.
import type { Pool } from '../../src/store/pool.js';
import type { Reply } from './gateway.js';

interface HasPool {
  readonly services: { readonly pool: Pool };
}
interface Steppable {
  get(key: string, id: string): Promise<Reply>;
  step(ms: number): Promise<number>;
}

/** The generation's row and its ledger request, straight from the tables. */
export async function rowOf(h: HasPool, id: string): Promise<Record<string, any>> {
  const r = await h.services.pool.query(
    `SELECT g.*, r.hold_state, r.charged_ink AS ledger_charged, r.hold_ink AS ledger_hold, r.usage AS ledger_usage, r.product AS ledger_product
       FROM generations g JOIN requests r ON r.id = g.request_id WHERE g.id = $1`,
    [id],
  );
  return r.rows[0];
}

export async function walletOf(h: HasPool, accountId: string): Promise<{ balance: number; held: number; charged: number }> {
  const r = await h.services.pool.query(
    'SELECT grant_ink + payg_ink AS balance, held_grant_ink + held_payg_ink AS held, charged_ink AS charged FROM wallets WHERE account_id = $1',
    [accountId],
  );
  return r.rows[0];
}

/** Runs engine rounds, advancing `stepMs` before each, until the generation is terminal (at most `max` rounds). */
export async function runToEnd(h: Steppable, key: string, id: string, stepMs: number, max = 40): Promise<Record<string, any>> {
  for (let i = 0; i < max; i++) {
    const g = (await h.get(key, id)).json;
    if (g.status === 'succeeded' || g.status === 'failed') return g;
    await h.step(stepMs);
  }
  throw new Error(`generation ${id} did not finish in ${max} rounds`);
}

/**
 * Holds the next vendor create call of an Ark simulator until `release()`: `entered` resolves when
 * that call is inside the vendor (the submit has committed its hold and generation row). Only that
 * one call is held; later creates run as usual.
 */
export function holdNextCreate(sim: { beforeCreate: (() => Promise<void>) | undefined }): { entered: Promise<void>; release: () => void } {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let enter!: () => void;
  const entered = new Promise<void>((r) => (enter = r));
  sim.beforeCreate = async () => {
    sim.beforeCreate = undefined;
    enter();
    await held;
  };
  return { entered, release };
}

/**
 * Holds every Idempotency-Key claim (its INSERT waits on a table lock) until `release()`, so that
 * concurrent submits line up at the claim and race for it together. The harness must give the
 * pool a lock_timeout longer than the hold.
 */
export async function holdClaims(pool: Pool): Promise<{ release: () => Promise<void> }> {
  const c = await pool.connect();
  await c.query('BEGIN');
  await c.query('LOCK TABLE idempotency_keys IN SHARE MODE');
  return {
    release: async () => {
      await c.query('COMMIT');
      c.release();
    },
  };
}
