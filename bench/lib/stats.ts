// Small figures the bench scripts share.

/** The middle of `values` (the upper middle of an even count); `values` is left as it was. */
export function median(values: readonly number[]): number {
  return [...values].sort((left, right) => left - right)[values.length >> 1]!;
}
