// Drift gauge bench: what one run of the ledger's drift gauge (src/ledger/drift.ts, run every
// minute by the instance that holds its advisory lock) costs on a ledger of realistic size.
//
// It seeds a fresh schema of its own with --accounts accounts (1,000) and --requests text requests
// (1,000,000) in bulk (INSERT ... SELECT over generate_series), every one consistent with the
// ledger's rules, so the gauge must find no drift:
//   - per account one key, one live lease (50 Ink, expiring in an hour), one top-up;
//   - each request on the exact path with its reserve journal row; all but the newest
//     --open-per-account (1) of each account settled (charge 7 of a 10 Ink hold, with its settle
//     row), created over the last ~23 days; those newest still open (held, recent, not stale);
//   - wallets and keys carrying exactly those sums; ANALYZE afterwards, as autovacuum would.
// Then it times DriftGauge.checkNow() (the public API, through a pool of one connection built
// like the gateway's: the configured statement and query timeouts apply) in four cases:
//   first run      no watermark yet: every wallet is checked (a new leader's first minute)
//   all touched    after one journal row for every account since the last run
//   few touched    after one journal row for --few accounts (5)
//   none touched   nothing written since the last run
// A "touch" is a 1 Ink top-up (wallet and journal row in one transaction): it keeps the rules.
// For each: wall time, and the CPU of the gauge's own Postgres backend (utime + stime from
// /proc/<pid>/stat, 10 ms ticks; meaningful only when Postgres runs on this machine), and the
// gauge's figures, which must be leader with 0 drift, 0 stale holds, 0 expired leases.
// --repeat N times each (5): wall time median and max, backend CPU mean and max. --check runs the full ledger invariant
// (src/ledger/invariant.ts) over the seeded schema once first (slow at this size).
//
// The drift query sums each touched wallet's durable open holds through the schema's partial index
// of them by account (migration 020, requests_open_unleased_account), which the bench schema gets
// from migrate like any other.
//
// Run: npm run bench:drift -- [--accounts 1000] [--requests 1000000] [--open-per-account 1]
//        [--repeat 5] [--few 5] [--query-timeout-ms N] [--statement-timeout-ms N]
//        [--check] [--keep] [--db URL] [--json]
// It uses --db, else DATABASE_URL (via loadConfig), else postgres://postgres@127.0.0.1:5432/test;
// the schema is dropped at the end unless --keep.
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config/config.js';
import { DriftGauge, type DriftFigures } from '../src/ledger/drift.js';
import { checkLedger } from '../src/ledger/invariant.js';
import { migrate } from '../src/store/migrate.js';
import { createPool, type Pool } from '../src/store/pool.js';

export interface DriftBenchOptions {
  url: string;
  accounts: number;
  requests: number;
  /** Open holds per account: the newest requests of each account (1). */
  openPerAccount: number;
  repeat: number;
  few: number;
  queryTimeoutMs?: number;
  statementTimeoutMs?: number;
  check: boolean;
  keep: boolean;
  log: (line: string) => void;
}

type CaseName = 'first run' | 'all touched' | 'few touched' | 'none touched';

export interface CaseResult {
  name: CaseName;
  touched: number;
  wallMs: number[];
  backendCpuMs: number[];
  /** Runs whose figures were not "leader, nothing found", or that logged a failure. */
  failures: string[];
}

export interface DriftBenchResult {
  schema: string;
  accounts: number;
  requests: number;
  openHolds: number;
  seedS: number;
  tableMiB: { requests: number; journal: number };
  queryTimeoutMs: number;
  statementTimeoutMs: number;
  invariantViolations: number | null;
  cases: CaseResult[];
}

const HOLD_INK = 10;
const CHARGE_INK = 7;
const LEASE_INK = 50;
const CREDIT_INK = 10_000_000;
const TICKS_PER_S = 100;

