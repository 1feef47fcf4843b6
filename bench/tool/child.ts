// One bench process: the vendor simulators, an inkgate, the plain proxy or an embedded Postgres.
// Each target runs in its own process so its CPU time, peak RSS and event-loop delay are its own.
// Protocol (IPC): the parent sends {op:'start', role, config}; the child answers {type:'ready'};
// then {op:'mark'} (reset the window) and {op:'read'} answer {type:'stats'}; {op:'audit'} (a
// gateway, once the load is over) answers {type:'audit'}; {op:'prof-start'} and {op:'prof-stop',
// file} take a CPU profile of this process (node:inspector) and answer {type:'prof'}; {op:'stop'}
// ends it.
// The parent gone (IPC disconnect) stops it too, so a killed bench leaves no process behind.
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { LaneName } from './args.js';
import type { ProxyUpstream } from './plain-proxy.js';
import type { Logger } from '../../src/util/log.js';
import type { Config, DeepPartial } from '../../src/config/config.js';

export type ChildRole = 'sims' | 'gateway' | 'proxy' | 'db';

export interface GatewayChildConfig {
  readonly dbUrl: string;
  readonly schema: string;
  readonly unbilled: boolean;
  readonly sims: { readonly anthropic: string; readonly openai: string };
  readonly simKeys: { readonly anthropic: string; readonly openai: string };
  readonly upstreamConnections: number;
  readonly ledger: { readonly durability: 'write-behind' | 'sync'; readonly flushMs: number };
  /** The shared rate limiter (null: in-process). */
  readonly redisUrl: string | null;
  /** Many tenants: also make this many funded accounts and keys (ready then carries `keys`). */
  readonly tenants: { readonly accounts: number; readonly keys: number } | null;
  /** The HTTP engine (config server.engine); unset: the configuration's default (auto). */
  readonly engine?: 'auto' | 'uws' | 'node';
  /**
   * The access log (config log.access), written as in a deployment (pino, buffered) but into
   * /dev/null; unset: on, as by default.
   */
  readonly accessLog?: boolean;
}

/** What a gateway's ledger looks like after the load: every hold should have ended, nothing logged. */
export interface LedgerAudit {
  /** Holds still open once the journal is written: running (an end lost) or usage_unknown. */
  readonly openHolds: number;
  readonly usageUnknown: number;
  /** Requests recorded, and the distinct keys they came from. */
  readonly requests: number;
  readonly keysUsed: number;
  /** Rows breaking a ledger rule (src/ledger/invariant.ts), over the gateway's whole schema. */
  readonly invariantViolations: number;
  /** Error lines the gateway logged during the bench (a failed settle or move is one). */
  readonly errorsLogged: number;
  readonly firstErrors: readonly string[];
}

export interface ProxyChildConfig {
  readonly upstreams: Partial<Record<LaneName, ProxyUpstream>>;
  readonly anthropicVersion: string;
  readonly connections: number;
}

export interface SimsChildConfig {
  readonly keys: { readonly anthropic: string; readonly openai: string };
  /**
   * The pool scenario: a second Anthropic and OpenAI simulator on ports of their own in this same
   * process (ready then carries `anthropic2` and `openai2`), so one deployment or two have the same
   * vendor process, and only the gateway's side differs.
   */
  readonly second?: boolean;
}

export interface ProcessSnapshot {
  /** User + system CPU of the whole process since it started, µs. */
  readonly cpuUs: number;
  readonly rssBytes: number;
  /** Highest RSS sampled (every 50 ms) since the last mark. */
  readonly peakRssBytes: number;
  /** Event-loop delay since the last mark (perf_hooks, 10 ms resolution), ms. */
  readonly eldP50Ms: number;
  readonly eldP99Ms: number;
  readonly eldMaxMs: number;
  /**
   * Simulators only: the requests each has received since it started, in start order (Anthropic,
   * OpenAI, then the second pair when started); others: absent.
   */
  readonly served?: readonly number[];
}

type Stop = () => Promise<void>;
type Audit = () => Promise<LedgerAudit>;
interface Started {
  ready: Record<string, unknown>;
  stop: Stop;
  audit?: Audit;
  /** Requests received so far (the simulators: so a run shows which deployments took its traffic). */
  served?: () => number[];
}
const FIRST_ERRORS = 5;

