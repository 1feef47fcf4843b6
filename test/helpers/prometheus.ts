// A small reader of the Prometheus text exposition format, for tests that scrape /metrics: every
// sample line becomes { name, labels, value }; HELP and TYPE lines are kept by metric name.
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Exposition {
  readonly samples: readonly Sample[];
  readonly types: ReadonlyMap<string, string>;
  /** The one sample of `name` whose labels include `labels`; throws when there is none or several. */
  value(name: string, labels?: Record<string, string>): number;
  /** Sum over every sample of `name` whose labels include `labels` (0 when none). */
  sum(name: string, labels?: Record<string, string>): number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseExposition(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (m) types.set(m[1]!, m[2]!);
      continue;
    }
    const m = LINE.exec(line);
    if (!m) throw new Error(`not an exposition line: ${JSON.stringify(line)}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_x, c: string) => (c === 'n' ? '\n' : c));
    const v = m[3] === '+Inf' ? Infinity : m[3] === '-Inf' ? -Infinity : Number(m[3]);
    // prom-client writes NaN as `Nan` (an event-loop gauge before its first sample); Prometheus reads
    // the value with Go's ParseFloat, which takes NaN in any case, so only other words are bad.
    if (Number.isNaN(v) && !/^nan$/i.test(m[3]!)) throw new Error(`bad value in ${JSON.stringify(line)}`);
    samples.push({ name: m[1]!, labels, value: v });
  }
  const matching = (name: string, labels: Record<string, string> = {}) =>
    samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return {
    samples,
    types,
    value(name, labels) {
      const hits = matching(name, labels);
      if (hits.length !== 1) throw new Error(`${hits.length} samples of ${name} ${JSON.stringify(labels ?? {})}`);
      return hits[0]!.value;
    },
    sum: (name, labels) => matching(name, labels).reduce((a, s) => a + s.value, 0),
  };
}

/** The value of one series written exactly as the exposition writes it (`name{a="b"}`); NaN when absent. */
export function seriesValue(text: string, series: string): number {
  return Number(
    text
      .split('\n')
      .find((l) => l.startsWith(`${series} `))
      ?.split(' ')[1],
  );
}
