// Watches the statements a pool sends (tests that must see how many statements a path made, or
// wait until a statement has been sent): wraps `pool.query`, records what matches, restores it.
import type { Test } from 'tap';

export interface WatchedQuery {
  readonly name: string | undefined;
  readonly text: string;
  readonly values: readonly unknown[] | undefined;
}

export interface QueryWatch {
  /** The matching statements, in the order they were sent. */
  readonly seen: readonly WatchedQuery[];
  /** Resolves once `n` matching statements have been sent. */
  until(n: number): Promise<void>;
  /** Puts the pool's own `query` back (also done at the test's teardown). */
  stop(): void;
}

export function watchQueries(t: Test, pool: object, match: (q: WatchedQuery) => boolean): QueryWatch {
  type QueryFn = (...args: unknown[]) => Promise<unknown>;
  const p = pool as { query: QueryFn; connect?: (...args: unknown[]) => Promise<{ query: QueryFn }> };
  const seen: WatchedQuery[] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  const watched = (orig: QueryFn): QueryFn =>
    function (this: unknown, ...args: unknown[]) {
      const a = args[0];
      const q: WatchedQuery =
        typeof a === 'string'
          ? { name: undefined, text: a, values: args[1] as unknown[] | undefined }
          : { name: (a as { name?: string }).name, text: (a as { text: string }).text, values: (a as { values?: unknown[] }).values };
      const out = orig.apply(this, args);
      if (match(q)) {
        seen.push(q);
        for (const w of waiters) if (seen.length >= w.n) w.resolve();
      }
      return out;
    };
  const origQuery = p.query;
  p.query = watched(origQuery);
  // A move that runs in its own transaction (the ledger's checked moves) sends its statements on a
  // client taken with connect(): those clients are watched too, until stop() puts them back.
  const origConnect = p.connect;
  const clients = new Map<{ query: QueryFn }, QueryFn>();
  if (origConnect !== undefined) {
    // Only the promise form: pool.query itself connects with a callback, and is watched above.
    p.connect = function (this: unknown, ...args: unknown[]) {
      if (args.length > 0) return origConnect.apply(this, args);
      return origConnect.apply(this, args).then((c) => {
        if (!clients.has(c)) {
          clients.set(c, c.query);
          c.query = watched(c.query);
        }
        return c;
      });
    };
  }
  const stop = () => {
    p.query = origQuery;
    if (origConnect !== undefined) p.connect = origConnect;
    for (const [c, q] of clients) c.query = q;
    clients.clear();
  };
  t.teardown(stop);
  return {
    seen,
    until: (n) => (seen.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }))),
    stop,
  };
}