function probe(): { mark(): ProcessSnapshot; read(): ProcessSnapshot } {
  const eld = monitorEventLoopDelay({ resolution: 10 });
  eld.enable();
  let peak = process.memoryUsage.rss();
  setInterval(() => {
    const r = process.memoryUsage.rss();
    if (r > peak) peak = r;
  }, 50).unref();
  const snap = (): ProcessSnapshot => {
    const c = process.cpuUsage();
    const rss = process.memoryUsage.rss();
    if (rss > peak) peak = rss;
    const has = eld.count > 0;
    return {
      cpuUs: c.user + c.system,
      rssBytes: rss,
      peakRssBytes: peak,
      eldP50Ms: has ? eld.percentile(50) / 1e6 : 0,
      eldP99Ms: has ? eld.percentile(99) / 1e6 : 0,
      eldMaxMs: has ? eld.max / 1e6 : 0,
    };
  };
  return {
    mark() {
      eld.reset();
      peak = process.memoryUsage.rss();
      return snap();
    },
    read: snap,
  };
}

async function startSims(c: SimsChildConfig): Promise<Started> {
  const { startAnthropicSimulator } = await import('../../simulators/anthropic/simulator.js');
  const { startOpenAISimulator } = await import('../../simulators/openai/simulator.js');
  const pair = async () =>
    [
      await startAnthropicSimulator({ apiKey: c.keys.anthropic, maxRecordedRequests: 0 }),
      await startOpenAISimulator({ apiKey: c.keys.openai, maxRecordedRequests: 0 }),
    ] as const;
  const [a, o] = await pair();
  const [a2, o2] = c.second ? await pair() : [];
  const all = [a, o, a2, o2].filter((x) => x !== undefined);
  return {
    ready: { anthropic: a.url, openai: o.url, ...(a2 && o2 ? { anthropic2: a2.url, openai2: o2.url } : {}) },
    stop: async () => void (await Promise.all(all.map((x) => x.close()))),
    served: () => all.map((x) => x.requestCount),
  };
}

/** The bench gateway's whole configuration beyond the defaults: its own schema, data dir, simulators and limits. */
function gatewayOverrides(c: GatewayChildConfig, dataDir: string): DeepPartial<Config> {
  return {
    server: { host: '127.0.0.1', port: 0, ...(c.engine === undefined ? {} : { engine: c.engine }) },
    dataDir,
    // Timeouts of seconds, not the production sub-second ones: the bench measures latency, and on a
    // loaded machine a long tick of its own would otherwise fail a settle the database never delayed.
    db: { url: c.dbUrl, schema: c.schema, poolMax: 32, connectionTimeoutMs: 5_000, queryTimeoutMs: 5_000 },
    redis: { url: c.redisUrl },
    limits: { requestsPerMinute: 1_000_000, publicRequestsPerMinute: 1_000_000 },
    vendors: { anthropic: { baseUrl: c.sims.anthropic, apiKey: c.simKeys.anthropic }, openai: { baseUrl: c.sims.openai, apiKey: c.simKeys.openai } },
    upstream: { connections: c.upstreamConnections },
    ledger: c.ledger,
    demo: { createAccount: false },
    log: { level: 'info', access: c.accessLog ?? true },
  };
}

async function startInkgate(c: GatewayChildConfig): Promise<Started> {
  const { loadConfig, tracingEnvironment } = await import('../../src/config/config.js');
  const { createGateway } = await import('../../src/gateway.js');
  const { prepareBenchGateway, prepareTenants } = await import('./bench-account.js');
  const { createLogger } = await import('../../src/util/log.js');
  const { checkLedger } = await import('../../src/ledger/invariant.js');
  // Nothing is printed, but error lines are counted: a failed settle under load is a finding.
  let errorsLogged = 0;
  const firstErrors: string[] = [];
  // At `error`: error and fatal lines are written (and counted), the rest dropped by the level.
  const log: Logger = createLogger('error', (line) => {
    errorsLogged++;
    if (firstErrors.length < FIRST_ERRORS) firstErrors.push(line.slice(0, 500));
  });
  // A private data dir (media store) and schema: nothing of the operator's is read or written.
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-bench-gw-'));
  // The operator's INKGATE_* variables must not reshape the target; the OTEL_* ones are taken, so
  // that a run can measure the gateway with traces on (docs/performance.md, Traces).
  const cfg = loadConfig(tracingEnvironment(), gatewayOverrides(c, dataDir));
  const accessLog = createLogger('info', undefined, true, openSync('/dev/null', 'w'));
  const gw = await createGateway(cfg, { log, accessLog, unbilled: c.unbilled });
  const pool = gw.services.pool;
  const dropAll = async () => {
    await pool.query(`DROP SCHEMA IF EXISTS ${c.schema} CASCADE`).catch(() => undefined);
    await gw.close().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  };
  const audit: Audit = async () => {
    await gw.services.escrow.beforeView(); // the journal written: what is open now is open in Postgres
    const r = await pool.query<{ open: string; unknown: string; n: string; keys: string }>(
      `SELECT count(*) FILTER (WHERE hold_state = 'open') AS open, count(*) FILTER (WHERE status = 'usage_unknown') AS unknown,
              count(*) AS n, count(DISTINCT key_id) AS keys FROM requests`,
    );
    const row = r.rows[0]!;
    const invariantViolations = (await checkLedger(pool)).reduce((n, v) => n + v.count, 0);
    return {
      invariantViolations,
      openHolds: Number(row.open),
      usageUnknown: Number(row.unknown),
      requests: Number(row.n),
      keysUsed: Number(row.keys),
      errorsLogged,
      firstErrors,
    };
  };
  try {
    const key = await prepareBenchGateway(gw);
    const keys = c.tenants ? await prepareTenants(gw, c.tenants.accounts, c.tenants.keys) : undefined;
    return {
      // The engine that serves: the parent checks each gateway runs the one it asked for.
      ready: { url: gw.url, key, ...(keys ? { keys } : {}), limiter: c.redisUrl ? 'redis' : 'in-process', engine: gw.engine },
      stop: dropAll,
      ...(c.unbilled ? {} : { audit }),
    };
  } catch (e) {
    await dropAll();
    throw e;
  }
}

