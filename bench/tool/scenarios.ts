// The bench's scenarios as a plan of runs (lane x scenario x target), executed one at a time so
// runs never compete with each other. Each run measures the client-side figures and, around its
// measured window, the CPU, peak RSS and event-loop delay of every bench process.
import { join } from 'node:path';
import type { BenchOptions, LaneName, Scenario } from './args.js';
import { distribution, summarize, type LatencySummary } from './histogram.js';
import { FIRST_DELTA_MARKER } from './lanes.js';
import { closedLoop, openLoop, pacedWave, type Tally, type Window } from './load.js';
import { wsLoop } from './ws-load.js';
import type { ProcessSnapshot } from './child.js';
import { ACCESS_TARGETS, ENGINE_TARGETS, POOL_TARGETS, type BenchProcess, type Target, type TargetName, type TargetSet } from './targets.js';

/** `websocket`: turns on one Responses WebSocket each (ws-load.ts), beside `stream`'s one HTTP request per turn. */
export type RunKind = 'request' | 'stream' | 'open-loop' | 'paced' | 'websocket';

export interface ProcessUse {
  readonly name: string;
  readonly pid: number;
  readonly cpuUs: number;
  readonly cpuUsPerRequest: number;
  /** CPU per relayed SSE event (streaming runs): this process's CPU / events the client received. */
  readonly cpuUsPerChunk: number | null;
  readonly peakRssMb: number;
  /** RSS when the measured window began (a paced run: idle after its warm-up, before the wave). */
  readonly startRssMb: number;
  readonly eldP50Ms: number;
  readonly eldP99Ms: number;
  readonly eldMaxMs: number;
  /**
   * The simulators' process: requests each simulator received in the window, in start order
   * (Anthropic, OpenAI, then the pool scenario's second pair); null for any other process.
   */
  readonly served: readonly number[] | null;
}

export interface RunResult {
  readonly id: string;
  readonly lane: LaneName;
  readonly scenario: Scenario;
  readonly kind: RunKind;
  readonly target: TargetName;
  /** Closed loop: connections; open loop: most requests out at once; paced: streams. */
  readonly connections: number;
  readonly seconds: number;
  readonly requests: number;
  readonly rps: number;
  readonly statuses: Record<string, number>;
  /** The first few answers other than 200: status and the start of the body. */
  readonly failureSamples: readonly string[];
  readonly errors: Record<string, number>;
  /** Answers other than 200 plus transport errors. */
  readonly failed: number;
  /** request: whole answer; stream: to the last byte; open-loop: from the scheduled send; paced: stream duration. */
  readonly latency: LatencySummary;
  readonly ttft: LatencySummary | null;
  readonly chunks: number | null;
  readonly openLoop: {
    readonly rate: number;
    readonly scheduled: number;
    readonly lateSends: number;
    readonly lateMs: number;
    readonly serviceTime: LatencySummary;
  } | null;
  readonly paced: {
    readonly streams: number;
    readonly paceMs: number;
    readonly deltas: number;
    readonly streamsPerS: number;
    readonly failures: number;
    readonly maxGapMs: number;
    /** The target's peak RSS during the wave less its RSS before it, per stream, KiB (null: a named target). */
    readonly rssPerStreamKb: number | null;
  } | null;
  readonly processes: readonly ProcessUse[];
  /** The target's own process figures (a shortcut into `processes`), null for a named target. */
  readonly own: ProcessUse | null;
  /** [percentile, ms] points of `latency` (and `ttft`) for the plots. */
  readonly plot: Array<[number, number]>;
  readonly ttftPlot: Array<[number, number]> | null;
  /** The target process's CPU profile over the measured window (--cpu-prof), null when none was taken. */
  readonly cpuProfile: string | null;
}

export interface PlannedRun {
  readonly lane: LaneName;
  readonly scenario: Scenario;
  readonly kind: RunKind;
  readonly target: Target;
  readonly connections: number;
  /** Wall time the run is expected to take, s (for the progress bar and the time bound). */
  readonly plannedSeconds: number;
}

