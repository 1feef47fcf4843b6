// Opaque identifiers for rows and jobs (keys, accounts, generations).
import { randomBytes } from 'node:crypto';

/** Opaque identifiers with a type prefix: 24 base62 characters from a CSPRNG. */
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export function newId(prefix: string, length = 24): string {
  let out = prefix;
  while (out.length < prefix.length + length) {
    for (const b of randomBytes(length * 2)) {
      // 248 = 4 * 62: rejecting the top bytes keeps every character equally likely.
      if (b < 248 && out.length < prefix.length + length) out += ALPHABET[b % 62];
    }
  }
  return out;
}
