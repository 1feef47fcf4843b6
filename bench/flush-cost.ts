// Where the write-behind flush's Postgres CPU goes, per request record, from one backend (its own
// /proc times only, so other work on a shared machine does not count): ledger_flush at several
// batch sizes (fixed cost per flush vs cost per record), then the `requests` row insert alone, with
// every index of the table and with its primary key only, and into other tables: no index and no
// CHECK (what an append-only request log would cost), the primary key only (an index-light table
// read by id), the CHECKs, the CHECKs and the primary key; last, ledger_flush as before migration
// 024 (a foreign key from `requests` to api_keys, no check of each record against its lease) and as
// today, alternated round by round, 160 records per flush (FLUSH_COST_AB_ROUNDS rounds each).
// Records are what a leased request sends under load: its start and its settle in one record.
// Asynchronous commit, as the write-behind's batches.
//   node --import ./test/loader/register.js bench/flush-cost.ts
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { newRequestId } from '../src/server/http-context.js';
import { FUNCTIONS_DIR } from '../src/store/migrate.js';
import { benchDatabaseUrl } from './lib/env.js';
import { flushFixture } from './lib/flush-fixture.js';
import { median } from './lib/stats.js';

const RECORDS = Number(process.env.FLUSH_COST_RECORDS ?? 20_000);
const AB_ROUNDS = Number(process.env.FLUSH_COST_AB_ROUNDS ?? 5);
const db = await benchDatabaseUrl();
const fixture = await flushFixture(db.url, 'bench_flush_' + process.pid);
const { pool, accountId, keyId, leaseId, grantPeriod, cpuUs } = fixture;

/** Small batches cost a round trip each: at most 2,000 of them (still hundreds of /proc ticks). */
const roundsFor = (batch: number): number => Math.min(2000, Math.max(1, Math.round(RECORDS / batch)));

const flushes = (batch: number): Promise<number> => fixture.perRecordUs(batch, roundsFor(batch));

const INSERT = `INSERT INTO %T (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
    grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, created_at, resolved_at, lease_id, leased)
  SELECT u.id, $2, $3, 'messages', 'sonnet', 'settled', 'settled', 100, 0, 100, $4, 10, 0, 10,
         '{"input_tokens":10,"output_tokens":20}'::jsonb, 'msg_0123456789abcdef', now(), now(), $5, false
    FROM set_config('synchronous_commit', 'off', true) AS async_commit, unnest($1::text[]) AS u(id)`;

async function inserts(table: string, batch: number): Promise<number> {
  const rounds = roundsFor(batch);
  const text = INSERT.replace('%T', table);
  const t0 = cpuUs();
  for (let i = 0; i < rounds; i++) {
    const ids = Array.from({ length: batch }, () => newRequestId());
    await pool.query(text, [ids, accountId, keyId, grantPeriod, leaseId]);
  }
  return (cpuUs() - t0) / (rounds * batch);
}

const out: Array<[string, number]> = [];
await flushes(50); // warm-up: plans cached, pages in memory
for (const b of [1, 10, 50, 160, 200]) out.push([`ledger_flush, ${b} records per flush`, await flushes(b)]);
out.push(['requests insert alone (every index), 50 per statement', await inserts('requests', 50)]);
await pool.query('CREATE TABLE request_log (LIKE requests INCLUDING DEFAULTS)');
out.push(['insert into a table with no index, 50 per statement', await inserts('request_log', 50)]);
await pool.query('ALTER TABLE request_log ADD PRIMARY KEY (id)');
out.push(['... with a primary key only (no CHECK), 50 per statement', await inserts('request_log', 50)]);
await pool.query('CREATE TABLE request_checked (LIKE requests INCLUDING DEFAULTS INCLUDING CONSTRAINTS)');
out.push(['... with the requests CHECKs, 50 per statement', await inserts('request_checked', 50)]);
await pool.query('ALTER TABLE request_checked ADD PRIMARY KEY (id)');
out.push(['... with the CHECKs and the primary key, 50 per statement', await inserts('request_checked', 50)]);
await pool.query('DROP INDEX requests_account_created, requests_leased, requests_open_created, requests_vendor_request');
out.push(['requests insert alone (primary key only), 50 per statement', await inserts('requests', 50)]);
out.push(['ledger_flush, 50 per flush, requests with its primary key only', await flushes(50)]);
// The indexes back; then ledger_flush as before migration 024 (the foreign key from `requests` to
// api_keys, no check of each record against its lease) against today's (the check, no foreign
// key), alternated round by round so that a shared machine's load drifts over both alike.
await pool.query(`CREATE INDEX requests_account_created ON requests (account_id, created_at DESC, id DESC);
  CREATE INDEX requests_leased ON requests (lease_id) WHERE leased;
  CREATE INDEX requests_open_created ON requests (created_at) WHERE hold_state = 'open';
  CREATE INDEX requests_vendor_request ON requests (vendor_request_id) WHERE vendor_request_id IS NOT NULL`);
const flushSql = readFileSync(join(FUNCTIONS_DIR, 'ledger_flush.sql'), 'utf8');
const LEASE_CHECK = /\n {2}-- Every record's account and key[\s\S]*?\n {2}END IF;\n/;
if (!LEASE_CHECK.test(flushSql)) throw new Error("ledger_flush.sql: its lease check was not found; update this bench's pattern");
const FK = 'request_key_of_account';
async function schemaOf(before024: boolean): Promise<void> {
  await pool.query(before024 ? flushSql.replace(LEASE_CHECK, '\n') : flushSql);
  await pool.query(
    before024
      ? `ALTER TABLE requests ADD CONSTRAINT ${FK} FOREIGN KEY (key_id, account_id) REFERENCES api_keys (id, account_id)`
      : `ALTER TABLE requests DROP CONSTRAINT ${FK}`,
  );
  await flushes(160); // plans of the new function cached before the measured round
}
const runs: Record<'before' | 'after', number[]> = { before: [], after: [] };
let before024 = false;
for (let i = 0; i < AB_ROUNDS; i++) {
  for (const kind of i % 2 === 0 ? (['before', 'after'] as const) : (['after', 'before'] as const)) {
    if ((kind === 'before') !== before024) await schemaOf((before024 = kind === 'before'));
    runs[kind].push(await flushes(160));
  }
}
for (const kind of ['before', 'after'] as const) {
  const what = kind === 'before' ? 'foreign key, no lease check (before 024)' : 'lease check, no foreign key (024)';
  out.push([`ledger_flush, 160 per flush, ${what}, median of ${AB_ROUNDS}`, median(runs[kind])]);
}
for (const [label, us] of out) console.log(`${label.padEnd(84)} ${us.toFixed(1)} µs/record`);
console.log(
  `alternated rounds, µs/record: before 024 ${runs.before.map((x) => x.toFixed(1)).join(', ')}; 024 ${runs.after.map((x) => x.toFixed(1)).join(', ')}`,
);
console.log(`(up to ${RECORDS} records per line, backend CPU from /proc, ${db.kind})`);
await fixture.close();
await db.stop();
