// Counters and histograms with at most two labels whose values come from fixed sets (lanes,
// products, catalogue model ids, vendors, error kinds): each label combination is a cell made the
// first time it is seen, found again by two Map lookups. Counting allocates nothing and hashes no
// labels (prom-client's labelled metrics build a label hash per call: measured in bench/metrics.ts).
// The cells reach prom-client's registry as custom metrics.
import type { CustomMetric } from './request-metrics.js';

type Labels = Readonly<Record<string, string>>;

function labelsOf(names: readonly string[], first: string, second: string): Labels {
  return Object.freeze(names.length === 1 ? { [names[0]!]: first } : { [names[0]!]: first, [names[1]!]: second });
}

/** Cells found by their label values (first, second); `second` is '' for a one-label metric. */
class Cells<C> {
  private readonly rows = new Map<string, Map<string, C>>();
  constructor(private readonly make: (first: string, second: string) => C) {}

  get(first: string, second: string): C {
    let row = this.rows.get(first);
    if (row === undefined) {
      row = new Map();
      this.rows.set(first, row);
    }
    let c = row.get(second);
    if (c === undefined) {
      c = this.make(first, second);
      row.set(second, c);
    }
    return c;
  }

  all(): C[] {
    const out: C[] = [];
    for (const row of this.rows.values()) for (const c of row.values()) out.push(c);
    return out;
  }
}

export class CounterCells {
  private readonly cells: Cells<{ labels: Labels; value: number }>;

  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: readonly string[],
  ) {
    this.cells = new Cells((a, b) => ({ labels: labelsOf(labelNames, a, b), value: 0 }));
  }

  inc(first: string, second = '', amount = 1): void {
    this.cells.get(first, second).value += amount;
  }

  metric(): CustomMetric {
    const m: CustomMetric = {
      name: this.name,
      help: this.help,
      type: 'counter',
      aggregator: 'sum',
      get: () => ({ ...m, values: this.cells.all().map((c) => ({ labels: c.labels, value: c.value })) }),
    };
    return m;
  }
}

export class HistogramCells {
  private readonly bounds: Float64Array;
  private readonly cells: Cells<{ labels: Labels; buckets: Float64Array; count: number; sum: number }>;

  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: readonly string[],
    bounds: readonly number[],
  ) {
    this.bounds = Float64Array.from(bounds);
    this.cells = new Cells((a, b) => ({ labels: labelsOf(labelNames, a, b), buckets: new Float64Array(bounds.length), count: 0, sum: 0 }));
  }

  observe(first: string, second: string, value: number): void {
    const c = this.cells.get(first, second);
    c.count++;
    c.sum += value;
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        c.buckets[i]!++;
        return;
      }
    }
  }

  metric(): CustomMetric {
    const m: CustomMetric = {
      name: this.name,
      help: this.help,
      type: 'histogram',
      aggregator: 'sum',
      get: () => {
        const values: ReturnType<CustomMetric['get']>['values'] = [];
        for (const c of this.cells.all()) {
          let acc = 0;
          for (let i = 0; i < this.bounds.length; i++) {
            acc += c.buckets[i]!;
            values.push({ metricName: `${this.name}_bucket`, labels: { ...c.labels, le: this.bounds[i]! }, value: acc });
          }
          values.push({ metricName: `${this.name}_bucket`, labels: { ...c.labels, le: '+Inf' }, value: c.count });
          values.push({ metricName: `${this.name}_sum`, labels: c.labels, value: c.sum });
          values.push({ metricName: `${this.name}_count`, labels: c.labels, value: c.count });
        }
        return { ...m, values };
      },
    };
    return m;
  }
}