/** Accounts, keys, requests with their journal rows, leases, wallets: in the order the foreign keys ask. */
function seedStatements(accounts: number, requests: number, openPerAccount: number): string[] {
  const acct = (a: string): string => `'usr_drift' || lpad((${a})::text, 6, '0')`;
  const key = (a: string): string => `'key_drift' || lpad((${a})::text, 6, '0')`;
  return [
    `INSERT INTO accounts (id, name, plan_id) SELECT ${acct('a')}, 'drift bench', 'pro' FROM generate_series(1, ${accounts}) a`,
    `INSERT INTO api_keys (id, account_id, name, key_hash, prefix, last4)
     SELECT ${key('a')}, ${acct('a')}, 'drift bench', sha256(('drift' || a)::bytea), 'svc_' || lpad(to_hex(a), 8, '0'), 'abcd'
       FROM generate_series(1, ${accounts}) a`,
    // The newest requests of each account (the last `accounts * openPerAccount` ids) are still open.
    `INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                          grant_period, charged_ink, charged_grant_ink, charged_payg_ink, created_at, resolved_at)
     SELECT 'req_drift' || i, ${acct('a')}, ${key('a')}, 'messages', 'sonnet',
            CASE WHEN open THEN 'open' ELSE 'settled' END, CASE WHEN open THEN 'running' ELSE 'settled' END,
            ${HOLD_INK}, 0, ${HOLD_INK}, 0, CASE WHEN open THEN 0 ELSE ${CHARGE_INK} END, 0, CASE WHEN open THEN 0 ELSE ${CHARGE_INK} END,
            now() - (${requests} - i) * interval '2 s', CASE WHEN open THEN NULL ELSE now() - (${requests} - i) * interval '2 s' + interval '1 s' END
       FROM (SELECT i, (i - 1) % ${accounts} + 1 AS a, i > ${requests - accounts * openPerAccount} AS open FROM generate_series(1, ${requests}) i) s`,
    `INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, payg_ink, held_payg_ink, charged_ink)
     SELECT created_at, 'reserve', account_id, key_id, id, hold_ink, -hold_payg_ink, hold_payg_ink, 0 FROM requests
     UNION ALL
     SELECT resolved_at, 'settle', account_id, key_id, id, charged_ink, hold_payg_ink - charged_payg_ink, -hold_payg_ink, charged_ink
       FROM requests WHERE hold_state = 'settled'`,
    `INSERT INTO leases (account_id, key_id, instance_id, epoch, state, grant_ink, payg_ink, grant_period, expires_at, created_at)
     SELECT account_id, id, 'drift-bench', 1, 'live', 0, ${LEASE_INK}, 0, now() + interval '1 hour', now() FROM api_keys`,
    `INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, payg_ink, leased_payg_ink)
     SELECT now(), 'lease', account_id, key_id, id, ${LEASE_INK}, -${LEASE_INK}, ${LEASE_INK} FROM leases`,
    `INSERT INTO ledger_journal (at, kind, account_id, amount_ink, payg_ink, credited_ink, note)
     SELECT now(), 'topup', id, ${CREDIT_INK}, ${CREDIT_INK}, ${CREDIT_INK}, 'drift bench' FROM accounts`,
    `INSERT INTO wallets (account_id, payg_ink, held_payg_ink, leased_payg_ink, charged_ink, credited_ink, topups_completed)
     SELECT account_id, ${CREDIT_INK} - charged - held - ${LEASE_INK}, held, ${LEASE_INK}, charged, ${CREDIT_INK}, 1
       FROM (SELECT account_id, sum(charged_ink) AS charged, sum(hold_payg_ink) FILTER (WHERE hold_state = 'open') AS held
               FROM requests GROUP BY account_id) r`,
    `UPDATE api_keys k SET ink_charged = r.charged, ink_reserved = r.held, ink_leased = ${LEASE_INK}
       FROM (SELECT key_id, sum(charged_ink) AS charged, sum(hold_ink) FILTER (WHERE hold_state = 'open') AS held
               FROM requests GROUP BY key_id) r WHERE r.key_id = k.id`,
  ];
}

async function seed(pool: Pool, o: DriftBenchOptions): Promise<number> {
  const t0 = performance.now();
  const c = await pool.connect();
  try {
    // Bulk load: no statement timeout, no waiting for each commit's flush (a bench schema), and a
    // lock wait of seconds rather than the hot path's 500 ms: on a shared server a bulk insert can
    // queue briefly behind other sessions, and a seed refused for that measures nothing.
    await c.query("SET statement_timeout = 0; SET synchronous_commit = off; SET lock_timeout = '30s'");
    await c.query('BEGIN');
    for (const sql of seedStatements(o.accounts, o.requests, o.openPerAccount)) {
      const s0 = performance.now();
      const r = await c.query(sql);
      o.log(`  ${sql.trim().split(/\s+/).slice(0, 3).join(' ')}: ${r.rowCount} rows, ${((performance.now() - s0) / 1000).toFixed(1)} s`);
    }
    await c.query('COMMIT');
    await c.query('ANALYZE');
  } finally {
    c.release();
  }
  return (performance.now() - t0) / 1000;
}

/** A 1 Ink top-up for the first n accounts: one journal row each, the wallet in step. */
async function touch(pool: Pool, n: number): Promise<void> {
  await pool.query(
    `WITH t AS (SELECT id FROM accounts ORDER BY id LIMIT $1),
          j AS (INSERT INTO ledger_journal (at, kind, account_id, amount_ink, payg_ink, credited_ink, note)
                SELECT now(), 'topup', id, 1, 1, 1, 'drift bench touch' FROM t)
     UPDATE wallets w SET payg_ink = payg_ink + 1, credited_ink = credited_ink + 1 FROM t WHERE w.account_id = t.id`,
    [n],
  );
}

