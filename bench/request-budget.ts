// The CPU budget of one billed text request, by stage, from V8 CPU profiles of the gateway under
// load (`inkgate bench --scenario engines --cpu-prof DIR`). Each sample goes to one stage: the
// innermost frame of its stack that a stage claims (a socket write is the engine's when
// node:http called it, the vendor dispatch's when undici did, the journal's when pg did). With
// --cpu-us N (the process's CPU µs per request in the profiled run, from the bench's own report:
// the profile's sampled time also counts the time the process waited for a core, on a loaded
// machine) each stage's share is put in microseconds of that figure; with --requests N (the
// requests the window served) the profile's own busy time per request is; else shares only.
//   node --import ./test/loader/register.js bench/request-budget.ts \
//     [--cpu-us N | --requests N] FILE.cpuprofile...
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { type CpuProfile, shortUrl } from './cpuprofile-top.js';

interface Rule {
  readonly stage: string;
  /** Matched against the frame's short url (src/server/x.ts, undici/lib/..., node:_http_server). */
  readonly url?: RegExp;
  /** Matched against the function name; with `url`, both must match. */
  readonly fn?: RegExp;
}

/** In table order; within one frame the first rule that matches wins. */
export const STAGES = [
  'HTTP engine (parse, context, answer writes)',
  'server (route, admission)',
  'authentication',
  'rate limit',
  'body parse and validation',
  'hold sizing',
  'escrow reserve',
  'vendor dispatch and read (undici)',
  'relay and tally',
  'settle',
  'journal (write-behind, pg)',
  'access log',
  'metrics',
  'garbage collector',
  'other (promises, timers, streams, VM)',
] as const;
type Stage = (typeof STAGES)[number];

const RULES: ReadonlyArray<Rule & { readonly stage: Stage }> = [
  { stage: 'access log', url: /src\/server\/access-log|^pino|^sonic-boom|src\/util\/log|^thread-stream/ },
  { stage: 'metrics', url: /src\/metrics\/|^prom-client/ },
  { stage: 'journal (write-behind, pg)', url: /write-behind|group-commit|^pg\/|^pg-protocol|^pg-pool|src\/store\// },
  { stage: 'settle', url: /src\/ledger\/(escrow|lease|hold)\./, fn: /settle|[eE]nd|release|resolve|charge|returnTo|record/ },
  { stage: 'settle', url: /src\/lanes\/text-proxy/, fn: /^settleStream$/ },
  { stage: 'escrow reserve', url: /src\/ledger\// },
  { stage: 'hold sizing', url: /src\/catalog\/pricing|prompt-estimate|count-tokens|token-count/ },
  { stage: 'authentication', url: /src\/auth\/|auth-failures/ },
  { stage: 'authentication', url: /src\/accounts\/api-key/, fn: /tokenHash|bearerToken/ },
  { stage: 'rate limit', url: /rate-limiter/ },
  { stage: 'rate limit', url: /src\/server\/server/, fn: /^spend/ },
  { stage: 'body parse and validation', url: /json-shape|json-parse|json-body|src\/lanes\/[a-z]+\/request|usage-frame|src\/accounts\/api-key/ },
  { stage: 'body parse and validation', url: /src\/lanes\/[a-z]+\/lane/, fn: /^parse$/ },
  { stage: 'relay and tally', url: /sse-framer|usage-tally|relayed-output|raw-json|src\/lanes\/[a-z]+\/lane|src\/lanes\/text-proxy/ },
  { stage: 'relay and tally', url: /^eventsource-parser/ },
  { stage: 'vendor dispatch and read (undici)', url: /^undici\/|src\/vendors\// },
  {
    stage: 'HTTP engine (parse, context, answer writes)',
    url: /src\/server\/(node-|http-context|socket-context|body-collector|uws-|proxy-header)|^node:_http_/,
  },
  { stage: 'server (route, admission)', url: /src\/server\/(server|router)/ },
];

function stageOf(functionName: string, url: string): Stage | undefined {
  if (functionName === '(garbage collector)') return 'garbage collector';
  if (url === '') return undefined;
  const u = shortUrl(url);
  for (const r of RULES) if ((r.url === undefined || r.url.test(u)) && (r.fn === undefined || r.fn.test(functionName))) return r.stage;
  return undefined;
}

export interface Budget {
  readonly busyMs: number;
  readonly byStage: ReadonlyMap<Stage, number>;
}

/** Busy time per stage, ms (self time per sample: the delta to the next one, as DevTools counts it). */
export function budget(p: CpuProfile): Budget {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const memo = new Map<number, Stage>();
  const stageAt = (id: number): Stage => {
    const known = memo.get(id);
    if (known !== undefined) return known;
    const f = byId.get(id)!.callFrame;
    const up = parent.get(id);
    const s = stageOf(f.functionName, f.url) ?? (up === undefined ? 'other (promises, timers, streams, VM)' : stageAt(up));
    memo.set(id, s);
    return s;
  };
  const samples = p.samples ?? [];
  const deltas = p.timeDeltas ?? [];
  const by = new Map<Stage, number>();
  let busy = 0;
  for (let i = 0; i < samples.length; i++) {
    const us = i + 1 < deltas.length ? deltas[i + 1]! : 0;
    const name = byId.get(samples[i]!)!.callFrame.functionName;
    if (name === '(idle)') continue;
    busy += us;
    const s = stageAt(samples[i]!);
    by.set(s, (by.get(s) ?? 0) + us / 1000);
  }
  return { busyMs: busy / 1000, byStage: by };
}

function main(argv: readonly string[]): number {
  let requests = 0;
  let cpuUs = 0;
  const files: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--requests') requests = Number(argv[++i]);
    else if (argv[i] === '--cpu-us') cpuUs = Number(argv[++i]);
    else files.push(argv[i]!);
  }
  if (files.length === 0 || !(requests >= 0) || !(cpuUs >= 0)) {
    process.stderr.write('usage: bench/request-budget.ts [--cpu-us N | --requests N] FILE.cpuprofile...\n');
    return 1;
  }
  for (const f of files) {
    const b = budget(JSON.parse(readFileSync(f, 'utf8')) as CpuProfile);
    const per = (ms: number) =>
      cpuUs > 0 ? `${((cpuUs * ms) / Math.max(b.busyMs, 1e-9)).toFixed(1)}` : requests > 0 ? `${((ms * 1000) / requests).toFixed(1)}` : '';
    const out = [`## ${basename(f)}: ${b.busyMs.toFixed(0)} ms busy${cpuUs > 0 || requests > 0 ? `, ${per(b.busyMs)} µs per request` : ''}`, ''];
    out.push('| stage | ms | of busy | µs per request |', '|---|---|---|---|');
    for (const s of STAGES) {
      const ms = b.byStage.get(s) ?? 0;
      out.push(`| ${s} | ${ms.toFixed(1)} | ${((100 * ms) / Math.max(b.busyMs, 1e-9)).toFixed(1)}% | ${per(ms)} |`);
    }
    process.stdout.write(out.join('\n') + '\n\n');
  }
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = main(process.argv.slice(2));
