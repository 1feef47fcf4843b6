// `inkgate bench` arguments: parsed and checked once, every number bounded, so a typo fails at
// once with one line instead of after minutes of load.
export const SCENARIOS = [
  'latency',
  'saturation',
  'stream-saturation',
  'open-loop',
  'paced',
  'billing',
  'many-tenants',
  'durability',
  'engines',
  'access-log',
  'pool',
] as const;
export type Scenario = (typeof SCENARIOS)[number];
export type LaneName = 'messages' | 'responses';

export interface NamedTarget {
  readonly url: string;
  readonly key: string;
}

export interface BenchOptions {
  readonly scenarios: readonly Scenario[];
  readonly lanes: readonly LaneName[];
  readonly seconds: number;
  readonly warmupSeconds: number;
  /** Per run: the run ends early once this many answers are measured. */
  readonly maxRequests: number;
  /** The whole bench: scenarios that would start after this are skipped (and listed as skipped). */
  readonly maxTotalSeconds: number;
  readonly connections: number;
  readonly rate: number;
  readonly streams: number;
  readonly paceMs: number;
  readonly deltas: number;
  /** The self-started inkgate's and plain proxy's connections per vendor (null: max(256, streams)). */
  readonly upstreamConnections: number | null;
  readonly gateway: NamedTarget | null;
  /** Per lane: the vendor called directly (null: none, or the simulators when self-started). */
  readonly direct: Readonly<Record<LaneName, NamedTarget | null>>;
  readonly models: Readonly<Record<LaneName, string>>;
  readonly directModels: Readonly<Record<LaneName, string>>;
  readonly anthropicVersion: string;
  readonly plainProxy: boolean;
  /** The self-started inkgate's ledger durability (config ledger.durability). */
  readonly durability: 'write-behind' | 'sync';
  /** The self-started inkgate's group-commit period, ms (config ledger.flushMs). */
  readonly flushMs: number;
  /** many-tenants: accounts, and keys spread over them. */
  readonly tenantAccounts: number;
  readonly tenantKeys: number;
  readonly json: boolean;
  readonly reportFile: string | null;
  /** A folder for one CPU profile per run of the target's own process (null: none taken). */
  readonly cpuProfDir: string | null;
  readonly progress: boolean;
  readonly help: boolean;
}

export class BenchUsageError extends Error {
  override name = 'BenchUsageError';
}

export const USAGE = `usage: inkgate bench [options]

Measures what inkgate adds over calling the vendor directly. With no target named it starts,
on 127.0.0.1, the vendor simulators, inkgate (billing on, and a second one with billing off)
and a plain node:http + undici pass-through proxy, and stops them all at the end. The engines
scenario starts one more inkgate per HTTP engine (server.engine uws and node; node only where
no uWebSockets.js build loads on this Node); the access-log scenario two more, the same
gateway with its access log on and off (written, as in a deployment, but into /dev/null); the
pool scenario a second simulator process and two more, the same gateway with one vendor
deployment and with two (the simulators on two ports, one base URL list).

  --scenario LIST        latency,saturation,stream-saturation,open-loop,paced,billing,
                         many-tenants,durability,engines,access-log,pool (default: all)
  --lane L               messages | responses | both (default both)
  --seconds N            measured seconds per run (default 5)
  --warmup-seconds N     unmeasured warm-up before each run (default 1)
  --max-requests N       answers measured per run at most (default 200000)
  --max-total-seconds N  bound on the whole bench; later scenarios are skipped (default 900)
  --connections N        closed-loop connections for saturation and billing (default 50)
  --rate R               open-loop requests per second (default 500)
  --streams N            paced streams at once (default 1000)
  --pace-ms MS           ms between deltas of a paced stream (default 20)
  --deltas N             deltas per paced stream (default 50)
  --upstream-connections N  self-started inkgate/proxy connections per vendor (default max(256, streams))
  --gateway URL --key KEY         measure this inkgate (or any gateway) instead of starting one
  --direct URL --direct-key KEY   the vendor called directly (base URL; /v1/messages or /v1/responses is added)
  --direct-responses URL --direct-responses-key KEY   another vendor for the responses lane
  --model-messages ID, --model-responses ID             gateway model ids (default sonnet, astra)
  --direct-model-messages ID, --direct-model-responses ID  vendor model ids (default claude-sonnet-5, gpt-6)
  --no-plain-proxy       do not start the plain proxy in front of a named --direct
  --durability MODE      the self-started inkgate's ledger durability: write-behind (default) or sync
  --flush-ms MS          the self-started inkgate's journal group-commit period (default 20)
  --tenant-accounts N    many-tenants: funded accounts (default 100)
  --tenant-keys N        many-tenants: keys spread over them, one per request in turn (default 1000)
  --json                 one JSON document on stdout (every figure, ratios, goals)
  --report FILE.html     a self-contained HTML report with latency plots
  --cpu-prof DIR         a CPU profile of the target's own process over each run's measured
                         window, DIR/<lane>-<scenario>-<kind>-c<N>-<target>.cpuprofile
                         (processes the bench started; figures taken under the profiler are
                         lower); bench/cpuprofile-top.ts in the source tree summarises them
  --progress             progress bar on stderr even when it is not a terminal
`;

