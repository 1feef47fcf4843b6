// Starting and stopping what the bench measures. Self-started (no target named): the simulators,
// inkgate with billing on, inkgate with billing off and the plain proxy, each in its own child
// process on 127.0.0.1, plus an embedded Postgres when no DATABASE_URL is configured, and the
// gateways only some scenarios need (sync durability, many tenants, one per HTTP engine). Named
// targets are only called; the plain proxy is then started in front of the named vendor.
import { fork, type ChildProcess } from 'node:child_process';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchOptions, LaneName } from './args.js';
import { selfStarted } from './args.js';
import { postgresServerProcess } from './postgres-cpu.js';
import { loadUws } from '../../src/server/uws-loader.js';
import type { BenchProcess } from './bench-process.js';
import type { ChildRole, GatewayChildConfig, LedgerAudit, ProcessSnapshot, ProxyChildConfig, SimsChildConfig } from './child.js';

export type { BenchProcess } from './bench-process.js';
import { laneBodies, laneEndpoint, vendorHeaders, type LaneBodies } from './lanes.js';
import type { Request } from './load.js';

export type TargetName =
  | 'direct'
  | 'plain proxy'
  | 'inkgate'
  | 'inkgate (billing off)'
  | 'inkgate (sync)'
  | 'inkgate (uws)'
  | 'inkgate (node)'
  | 'inkgate (one key)'
  | 'inkgate (many tenants)'
  | 'inkgate (access log)'
  | 'inkgate (no access log)'
  | 'inkgate (one deployment)'
  | 'inkgate (two deployments)';
/** The access-log scenario's gateways: the same configuration with the access log on and off. */
export const ACCESS_TARGETS = { on: 'inkgate (access log)', off: 'inkgate (no access log)' } as const satisfies Record<string, TargetName>;
/** Scenarios whose gateways are their own: they need neither the shared inkgate nor the one with billing off. */
const OWN_GATEWAYS: ReadonlySet<string> = new Set(['engines', 'access-log', 'pool']);
/**
 * The pool scenario's gateways: the same configuration with one vendor deployment (a simulator) and
 * with two (that simulator and a second one on another port of the same process, as one
 * comma-separated base URL list).
 */
export const POOL_TARGETS = { one: 'inkgate (one deployment)', two: 'inkgate (two deployments)' } as const satisfies Record<string, TargetName>;

/** The engines scenario's gateways, one per HTTP engine (config server.engine), billing on. */
export const ENGINE_TARGETS = { uws: 'inkgate (uws)', node: 'inkgate (node)' } as const satisfies Record<string, TargetName>;
/** The process of the many-tenants scenario: one gateway, the shared limiter, many funded keys. */
export const TENANTS_PROCESS = 'inkgate (tenants)';

export interface Target {
  readonly name: TargetName;
  readonly lane: LaneName;
  readonly request: Omit<Request, 'body'>;
  readonly bodies: LaneBodies;
  /** The bench process serving this target (its CPU is the target's own); null for a named one. */
  readonly processName: string | null;
}

export interface TargetSet {
  readonly targets: readonly Target[];
  readonly processes: readonly BenchProcess[];
  /** Where the self-started inkgate keeps its ledger, e.g. "DATABASE_URL" or "embedded PostgreSQL". */
  readonly database: string | null;
  readonly upstreamConnections: number | null;
  /** The many-tenants gateway's rate limiter ("redis" or "in-process"), null when not started. */
  readonly tenantsLimiter: string | null;
  /** Each self-started gateway and the HTTP engine it serves with (as its start-up line names it). */
  readonly engines: ReadonlyArray<{ readonly process: string; readonly engine: string | null }>;
  /** What the reader must know about this set, e.g. an engine that could not run on this Node. */
  readonly notes: readonly string[];
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 120_000;
const STATS_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 20_000;
const TAIL_BYTES = 4096;
const SIM_KEYS = { anthropic: 'sk-ant-bench', openai: 'sk-oai-bench' } as const;

/** child.ts from source (ts loader) or child.js from dist: the same folder and extension as this file. */
function childEntry(): string {
  const here = fileURLToPath(import.meta.url);
  return join(dirname(here), 'child' + extname(here));
}

/**
 * Node flags the children inherit: the loader (running from source) and tracing flags such as
 * --cpu-prof (each child then writes its own profile), but not what only made sense for this
 * process: an eval'd script, its input type, a debugger port.
 */
export function childExecArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (['-e', '--eval', '-p', '--print', '--input-type'].includes(a)) i++;
    else if (a.startsWith('--input-type=') || a.startsWith('--eval=') || a.startsWith('--print=') || a.startsWith('--inspect')) continue;
    else out.push(a);
  }
  return out;
}

