// What every benched inkgate needs before the first request: both text lanes open and one key on
// an account with more Ink than any run can spend (10 million USD).
import { createAccount, createKey } from '../accounts/accounts.js';
import { setLane } from '../deployment/state.js';
import type { Gateway } from '../gateway.js';

const BENCH_INK = 1_000_000_000;

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
