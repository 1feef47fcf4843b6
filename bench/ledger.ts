// Ledger bench: reserve+settle pairs per second and reserve latency (p50 / p99), on one hot
// account and spread over 1,000 accounts, with 1, 8 and 64 requests in flight, for:
//   baseline   one BEGIN / UPDATE wallets / COMMIT per move (no request record, no key, no journal)
//   unbatched  the Ledger with group commit off: one function call (one statement, one commit) per move
//   batched    the Ledger as the gateway runs it: concurrent moves grouped into one statement and one commit
//
// How it measures: N workers (N = in flight) each loop reserve -> settle on the scenario's
// accounts for --seconds after a 0.5 s warm-up; a pair counts when its settle returns; the
// reserve latency is timed per call. The three implementations run interleaved (baseline,
// unbatched, batched, then again) --repeat times, and the report gives the median of the repeats,
// so a noisy machine (other test suites on the same two cores) hits all three alike.
// After every run it checks that no move was lost or doubled: for the ledger, exactly one reserve
// and one settle journal row per completed pair, no hold left open, and the Ink charged equal to
// the sum the workers asked for; for the baseline, nothing held and the charged total right. At
// the end the full ledger invariant runs over the bench schema.
//
// Run: node --import ./test/loader/register.js bench/ledger.ts \
//        [--seconds 2] [--repeat 3] [--pool 24] [--batch-in-flight N] [--db URL] [--json]
// It uses --db, else DATABASE_URL (via loadConfig), else postgres://postgres@127.0.0.1:5432/test;
// it creates two schemas of its own (the baseline writes no journal, so it cannot share the
// ledger's) and drops them at the end. It prints fsync / synchronous_commit: the figures mean
// something only with both on.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config/config.js';
import { Ledger } from '../src/ledger/ledger.js';
import { migrate } from '../src/store/migrate.js';
import { createPool, type Pool } from '../src/store/pool.js';
import { checkLedger } from '../src/ledger/invariant.js';

export interface BenchOptions {
  url: string;
  seconds: number;
  repeat: number;
  poolMax: number;
  /** Ledger batchMaxInFlight for the batched runs (undefined: the Ledger's default). */
  batchInFlight?: number;
  inFlight: readonly number[];
  log: (line: string) => void;
}

type ImplName = 'baseline' | 'unbatched' | 'batched';
type Shape = 'hot' | 'spread';

export interface RunResult {
  pairsPerS: number;
  reserveP50Ms: number;
  reserveP99Ms: number;
  settleP50Ms: number;
  /** Batched only: moves per statement (reserve, resolve). */
  movesPerStatement?: [number, number];
}

export interface ScenarioResult extends RunResult {
  impl: ImplName;
  shape: Shape;
  inFlight: number;
  runs: RunResult[];
}

const SPREAD_ACCOUNTS = 1000;
const HOLD_INK = 50;
const MAX_SAMPLES = 1_000_000;
const IMPLS: readonly ImplName[] = ['baseline', 'unbatched', 'batched'];

interface Impl {
  reserve(requestId: string, account: number): Promise<void>;
  settle(requestId: string, account: number, charge: number): Promise<void>;
}

interface Seeded {
  accounts: string[];
  keys: string[];
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
};

function quantile(a: Float64Array, n: number, q: number): number {
  if (n === 0) return NaN;
  const s = a.slice(0, n).sort();
  return s[Math.min(n - 1, Math.floor(q * n))]!;
}

/** Account 0 is the hot one; 1..1000 are the spread. Credited through the journal, like real ones. */
async function seed(pool: Pool, schema: string): Promise<Seeded> {
  const tag = randomBytes(3).toString('hex');
  const accounts = Array.from({ length: SPREAD_ACCOUNTS + 1 }, (_, i) => `usr_b${tag}_${i}`);
  const keys = accounts.map((_, i) => `key_b${tag}_${i}`);
  const payg = 1_000_000_000_000;
  await pool.query(`INSERT INTO ${schema}.accounts (id, name, plan_id) SELECT unnest($1::text[]), 'bench', 'pro'`, [accounts]);
  await pool.query(`INSERT INTO ${schema}.wallets (account_id, payg_ink, credited_ink, topups_completed) SELECT unnest($1::text[]), $2, $2, 1`, [
    accounts,
    payg,
  ]);
  await pool.query(
    `INSERT INTO ${schema}.ledger_journal (at, kind, account_id, amount_ink, payg_ink, credited_ink, note)
     SELECT now(), 'topup', unnest($1::text[]), $2, $2, $2, 'bench seed'`,
    [accounts, payg],
  );
  await pool.query(
    `INSERT INTO ${schema}.api_keys (id, account_id, name, key_hash, prefix, last4)
     SELECT k, a, 'bench', sha256(convert_to(k, 'UTF8')), substr(md5(k), 1, 12), 'bnch' FROM unnest($1::text[], $2::text[]) AS x(k, a)`,
    [keys, accounts],
  );
  return { accounts, keys };
}

