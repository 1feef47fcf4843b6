// Signed media links (docs/api/media.md: authenticated by their signature alone, valid 15
// minutes). sig = base64url(HMAC-SHA256(secret, path + '\n' + exp + '\n' + n)), where n
// is a random nonce, so every read of a generation gives a fresh link (docs/api/media.md:
// reading the generation again yields a fresh link; with exp alone, two reads in the same second gave the
// same one). A link without n (the form before the nonce) is HMAC(path + '\n' + exp). The newline
// cannot occur in a path we sign and exp is digits, so no two (path, exp, n) collide. Time is
// always passed in (no clock read here), so tests and callers control it.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** A signed link is valid 15 minutes (docs/api/media.md). */
export const MEDIA_LINK_TTL_S = 15 * 60;
/** The media host serves paths under this prefix; the rest of the path is the media-store key. */
export const MEDIA_PATH_PREFIX = '/media/';

const SIG_CHARS = 43; // base64url of 32 bytes, no padding
const MAX_PATH_CHARS = 1024;
const EXP_RE = /^[0-9]{1,12}$/;
/** The nonce's form: what `newNonce` makes (base64url of 6 random bytes), or empty (none). */
const NONCE_RE = /^[A-Za-z0-9_-]{0,16}$/;
const newNonce = (): string => randomBytes(6).toString('base64url');

export type LinkVerdict = 'ok' | 'expired' | 'bad_signature';

function mac(secret: Buffer, path: string, exp: string, nonce: string): Buffer {
  const h = createHmac('sha256', secret).update(path).update('\n').update(exp);
  if (nonce !== '') h.update('\n').update(nonce);
  return h.digest();
}

function checkPath(path: string): void {
  if (!path.startsWith('/') || path.length > MAX_PATH_CHARS || /[\n?#]/.test(path)) throw new Error(`signMediaPath: bad path ${JSON.stringify(path)}`);
}

/**
 * `${path}?exp=${expiresAtS}&n=${nonce}&sig=${sig}` (no `n` when the nonce is empty); `path` is
 * what the media host will see (no query). The nonce is random unless given.
 */
export function signMediaPath(secret: Buffer, path: string, expiresAtS: number, nonce: string = newNonce()): string {
  checkPath(path);
  if (!Number.isSafeInteger(expiresAtS) || expiresAtS < 0 || !EXP_RE.test(String(expiresAtS))) throw new Error('signMediaPath: bad expiry');
  if (!NONCE_RE.test(nonce)) throw new Error('signMediaPath: bad nonce');
  const exp = String(expiresAtS);
  const sig = mac(secret, path, exp, nonce).toString('base64url');
  return nonce === '' ? `${path}?exp=${exp}&sig=${sig}` : `${path}?exp=${exp}&n=${nonce}&sig=${sig}`;
}

export interface SignedLink {
  readonly url: string;
  readonly expiresAtS: number;
}

/**
 * The full link for a media-store key: `${base}/media/<key>?exp=&n=&sig=`, valid `ttlS` from now
 * and never past `notAfterMs` (the result's retention end) when given. `base` is the media origin.
 */
export function signedMediaLink(secret: Buffer, base: string, key: string, nowMs: number, ttlS: number, notAfterMs?: number): SignedLink {
  const origin = base.endsWith('/') ? base.slice(0, -1) : base;
  const ttlEndS = Math.floor(nowMs / 1000) + ttlS;
  const expiresAtS = notAfterMs === undefined ? ttlEndS : Math.min(ttlEndS, Math.floor(notAfterMs / 1000));
  return { url: origin + signMediaPath(secret, MEDIA_PATH_PREFIX + key, expiresAtS), expiresAtS };
}

/**
 * Checks a link. The signature is checked first (a forged link learns nothing about expiry), in
 * constant time: the given signature is compared as text against the expected base64url text with
 * timingSafeEqual; a signature of the wrong length is compared against a same-length dummy so both
 * paths do the same work (only the length, which is public, could show). Valid while nowS < exp.
 */
export function verifyMediaLink(secret: Buffer, path: string, exp: string | number, sig: string, nowS: number, nonce = ''): LinkVerdict {
  const expText = typeof exp === 'number' ? String(exp) : exp;
  if (typeof nonce !== 'string' || !NONCE_RE.test(nonce)) return 'bad_signature';
  const expected = Buffer.from(mac(secret, path, expText, nonce).toString('base64url'), 'utf8');
  const givenRaw = Buffer.from(typeof sig === 'string' ? sig : '', 'utf8');
  const given = givenRaw.length === SIG_CHARS ? givenRaw : Buffer.alloc(SIG_CHARS);
  const equal = timingSafeEqual(given, expected);
  if (!equal || givenRaw.length !== SIG_CHARS || !EXP_RE.test(expText)) return 'bad_signature';
  return nowS < Number(expText) ? 'ok' : 'expired';
}
