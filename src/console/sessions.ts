// Sign-in links and sessions. A link token and a session id are 32 random bytes (base64url); the
// tables keep only their SHA-256, so reading the database signs nobody in. The CSRF token of a
// session is an HMAC of its id: it needs no storage and dies with the session.
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Queryable } from '../store/pool.js';

export const SESSION_COOKIE = 'inkgate_console';
export const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

export const sha256 = (s: string): Buffer => createHash('sha256').update(s).digest();
export const newToken = (): string => randomBytes(32).toString('base64url');

export class ConsoleError extends Error {}

/** A one-time sign-in link token for `accountId`, valid `ttlMs`. */
export async function createSignInLink(database: Queryable, accountId: string, ttlMs: number): Promise<{ token: string; expiresAt: Date }> {
  const token = newToken();
  // One statement: housekeeping on the way (links and sessions a day past their end are of no use
  // to anyone), and the link inserted only for an account that exists.
  const r = await database.query<{ expires_at: Date }>(
    `WITH old_links AS (DELETE FROM console_links WHERE expires_at < now() - interval '1 day'),
          old_sessions AS (DELETE FROM console_sessions WHERE expires_at < now() - interval '1 day')
     INSERT INTO console_links (token_hash, account_id, expires_at)
     SELECT $1, id, now() + $3 * interval '1 millisecond' FROM accounts WHERE id = $2
     RETURNING expires_at`,
    [sha256(token), accountId, ttlMs],
  );
  if (r.rowCount === 0) throw new ConsoleError(`unknown account ${accountId}`);
  return { token, expiresAt: r.rows[0]!.expires_at };
}

/**
 * Uses a link once and opens a session in the same statement: a second use, an expired link or a
 * made-up token finds no row and opens nothing. Returns the session id for the cookie.
 */
export async function redeemSignInLink(
  database: Queryable,
  token: string,
  sessionTtlMs: number,
): Promise<{ sessionId: string; accountId: string } | undefined> {
  if (!TOKEN_RE.test(token)) return undefined;
  const sessionId = newToken();
  const r = await database.query<{ account_id: string }>(
    `WITH used AS (
       UPDATE console_links SET used_at = now()
        WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now() RETURNING account_id)
     INSERT INTO console_sessions (id_hash, account_id, expires_at)
     SELECT $2, account_id, now() + $3 * interval '1 millisecond' FROM used RETURNING account_id`,
    [sha256(token), sha256(sessionId), sessionTtlMs],
  );
  const row = r.rows[0];
  return row ? { sessionId, accountId: row.account_id } : undefined;
}

export interface Session {
  readonly id: string;
  readonly accountId: string;
  readonly accountName: string;
  readonly csrf: string;
}

/** The live session behind a cookie value, or undefined (unknown, expired, signed out). */
export async function findSession(database: Queryable, sessionId: string | undefined): Promise<Session | undefined> {
  if (sessionId === undefined || !TOKEN_RE.test(sessionId)) return undefined;
  const r = await database.query<{ account_id: string; name: string }>(
    `SELECT s.account_id, a.name FROM console_sessions s JOIN accounts a ON a.id = s.account_id
      WHERE s.id_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now()`,
    [sha256(sessionId)],
  );
  const row = r.rows[0];
  return row ? { id: sessionId, accountId: row.account_id, accountName: row.name, csrf: csrfToken(sessionId) } : undefined;
}

export async function endSession(database: Queryable, sessionId: string): Promise<void> {
  await database.query('UPDATE console_sessions SET revoked_at = coalesce(revoked_at, now()) WHERE id_hash = $1', [sha256(sessionId)]);
}

export function csrfToken(sessionId: string): string {
  return createHmac('sha256', sessionId).update('inkgate console csrf').digest('base64url');
}

/** Constant-time comparison of a submitted CSRF token with the session's. */
export function csrfOk(session: Session, submitted: string | undefined): boolean {
  if (submitted === undefined) return false;
  const a = Buffer.from(session.csrf);
  const b = Buffer.from(submitted);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** One cookie's value from a Cookie header (the first of that name). */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined || header.length > 8192) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Set-Cookie for a session; Secure when the console is served over https. */
export function sessionCookie(value: string, maxAgeS: number, secure: boolean): string {
  return `${SESSION_COOKIE}=${value}; Path=/console; Max-Age=${maxAgeS}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}
