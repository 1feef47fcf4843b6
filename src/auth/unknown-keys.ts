// The negative cache: keys the store just said are not live (never made, revoked or expired) are
// refused from memory for a short while, so a client repeating one bad key costs one lookup per
// `unknownKeyMs`, not one per request.
//
// Entries are keyed by the key's full SHA-256 hash, never by its 12-character display prefix. The
// prefix is not a secret (the console, `/v1/me` and the access log show it): a cache keyed by
// prefix and filled on a miss would let anyone who knows a live key's prefix send that prefix with
// a made-up tail and have the live key refused on every instance. Keyed by hash, only the exact
// key that missed is refused. A key made after its hash was cached is refused for at most
// `unknownKeyMs` more, and only if someone sent that exact key before it existed: keys are 32
// random bytes (the console's playground key is derived from a server secret and a fresh id), so
// that does not happen to a key anyone creates. Revoked and expired keys never come back to life.
//
// Bounded in lifetime and in size: insertion-ordered, the oldest entry leaves first.

import { ExpiringKeys } from '../util/expiring-keys.js';

export interface UnknownKeysOptions {
  /** How long a key found not live is refused from memory (0: off). */
  readonly unknownKeyMs: number;
  /** Most entries kept. */
  readonly unknownKeyEntries: number;
  /** Monotonic milliseconds; tests step a clock of their own. */
  readonly nowMs: () => number;
}

export class UnknownKeys {
  /** Key hashes (latin1) refused from memory, each until its time is up. */
  private readonly entries: ExpiringKeys;

  constructor(private readonly opts: UnknownKeysOptions) {
    if (!Number.isInteger(opts.unknownKeyEntries) || opts.unknownKeyEntries < 1) {
      throw new TypeError(`unknown keys: unknownKeyEntries must be a positive integer, got ${opts.unknownKeyEntries}`);
    }
    this.entries = new ExpiringKeys(opts.unknownKeyEntries, opts.nowMs);
  }

  /** Entries held (expired ones included until they are met or pushed out). */
  get size(): number {
    return this.entries.size;
  }

  /** True while `id` (a key hash as latin1) is remembered as not live; an expired entry is dropped. */
  has(id: string): boolean {
    return this.entries.leftMs(id) > 0;
  }

  /** Remembers that the store found no live key for `id`. */
  add(id: string): void {
    if (this.opts.unknownKeyMs > 0) this.entries.add(id, this.opts.unknownKeyMs);
  }
}