export interface Skipped {
  readonly lane: LaneName;
  readonly scenario: Scenario;
  readonly reason: string;
}

const BASELINES: readonly TargetName[] = ['direct', 'plain proxy', 'inkgate'];

export function pacedWaveSeconds(o: BenchOptions): number {
  // A paced stream lasts deltas x pace; the wave is that plus queueing; the deadline allows 10x.
  return (o.deltas * o.paceMs) / 1000;
}

const pacedWarmupStreams = (o: BenchOptions) => Math.min(o.streams, 50);

/** Scenarios that compare two self-started gateways: which two, and the runs each gets (1 or --connections). */
const PAIRED: Partial<Record<Scenario, { targets: readonly TargetName[]; needs: string; runs: ReadonlyArray<readonly [RunKind, 1 | 'many']> }>> = {
  billing: {
    targets: ['inkgate', 'inkgate (billing off)'],
    needs: 'needs the self-started inkgate (billing on and off)',
    runs: [
      ['request', 1],
      ['request', 'many'],
    ],
  },
  durability: {
    targets: ['inkgate', 'inkgate (sync)'],
    needs: 'needs the self-started inkgate and inkgate (sync)',
    runs: [
      ['request', 'many'],
      ['stream', 'many'],
    ],
  },
  'access-log': {
    targets: [ACCESS_TARGETS.on, ACCESS_TARGETS.off],
    needs: 'needs the self-started inkgate with its access log on and off',
    runs: [
      ['request', 'many'],
      ['stream', 'many'],
    ],
  },
  pool: {
    targets: [POOL_TARGETS.one, POOL_TARGETS.two],
    needs: 'needs the self-started inkgate with one vendor deployment and with two',
    runs: [
      ['request', 'many'],
      ['stream', 'many'],
    ],
  },
  'many-tenants': {
    targets: ['inkgate (one key)', 'inkgate (many tenants)'],
    needs: 'needs the self-started inkgate (one key) and inkgate (many tenants)',
    runs: [
      ['request', 'many'],
      ['stream', 'many'],
    ],
  },
};

export function planRuns(o: BenchOptions, set: TargetSet): { runs: PlannedRun[]; skipped: Skipped[] } {
  const runs: PlannedRun[] = [];
  const skipped: Skipped[] = [];
  const per = o.warmupSeconds + o.seconds;
  for (const lane of o.lanes) {
    const of = (names: readonly TargetName[]) => set.targets.filter((t) => t.lane === lane && names.includes(t.name));
    for (const scenario of o.scenarios) {
      const add = (targets: Target[], kind: RunKind, connections: number, plannedSeconds: number) => {
        for (const target of targets) runs.push({ lane, scenario, kind, target, connections, plannedSeconds });
      };
      const pair = PAIRED[scenario];
      if (pair !== undefined) {
        const ts = of(pair.targets);
        if (ts.length < 2) {
          skipped.push({ lane, scenario, reason: pair.needs });
          continue;
        }
        for (const [kind, connections] of pair.runs) add(ts, kind, connections === 'many' ? o.connections : 1, per);
        continue;
      }
      if (scenario === 'engines') {
        // In one run, over the same simulators: the plain proxy and a billing gateway per HTTP engine
        // (uws only where it loads), under load; and at concurrency 1 the simulator called directly
        // too, for the latency each adds.
        const gateways = of([ENGINE_TARGETS.uws, ENGINE_TARGETS.node]);
        const proxy = of(['plain proxy']);
        if (gateways.length === 0 || proxy.length === 0) {
          skipped.push({ lane, scenario, reason: 'needs the self-started plain proxy and a gateway per HTTP engine' });
          continue;
        }
        const c1 = of(['direct', 'plain proxy', ENGINE_TARGETS.uws, ENGINE_TARGETS.node]);
        add(c1, 'request', 1, per);
        add(c1, 'stream', 1, per);
        add([...proxy, ...gateways], 'request', o.connections, per);
        add([...proxy, ...gateways], 'stream', o.connections, per);
        continue;
      }
      if (scenario === 'stream-saturation') {
        // One-write replies (no pacing): what the gateway itself costs per stream, billing on and off.
        add(of([...BASELINES, 'inkgate (billing off)']), 'stream', o.connections, per);
        continue;
      }
      const ts = of(BASELINES);
      if (ts.length === 0) {
        skipped.push({ lane, scenario, reason: 'no target on this lane' });
        continue;
      }
      if (scenario === 'latency') {
        add(ts, 'request', 1, per);
        add(ts, 'stream', 1, per);
        // Responses over one WebSocket: the self-started gateway's turns on one socket.
        if (lane === 'responses') add(of(['inkgate']), 'websocket', 1, per);
      } else if (scenario === 'saturation') add(ts, 'request', o.connections, per);
      else if (scenario === 'open-loop') add(ts, 'open-loop', o.connections, per);
      else add(ts, 'paced', o.streams, 2 * pacedWaveSeconds(o) + 1);
    }
  }
  return { runs, skipped };
}

