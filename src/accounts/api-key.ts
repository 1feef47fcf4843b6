// API key format and storage form. Keys are `svc_` + 43 URL-safe characters (32 random bytes,
// base64url). We keep only the SHA-256 hash, a 12-character display prefix and the last four.
import { createHash, hash as cryptoHash, randomBytes } from 'node:crypto';

export const KEY_PREFIX = 'svc_';
const KEY_RE = /^svc_[A-Za-z0-9_-]{43}$/;

export interface NewKey {
  readonly raw: string;
  readonly hash: Buffer;
  readonly prefix: string;
  readonly last4: string;
}

export function generateKey(): NewKey {
  return keyFromRaw(KEY_PREFIX + randomBytes(32).toString('base64url'));
}

/** The stored forms of a raw key (its hash, display prefix and last four). */
export function keyFromRaw(raw: string): NewKey {
  return { raw, hash: hashKey(raw), prefix: raw.slice(0, 12), last4: raw.slice(-4) };
}

export function isWellFormedKey(raw: string): boolean {
  return raw.length === 47 && KEY_RE.test(raw);
}

export function hashKey(raw: string): Buffer {
  return createHash('sha256').update(raw).digest();
}

/**
 * hashKey's bytes as a latin1 string (one character per byte), the key cache's id: in one call
 * where Node has crypto.hash (20.12 and later; about 0.4 µs against 1.5-2 µs for a Hash object
 * and its Buffer, on every authenticated request).
 */
export const keyDigest: (raw: string) => string =
  typeof cryptoHash === 'function' ? (raw) => cryptoHash('sha256', raw, 'binary') : (raw) => hashKey(raw).toString('latin1');

/**
 * The stable, meaningless stand-in for a key that vendors see (Messages `metadata.user_id`,
 * Responses `safety_identifier`): derived from the key id, never from the key itself.
 */
export function vendorUserHash(keyId: string): string {
  let h = userHashes.get(keyId);
  if (h === undefined) {
    h = createHash('sha256')
      .update('inkgate:' + keyId)
      .digest('hex')
      .slice(0, 32);
    // Remembered per key id (a hash per request was ~4 µs of every text request's budget); bounded, dropped whole when full.
    if (userHashes.size >= MAX_USER_HASHES) userHashes.clear();
    userHashes.set(keyId, h);
  }
  return h;
}
const MAX_USER_HASHES = 10_000;
const userHashes = new Map<string, string>();

/** The bearer token from an Authorization header value, or undefined. Only `Bearer` is read. */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined || header.length > 200) return undefined;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header);
  return m ? m[1] : undefined;
}
