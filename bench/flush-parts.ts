// Where a journal record's Postgres CPU goes inside ledger_flush: the same batches of settled
// leased requests (start and end in one record, as most are under load) written through the
// write-behind into schemas that differ from the shipped one in one part each, round by round in
// alternating order so that a shared machine's drift falls on every variant alike. Each schema has
// its own backend, and the figure is that backend's own CPU (/proc) per record.
//
// The variants peel the flush apart (the first four) and bound what a cheaper `requests` table
// could save (the last three; the index-light table for leased requests would be one of these):
// - shipped: the schema as migrated;
// - call only: ledger_flush answers 'ok' for every record and does nothing else (the call, its
//   array arguments, its answer, the transaction);
// - dispatcher: ledger_flush_leased does nothing (adds the lease check, the locks, the late path);
// - plain insert: ledger_flush_leased is one INSERT of the rows from the arrays (adds the row; no
//   lease, wallet, key or journal move);
// - no secondary index: `requests` with its primary key only;
// - no CHECK: `requests` without its CHECK constraints;
// - primary key only: neither secondary indexes nor CHECKs.
// The variants that change what is written are for measuring only: their ledgers do not balance.
//   DATABASE_URL=... node --import ./test/loader/register.js bench/flush-parts.ts [--batch 100] [--records 10000] [--rounds 5]
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FUNCTIONS_DIR } from '../src/store/migrate.js';
import { benchDatabaseUrl } from './lib/env.js';
import { type FlushFixture, flushFixture } from './lib/flush-fixture.js';
import { numberArg } from './lib/argv.js';
import { median } from './lib/stats.js';

const BATCH = numberArg('batch', 100);
const RECORDS = numberArg('records', 10_000);
const ROUNDS = numberArg('rounds', 5);

const FLUSH_SQL = readFileSync(join(FUNCTIONS_DIR, 'ledger_flush.sql'), 'utf8');
const LEASED_SQL = readFileSync(join(FUNCTIONS_DIR, 'ledger_flush_leased.sql'), 'utf8');

/** ledger_flush_leased with `body` in place of its own. */
function leasedWithBody(body: string): string {
  const start = LEASED_SQL.indexOf('BEGIN\n');
  const end = LEASED_SQL.lastIndexOf('END\n$function$');
  if (start < 0 || end < 0) throw new Error("ledger_flush_leased.sql: its body was not found; update this bench's pattern");
  return LEASED_SQL.slice(0, start + 'BEGIN\n'.length) + body + LEASED_SQL.slice(end);
}

const PLAIN_INSERT = `  INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink,
                        hold_payg_ink, grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage,
                        vendor_request_id, reason, created_at, resolved_at, lease_id, leased)
  SELECT a.id, a.account_id, a.key_id, a.product, a.model, 'settled', 'settled', a.hold, a.hold_g, a.hold - a.hold_g,
         a.period, a.charge, 0, a.charge, a.usage, a.vid, a.reason, a.created, a.resolved, a.lease_id, false
    FROM unnest(p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods,
                p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)
         AS a(id, account_id, key_id, product, model, lease_id, hold, hold_g, period, created, vid, e, charge, usage, reason, resolved)
  ON CONFLICT (id) DO NOTHING;
`;
const CALL_ONLY_AT = /\n {2}IF n = 0 THEN RETURN; END IF;/;
if (!CALL_ONLY_AT.test(FLUSH_SQL)) throw new Error("ledger_flush.sql: its first statement was not found; update this bench's pattern");
const DROP_SECONDARY = `DROP INDEX requests_account_created, requests_leased, requests_open_created, requests_vendor_request, requests_open_unleased_account`;
const DROP_CHECKS = `DO $$ DECLARE c text; BEGIN
  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'requests'::regclass AND contype = 'c' LOOP
    EXECUTE format('ALTER TABLE requests DROP CONSTRAINT %I', c);
  END LOOP; END $$`;

const VARIANTS: Record<string, string[]> = {
  shipped: [],
  'call only': [FLUSH_SQL.replace(CALL_ONLY_AT, "\n  RETURN QUERY SELECT g::integer, 'ok'::text FROM generate_series(1, n) g; RETURN;")],
  dispatcher: [leasedWithBody('  NULL;\n')],
  'plain insert': [leasedWithBody(PLAIN_INSERT)],
  'no secondary index': [DROP_SECONDARY],
  'no CHECK': [DROP_CHECKS],
  'primary key only': [DROP_SECONDARY, DROP_CHECKS],
};

const db = await benchDatabaseUrl();
const names = Object.keys(VARIANTS);
const variants = new Map<string, FlushFixture>();
for (const [i, name] of names.entries()) variants.set(name, await flushFixture(db.url, `bench_parts_${i}_${process.pid}`, VARIANTS[name]!));
const flushes = Math.max(1, Math.round(RECORDS / BATCH));
for (const v of variants.values()) await v.perRecordUs(BATCH, flushes); // warm-up: plans cached, pages in memory
const runs = new Map<string, number[]>(names.map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const name of round % 2 === 0 ? names : [...names].reverse()) runs.get(name)!.push(await variants.get(name)!.perRecordUs(BATCH, flushes));
}
console.log(`# ledger_flush by part: ${BATCH} records per flush, ${RECORDS} records per round, ${ROUNDS} alternated rounds (${db.kind})`);
console.log('| variant | µs per record, median | rounds |');
console.log('|---|---|---|');
for (const name of names) {
  const values = runs.get(name)!;
  console.log(`| ${name} | ${median(values).toFixed(1)} | ${values.map((v) => v.toFixed(1)).join(', ')} |`);
}
for (const v of variants.values()) await v.close();
await db.stop();
