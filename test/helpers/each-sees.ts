// Timing a switch (a revoke, a lane or API toggle) as each of several gateway processes comes to see it.

/**
 * Probes each item over and over until `sees` says it shows the change; resolves with the ms from
 * `since` each took, Infinity for one still blind `giveUpMs` after `since`.
 */
export function msUntilEachSees<T>(items: readonly T[], sees: (item: T) => Promise<boolean>, since: number, giveUpMs: number): Promise<number[]> {
  return Promise.all(
    items.map(async (item) => {
      for (;;) {
        if (await sees(item)) return performance.now() - since;
        if (performance.now() - since > giveUpMs) return Infinity;
      }
    }),
  );
}