const BOOLEAN = new Set(['json', 'progress', 'no-plain-proxy', 'help']);
const VALUED = new Set([
  'scenario',
  'lane',
  'seconds',
  'warmup-seconds',
  'max-requests',
  'max-total-seconds',
  'connections',
  'rate',
  'streams',
  'pace-ms',
  'deltas',
  'upstream-connections',
  'gateway',
  'key',
  'direct',
  'direct-key',
  'direct-responses',
  'direct-responses-key',
  'model-messages',
  'model-responses',
  'direct-model-messages',
  'direct-model-responses',
  'anthropic-version',
  'report',
  'durability',
  'flush-ms',
  'tenant-accounts',
  'tenant-keys',
  'cpu-prof',
]);

function num(flags: Map<string, string>, name: string, dflt: number, min: number, max: number, integer = true): number {
  const v = flags.get(name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min || n > max) {
    throw new BenchUsageError(`--${name} must be ${integer ? 'a whole number' : 'a number'} from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return n;
}

function url(v: string, name: string): string {
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw new BenchUsageError(`--${name} must be an http(s) URL, got ${JSON.stringify(v)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new BenchUsageError(`--${name} must be an http(s) URL`);
  return v;
}

/** `--name value`, `--name=value` and bare boolean `--name`, each checked against the known options. */
function readFlags(argv: readonly string[]): { flags: Map<string, string>; bools: Set<string> } {
  const flags = new Map<string, string>();
  const bools = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--')) throw new BenchUsageError(`unexpected argument ${JSON.stringify(a)}`);
    const eq = a.indexOf('=');
    const name = eq > 0 ? a.slice(2, eq) : a.slice(2);
    if (BOOLEAN.has(name) && eq < 0) bools.add(name);
    else if (VALUED.has(name)) {
      const v = eq > 0 ? a.slice(eq + 1) : argv[++i];
      if (v === undefined) throw new BenchUsageError(`--${name} needs a value`);
      flags.set(name, v);
    } else throw new BenchUsageError(`unknown option --${name}; run inkgate bench --help`);
  }
  return { flags, bools };
}

export function parseBenchArgs(argv: readonly string[], stderrIsTty: boolean): BenchOptions {
  const { flags, bools } = readFlags(argv);
  const scenarioList = (flags.get('scenario') ?? SCENARIOS.join(','))
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const s of scenarioList) {
    if (!(SCENARIOS as readonly string[]).includes(s)) throw new BenchUsageError(`unknown scenario ${JSON.stringify(s)}; one of ${SCENARIOS.join(', ')}`);
  }
  const laneArg = flags.get('lane') ?? 'both';
  if (!['messages', 'responses', 'both'].includes(laneArg)) throw new BenchUsageError('--lane must be messages, responses or both');
  const gatewayUrl = flags.get('gateway');
  const key = flags.get('key');
  if ((gatewayUrl === undefined) !== (key === undefined)) throw new BenchUsageError('--gateway and --key go together');
  const directUrl = flags.get('direct');
  const directKey = flags.get('direct-key');
  if ((directUrl === undefined) !== (directKey === undefined)) throw new BenchUsageError('--direct and --direct-key go together');
  const drUrl = flags.get('direct-responses') ?? directUrl;
  const drKey = flags.get('direct-responses-key') ?? directKey;
  if ((drUrl === undefined) !== (drKey === undefined)) throw new BenchUsageError('--direct-responses and --direct-responses-key go together');
  const streams = num(flags, 'streams', 1000, 1, 20_000);
  const durability = flags.get('durability') ?? 'write-behind';
  if (durability !== 'write-behind' && durability !== 'sync') throw new BenchUsageError('--durability must be write-behind or sync');
  const tenantAccounts = num(flags, 'tenant-accounts', 100, 1, 10_000);
  const tenantKeys = num(flags, 'tenant-keys', 1000, 1, 100_000);
  if (tenantKeys < tenantAccounts) throw new BenchUsageError('--tenant-keys must be at least --tenant-accounts (every account gets a key)');
  const report = flags.get('report');
  if (report !== undefined && report.trim() === '') throw new BenchUsageError('--report needs a file name');
  const cpuProf = flags.get('cpu-prof');
  if (cpuProf !== undefined && cpuProf.trim() === '') throw new BenchUsageError('--cpu-prof needs a folder');
  return {
    scenarios: SCENARIOS.filter((s) => scenarioList.includes(s)),
    lanes: laneArg === 'both' ? ['messages', 'responses'] : [laneArg as LaneName],
    seconds: num(flags, 'seconds', 5, 0.2, 3600, false),
    warmupSeconds: num(flags, 'warmup-seconds', 1, 0, 600, false),
    maxRequests: num(flags, 'max-requests', 200_000, 1, 100_000_000),
    maxTotalSeconds: num(flags, 'max-total-seconds', 900, 1, 86_400),
    connections: num(flags, 'connections', 50, 1, 10_000),
    rate: num(flags, 'rate', 500, 1, 1_000_000, false),
    streams,
    paceMs: num(flags, 'pace-ms', 20, 0, 60_000),
    deltas: num(flags, 'deltas', 50, 1, 10_000),
    upstreamConnections: flags.has('upstream-connections') ? num(flags, 'upstream-connections', 256, 1, 10_000) : null,
    gateway: gatewayUrl !== undefined ? { url: url(gatewayUrl, 'gateway'), key: key! } : null,
    direct: {
      messages: directUrl !== undefined ? { url: url(directUrl, 'direct'), key: directKey! } : null,
      responses: drUrl !== undefined ? { url: url(drUrl, 'direct-responses'), key: drKey! } : null,
    },
    models: { messages: flags.get('model-messages') ?? 'sonnet', responses: flags.get('model-responses') ?? 'astra' },
    directModels: { messages: flags.get('direct-model-messages') ?? 'claude-sonnet-5', responses: flags.get('direct-model-responses') ?? 'gpt-6' },
    anthropicVersion: flags.get('anthropic-version') ?? '2023-06-01',
    plainProxy: !bools.has('no-plain-proxy'),
    durability,
    flushMs: num(flags, 'flush-ms', 20, 1, 10_000),
    tenantAccounts,
    tenantKeys,
    json: bools.has('json'),
    reportFile: report ?? null,
    cpuProfDir: cpuProf ?? null,
    progress: bools.has('progress') || stderrIsTty,
    help: bools.has('help'),
  };
}

/** True when the bench starts its own simulators, inkgates and proxy (no target named). */
export function selfStarted(o: BenchOptions): boolean {
  return o.gateway === null && o.direct.messages === null && o.direct.responses === null;
}
