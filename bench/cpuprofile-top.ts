// Summarises V8 CPU profiles (.cpuprofile: `inkgate bench --cpu-prof DIR`, `node --cpu-prof`):
// per file, the busy time sampled, the functions with the most self time (function + file:line),
// the same self time summed by area (a source file, a package, a node: module, the collector), and
// with --match the time any matching function was on the stack (inclusive, counted once per sample),
// and with --callers the paths (--depth frames up, 5 by default) by which a matching function was reached.
//   node --import ./test/loader/register.js bench/cpuprofile-top.ts \
//     [--top N] [--match REGEX]... [--callers REGEX [--depth N]] DIR/*.cpuprofile
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}
interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: readonly number[];
}
export interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly startTime: number;
  readonly endTime: number;
  readonly samples?: readonly number[];
  readonly timeDeltas?: readonly number[];
}

/** Where a frame's code lives, short: src/lanes/x.ts (or .js), simulators/..., undici/lib/..., node:internal/..., or the VM's own. */
export function shortUrl(url: string): string {
  if (url === '') return '';
  const u = url.replace(/^file:\/\//, '');
  const nm = u.lastIndexOf('/node_modules/');
  if (nm >= 0) return u.slice(nm + '/node_modules/'.length);
  // The compiled tree mirrors the repository (dist/src, dist/simulators, dist/bench/tool).
  const m = /\/(src|simulators|bench|test)\/(.*)$/.exec(u.replace('/dist/', '/'));
  return m ? `${m[1]}/${m[2]}` : u;
}

/** The area a frame's self time is summed under. */
export function area(f: CallFrame): string {
  if (f.url === '') return f.functionName.startsWith('(') ? f.functionName : '(native)';
  const s = shortUrl(f.url);
  if (s.startsWith('node:'))
    return s
      .replace(/^node:internal\/(deps\/)?/, 'node:')
      .split('/')
      .slice(0, 2)
      .join('/');
  if (f.url.includes('/node_modules/')) return s.startsWith('@') ? s.split('/').slice(0, 2).join('/') : s.split('/')[0]!;
  return s;
}

const frameName = (f: CallFrame) => `${f.functionName || '(anonymous)'}${f.url === '' ? '' : ` ${shortUrl(f.url)}:${f.lineNumber + 1}`}`;

export interface Summary {
  /** Sampled wall time, idle included, ms. */
  readonly totalMs: number;
  readonly idleMs: number;
  readonly busyMs: number;
  readonly functions: ReadonlyArray<{ readonly key: string; readonly ms: number }>;
  readonly areas: ReadonlyArray<{ readonly key: string; readonly ms: number }>;
  readonly matches: ReadonlyArray<{ readonly pattern: string; readonly ms: number }>;
  /** Self time of the functions matching `callers`, by the frames above them (nearest first). */
  readonly callers: ReadonlyArray<{ readonly key: string; readonly ms: number }>;
}

/** Self time per sample is the delta to the next sample (as DevTools counts it). */
export function summarise(p: CpuProfile, patterns: readonly RegExp[] = [], callers: RegExp | null = null, depth = 5): Summary {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const callerOf = (id: number): CallFrame | null => {
    for (let up = parent.get(id); up !== undefined; up = parent.get(up)) {
      const f = byId.get(up)!.callFrame;
      if (f.url !== '') return f;
    }
    return null;
  };
  const samples = p.samples ?? [];
  const deltas = p.timeDeltas ?? [];
  const self = new Map<number, number>();
  for (let i = 0; i < samples.length; i++) {
    const us = i + 1 < deltas.length ? deltas[i + 1]! : 0;
    self.set(samples[i]!, (self.get(samples[i]!) ?? 0) + us);
  }
  const fn = new Map<string, number>();
  const ar = new Map<string, number>();
  let idle = 0;
  let total = 0;
  for (const [id, us] of self) {
    const f = byId.get(id)!.callFrame;
    total += us;
    if (f.functionName === '(idle)') {
      idle += us;
      continue;
    }
    // A native function (a socket write, a hash) is named with the JavaScript that called it.
    const caller = f.url === '' && !f.functionName.startsWith('(') ? callerOf(id) : null;
    const where = f.url === '' ? (caller ? ` (native, from ${frameName(caller)})` : '') : ` ${shortUrl(f.url)}:${f.lineNumber + 1}`;
    const key = `${f.functionName || '(anonymous)'}${where}`;
    fn.set(key, (fn.get(key) ?? 0) + us);
    const a = area(f);
    ar.set(a, (ar.get(a) ?? 0) + us);
  }
  // Inclusive: a sample counts for a pattern once when any frame of its stack matches.
  const matches = patterns.map((re) => {
    const hit = new Map<number, boolean>();
    const onStack = (id: number): boolean => {
      const known = hit.get(id);
      if (known !== undefined) return known;
      const f = byId.get(id)!.callFrame;
      const up = parent.get(id);
      const v = re.test(`${f.functionName} ${shortUrl(f.url)}`) || (up !== undefined && onStack(up));
      hit.set(id, v);
      return v;
    };
    let us = 0;
    for (const [id, t] of self) if (byId.get(id)!.callFrame.functionName !== '(idle)' && onStack(id)) us += t;
    return { pattern: re.source, ms: us / 1000 };
  });
  const paths = new Map<string, number>();
  if (callers !== null) {
    for (const [id, us] of self) {
      const f = byId.get(id)!.callFrame;
      if (!callers.test(`${f.functionName} ${shortUrl(f.url)}`)) continue;
      const chain = [frameName(f)];
      for (let up = parent.get(id); up !== undefined && chain.length <= depth; up = parent.get(up)) {
        const c = byId.get(up)!.callFrame;
        if (c.functionName !== '(root)') chain.push(frameName(c));
      }
      const key = chain.join(' < ');
      paths.set(key, (paths.get(key) ?? 0) + us);
    }
  }
  const sorted = (m: Map<string, number>) => [...m].map(([key, us]) => ({ key, ms: us / 1000 })).sort((a, b) => b.ms - a.ms);
  return {
    totalMs: total / 1000,
    idleMs: idle / 1000,
    busyMs: (total - idle) / 1000,
    functions: sorted(fn),
    areas: sorted(ar),
    matches,
    callers: sorted(paths),
  };
}

function render(name: string, s: Summary, top: number): string {
  const pct = (ms: number) => `${((100 * ms) / Math.max(s.busyMs, 1e-9)).toFixed(1)}%`;
  const rows = (list: Summary['functions']) => list.slice(0, top).map((x) => `| ${x.ms.toFixed(1)} | ${pct(x.ms)} | ${x.key.replace(/\|/g, '\\|')} |`);
  const out = [
    `## ${name}: ${s.busyMs.toFixed(0)} ms busy of ${s.totalMs.toFixed(0)} ms sampled (${((100 * s.busyMs) / Math.max(s.totalMs, 1e-9)).toFixed(0)}%)`,
    '',
    '| self ms | of busy | function |',
    '|---|---|---|',
    ...rows(s.functions),
    '',
    '| self ms | of busy | area |',
    '|---|---|---|',
    ...rows(s.areas),
  ];
  if (s.callers.length > 0) out.push('', '| self ms | of busy | reached by (nearest frame first) |', '|---|---|---|', ...rows(s.callers));
  if (s.matches.length > 0) {
    out.push(
      '',
      '| inclusive ms | of busy | on the stack |',
      '|---|---|---|',
      ...s.matches.map((m) => `| ${m.ms.toFixed(1)} | ${pct(m.ms)} | /${m.pattern}/ |`),
    );
  }
  return out.join('\n') + '\n';
}

function main(argv: readonly string[]): number {
  let top = 25;
  const patterns: RegExp[] = [];
  let callers: RegExp | null = null;
  let depth = 5;
  const files: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--top') top = Number(argv[++i]);
    else if (a === '--match') patterns.push(new RegExp(argv[++i] ?? ''));
    else if (a === '--callers') callers = new RegExp(argv[++i] ?? '');
    else if (a === '--depth') depth = Number(argv[++i]);
    else if (a === '--help') {
      process.stdout.write('usage: bench/cpuprofile-top.ts [--top N] [--match REGEX]... [--callers REGEX [--depth N]] FILE.cpuprofile...\n');
      return 0;
    } else files.push(a);
  }
  if (files.length === 0 || !Number.isInteger(top) || top < 1) {
    process.stderr.write('usage: bench/cpuprofile-top.ts [--top N] [--match REGEX]... [--callers REGEX [--depth N]] FILE.cpuprofile...\n');
    return 1;
  }
  for (const f of files)
    process.stdout.write(render(basename(f), summarise(JSON.parse(readFileSync(f, 'utf8')) as CpuProfile, patterns, callers, depth), top) + '\n');
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = main(process.argv.slice(2));
