// The SQL function files (src/store/functions/) and how migrate applies them: once per text, a
// changed text once more, never while the database is ahead of the code, all changed files in one
// transaction; and re-applied on a live database while two gateways (write-behind leases, and the
// exact path) serve billed requests, not one of which fails or is billed wrongly.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { FUNCTIONS_DIR, listFunctionFiles, migrateAll } from '../../src/store/migrate.js';
import { silentLogger } from '../../src/util/log.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { fundedKey } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { messagesProbe } from '../helpers/messages-probe.js';
import { parseSse } from '../helpers/sse.js';

/** A copy of the function files the test may edit. */
function functionsCopy(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-functions-'));
  cpSync(FUNCTIONS_DIR, dir, { recursive: true });
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Marks a function file's body (not only the file: the function itself is replaced) with a
 * comment right after the line that opens the body.
 */
function markBody(dir: string, name: string, mark: string): void {
  const path = join(dir, `${name}.sql`);
  const text = readFileSync(path, 'utf8');
  const open = /^AS (\$\w*\$)$/m.exec(text);
  if (!open) throw new Error(`${name}.sql: no body opening line`);
  const at = open.index + open[0].length;
  writeFileSync(path, `${text.slice(0, at)}\n-- ${mark}${text.slice(at)}`);
}

async function bodiesMarked(db: TestDb, mark: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ proname: string }>(
    `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND strpos(p.prosrc, $2) > 0 ORDER BY p.proname COLLATE "C"`,
    [db.schema, `-- ${mark}`],
  );
  return rows.map((r) => r.proname);
}

const NAMES = listFunctionFiles().map((f) => f.name);

