// HDR histograms for the bench: values are recorded in whole microseconds (1 µs to 10 minutes at
// 3 significant digits, ~0.1% error), read back in milliseconds. One histogram per run and figure,
// so memory stays fixed however many requests a run makes.
import { build, type Histogram } from 'hdr-histogram-js';

/** Longest latency a histogram tracks; a slower answer is clamped here (and still counted). */
const MAX_TRACKABLE_US = 600_000_000;

export function newHistogram(): Histogram {
  return build({ lowestDiscernibleValue: 1, highestTrackableValue: MAX_TRACKABLE_US, numberOfSignificantValueDigits: 3, autoResize: false, bitBucketSize: 32 });
}

/** Records a duration given in milliseconds (performance.now() differences). */
export function recordMs(h: Histogram, ms: number): void {
  const us = Math.round(ms * 1000);
  h.recordValue(us < 1 ? 1 : Math.min(us, MAX_TRACKABLE_US));
}

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly meanMs: number;
}

const ms = (us: number) => us / 1000;

/**
 * A percentile in µs. HDR answers with the top of the value's bucket (up to 0.1% above what was
 * recorded), which can pass the exact recorded max: capped there, so p50 <= p90 <= p99 <= max.
 */
function at(h: Histogram, p: number): number {
  return Math.min(h.getValueAtPercentile(p), h.maxValue);
}

/** NaN when empty: a run with no answers has no percentiles, not zeros. */
export function summarize(h: Histogram): LatencySummary {
  if (h.totalCount === 0) return { count: 0, p50Ms: NaN, p90Ms: NaN, p99Ms: NaN, maxMs: NaN, meanMs: NaN };
  return {
    count: h.totalCount,
    p50Ms: ms(at(h, 50)),
    p90Ms: ms(at(h, 90)),
    p99Ms: ms(at(h, 99)),
    maxMs: ms(h.maxValue),
    meanMs: ms(h.mean),
  };
}

/**
 * The latency distribution as points for a plot: [percentile, ms] at percentiles spaced evenly on
 * the log scale of 1/(1-p) (0, 90, 99, 99.9 ... get equal room), as HdrHistogram's own plots do.
 */
export function distribution(h: Histogram, points = 48): Array<[number, number]> {
  if (h.totalCount === 0) return [];
  const out: Array<[number, number]> = [];
  // Up to the resolution the sample count supports: with n samples, 1 - 1/n is the last step.
  const maxNines = Math.max(1, Math.min(5, Math.log10(h.totalCount)));
  for (let i = 0; i <= points; i++) {
    const nines = (i / points) * maxNines;
    const p = i === points ? 100 : 100 * (1 - 10 ** -nines);
    out.push([p, ms(p === 100 ? h.maxValue : at(h, p))]);
  }
  return out;
}