async function backendCpuMs(pid: number): Promise<number> {
  const st = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  if (st === '') return Number.NaN; // Postgres on another machine: no figure
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / TICKS_PER_S;
}

function judge(f: DriftFigures, logged: string[]): string | undefined {
  if (logged.length > 0) return logged.join('; ');
  if (!f.leader) return 'not leader';
  if (f.driftAccounts + f.staleHolds + f.expiredLeases > 0) return `found ${JSON.stringify(f)}`;
  return undefined;
}

interface GaugeRig {
  gauge: DriftGauge;
  pid: () => number;
  logged: string[];
}

function gaugeRig(pool: Pool, pids: number[]): GaugeRig {
  const logged: string[] = [];
  const gauge = new DriftGauge({ pool, intervalMs: 60_000, log: (fields, event) => void logged.push(`${event} ${JSON.stringify(fields)}`) });
  return { gauge, logged, pid: () => pids[pids.length - 1] ?? 0 };
}

async function timedCheck(rig: GaugeRig, c: CaseResult): Promise<void> {
  rig.logged.length = 0;
  const pidBefore = rig.pid();
  const before = pidBefore === 0 ? 0 : await backendCpuMs(pidBefore);
  const t0 = performance.now();
  const f = await rig.gauge.checkNow();
  c.wallMs.push(performance.now() - t0);
  // A run that opened a new connection counts its fresh backend from 0.
  c.backendCpuMs.push((await backendCpuMs(rig.pid())) - (rig.pid() === pidBefore ? before : 0));
  const bad = judge(f, rig.logged);
  if (bad !== undefined) c.failures.push(bad);
}

async function measure(gaugePool: Pool, dataPool: Pool, pids: number[], o: DriftBenchOptions): Promise<CaseResult[]> {
  const mk = (name: CaseName, touched: number): CaseResult => ({ name, touched, wallMs: [], backendCpuMs: [], failures: [] });
  const cases = [mk('first run', o.accounts), mk('all touched', o.accounts), mk('few touched', o.few), mk('none touched', 0)];
  for (let r = 0; r < o.repeat; r++) {
    // A new gauge per round: its first run has no watermark (a new leader); the lock moves with it.
    const rig = gaugeRig(gaugePool, pids);
    await timedCheck(rig, cases[0]!);
    await touch(dataPool, o.accounts);
    await timedCheck(rig, cases[1]!);
    await touch(dataPool, o.few);
    await timedCheck(rig, cases[2]!);
    await timedCheck(rig, cases[3]!);
    await rig.gauge.stop();
    o.log(`  round ${r + 1}: ${cases.map((c) => `${c.name} ${c.wallMs[r]!.toFixed(0)} ms`).join(', ')}`);
  }
  return cases;
}

/** A gigabyte of schema: the drop gets its own lock wait, not the pool's half second. */
async function dropSchema(pool: Pool, schema: string): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('SET LOCAL lock_timeout = 60000');
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await c.query('COMMIT');
  } catch (e) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

async function tableMiB(pool: Pool, table: string): Promise<number> {
  const r = await pool.query<{ b: string }>(`SELECT pg_total_relation_size($1::regclass)::text AS b`, [table]);
  return Number(r.rows[0]!.b) / 1048576;
}

