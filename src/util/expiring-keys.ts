// A bounded memory of keys that each hold for a while: the negative key cache (auth/unknown-keys.ts)
// and the addresses over their failed-authentication budget (limits/auth-failures.ts). An entry
// read once expired is dropped; when full, the oldest entry (insertion order) leaves first.

export class ExpiringKeys {
  /** Key -> until when (ms on nowMs) it holds; the first entry is the oldest. */
  private readonly until = new Map<string, number>();

  constructor(
    private readonly maxEntries: number,
    private readonly nowMs: () => number,
  ) {
    if (!Number.isInteger(maxEntries) || maxEntries < 1) throw new TypeError(`expiring keys: maxEntries must be a positive integer, got ${maxEntries}`);
  }

  /** Entries held (expired ones included until they are read or pushed out). */
  get size(): number {
    return this.until.size;
  }

  /** How long `key` still holds, in ms; 0 when it is not held (an expired entry is dropped). */
  leftMs(key: string): number {
    if (this.until.size === 0) return 0;
    const until = this.until.get(key);
    if (until === undefined) return 0;
    const left = until - this.nowMs();
    if (left > 0) return left;
    this.until.delete(key);
    return 0;
  }

  /** Holds `key` for `forMs` from now (again, when it was held), making room first when full. */
  add(key: string, forMs: number): void {
    this.until.delete(key);
    if (this.until.size >= this.maxEntries) this.until.delete(this.until.keys().next().value!);
    this.until.set(key, this.nowMs() + forMs);
  }
}
