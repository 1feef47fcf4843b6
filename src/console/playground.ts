// The playground's calls: made by the server on the signed-in account's behalf, through the
// gateway's own /v1 routes (same validation, holds, lanes, rate limits and billing as any client),
// with a real key of the account kept for the purpose. That key's raw value is an HMAC of its id
// under console_secret: it is recomputed for each call, never stored, never sent to a browser.
import { createHmac, randomBytes } from 'node:crypto';
import { request, type Dispatcher } from 'undici';
import { createKeyIn } from '../accounts/accounts.js';
import { KEY_PREFIX, keyFromRaw } from '../accounts/api-key.js';
import { withTx, type Pool, type Queryable } from '../store/pool.js';

export const PLAYGROUND_KEY_NAME = 'Console playground';
/** Largest prompt the playground forwards (characters); the lanes have their own caps besides. */
export const PLAYGROUND_PROMPT_CHARS = 20_000;
export const PLAYGROUND_MAX_TOKENS = 4096;

/** Per pool (a process may serve several databases: tests do). */
const secrets = new WeakMap<Queryable, Promise<Buffer>>();

/** The deployment's console secret, created by the first instance that needs it. */
export function consoleSecret(database: Queryable): Promise<Buffer> {
  let p = secrets.get(database);
  if (p) return p;
  p = (async () => {
    await database.query('INSERT INTO console_secret (singleton, secret) VALUES (true, $1) ON CONFLICT (singleton) DO NOTHING', [randomBytes(32)]);
    const r = await database.query<{ secret: Buffer }>('SELECT secret FROM console_secret WHERE singleton');
    return r.rows[0]!.secret;
  })().catch((error: unknown) => {
    secrets.delete(database);
    throw error;
  });
  secrets.set(database, p);
  return p;
}

const rawKeyFor = (secret: Buffer, keyId: string): string =>
  KEY_PREFIX +
  createHmac('sha256', secret)
    .update('playground:' + keyId)
    .digest('base64url');

/**
 * The account's live playground key as a raw bearer token: the recorded one when it is still live,
 * otherwise a new one (the first call, or after the holder revoked it). Creating follows the usual
 * rule (a paid plan or a completed top-up), so the error then is createKeyIn's.
 */
const LIVE_PLAYGROUND_KEY = `SELECT pk.key_id FROM console_playground_keys pk JOIN api_keys k ON k.id = pk.key_id
      WHERE pk.account_id = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())`;

export async function playgroundKey(pool: Pool, accountId: string): Promise<string> {
  const secret = await consoleSecret(pool);
  const live = await pool.query<{ key_id: string }>(LIVE_PLAYGROUND_KEY, [accountId]);
  if (live.rows[0]) return rawKeyFor(secret, live.rows[0].key_id);
  // Created with its derived value from the start, and recorded in the same transaction: a failure
  // leaves no stray key behind. Concurrent first calls queue on the account's row (a lock that
  // request records' foreign keys do not wait on): the first creates, the others find its key.
  return withTx(pool, async (client) => {
    await client.query('SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE', [accountId]);
    const made = await client.query<{ key_id: string }>(LIVE_PLAYGROUND_KEY, [accountId]);
    if (made.rows[0]) return rawKeyFor(secret, made.rows[0].key_id);
    const created = await createKeyIn(client, { accountId, name: PLAYGROUND_KEY_NAME }, (id) => keyFromRaw(rawKeyFor(secret, id)));
    await client.query(
      `INSERT INTO console_playground_keys (account_id, key_id) VALUES ($1, $2)
       ON CONFLICT (account_id) DO UPDATE SET key_id = EXCLUDED.key_id, created_at = now()`,
      [accountId, created.id],
    );
    return created.key;
  });
}

export interface PlaygroundInput {
  lane: 'messages' | 'responses';
  model: string;
  prompt: string;
  maxTokens: number;
  stream: boolean;
}

/** The /v1 body for a playground call, in the lane's own protocol. */
export function playgroundBody(input: PlaygroundInput): string {
  if (input.lane === 'messages') {
    return JSON.stringify({ model: input.model, max_tokens: input.maxTokens, stream: input.stream, messages: [{ role: 'user', content: input.prompt }] });
  }
  return JSON.stringify({ model: input.model, max_output_tokens: input.maxTokens, stream: input.stream, input: input.prompt });
}

/**
 * Sends the call to this gateway's own /v1 route; the caller reads (or relays) the answer, then
 * calls `done`. The whole exchange is cut after `timeoutMs`, or when the browser leaves: `onAbort`
 * is handed the abort before the call starts, so leaving while the answer is awaited cuts it too.
 */
export async function callSelf(
  base: string,
  key: string,
  input: PlaygroundInput,
  timeoutMs: number,
  onAbort: (abort: () => void) => void,
): Promise<{ res: Dispatcher.ResponseData; done: () => void }> {
  const ac = new AbortController();
  const abort = () => ac.abort();
  onAbort(abort);
  const timer = setTimeout(abort, timeoutMs);
  try {
    const res = await request(`${base}/v1/${input.lane}`, {
      method: 'POST',
      // The page reads the charge from the usage frame: asked for whatever the key's setting is.
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-service-usage-frame': 'event' },
      body: playgroundBody(input),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: ac.signal,
    });
    return { res, done: () => clearTimeout(timer) };
  } catch (e) {
    clearTimeout(timer);
    throw e;
  }
}
