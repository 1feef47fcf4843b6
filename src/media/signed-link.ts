// Signed media links (spec "Authentication" 8: authenticated by their signature alone; "Limits":
// valid 15 minutes). sig = base64url(HMAC-SHA256(secret, path + '\n' + exp)). The newline cannot
// occur in a path we sign, so (path, exp) pairs never collide. Time is always passed in (no clock
// read here), so tests and callers control it.
import { createHmac, timingSafeEqual } from 'node:crypto';

/** Spec "Limits": a signed link is valid 15 minutes. */
export const MEDIA_LINK_TTL_S = 15 * 60;
/** The media host serves paths under this prefix; the rest of the path is the media-store key. */
export const MEDIA_PATH_PREFIX = '/media/';

const SIG_CHARS = 43; // base64url of 32 bytes, no padding
const MAX_PATH_CHARS = 1024;
const EXP_RE = /^[0-9]{1,12}$/;

export type LinkVerdict = 'ok' | 'expired' | 'bad_signature';

function mac(secret: Buffer, path: string, exp: string): Buffer {
  return createHmac('sha256', secret).update(path).update('\n').update(exp).digest();
}

function checkPath(path: string): void {
  if (!path.startsWith('/') || path.length > MAX_PATH_CHARS || /[\n?#]/.test(path)) throw new Error(`signMediaPath: bad path ${JSON.stringify(path)}`);
}

/** `${path}?exp=${expiresAtS}&sig=${sig}`; `path` is what the media host will see (no query). */
export function signMediaPath(secret: Buffer, path: string, expiresAtS: number): string {
  checkPath(path);
  if (!Number.isSafeInteger(expiresAtS) || expiresAtS < 0 || !EXP_RE.test(String(expiresAtS))) throw new Error('signMediaPath: bad expiry');
  const exp = String(expiresAtS);
  return `${path}?exp=${exp}&sig=${mac(secret, path, exp).toString('base64url')}`;
}

/**
 * The full link for a media-store key: `${mediaUrl}/media/<key>?exp=...&sig=...`, valid
 * MEDIA_LINK_TTL_S from `nowS`. `mediaUrl` is the configured media origin (no trailing slash).
 */
export function mediaLinkFor(secret: Buffer, mediaUrl: string, key: string, nowS: number): string {
  const base = mediaUrl.endsWith('/') ? mediaUrl.slice(0, -1) : mediaUrl;
  return base + signMediaPath(secret, MEDIA_PATH_PREFIX + key, Math.floor(nowS) + MEDIA_LINK_TTL_S);
}

/**
 * Checks a link. The signature is checked first (a forged link learns nothing about expiry), in
 * constant time: the given signature is compared as text against the expected base64url text with
 * timingSafeEqual; a signature of the wrong length is compared against a same-length dummy so both
 * paths do the same work (only the length, which is public, could show). Valid while nowS < exp.
 */
export function verifyMediaLink(secret: Buffer, path: string, exp: string | number, sig: string, nowS: number): LinkVerdict {
  const expText = typeof exp === 'number' ? String(exp) : exp;
  const expected = Buffer.from(mac(secret, path, expText).toString('base64url'), 'utf8');
  const givenRaw = Buffer.from(typeof sig === 'string' ? sig : '', 'utf8');
  const given = givenRaw.length === SIG_CHARS ? givenRaw : Buffer.alloc(SIG_CHARS);
  const equal = timingSafeEqual(given, expected);
  if (!equal || givenRaw.length !== SIG_CHARS || !EXP_RE.test(expText)) return 'bad_signature';
  return nowS < Number(expText) ? 'ok' : 'expired';
}