/** The naive ledger the goal is measured against: one short transaction per move, wallet only. */
function baseline(pool: Pool, schema: string, accounts: string[]): Impl {
  const tx = async (sql: string, values: unknown[]) => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const r = await c.query(sql, values);
      await c.query('COMMIT');
      return r.rowCount;
    } finally {
      c.release();
    }
  };
  const reserveSql = `UPDATE ${schema}.wallets
      SET grant_ink = grant_ink - least(grant_ink, $2), payg_ink = payg_ink - ($2 - least(grant_ink, $2)),
          held_grant_ink = held_grant_ink + least(grant_ink, $2), held_payg_ink = held_payg_ink + ($2 - least(grant_ink, $2))
    WHERE account_id = $1 AND grant_ink + payg_ink >= $2`;
  // The bench wallets hold pay-as-you-go only, so the hold is all payg.
  const settleSql = `UPDATE ${schema}.wallets
      SET held_payg_ink = held_payg_ink - $2, payg_ink = payg_ink + ($2 - $3), charged_ink = charged_ink + $3
    WHERE account_id = $1`;
  return {
    reserve: async (_id, account) => {
      if ((await tx(reserveSql, [accounts[account], HOLD_INK])) !== 1) throw new Error('baseline reserve refused');
    },
    settle: async (_id, account, charge) => {
      await tx(settleSql, [accounts[account], HOLD_INK, charge]);
    },
  };
}

function ledgerImpl(ledger: Ledger, s: Seeded): Impl {
  return {
    reserve: async (requestId, account) => {
      await ledger.reserve({
        requestId,
        accountId: s.accounts[account]!,
        keyId: s.keys[account]!,
        product: 'messages',
        model: 'assistant-sonnet-5',
        holdInk: HOLD_INK,
      });
    },
    settle: async (requestId, _account, charge) => {
      const r = await ledger.settle(requestId, charge);
      if (!r.resolved) throw new Error(`settle of ${requestId} did not resolve: ${r.reason}`);
    },
  };
}

interface Run {
  pairs: number;
  charged: number;
  ids: string[];
  reserveMs: Float64Array;
  nr: number;
  settleMs: Float64Array;
  ns: number;
  elapsedS: number;
}

async function runScenario(impl: Impl, shape: Shape, inFlight: number, seconds: number): Promise<Run> {
  const reserveMs = new Float64Array(MAX_SAMPLES);
  const settleMs = new Float64Array(MAX_SAMPLES);
  let nr = 0;
  let ns = 0;
  let pairs = 0;
  let charged = 0;
  const ids: string[] = [];
  let measuring = false;
  let stop = false;
  let seq = 0;
  const prefix = `req_bench${randomBytes(4).toString('hex')}_`;
  const worker = async () => {
    while (!stop) {
      const id = prefix + (seq++).toString(36);
      const account = shape === 'hot' ? 0 : 1 + Math.floor(Math.random() * SPREAD_ACCOUNTS);
      const charge = Math.floor(Math.random() * (HOLD_INK + 1));
      const t0 = performance.now();
      await impl.reserve(id, account);
      const t1 = performance.now();
      await impl.settle(id, account, charge);
      const t2 = performance.now();
      charged += charge;
      ids.push(id);
      if (measuring) {
        pairs++;
        if (nr < MAX_SAMPLES) reserveMs[nr++] = t1 - t0;
        if (ns < MAX_SAMPLES) settleMs[ns++] = t2 - t1;
      }
    }
  };
  const workers = Array.from({ length: inFlight }, worker);
  await new Promise((r) => setTimeout(r, 500)); // warm-up: connections, prepared statements, plans
  measuring = true;
  const start = performance.now();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  measuring = false;
  const elapsedS = (performance.now() - start) / 1000;
  stop = true;
  await Promise.all(workers);
  return { pairs, charged, ids, reserveMs, nr, settleMs, ns, elapsedS };
}