export async function runDriftBench(o: DriftBenchOptions): Promise<DriftBenchResult> {
  const schema = `bench_drift_${randomBytes(4).toString('hex')}`;
  const base = loadConfig({}, { db: { schema } }).db;
  const db = {
    ...base,
    url: o.url,
    queryTimeoutMs: o.queryTimeoutMs ?? base.queryTimeoutMs,
    statementTimeoutMs: o.statementTimeoutMs ?? base.statementTimeoutMs,
  };
  const dataPool = createPool({ ...db, poolMax: 2, queryTimeoutMs: 0, statementTimeoutMs: 0 });
  // The gauge's pool is one connection, as timed as the gateway's: its backend is the one measured.
  const gaugePool = createPool({ ...db, poolMax: 1 });
  const pids: number[] = [];
  gaugePool.on('connect', (c) => void pids.push((c as unknown as { processID: number }).processID));
  try {
    if (o.accounts * o.openPerAccount > o.requests) throw new Error('--requests must be at least --accounts x --open-per-account');
    o.log(`schema ${schema}: seeding ${o.accounts} accounts, ${o.requests} requests, ${o.openPerAccount} open per account`);
    await migrate(dataPool, schema);
    const seedS = await seed(dataPool, o);
    const tables = { requests: await tableMiB(dataPool, 'requests'), journal: await tableMiB(dataPool, 'ledger_journal') };
    o.log(`seeded in ${seedS.toFixed(0)} s: requests ${tables.requests.toFixed(0)} MiB, journal ${tables.journal.toFixed(0)} MiB (with indexes)`);
    let invariantViolations: number | null = null;
    if (o.check) {
      const found = await checkLedger(dataPool);
      invariantViolations = found.reduce((n, v) => n + v.count, 0);
      o.log(`full ledger invariant: ${invariantViolations} violations${found.length ? ' ' + JSON.stringify(found) : ''}`);
    }
    const cases = await measure(gaugePool, dataPool, pids, o);
    return {
      schema,
      accounts: o.accounts,
      requests: o.requests,
      openHolds: o.accounts * o.openPerAccount,
      seedS,
      tableMiB: tables,
      queryTimeoutMs: db.queryTimeoutMs,
      statementTimeoutMs: db.statementTimeoutMs,
      invariantViolations,
      cases,
    };
  } finally {
    await gaugePool.end();
    if (!o.keep) await dropSchema(dataPool, schema).catch((e: Error) => o.log(`could not drop schema ${schema}: ${e.message}`));
    await dataPool.end();
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? Number.NaN;

export function formatDriftBench(r: DriftBenchResult): string {
  const lines = [
    `${r.accounts} accounts, ${r.requests} requests of which ${r.openHolds} open (requests ${r.tableMiB.requests.toFixed(0)} MiB, journal ${r.tableMiB.journal.toFixed(0)} MiB with indexes), seeded in ${r.seedS.toFixed(0)} s`,
    `pool timeouts: query ${r.queryTimeoutMs} ms (client), statement ${r.statementTimeoutMs} ms (server)` +
      (r.invariantViolations === null ? '' : `; full ledger invariant: ${r.invariantViolations} violations`),
    '',
    '| case | accounts touched | wall p50 / max ms | backend CPU mean / max ms | failed runs |',
    '|---|---|---|---|---|',
  ];
  for (const c of r.cases) {
    const w = `${median(c.wallMs).toFixed(0)} / ${Math.max(...c.wallMs).toFixed(0)}`;
    // Mean, not median: each reading is whole 10 ms ticks, the mean of several is finer.
    const cpu = `${(c.backendCpuMs.reduce((a, b) => a + b, 0) / c.backendCpuMs.length).toFixed(0)} / ${Math.max(...c.backendCpuMs).toFixed(0)}`;
    lines.push(`| ${c.name} | ${c.touched} | ${w} | ${cpu} | ${c.failures.length} of ${c.wallMs.length} |`);
  }
  const failures = r.cases.flatMap((c) => c.failures.map((f) => `${c.name}: ${f}`));
  if (failures.length > 0) lines.push('', 'failures:', ...[...new Set(failures)].slice(0, 10).map((f) => `  ${f}`));
  return lines.join('\n');
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
}

function intFlag(argv: string[], name: string, def: number, min: number, max: number): number {
  const v = Number(flag(argv, name) ?? def);
  if (!Number.isInteger(v) || v < min || v > max) {
    process.stderr.write(`bench/drift.ts: --${name} must be a whole number in ${min}..${max}\n`);
    process.exit(2);
  }
  return v;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const argv = process.argv.slice(2);
  const json = argv.includes('--json');
  const accounts = intFlag(argv, 'accounts', 1000, 1, 100_000);
  const opt = (name: string): number | undefined => (flag(argv, name) === undefined ? undefined : intFlag(argv, name, 0, 0, 3_600_000));
  const out = await runDriftBench({
    url: flag(argv, 'db') ?? loadConfig().db.url ?? 'postgres://postgres@127.0.0.1:5432/test',
    accounts,
    requests: intFlag(argv, 'requests', 1_000_000, accounts, 50_000_000),
    openPerAccount: intFlag(argv, 'open-per-account', 1, 1, 1000),
    repeat: intFlag(argv, 'repeat', 5, 1, 50),
    few: intFlag(argv, 'few', 5, 1, accounts),
    queryTimeoutMs: opt('query-timeout-ms'),
    statementTimeoutMs: opt('statement-timeout-ms'),
    check: argv.includes('--check'),
    keep: argv.includes('--keep'),
    log: (l) => (json ? process.stderr.write(l + '\n') : process.stdout.write(l + '\n')),
  });
  process.stdout.write((json ? JSON.stringify(out, null, 2) : formatDriftBench(out)) + '\n');
}