async function spawnChild(name: string, role: ChildRole, config: unknown): Promise<{ proc: BenchProcess; ready: Record<string, unknown> }> {
  // Children's own output must never reach stdout (--json); the tail is kept for error messages.
  const cp: ChildProcess = fork(childEntry(), [], { execArgv: childExecArgv(process.execArgv), stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  let tail = '';
  const keep = (b: Buffer) => void (tail = (tail + b.toString()).slice(-TAIL_BYTES));
  cp.stdout!.on('data', keep);
  cp.stderr!.on('data', keep);
  let exited = cp.exitCode !== null;
  const exit = new Promise<void>((r) => cp.once('exit', () => ((exited = true), r())));
  let nextId = 1;
  // Questions to the child ('mark', 'read', 'audit') and their answers, matched by id.
  const pending = new Map<number, (m: Record<string, unknown>) => void>();
  const ready = new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: not ready after ${START_TIMEOUT_MS / 1000} s\n${tail}`)), START_TIMEOUT_MS);
    cp.on('message', (m: { type: string; id?: number; message?: string } & Record<string, unknown>) => {
      if (m.type === 'ready') clearTimeout(timer), resolve(m);
      else if (m.type === 'error') clearTimeout(timer), reject(new Error(`${name}: ${m.message}`));
      else if (m.id !== undefined) {
        pending.get(m.id)?.(m);
        pending.delete(m.id);
      }
    });
    void exit.then(() => (clearTimeout(timer), reject(new Error(`${name}: exited before it was ready\n${tail.trim()}`))));
  });
  const ask = (op: 'mark' | 'read' | 'audit' | 'prof-start' | 'prof-stop', more: Record<string, unknown> = {}) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      if (exited) return reject(new Error(`${name} is gone\n${tail.trim()}`));
      const id = nextId++;
      const timer = setTimeout(() => (pending.delete(id), reject(new Error(`${name}: no answer to ${op} after ${STATS_TIMEOUT_MS} ms`))), STATS_TIMEOUT_MS);
      pending.set(id, (m) => (clearTimeout(timer), resolve(m)));
      cp.send({ ...more, op, id });
    });
  const proc: BenchProcess = {
    name,
    pid: cp.pid!,
    extraPids: [],
    stats: async (op) => (await ask(op)) as unknown as ProcessSnapshot,
    audit: async () => {
      if (exited || role !== 'gateway') return null;
      const m = await ask('audit');
      if (m.error !== undefined) throw new Error(`${name}: audit failed: ${String(m.error)}`);
      return (m.audit ?? null) as LedgerAudit | null;
    },
    profile: async (op, file) => {
      const m = await ask(op === 'start' ? 'prof-start' : 'prof-stop', file === undefined ? {} : { file });
      if (m.error !== undefined) throw new Error(`${name}: CPU profile ${op} failed: ${String(m.error)}`);
    },
    stop: async () => {
      if (exited) return;
      cp.send({ op: 'stop' }, () => undefined);
      const stopped = await Promise.race([exit.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), STOP_TIMEOUT_MS).unref())]);
      if (!stopped) {
        cp.kill('SIGKILL');
        await exit;
      }
    },
  };
  cp.send({ op: 'start', role, config });
  try {
    const r = await ready;
    return { proc: { ...proc, extraPids: Array.isArray(r.extraPids) ? (r.extraPids as number[]) : [] }, ready: r };
  } catch (e) {
    await proc.stop();
    throw e;
  }
}

/** Like Promise.all, but only settles once every start has: a failed start never orphans the others. */
async function settled<T>(ps: Array<Promise<T>>): Promise<T[]> {
  const rs = await Promise.allSettled(ps);
  const bad = rs.find((r) => r.status === 'rejected');
  if (bad) throw (bad as PromiseRejectedResult).reason;
  return rs.map((r) => (r as PromiseFulfilledResult<T>).value);
}

function target(
  name: TargetName,
  lane: LaneName,
  baseUrl: string,
  headers: Record<string, string>,
  model: string,
  o: BenchOptions,
  processName: string | null,
): Target {
  const ep = laneEndpoint(lane, baseUrl);
  return {
    name,
    lane,
    request: { origin: ep.origin, path: ep.path, headers: { 'content-type': 'application/json', ...headers } },
    bodies: laneBodies(lane, model, o.paceMs, o.deltas),
    processName,
  };
}

const bearer = (key: unknown): Record<string, string> => ({ authorization: `Bearer ${String(key)}` });

/** Starts one bench child process and keeps it for stopping; resolves with its ready message. */
type AddProcess = (name: string, role: ChildRole, config: unknown) => Promise<Record<string, unknown>>;
type SimUrls = { anthropic: string; openai: string };
type Ready = Record<string, unknown> | null;
/** What a start produced besides its processes. */
type Started = Pick<TargetSet, 'targets' | 'database' | 'upstreamConnections' | 'tenantsLimiter' | 'engines' | 'notes'>;

export async function startTargets(o: BenchOptions, dbUrl: string | null, redisUrl: string | null, onStep: (what: string) => void): Promise<TargetSet> {
  const processes: BenchProcess[] = [];
  const stopAll = async () => {
    // Reverse start order: gateways drop their schemas before the database goes.
    for (const p of [...processes].reverse()) await p.stop().catch(() => undefined);
  };
  const add: AddProcess = async (name, role, config) => {
    onStep(`starting ${name}`);
    const c = await spawnChild(name, role, config);
    processes.push(c.proc);
    return c.ready;
  };
  const upstreamConnections = o.upstreamConnections ?? Math.max(256, o.streams + 16);
  try {
    let started: Started;
    if (selfStarted(o)) {
      started = await startOwnTargets(o, dbUrl, redisUrl, upstreamConnections, add);
      processes.push(postgresServerProcess());
    } else {
      started = await startNamedTargets(o, upstreamConnections, add);
    }
    return { ...started, processes, stop: stopAll };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

/** The simulators, the database (unless DATABASE_URL names one), the gateways and the plain proxy. */
async function startOwnTargets(o: BenchOptions, dbUrl: string | null, redisUrl: string | null, upstreamConnections: number, add: AddProcess): Promise<Started> {
  const database = dbUrl === null ? 'embedded PostgreSQL' : 'DATABASE_URL';
  const [s, db] = (await settled([
    add('simulators', 'sims', { keys: SIM_KEYS, second: o.scenarios.includes('pool') } satisfies SimsChildConfig),
    dbUrl === null ? add('postgres', 'db', {}) : Promise.resolve({ url: dbUrl }),
  ])) as [SimUrls & Partial<Record<'anthropic2' | 'openai2', string>>, { url: string }];
  const gw = (suffix: string, unbilled: boolean, more: Partial<GatewayChildConfig> = {}): GatewayChildConfig => ({
    dbUrl: db.url,
    schema: `inkgate_bench_${process.pid}_${suffix}`,
    unbilled,
    sims: s,
    simKeys: SIM_KEYS,
    upstreamConnections,
    ledger: { durability: o.durability, flushMs: o.flushMs },
    redisUrl: null,
    tenants: null,
    ...more,
  });
  // The durability, many-tenants and engines scenarios need gateways of their own, started only for
  // them; the engines scenario alone needs neither the shared inkgate nor the one with billing off.
  const wantShared = o.scenarios.some((sc) => !OWN_GATEWAYS.has(sc));
  const wantAccess = o.scenarios.includes('access-log');
  const wantSync = o.scenarios.includes('durability');
  const wantTenants = o.scenarios.includes('many-tenants');
  const wantEngines = o.scenarios.includes('engines');
  // uWS loads only where a native build exists for this Node (the children run this same Node).
  const uws = wantEngines ? loadUws() : null;
  const notes: string[] = [];
  if (uws && !uws.ok) notes.push(`engines: the uws engine cannot run here (${uws.reason}); the scenario runs the node engine only`);
  const engineGw = (engine: 'uws' | 'node') => add(ENGINE_TARGETS[engine], 'gateway', gw(engine, false, { engine }));
  const [on, off, proxy, sync, tenants, engUws, engNode, accOn, accOff, pool] = (await settled<Ready | PoolReady>([
    wantShared ? add('inkgate', 'gateway', gw('on', false)) : Promise.resolve(null),
    wantShared ? add('inkgate (billing off)', 'gateway', gw('off', true)) : Promise.resolve(null),
    add('plain proxy', 'proxy', {
      upstreams: { messages: { url: s.anthropic, key: SIM_KEYS.anthropic }, responses: { url: s.openai, key: SIM_KEYS.openai } },
      anthropicVersion: o.anthropicVersion,
      connections: upstreamConnections,
    } satisfies ProxyChildConfig),
    wantSync ? add('inkgate (sync)', 'gateway', gw('sync', false, { ledger: { durability: 'sync', flushMs: o.flushMs } })) : Promise.resolve(null),
    wantTenants
      ? add(TENANTS_PROCESS, 'gateway', gw('tenants', false, { redisUrl, tenants: { accounts: o.tenantAccounts, keys: o.tenantKeys } }))
      : Promise.resolve(null),
    uws?.ok ? engineGw('uws') : Promise.resolve(null),
    wantEngines ? engineGw('node') : Promise.resolve(null),
    wantAccess ? add(ACCESS_TARGETS.on, 'gateway', gw('access', false, { accessLog: true })) : Promise.resolve(null),
    wantAccess ? add(ACCESS_TARGETS.off, 'gateway', gw('noaccess', false, { accessLog: false })) : Promise.resolve(null),
    o.scenarios.includes('pool') ? startPoolGateways(add, s, gw) : Promise.resolve(null),
  ])) as [Ready, Ready, Ready, Ready, Ready, Ready, Ready, Ready, Ready, PoolReady | null];
  const engines = servingEngines([
    ['inkgate', on],
    ['inkgate (billing off)', off],
    ['inkgate (sync)', sync],
    [TENANTS_PROCESS, tenants],
    [ENGINE_TARGETS.uws, engUws],
    [ENGINE_TARGETS.node, engNode],
    [POOL_TARGETS.one, pool?.one ?? null],
    [POOL_TARGETS.two, pool?.two ?? null],
  ]);
  // A gateway that asked for an engine must serve with it, or its figures are another engine's.
  for (const [want, r] of [
    ['uws', engUws],
    ['node', engNode],
  ] as const) {
    if (r !== null && r.engine !== want) throw new Error(`${ENGINE_TARGETS[want]}: asked for server.engine ${want}, serves with ${String(r.engine)}`);
  }
  const targets = o.lanes.flatMap((lane) => ownLaneTargets(lane, o, s, { on, off, proxy: proxy!, sync, tenants, engUws, engNode, accOn, accOff, pool }));
  return { targets, database, upstreamConnections, tenantsLimiter: tenants ? String(tenants.limiter) : null, engines, notes };
}

/** Each started gateway (its ready message) and the engine it serves with, as the report lists them. */
function servingEngines(started: ReadonlyArray<readonly [string, Ready]>): Started['engines'] {
  return started.filter(([, r]) => r !== null).map(([process, r]) => ({ process, engine: typeof r!.engine === 'string' ? r!.engine : null }));
}

type PoolReady = { one: Record<string, unknown>; two: Record<string, unknown> };

/**
 * The pool scenario: the same billing gateway twice, with the simulators as its only deployment and
 * with them and the second pair (same process, other ports) as two, each vendor's base URL a
 * comma-separated list as INKGATE_<VENDOR>_BASE_URL takes it (one key for both).
 */
async function startPoolGateways(
  add: AddProcess,
  s: SimUrls & Partial<Record<'anthropic2' | 'openai2', string>>,
  gw: (suffix: string, unbilled: boolean) => GatewayChildConfig,
): Promise<PoolReady> {
  const two = { anthropic: `${s.anthropic},${s.anthropic2!}`, openai: `${s.openai},${s.openai2!}` };
  const [one, both] = await settled([
    add(POOL_TARGETS.one, 'gateway', gw('pool1', false)),
    add(POOL_TARGETS.two, 'gateway', { ...gw('pool2', false), sims: two }),
  ]);
  return { one: one!, two: both! };
}

/** One lane's targets over the self-started processes (ready messages carry their url and key). */
function ownLaneTargets(
  lane: LaneName,
  o: BenchOptions,
  s: SimUrls,
  p: {
    on: Ready;
    off: Ready;
    proxy: Record<string, unknown>;
    sync: Ready;
    tenants: Ready;
    engUws: Ready;
    engNode: Ready;
    accOn: Ready;
    accOff: Ready;
    pool: PoolReady | null;
  },
): Target[] {
  const out: Target[] = [];
  const simUrl = lane === 'messages' ? s.anthropic : s.openai;
  const simKey = SIM_KEYS[lane === 'messages' ? 'anthropic' : 'openai'];
  out.push(target('direct', lane, simUrl, vendorHeaders(lane, simKey, o.anthropicVersion), o.directModels[lane], o, 'simulators'));
  out.push(target('plain proxy', lane, String(p.proxy.url), {}, o.directModels[lane], o, 'plain proxy'));
  const own = (name: TargetName, r: Ready) => void (r && out.push(target(name, lane, String(r.url), bearer(r.key), o.models[lane], o, name)));
  own('inkgate', p.on);
  own('inkgate (billing off)', p.off);
  own('inkgate (sync)', p.sync);
  own(ENGINE_TARGETS.uws, p.engUws);
  own(ENGINE_TARGETS.node, p.engNode);
  own(ACCESS_TARGETS.on, p.accOn);
  own(ACCESS_TARGETS.off, p.accOff);
  own(POOL_TARGETS.one, p.pool?.one ?? null);
  own(POOL_TARGETS.two, p.pool?.two ?? null);
  if (p.tenants) {
    const one = target('inkgate (one key)', lane, String(p.tenants.url), bearer(p.tenants.key), o.models[lane], o, TENANTS_PROCESS);
    out.push(one);
    const rotate = (p.tenants.keys as string[]).map(bearer);
    out.push({ ...one, name: 'inkgate (many tenants)', request: { ...one.request, rotate } });
  }
  return out;
}

/** Named targets are only called; the plain proxy (when wanted) is started in front of the named vendors. */
async function startNamedTargets(o: BenchOptions, upstreamConnections: number, add: AddProcess): Promise<Started> {
  const targets: Target[] = [];
  const named = o.lanes.filter((l) => o.direct[l] !== null);
  let proxyUrl: string | null = null;
  if (named.length > 0 && o.plainProxy) {
    const upstreams: ProxyChildConfig['upstreams'] = {};
    for (const l of named) upstreams[l] = o.direct[l]!;
    proxyUrl = String(
      (await add('plain proxy', 'proxy', { upstreams, anthropicVersion: o.anthropicVersion, connections: upstreamConnections } satisfies ProxyChildConfig)).url,
    );
  }
  for (const lane of o.lanes) {
    const d = o.direct[lane];
    if (d) targets.push(target('direct', lane, d.url, vendorHeaders(lane, d.key, o.anthropicVersion), o.directModels[lane], o, null));
    if (d && proxyUrl) targets.push(target('plain proxy', lane, proxyUrl, {}, o.directModels[lane], o, 'plain proxy'));
    if (o.gateway) targets.push(target('inkgate', lane, o.gateway.url, bearer(o.gateway.key), o.models[lane], o, null));
  }
  return { targets, database: null, upstreamConnections: proxyUrl ? upstreamConnections : null, tenantsLimiter: null, engines: [], notes: [] };
}