/** No lost or doubled move: every completed pair is one reserve and one settle, nothing left open. */
async function checkLedgerRun(pool: Pool, ids: string[], chargedWanted: number): Promise<void> {
  const r = await pool.query<{ reserves: number; settles: number; open: number; charged: number; requests: number }>(
    `SELECT (SELECT count(*)::int FROM ledger_journal WHERE request_id = ANY($1) AND kind = 'reserve') AS reserves,
            (SELECT count(*)::int FROM ledger_journal WHERE request_id = ANY($1) AND kind = 'settle') AS settles,
            (SELECT count(*)::int FROM requests WHERE id = ANY($1) AND hold_state = 'open') AS open,
            (SELECT coalesce(sum(charged_ink), 0)::bigint FROM requests WHERE id = ANY($1)) AS charged,
            (SELECT count(*)::int FROM requests WHERE id = ANY($1)) AS requests`,
    [ids],
  );
  const x = r.rows[0]!;
  if (x.reserves !== ids.length || x.settles !== ids.length || x.open !== 0 || x.requests !== ids.length || x.charged !== chargedWanted) {
    throw new Error(`lost or doubled moves: ${JSON.stringify(x)} for ${ids.length} pairs charging ${chargedWanted}`);
  }
}

async function checkBaselineRun(pool: Pool, schema: string, chargedWanted: number, chargedBefore: number): Promise<number> {
  const r = await pool.query<{ held: number; charged: number }>(
    `SELECT coalesce(sum(held_grant_ink + held_payg_ink), 0)::bigint AS held, coalesce(sum(charged_ink), 0)::bigint AS charged FROM ${schema}.wallets`,
  );
  const x = r.rows[0]!;
  if (x.held !== 0 || x.charged - chargedBefore !== chargedWanted) throw new Error(`baseline lost moves: ${JSON.stringify(x)}, wanted +${chargedWanted}`);
  return x.charged;
}