const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

/** Requests each simulator received between two snapshots (null: not a simulators process). */
function servedIn(before: ProcessSnapshot, after: ProcessSnapshot): number[] | null {
  if (before.served === undefined || after.served === undefined) return null;
  return after.served.map((n, i) => n - (before.served![i] ?? 0));
}

/**
 * Marks every bench process at the window's start and reads them at its end; with `profile`, that
 * process's CPU profile covers the same window (started before the marks, written after the reads).
 */
function processWindow(
  processes: readonly BenchProcess[],
  profile: { readonly process: BenchProcess; readonly file: string } | null,
): Window & { uses(requests: number, chunks: number | null): ProcessUse[] } {
  let before: ProcessSnapshot[] = [];
  let after: ProcessSnapshot[] = [];
  return {
    start: async () => {
      await profile?.process.profile?.('start');
      before = await Promise.all(processes.map((p) => p.stats('mark')));
    },
    end: async () => {
      after = await Promise.all(processes.map((p) => p.stats('read')));
      await profile?.process.profile?.('stop', profile.file);
    },
    uses: (requests, chunks) =>
      processes.map((p, i) => {
        const cpuUs = after[i]!.cpuUs - before[i]!.cpuUs;
        return {
          name: p.name,
          pid: p.pid,
          cpuUs,
          cpuUsPerRequest: cpuUs / Math.max(1, requests),
          cpuUsPerChunk: chunks === null ? null : cpuUs / Math.max(1, chunks),
          peakRssMb: after[i]!.peakRssBytes / 1048576,
          startRssMb: before[i]!.rssBytes / 1048576,
          eldP50Ms: after[i]!.eldP50Ms,
          eldP99Ms: after[i]!.eldP99Ms,
          eldMaxMs: after[i]!.eldMaxMs,
          served: servedIn(before[i]!, after[i]!),
        };
      }),
  };
}

/** Where --cpu-prof writes a run's profile: DIR/<lane>-<scenario>-<kind>-c<N>-<target>.cpuprofile. */
export function profileFile(dir: string, run: Pick<PlannedRun, 'lane' | 'scenario' | 'kind' | 'connections'>, target: TargetName): string {
  const slug = target.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '');
  return join(dir, `${run.lane}-${run.scenario}-${run.kind}-c${run.connections}-${slug}.cpuprofile`);
}

