// What every benched inkgate needs before the first request: both text lanes open and one key on
// an account with more Ink than any run can spend (10 million USD).
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { setLane } from '../../src/deployment/state.js';
import type { Gateway } from '../../src/gateway.js';

const BENCH_INK = 1_000_000_000;
/** Accounts and keys are made this many at a time (each is a transaction of its own). */
const SETUP_PARALLEL = 16;

/** Opens both text lanes and returns a funded key (raw). */
export async function prepareBenchGateway(gw: Gateway): Promise<string> {
  const pool = gw.services.pool;
  await setLane(pool, 'messages', true);
  await setLane(pool, 'responses', true);
  await gw.services.state.refresh();
  const acc = await createAccount(pool, { name: 'bench', planId: 'pro' });
  await gw.services.ledger.topUp(acc.id, BENCH_INK, 'bench');
  return (await createKey(pool, { accountId: acc.id, name: 'bench' })).key;
}

/**
 * Many tenants: `accounts` funded accounts on the pro plan and `keys` keys dealt over them in
 * turn (key i belongs to account i mod accounts). Returns the raw keys in that order.
 */
export async function prepareTenants(gw: Gateway, accounts: number, keys: number): Promise<string[]> {
  const pool = gw.services.pool;
  const inParallel = async <T>(n: number, f: (i: number) => Promise<T>): Promise<T[]> => {
    const out: T[] = new Array<T>(n);
    let next = 0;
    const worker = async () => {
      while (next < n) {
        const i = next++;
        out[i] = await f(i);
      }
    };
    await Promise.all(Array.from({ length: Math.min(SETUP_PARALLEL, n) }, worker));
    return out;
  };
  const ids = await inParallel(accounts, async (i) => {
    const acc = await createAccount(pool, { name: `tenant ${i}`, planId: 'pro' });
    await gw.services.ledger.topUp(acc.id, BENCH_INK, 'bench');
    return acc.id;
  });
  return inParallel(keys, async (i) => (await createKey(pool, { accountId: ids[i % accounts]!, name: `tenant key ${i}` })).key);
}