export async function runLedgerBench(opts: BenchOptions): Promise<{ settings: Record<string, string>; results: ScenarioResult[] }> {
  const tag = randomBytes(4).toString('hex');
  const schemas = { ledger: `bench_ledger_${tag}`, baseline: `bench_baseline_${tag}` };
  // One pool, search_path on the ledger schema; the baseline names its schema in every statement.
  const pool = createPool({ ...loadConfig({}, { db: { schema: schemas.ledger } }).db, url: opts.url, poolMax: opts.poolMax });
  const settings: Record<string, string> = {};
  const runs = new Map<string, RunResult[]>();
  try {
    for (const s of ['server_version', 'fsync', 'synchronous_commit', 'wal_sync_method', 'commit_delay', 'max_connections']) {
      settings[s] = (await pool.query(`SELECT current_setting($1) AS v`, [s])).rows[0].v;
    }
    opts.log(
      `postgres ${settings.server_version}: fsync=${settings.fsync} synchronous_commit=${settings.synchronous_commit} ` +
        `wal_sync_method=${settings.wal_sync_method}; pool ${opts.poolMax}; ${opts.seconds} s per run, ${opts.repeat} interleaved repeats`,
    );
    await migrate(pool, schemas.baseline);
    await migrate(pool, schemas.ledger); // leaves the session on the ledger schema; new connections get it from the pool options
    const seeded = { baseline: await seed(pool, schemas.baseline), ledger: await seed(pool, schemas.ledger) };
    let baselineCharged = 0;

    for (let rep = 0; rep < opts.repeat; rep++) {
      for (const shape of ['hot', 'spread'] as const) {
        for (const inFlight of opts.inFlight) {
          for (const impl of IMPLS) {
            const ledger =
              impl === 'baseline' ? undefined : new Ledger(pool, impl === 'batched' ? { batchMaxInFlight: opts.batchInFlight } : { batching: false });
            const run = await runScenario(
              ledger ? ledgerImpl(ledger, seeded.ledger) : baseline(pool, schemas.baseline, seeded.baseline.accounts),
              shape,
              inFlight,
              opts.seconds,
            );
            const stats = ledger?.batchStats();
            await ledger?.close();
            if (impl === 'baseline') baselineCharged = await checkBaselineRun(pool, schemas.baseline, run.charged, baselineCharged);
            else await checkLedgerRun(pool, run.ids, run.charged);
            const r: RunResult = {
              pairsPerS: Math.round(run.pairs / run.elapsedS),
              reserveP50Ms: quantile(run.reserveMs, run.nr, 0.5),
              reserveP99Ms: quantile(run.reserveMs, run.nr, 0.99),
              settleP50Ms: quantile(run.settleMs, run.ns, 0.5),
            };
            if (stats) {
              r.movesPerStatement = [
                +(stats.reserve.items / Math.max(1, stats.reserve.batches)).toFixed(1),
                +(stats.resolve.items / Math.max(1, stats.resolve.batches)).toFixed(1),
              ];
            }
            const k = `${impl}/${shape}/${inFlight}`;
            runs.set(k, [...(runs.get(k) ?? []), r]);
            opts.log(
              `  run ${rep + 1}: ${shape.padEnd(6)} x${String(inFlight).padEnd(2)} ${impl.padEnd(9)} ${String(r.pairsPerS).padStart(6)} pairs/s, ` +
                `reserve p50 ${r.reserveP50Ms.toFixed(3)} ms p99 ${r.reserveP99Ms.toFixed(3)} ms` +
                (r.movesPerStatement ? `, moves/statement ${r.movesPerStatement.join('/')}` : '') +
                ' (checked: no lost or doubled moves)',
            );
          }
        }
      }
    }

    const v = (await checkLedger(pool, 3)).map((x) => `${x.rule}: ${JSON.stringify(x.rows)}`);
    if (v.length > 0) throw new Error(`ledger invariant broken after the bench: ${v.join('; ')}`);
    opts.log('ledger invariant holds over the whole ledger bench schema');

    const results: ScenarioResult[] = [];
    opts.log('\nmedians of the repeats:');
    opts.log('shape  in-flight impl       pairs/s  reserve p50  reserve p99  settle p50  moves/stmt   vs baseline');
    for (const shape of ['hot', 'spread'] as const) {
      for (const inFlight of opts.inFlight) {
        const base = median(runs.get(`baseline/${shape}/${inFlight}`)!.map((r) => r.pairsPerS));
        for (const impl of IMPLS) {
          const rs = runs.get(`${impl}/${shape}/${inFlight}`)!;
          const m: ScenarioResult = {
            impl,
            shape,
            inFlight,
            runs: rs,
            pairsPerS: median(rs.map((r) => r.pairsPerS)),
            reserveP50Ms: median(rs.map((r) => r.reserveP50Ms)),
            reserveP99Ms: median(rs.map((r) => r.reserveP99Ms)),
            settleP50Ms: median(rs.map((r) => r.settleP50Ms)),
          };
          if (rs[0]!.movesPerStatement) m.movesPerStatement = [median(rs.map((r) => r.movesPerStatement![0])), median(rs.map((r) => r.movesPerStatement![1]))];
          results.push(m);
          opts.log(
            `${shape.padEnd(6)} ${String(inFlight).padStart(9)} ${impl.padEnd(9)} ${String(m.pairsPerS).padStart(8)} ${m.reserveP50Ms.toFixed(3).padStart(9)} ms` +
              `${m.reserveP99Ms.toFixed(3).padStart(9)} ms${m.settleP50Ms.toFixed(3).padStart(9)} ms  ${(m.movesPerStatement?.join('/') ?? '-').padEnd(11)}` +
              `${(m.pairsPerS / base).toFixed(2).padStart(6)}x`,
          );
        }
      }
    }
    return { settings, results };
  } finally {
    for (const s of Object.values(schemas)) await pool.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`).catch(() => undefined);
    await pool.end();
  }
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const argv = process.argv.slice(2);
  const json = argv.includes('--json');
  const url = flag(argv, 'db') ?? loadConfig().db.url ?? 'postgres://postgres@127.0.0.1:5432/test';
  const seconds = Number(flag(argv, 'seconds') ?? 2);
  const repeat = Number(flag(argv, 'repeat') ?? 3);
  const poolMax = Number(flag(argv, 'pool') ?? 24);
  const batchInFlight = flag(argv, 'batch-in-flight') === undefined ? undefined : Number(flag(argv, 'batch-in-flight'));
  if (
    !(seconds > 0 && seconds <= 600) ||
    !Number.isInteger(repeat) ||
    repeat < 1 ||
    repeat > 20 ||
    !Number.isInteger(poolMax) ||
    poolMax < 1 ||
    poolMax > 200
  ) {
    process.stderr.write('usage: bench/ledger.ts [--seconds 0.1..600] [--repeat 1..20] [--pool 1..200] [--db URL] [--json]\n');
    process.exit(2);
  }
  const out = await runLedgerBench({
    url,
    seconds,
    repeat,
    poolMax,
    batchInFlight,
    inFlight: [1, 8, 64],
    log: (l) => (json ? undefined : process.stdout.write(l + '\n')),
  });
  if (json) process.stdout.write(JSON.stringify(out, null, 2) + '\n');
}