t.test('every file defines the one function it is named after, and only it', async (t) => {
  t.ok(NAMES.length >= 12, 'the ledger functions have their files');
  for (const f of listFunctionFiles()) {
    const defined = [...f.sql.matchAll(/^CREATE (?:OR REPLACE )?FUNCTION (\w+)\(/gm)].map((m) => m[1]);
    t.same(defined, [f.name], `${f.name}.sql defines ${f.name}`);
  }
});

t.test('a fresh database records every file; a second run applies nothing; a changed text is applied once', async (t) => {
  const db = await testDb(t);
  const recorded = await db.pool.query<{ name: string; sha256: string }>('SELECT name, sha256 FROM schema_functions ORDER BY name COLLATE "C"');
  t.same(
    recorded.rows,
    listFunctionFiles().map((f) => ({ name: f.name, sha256: f.sha256 })),
    'each file with its SHA-256',
  );
  t.same(await migrateAll(db.pool, db.schema), { migrations: [], functions: [], functionsSkipped: false }, 'unchanged: nothing applied');

  const dir = functionsCopy(t);
  markBody(dir, 'ledger_flush', 'changed once');
  t.same((await migrateAll(db.pool, db.schema, { functionsDir: dir })).functions, ['ledger_flush'], 'the changed file only');
  t.same(await bodiesMarked(db, 'changed once'), ['ledger_flush'], 'the function runs the new text');
  t.same((await migrateAll(db.pool, db.schema, { functionsDir: dir })).functions, [], 'applied once, not again');
  t.same((await migrateAll(db.pool, db.schema)).functions, ['ledger_flush'], 'going back to the old text is a change too');
  t.same(await bodiesMarked(db, 'changed once'), []);
});

t.test('a signature change drops the old one; a failing file applies nothing of its set', async (t) => {
  const db = await testDb(t);
  const dir = functionsCopy(t);
  writeFileSync(join(dir, 'zz_probe.sql'), 'CREATE OR REPLACE FUNCTION zz_probe(a integer) RETURNS integer LANGUAGE sql AS $$ SELECT a $$;\n');
  t.same((await migrateAll(db.pool, db.schema, { functionsDir: dir })).functions, ['zz_probe']);
  writeFileSync(
    join(dir, 'zz_probe.sql'),
    'DROP FUNCTION IF EXISTS zz_probe(integer);\nCREATE OR REPLACE FUNCTION zz_probe(a integer, b integer) RETURNS integer LANGUAGE sql AS $$ SELECT a + b $$;\n',
  );
  t.same((await migrateAll(db.pool, db.schema, { functionsDir: dir })).functions, ['zz_probe']);
  const { rows } = await db.pool.query<{ args: string }>(
    `SELECT pg_get_function_identity_arguments(p.oid) AS args FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = $1 AND p.proname = 'zz_probe'`,
    [db.schema],
  );
  t.same(rows, [{ args: 'a integer, b integer' }], 'one signature left, the new one');

  markBody(dir, 'ledger_recall', 'in a failed set');
  writeFileSync(join(dir, 'zz_probe.sql'), 'CREATE OR REPLACE FUNCTION zz_probe( RETURNS broken;\n');
  await t.rejects(migrateAll(db.pool, db.schema, { functionsDir: dir }), /function file zz_probe\.sql failed/);
  t.same(await bodiesMarked(db, 'in a failed set'), [], 'the good file of the failed set was rolled back');
  const rec = await db.pool.query<{ sha256: string }>("SELECT sha256 FROM schema_functions WHERE name = 'ledger_recall'");
  t.equal(rec.rows[0]!.sha256, listFunctionFiles().find((f) => f.name === 'ledger_recall')!.sha256, 'and its record kept the old text');

  rmSync(join(dir, 'zz_probe.sql'));
  t.same((await migrateAll(db.pool, db.schema, { functionsDir: dir })).functions, ['ledger_recall'], 'fixed: applied');
  const gone = await db.pool.query("SELECT 1 FROM schema_functions WHERE name = 'zz_probe'");
  t.equal(gone.rowCount, 0, "a removed file's record goes");
});

t.test('a database migrated by newer code keeps its functions', async (t) => {
  const db = await testDb(t);
  await db.pool.query("INSERT INTO schema_migrations (version, name) VALUES (999, 'from_a_newer_release')");
  const dir = functionsCopy(t);
  markBody(dir, 'ledger_flush', 'older code');
  t.same(await migrateAll(db.pool, db.schema, { functionsDir: dir }), { migrations: [], functions: [], functionsSkipped: true });
  t.same(await bodiesMarked(db, 'older code'), [], 'the older text was not applied');
});

const VENDOR_KEY = 'sk-ant-sql-functions';
/** Client loops per gateway, each sending streams one after another. */
const LOOPS = 4;
/** Times every function file is changed and re-applied while the load runs. */
const ROUNDS = 3;
/** Streams each gateway completes before a round starts, and again after it ended, before the next. */
const BETWEEN_ROUNDS = 8;

t.test('every function re-applied on a live database under billed load: no request fails', async (t) => {
  const db = await testDb(t);
  const anthropic = await startAnthropicSimulator({ apiKey: VENDOR_KEY, maxRecordedRequests: 0 });
  t.teardown(() => anthropic.close());
  await setLane(db.pool, 'messages', true);
  const gateway = async (name: string, ledger: DeepPartial<Config['ledger']>): Promise<Gateway> => {
    const config = loadConfig(
      {},
      {
        server: { host: '127.0.0.1', port: 0 },
        db: { url: db.url, schema: db.schema },
        redis: { url: null },
        // The load is many requests a minute on one key; the per-key limit is not under test here.
        limits: { requestsPerMinute: 1_000_000 },
        vendors: { anthropic: { baseUrl: anthropic.url, apiKey: VENDOR_KEY } },
        ledger: { instanceId: `${name}-${db.schema}`, ...ledger },
      },
    );
    const gw = await createGateway(config, { log: silentLogger, skipMigrate: true, exit: (code) => t.fail(`${name} exited ${code}`) });
    t.teardown(() => gw.close());
    return gw;
  };
  // Leases and the write-behind journal (ledger_lease_take, ledger_flush, ledger_heartbeat, ...),
  // and the exact path (ledger_reserve_one, ledger_resolve_one and the batch ones).
  const gws = [await gateway('leased', {}), await gateway('exact', { lease: { enabled: false } })];
  const keys = [await fundedKey(gws[0]!, 'leased', 10_000_000), await fundedKey(gws[1]!, 'exact', 10_000_000)];
  const probe = messagesProbe({ label: 'sql functions', vendorKey: VENDOR_KEY, paceMs: 2, replyTokens: 4 });

  const failures: string[] = [];
  const told = new Map<string, number>(); // request id -> the charge its usage frame told
  const done = [0, 0];
  let inFlight = 0;
  let stop = false;
  let waiter: { g: number; n: number; wake: () => void } | undefined;
  const reached = (g: number, n: number) =>
    new Promise<void>((wake) => {
      if (done[g]! >= n) wake();
      else waiter = { g, n, wake };
    });
  const loop = async (g: number, l: number) => {
    for (let i = 0; !stop; i++) {
      inFlight++;
      try {
        const r = await probe.send(gws[g]!.url, keys[g]!.key, probe.body(true, `g${g} l${l} #${i}`));
        const last = parseSse(r.text).at(-1);
        const id = r.headers['x-service-request-id'] as string | undefined;
        if (r.status !== 200 || last?.event !== 'service.usage' || !id) failures.push(`${g}/${l}/${i}: ${r.status} ${r.text.slice(0, 200)}`);
        else told.set(id, Number(JSON.parse(last.data).ink_charged));
      } catch (e) {
        failures.push(`${g}/${l}/${i}: ${(e as Error).message}`);
      } finally {
        inFlight--;
      }
      done[g]!++;
      if (waiter && done[waiter.g]! >= waiter.n) {
        const w = waiter;
        waiter = undefined;
        w.wake();
      }
    }
  };
  const loops = gws.flatMap((_, g) => Array.from({ length: LOOPS }, (__, l) => loop(g, l)));

  const dir = functionsCopy(t);
  const appliedUnderLoad: Array<{ functions: string[]; inFlight: number }> = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      for (let g = 0; g < gws.length; g++) await reached(g, done[g]! + BETWEEN_ROUNDS);
      for (const name of NAMES) markBody(dir, name, `round ${round}`);
      const busy = inFlight;
      const report = await migrateAll(db.pool, db.schema, { functionsDir: dir });
      appliedUnderLoad.push({ functions: report.functions, inFlight: busy });
      t.same(await bodiesMarked(db, `round ${round}`), NAMES, `round ${round}: every function runs its new text`);
    }
    for (let g = 0; g < gws.length; g++) await reached(g, done[g]! + BETWEEN_ROUNDS);
  } finally {
    stop = true;
    await Promise.all(loops);
  }
  for (const a of appliedUnderLoad) {
    t.same(a.functions, NAMES, 'every file re-applied');
    t.ok(a.inFlight > 0, `with ${a.inFlight} requests in flight when it began`);
  }
  t.same(failures, [], 'no request failed');
  t.ok(told.size >= (ROUNDS + 1) * BETWEEN_ROUNDS * gws.length, `${told.size} billed requests`);
  t.same((await migrateAll(db.pool, db.schema, { functionsDir: dir })).functions, [], 'the last text, applied again: nothing');

  // Every answer's charge is what Postgres recorded once the journals are written.
  for (const gw of gws) await gw.close();
  const { rows } = await db.pool.query<{ id: string; hold_state: string; charged_ink: string }>(
    'SELECT id, hold_state, charged_ink FROM requests WHERE id = ANY($1)',
    [[...told.keys()]],
  );
  t.equal(rows.length, told.size, 'every billed request was written');
  const wrong = rows.filter((r) => r.hold_state !== 'settled' || Number(r.charged_ink) !== told.get(r.id));
  t.same(wrong, [], 'each settled at the charge its client was told');
  await assertLedgerInvariant(t, db.pool);
});