/** Drives the run's kind of load at its target; the open-loop or paced figures when the run is one of those. */
async function driveLoad(
  run: PlannedRun,
  o: BenchOptions,
  win: ReturnType<typeof processWindow>,
): Promise<{ tally: Tally; openLoopInfo: RunResult['openLoop']; pacedInfo: RunResult['paced'] }> {
  const t = run.target;
  const warmupMs = o.warmupSeconds * 1000;
  const durationMs = o.seconds * 1000;
  const marker = FIRST_DELTA_MARKER[run.lane];
  if (run.kind === 'request' || run.kind === 'stream') {
    const stream = run.kind === 'stream';
    const tally = await closedLoop({
      request: { ...t.request, body: stream ? t.bodies.stream : t.bodies.plain },
      connections: run.connections,
      warmupMs,
      durationMs,
      maxRequests: o.maxRequests,
      marker: stream ? marker : null,
      window: win,
    });
    return { tally, openLoopInfo: null, pacedInfo: null };
  }
  if (run.kind === 'websocket') {
    const tally = await wsLoop({
      request: { ...t.request, body: t.bodies.stream },
      connections: run.connections,
      warmupMs,
      durationMs,
      maxRequests: o.maxRequests,
      window: win,
    });
    return { tally, openLoopInfo: null, pacedInfo: null };
  }
  if (run.kind === 'open-loop') {
    const ol = await openLoop({
      request: { ...t.request, body: t.bodies.plain },
      rate: o.rate,
      maxInFlight: run.connections,
      warmupMs,
      durationMs,
      maxRequests: o.maxRequests,
      window: win,
    });
    return {
      tally: ol,
      openLoopInfo: { rate: o.rate, scheduled: ol.scheduled, lateSends: ol.lateSends, lateMs: ol.lateMs, serviceTime: summarize(ol.serviceTime) },
      pacedInfo: null,
    };
  }
  const pw = await pacedWave({
    request: { ...t.request, body: t.bodies.paced },
    streams: o.streams,
    warmupStreams: pacedWarmupStreams(o),
    deadlineMs: Math.max(60_000, 10 * pacedWaveSeconds(o) * 1000),
    marker,
    window: win,
  });
  const pacedInfo = {
    streams: o.streams,
    paceMs: o.paceMs,
    deltas: o.deltas,
    streamsPerS: pw.requests / pw.seconds,
    failures: pw.failures,
    maxGapMs: pw.maxGapMs,
    rssPerStreamKb: null,
  };
  return { tally: pw, openLoopInfo: null, pacedInfo };
}

/** What each open stream adds to the target's RSS: its peak during the wave above its RSS before, per stream. */
function perStreamKb(own: ProcessUse | null, streams: number): number | null {
  return own === null || streams <= 0 ? null : (Math.max(0, own.peakRssMb - own.startRssMb) * 1024) / streams;
}

export async function executeRun(run: PlannedRun, o: BenchOptions, processes: readonly BenchProcess[]): Promise<RunResult> {
  const t = run.target;
  const profiled = o.cpuProfDir === null ? undefined : processes.find((p) => p.name === t.processName && p.profile !== undefined);
  const profile = profiled ? { process: profiled, file: profileFile(o.cpuProfDir!, run, t.name) } : null;
  const win = processWindow(processes, profile);
  const { tally, openLoopInfo, pacedInfo } = await driveLoad(run, o, win);
  const streaming = run.kind === 'stream' || run.kind === 'paced' || run.kind === 'websocket';
  const uses = win.uses(tally.requests, streaming ? tally.chunks : null);
  const own = uses.find((u) => u.name === t.processName) ?? null;
  const non200 = Object.entries(tally.statuses)
    .filter(([s]) => s !== '200')
    .reduce((n, [, c]) => n + c, 0);
  const result: RunResult = {
    id: `${run.lane}/${run.scenario}/${run.kind}/c${run.connections}/${t.name}`,
    lane: run.lane,
    scenario: run.scenario,
    kind: run.kind,
    target: t.name,
    connections: run.connections,
    seconds: tally.seconds,
    requests: tally.requests,
    rps: tally.requests / tally.seconds,
    statuses: tally.statuses,
    failureSamples: tally.failureSamples,
    errors: tally.errors,
    failed: non200 + sum(tally.errors),
    latency: summarize(tally.latency),
    ttft: streaming ? summarize(tally.ttft) : null,
    chunks: streaming ? tally.chunks : null,
    openLoop: openLoopInfo,
    paced: pacedInfo === null ? null : { ...pacedInfo, rssPerStreamKb: perStreamKb(own, pacedInfo.streams) },
    processes: uses,
    own,
    plot: distribution(tally.latency),
    ttftPlot: streaming ? distribution(tally.ttft) : null,
    cpuProfile: profile?.file ?? null,
  };
  tally.latency.destroy();
  tally.ttft.destroy();
  return result;
}
