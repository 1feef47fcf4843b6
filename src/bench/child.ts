// One bench process: the vendor simulators, an inkgate, the plain proxy or an embedded Postgres.
// Each target runs in its own process so its CPU time, peak RSS and event-loop delay are its own.
// Protocol (IPC): the parent sends {op:'start', role, config}; the child answers {type:'ready'};
// then {op:'mark'} (reset the window) and {op:'read'} answer {type:'stats'}; {op:'stop'} ends it.
// The parent gone (IPC disconnect) stops it too, so a killed bench leaves no process behind.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { LaneName } from './args.js';
import type { ProxyUpstream } from './plain-proxy.js';

export type ChildRole = 'sims' | 'gateway' | 'proxy' | 'db';

export interface GatewayChildConfig {
  readonly dbUrl: string;
  readonly schema: string;
  readonly unbilled: boolean;
  readonly sims: { readonly anthropic: string; readonly openai: string };
  readonly simKeys: { readonly anthropic: string; readonly openai: string };
  readonly upstreamConnections: number;
  readonly ledger: { readonly durability: 'write-behind' | 'sync'; readonly flushMs: number };
}

export interface ProxyChildConfig {
  readonly upstreams: Partial<Record<LaneName, ProxyUpstream>>;
  readonly anthropicVersion: string;
  readonly connections: number;
}

export interface SimsChildConfig {
  readonly keys: { readonly anthropic: string; readonly openai: string };
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
}

type Stop = () => Promise<void>;

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

async function startSims(c: SimsChildConfig): Promise<{ ready: Record<string, unknown>; stop: Stop }> {
  const { startAnthropicSimulator } = await import('../vendors/anthropic/simulator.js');
  const { startOpenAISimulator } = await import('../vendors/openai/simulator.js');
  const a = await startAnthropicSimulator({ apiKey: c.keys.anthropic, maxRecordedRequests: 0 });
  const o = await startOpenAISimulator({ apiKey: c.keys.openai, maxRecordedRequests: 0 });
  return { ready: { anthropic: a.url, openai: o.url }, stop: async () => void (await Promise.all([a.close(), o.close()])) };
}

async function startInkgate(c: GatewayChildConfig): Promise<{ ready: Record<string, unknown>; stop: Stop }> {
  const { loadConfig } = await import('../config/config.js');
  const { createGateway } = await import('../gateway.js');
  const { prepareBenchGateway } = await import('./bench-account.js');
  const { silentLogger } = await import('../util/log.js');
  // A private data dir (media store) and schema: nothing of the operator's is read or written.
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-bench-gw-'));
  // Empty environment on purpose: the operator's INKGATE_* variables must not reshape the target.
  const cfg = loadConfig(
    {},
    {
      server: { host: '127.0.0.1', port: 0 },
      dataDir,
      db: { url: c.dbUrl, schema: c.schema, poolMax: 32 },
      redis: { url: null },
      limits: { requestsPerMinute: 1_000_000, publicRequestsPerMinute: 1_000_000 },
      vendors: { anthropic: { baseUrl: c.sims.anthropic, apiKey: c.simKeys.anthropic }, openai: { baseUrl: c.sims.openai, apiKey: c.simKeys.openai } },
      upstream: { connections: c.upstreamConnections },
      ledger: c.ledger,
      demo: { createAccount: false },
    },
  );
  const gw = await createGateway(cfg, { log: silentLogger, unbilled: c.unbilled });
  const pool = gw.services.pool;
  const dropAll = async () => {
    await pool.query(`DROP SCHEMA IF EXISTS ${c.schema} CASCADE`).catch(() => undefined);
    await gw.close().catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const key = await prepareBenchGateway(gw);
    return { ready: { url: gw.url, key }, stop: dropAll };
  } catch (e) {
    await dropAll();
    throw e;
  }
}

async function startProxy(c: ProxyChildConfig): Promise<{ ready: Record<string, unknown>; stop: Stop }> {
  const { startPlainProxy } = await import('./plain-proxy.js');
  const p = await startPlainProxy(c);
  return { ready: { url: p.url }, stop: () => p.close() };
}

async function startDb(): Promise<{ ready: Record<string, unknown>; stop: Stop }> {
  const { startEmbeddedPostgres } = await import('../store/embedded.js');
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

function main(): void {
  const p = probe();
  let stop: Stop | null = null;
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
  process.on('message', (m: { op: string; id?: number; role?: ChildRole; config?: unknown }) => {
    if (m.op === 'start') {
      const role = m.role!;
      const started =
        role === 'sims' ? startSims(m.config as SimsChildConfig)
        : role === 'gateway' ? startInkgate(m.config as GatewayChildConfig)
        : role === 'proxy' ? startProxy(m.config as ProxyChildConfig)
        : startDb();
      started.then(
        (s) => {
          stop = s.stop;
          process.send?.({ type: 'ready', ...s.ready });
        },
        (e: unknown) => {
          process.send?.({ type: 'error', message: e instanceof Error ? e.message : String(e) });
          void end(1);
        },
      );
    } else if (m.op === 'mark') process.send?.({ type: 'stats', id: m.id, ...p.mark() });
    else if (m.op === 'read') process.send?.({ type: 'stats', id: m.id, ...p.read() });
    else if (m.op === 'stop') void end(0).then(undefined, () => process.exit(1));
  });
}

main();
