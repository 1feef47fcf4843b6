// `npm run demo`: a console sign-in link for the demo account, printed at start-up beside its key,
// so the browser console can be tried at once. Only the demo does this; `npm start` never does.
import type { Config } from '../config/config.js';
import { consoleLinkBase } from '../config/public-url.js';
import type { Queryable } from '../store/pool.js';
import { createSignInLink } from './sessions.js';

/** A one-time link for the oldest account (the demo account), or undefined when there is none. */
export async function demoSignInLink(database: Queryable, config: Config, gatewayUrl: string): Promise<string | undefined> {
  const r = await database.query<{ id: string }>('SELECT id FROM accounts ORDER BY created_at, id LIMIT 1');
  const id = r.rows[0]?.id;
  if (id === undefined) return undefined;
  const link = await createSignInLink(database, id, config.console.linkTtlMs);
  // The same rule as `inkgate console link`, with the address this gateway really listens on last.
  return `${consoleLinkBase(config, gatewayUrl).url}/console/signin?token=${link.token}`;
}