async function startProxy(c: ProxyChildConfig): Promise<Started> {
  const { startPlainProxy } = await import('./plain-proxy.js');
  const p = await startPlainProxy(c);
  return { ready: { url: p.url }, stop: () => p.close() };
}

async function startDb(): Promise<Started> {
  const { startEmbeddedPostgres } = await import('../../src/store/embedded.js');
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-bench-pg-'));
  const h = await startEmbeddedPostgres(dir, () => undefined);
  let postmasterPid: number | null = null;
  try {
    postmasterPid = Number.parseInt(readFileSync(join(dir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0] ?? '', 10) || null;
  } catch {
    /* not readable (another user owns it): the pid is then simply not reported */
  }
  return {
    ready: { url: h.url, extraPids: postmasterPid ? [postmasterPid] : [] },
    stop: async () => {
      await h.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** CPU profiles of this process, one at a time, through the in-process inspector (no debugger port). */
function profiler(): { start(): Promise<void>; stop(file: string): Promise<void> } {
  let session: Session | null = null;
  return {
    async start() {
      if (session === null) {
        session = new Session();
        session.connect();
        await session.post('Profiler.enable');
      }
      await session.post('Profiler.start');
    },
    async stop(file) {
      if (session === null) throw new Error('no profile started');
      const { profile } = await session.post('Profiler.stop');
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, JSON.stringify(profile));
    },
  };
}

function main(): void {
  const p = probe();
  const prof = profiler();
  let stop: Stop | null = null;
  let audit: Audit | null = null;
  let served: (() => number[]) | null = null;
  let stopping = false;
  const end = async (code: number) => {
    if (stopping) return;
    stopping = true;
    // A stop that hangs must not keep the process: bounded, then exit anyway.
    const t = setTimeout(() => process.exit(code || 3), 15_000);
    t.unref();
    try {
      await stop?.();
    } finally {
      process.exit(code);
    }
  };
  process.on('disconnect', () => void end(0));
  process.on('message', (m: { op: string; id?: number; role?: ChildRole; config?: unknown; file?: string }) => {
    if (m.op === 'start') {
      const role = m.role!;
      const started =
        role === 'sims'
          ? startSims(m.config as SimsChildConfig)
          : role === 'gateway'
            ? startInkgate(m.config as GatewayChildConfig)
            : role === 'proxy'
              ? startProxy(m.config as ProxyChildConfig)
              : startDb();
      started.then(
        (s) => {
          stop = s.stop;
          audit = s.audit ?? null;
          served = s.served ?? null;
          process.send?.({ type: 'ready', ...s.ready });
        },
        (e: unknown) => {
          process.send?.({ type: 'error', message: e instanceof Error ? e.message : String(e) });
          void end(1);
        },
      );
    } else if (m.op === 'mark') process.send?.({ type: 'stats', id: m.id, ...p.mark(), served: served?.() });
    else if (m.op === 'read') process.send?.({ type: 'stats', id: m.id, ...p.read(), served: served?.() });
    else if (m.op === 'audit') {
      const reply = (a: LedgerAudit | null, error?: string) => process.send?.({ type: 'audit', id: m.id, audit: a, error });
      if (!audit)
        reply(null); // not a billing gateway: nothing to audit
      else
        audit().then(
          (a) => reply(a),
          (e: unknown) => reply(null, e instanceof Error ? e.message : String(e)),
        );
    } else if (m.op === 'prof-start' || m.op === 'prof-stop') {
      const reply = (error?: string) => process.send?.({ type: 'prof', id: m.id, error });
      (m.op === 'prof-start' ? prof.start() : prof.stop(m.file!)).then(
        () => reply(),
        (e: unknown) => reply(e instanceof Error ? e.message : String(e)),
      );
    } else if (m.op === 'stop') void end(0).then(undefined, () => process.exit(1));
  });
}

main();
