// One-time nonces for the key-creation form. Reloading the answer that showed a new key re-posts
// its form; the raw key is never stored, so the repeat can neither create a second key nor show the
// first one again. Each rendering of the form gets a random nonce bound to the session (Postgres
// keeps its SHA-256, like session ids); the first post with it creates the key in the same
// transaction that marks the nonce used, and a repeat finds it used and learns which key it made.
import type { Queryable } from '../store/pool.js';
import { newToken, sha256, TOKEN_RE } from './sessions.js';

/**
 * Forms a session can hold at once: every keys page view mints one, so an old tab's form stops
 * working after this many newer ones (it answers "reload the page"), and the table stays bounded.
 */
export const NONCES_PER_SESSION = 64;

export type NonceClaim = { readonly state: 'claimed' } | { readonly state: 'used'; readonly keyId: string | null } | { readonly state: 'unknown' };

/** A fresh nonce for one form of `sessionId`; it lives as long as the session. */
export async function issueFormNonce(database: Queryable, sessionId: string): Promise<string> {
  const nonce = newToken();
  const session = sha256(sessionId);
  // One statement: the oldest beyond the limit go as the new one comes.
  await database.query(
    `WITH old AS (DELETE FROM console_form_nonces WHERE nonce_hash IN (
                    SELECT nonce_hash FROM console_form_nonces WHERE session_hash = $2
                     ORDER BY created_at DESC OFFSET $3))
     INSERT INTO console_form_nonces (nonce_hash, session_hash, expires_at)
     SELECT $1, id_hash, expires_at FROM console_sessions WHERE id_hash = $2`,
    [sha256(nonce), session, NONCES_PER_SESSION - 1],
  );
  return nonce;
}

/**
 * Marks the nonce used, inside the caller's transaction (a rollback leaves it unused). A second
 * post racing the first waits on the row lock and then finds it used. Another session's nonce,
 * an expired one and a made-up one are all 'unknown'.
 */
export async function claimFormNonce(client: Queryable, sessionId: string, nonce: string): Promise<NonceClaim> {
  if (!TOKEN_RE.test(nonce)) return { state: 'unknown' };
  const key = [sha256(nonce), sha256(sessionId)];
  const won = await client.query(
    `UPDATE console_form_nonces SET used_at = now()
      WHERE nonce_hash = $1 AND session_hash = $2 AND used_at IS NULL AND expires_at > now()`,
    key,
  );
  if (won.rowCount === 1) return { state: 'claimed' };
  const used = await client.query<{ key_id: string | null }>(
    'SELECT key_id FROM console_form_nonces WHERE nonce_hash = $1 AND session_hash = $2 AND used_at IS NOT NULL',
    key,
  );
  const row = used.rows[0];
  return row ? { state: 'used', keyId: row.key_id } : { state: 'unknown' };
}

/** Remembers which key a claimed nonce created (named on the "already created" page). */
export async function recordNonceKey(client: Queryable, nonce: string, keyId: string): Promise<void> {
  await client.query('UPDATE console_form_nonces SET key_id = $2 WHERE nonce_hash = $1', [sha256(nonce), keyId]);
}
