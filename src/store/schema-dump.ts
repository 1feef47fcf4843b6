// The schema the migrations and function files build, written out as one readable file
// (src/store/schema.sql), so the current definition of a table is read in one place instead of
// replayed across migrations (a function's is also its own file in src/store/functions/). It is
// read from the catalogs (pg_get_*def), not from pg_dump: that needs no external binary, and
// pg_dump refuses a server newer than itself (the machine's Postgres and the embedded fallback are
// different major versions).
//
// The text must not depend on the schema the migrations ran in (tests use one per file, the
// product its configured one), so names are printed unqualified, and on nothing but the
// definitions themselves, so everything is sorted by name in the "C" collation.
//
// Run as a script (`npm run schema:dump`) it migrates a fresh schema in the configured database
// (DATABASE_URL, else the embedded one, as the admin CLI does), dumps it into src/store/schema.sql
// and drops the schema again.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { QueryConfig } from 'pg';
import { loadConfig, PROJECT_ROOT } from '../config/config.js';
import { openDatabase } from './connect.js';
import { migrate } from './migrate.js';
import { createPool, type Pool } from './pool.js';

export const SCHEMA_FILE = join(PROJECT_ROOT, 'src', 'store', 'schema.sql');
export const REGENERATE_COMMAND = 'npm run schema:dump';

const HEADER = `-- GENERATED from the migrations in src/store/migrations/ and the function files in
-- src/store/functions/ by src/store/schema-dump.ts: do not edit by hand. Change a table with a new
-- migration, a function by editing its file, then regenerate this file with:
--   ${REGENERATE_COMMAND}
-- test/integration/schema-file.test.ts fails while this file and the migrations disagree.
--
-- Every table (columns in their order, then constraints), its indexes and triggers, every view and
-- function, as migrate leaves them; tables and functions sorted by name. Meant to be read:
-- databases are built by src/store/migrate.ts, never from this file. The rows the
-- migrations insert (plans, lanes, deployment) are data, not schema, and are not shown here.
`;

/** The file's content for a dump: the header, one blank line, the dump. */
export function renderSchemaFile(dump: string): string {
  return `${HEADER}\n${dump}`;
}

/** The dump part of the file's content: everything after the header and the blank line that ends it. */
export function schemaFileBody(text: string): string {
  const end = text.indexOf('\n\n');
  return end < 0 ? '' : text.slice(end + 2);
}

// Every query takes the schema name as $1. Objects owned by an extension are the extension's, not
// the migrations', and are left out (classid is given so that the lookup uses pg_depend's index).
const NOT_EXTENSION = (catalog: string, oid: string) =>
  `NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = '${catalog}'::regclass AND e.objid = ${oid} AND e.deptype = 'e')`;
const RELATIONS = `pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $1`;

const Q = {
  tables: `SELECT quote_ident(c.relname) AS rel FROM ${RELATIONS}
     WHERE c.relkind IN ('r', 'p') AND ${NOT_EXTENSION('pg_class', 'c.oid')} ORDER BY c.relname COLLATE "C"`,
  columns: `SELECT quote_ident(c.relname) AS rel, quote_ident(a.attname) AS name, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null, a.attidentity AS identity, a.attgenerated AS generated,
       pg_get_expr(d.adbin, d.adrelid, true) AS expr,
       CASE WHEN a.attcollation <> t.typcollation THEN quote_ident(co.collname) END AS collation
      FROM ${RELATIONS} JOIN pg_attribute a ON a.attrelid = c.oid JOIN pg_type t ON t.oid = a.atttypid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      LEFT JOIN pg_collation co ON co.oid = a.attcollation
     WHERE c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY c.relname COLLATE "C", a.attnum`,
  // contype 'n' (NOT NULL, catalogued as constraints from Postgres 18 on) is printed on its column;
  // 't' (constraint trigger) with the triggers.
  constraints: `SELECT quote_ident(c.relname) AS rel, format('CONSTRAINT %I %s', k.conname, pg_get_constraintdef(k.oid, true)) AS def
      FROM ${RELATIONS} JOIN pg_constraint k ON k.conrelid = c.oid
     WHERE k.contype IN ('c', 'f', 'p', 'u', 'x')
     ORDER BY c.relname COLLATE "C", k.conname COLLATE "C"`,
  // An index that carries a primary key, unique or exclusion constraint is that constraint.
  indexes: `SELECT quote_ident(c.relname) AS rel, pg_get_indexdef(i.indexrelid, 0, true) AS def
      FROM ${RELATIONS} JOIN pg_index i ON i.indrelid = c.oid JOIN pg_class x ON x.oid = i.indexrelid
     WHERE NOT EXISTS (SELECT 1 FROM pg_constraint k
                        WHERE k.conindid = i.indexrelid AND k.conrelid = c.oid AND k.contype IN ('p', 'u', 'x'))
     ORDER BY c.relname COLLATE "C", x.relname COLLATE "C"`,
  triggers: `SELECT quote_ident(c.relname) AS rel, pg_get_triggerdef(g.oid, true) AS def, quote_ident(g.tgname) AS name, g.tgenabled AS enabled
      FROM ${RELATIONS} JOIN pg_trigger g ON g.tgrelid = c.oid
     WHERE NOT g.tgisinternal ORDER BY c.relname COLLATE "C", g.tgname COLLATE "C"`,
  views: `SELECT quote_ident(c.relname) AS rel, c.relkind = 'm' AS materialized, pg_get_viewdef(c.oid, true) AS def
      FROM ${RELATIONS} WHERE c.relkind IN ('v', 'm') AND ${NOT_EXTENSION('pg_class', 'c.oid')} ORDER BY c.relname COLLATE "C"`,
  functions: `SELECT pg_get_functiondef(p.oid) AS def
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = $1
     WHERE p.prokind IN ('f', 'p') AND ${NOT_EXTENSION('pg_proc', 'p.oid')}
     ORDER BY p.proname COLLATE "C", pg_get_function_identity_arguments(p.oid) COLLATE "C"`,
};

/**
 * Objects this dump does not print. Rather than leave them out of a file that says it holds the
 * whole schema, dumpSchema refuses, naming them, so a migration that adds one extends this file.
 */
const UNPRINTED = `SELECT what FROM (
    SELECT 1 AS o, CASE c.relkind WHEN 'S' THEN 'sequence ' WHEN 'c' THEN 'composite type ' WHEN 'f' THEN 'foreign table '
             ELSE format('relation (relkind %s) ', c.relkind) END || c.relname AS what
      FROM ${RELATIONS}
     WHERE c.relkind NOT IN ('r', 'p', 'v', 'm', 'i', 'I', 't') AND ${NOT_EXTENSION('pg_class', 'c.oid')}
       AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'i'))
    UNION ALL SELECT 2, 'row level security on ' || c.relname FROM ${RELATIONS} WHERE c.relrowsecurity
    UNION ALL SELECT 3, format('policy %s on %s', p.polname, c.relname) FROM ${RELATIONS} JOIN pg_policy p ON p.polrelid = c.oid
    UNION ALL SELECT 4, format('rule %s on %s', r.rulename, c.relname) FROM ${RELATIONS} JOIN pg_rewrite r ON r.ev_class = c.oid
     WHERE NOT (c.relkind IN ('v', 'm') AND r.rulename = '_RETURN')
    UNION ALL SELECT 5, 'type ' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace AND n.nspname = $1
     WHERE (t.typtype IN ('e', 'd', 'r', 'm') OR (t.typtype = 'b' AND t.typcategory <> 'A')) AND ${NOT_EXTENSION('pg_type', 't.oid')}
    UNION ALL SELECT 6, 'aggregate or window function ' || p.proname FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = $1 WHERE p.prokind IN ('a', 'w')
    UNION ALL SELECT 7, 'comment on ' || pg_describe_object(d.classoid, d.objoid, d.objsubid) FROM pg_description d
     WHERE (d.classoid = 'pg_class'::regclass AND d.objoid IN (SELECT c.oid FROM ${RELATIONS}))
        OR (d.classoid = 'pg_proc'::regclass AND d.objoid IN (SELECT p.oid FROM pg_proc p
              JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = $1))
  ) x ORDER BY o, what COLLATE "C"`;

type Row = Record<string, string | boolean | null>;

/** Rows grouped by their `rel` column, in query order. */
function byRelation(rows: Row[]): Map<string, Row[]> {
  const out = new Map<string, Row[]>();
  for (const r of rows) {
    const rel = r.rel as string;
    const list = out.get(rel);
    if (list) list.push(r);
    else out.set(rel, [r]);
  }
  return out;
}

function columnLine(column: Row): string {
  let s = `${column.name} ${column.type}`;
  if (column.collation) s += ` COLLATE ${column.collation}`;
  if (column.generated === 's' || column.generated === 'v') s += ` GENERATED ALWAYS AS (${column.expr}) ${column.generated === 's' ? 'STORED' : 'VIRTUAL'}`;
  else if (column.expr !== null) s += ` DEFAULT ${column.expr}`;
  if (column.identity === 'a') s += ' GENERATED ALWAYS AS IDENTITY';
  if (column.identity === 'd') s += ' GENERATED BY DEFAULT AS IDENTITY';
  if (column.not_null) s += ' NOT NULL';
  return s;
}

function triggerLines(rel: string, trigger: Row): string[] {
  const lines = [`${trigger.def};`];
  // tgenabled: O fires (the default), D disabled, R only as a replica, A always.
  const alter = { D: 'DISABLE', R: 'ENABLE REPLICA', A: 'ENABLE ALWAYS' }[trigger.enabled as string];
  if (alter) lines.push(`ALTER TABLE ${rel} ${alter} TRIGGER ${trigger.name};`);
  return lines;
}

interface Catalog {
  tables: Row[];
  columns: Map<string, Row[]>;
  constraints: Map<string, Row[]>;
  indexes: Map<string, Row[]>;
  triggers: Map<string, Row[]>;
  views: Row[];
  functions: Row[];
}

function renderTables(cat: Catalog): string[] {
  const blocks: string[] = [];
  for (const { rel } of cat.tables) {
    const name = rel as string;
    const body = [...(cat.columns.get(name) ?? []).map(columnLine), ...(cat.constraints.get(name) ?? []).map((k) => k.def as string)];
    // The deparser breaks a long CHECK (a CASE) over lines: indent them under their constraint.
    const lines = [`CREATE TABLE ${name} (`, body.map((l) => `  ${l.replace(/\n/g, '\n    ')}`).join(',\n'), ');'];
    for (const i of cat.indexes.get(name) ?? []) lines.push(`${i.def};`);
    for (const t of cat.triggers.get(name) ?? []) lines.push(...triggerLines(name, t));
    blocks.push(lines.join('\n'));
  }
  return blocks;
}

function renderViews(cat: Catalog): string[] {
  return cat.views.map((view) => {
    const lines = [`CREATE ${view.materialized ? 'MATERIALIZED VIEW' : 'VIEW'} ${view.rel} AS`, (view.def as string).replace(/^\s+/, '')];
    for (const t of cat.triggers.get(view.rel as string) ?? []) lines.push(...triggerLines(view.rel as string, t));
    return lines.join('\n');
  });
}

function render(cat: Catalog): string {
  const sections: string[] = [];
  const section = (title: string, blocks: string[]) => {
    if (blocks.length > 0) sections.push(`-- ${title}\n\n${blocks.join('\n\n')}\n`);
  };
  section('Tables: columns in their order, then constraints; then indexes and triggers', renderTables(cat));
  section('Views', renderViews(cat));
  section(
    'Functions',
    cat.functions.map((f) => `${(f.def as string).trimEnd()};`),
  );
  return sections.join('\n');
}

/**
 * Takes a schema's name out of catalog text. pg_get_functiondef always qualifies the function's
 * own name; the others qualify whatever the search_path (set to the schema) does not reach.
 * Function bodies are left alone: they are the migrations' text, and not ours to rewrite.
 */
function unqualify(cat: Catalog, quoted: string): void {
  const prefix = new RegExp(`(^|[^\\w$".])${quoted.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.`, 'g');
  const strip = (s: string) => s.replace(prefix, '$1');
  for (const rows of [...cat.constraints.values(), ...cat.indexes.values(), ...cat.triggers.values()]) {
    for (const r of rows) r.def = strip(r.def as string);
  }
  for (const v of cat.views) v.def = strip(v.def as string);
  for (const f of cat.functions) {
    const def = f.def as string;
    const head = def.indexOf('\n');
    f.def = strip(def.slice(0, head)) + def.slice(head);
  }
}

type Query = <R extends Row>(sql: string) => Promise<R[]>;

async function readCatalog(query: Query): Promise<Catalog> {
  return {
    tables: await query(Q.tables),
    columns: byRelation(await query(Q.columns)),
    constraints: byRelation(await query(Q.constraints)),
    indexes: byRelation(await query(Q.indexes)),
    triggers: byRelation(await query(Q.triggers)),
    views: await query(Q.views),
    functions: await query(Q.functions),
  };
}

/**
 * A dump is a tool's or a test's call, not the hot path: it gets its own timeouts, server side
 * (SET LOCAL) and client side (pg's per-query query_timeout, which @types/pg does not list), instead
 * of the request-sized ones of a gateway pool, which a busy machine exceeds.
 */
const DUMP_TIMEOUT_MS = 60_000;

/** The definitions of everything in `schemaName`, as deterministic, schema-name-free SQL text. */
export async function dumpSchema(pool: Pool, schemaName: string): Promise<string> {
  const client = await pool.connect();
  const q: Query = async <R extends Row>(sql: string) =>
    (await client.query<R>({ text: sql, values: [schemaName], query_timeout: DUMP_TIMEOUT_MS } as QueryConfig)).rows;
  let broken = false;
  try {
    // One read-only snapshot; SET LOCAL keeps the settings inside it. With the schema alone on the
    // search_path the deparsers print its objects unqualified.
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    await client.query(`SET LOCAL statement_timeout = ${DUMP_TIMEOUT_MS}`);
    const schema = (await q<{ q: string; found: boolean }>('SELECT quote_ident($1) AS q, EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS found'))[0]!;
    if (!schema.found) throw new Error(`schema dump: no schema named ${schema.q}`);
    await client.query(`SET LOCAL search_path = ${schema.q}`);
    const unprinted = (await q<{ what: string }>(UNPRINTED)).map((r) => r.what);
    if (unprinted.length > 0) {
      throw new Error(`schema dump: ${schema.q} holds objects src/store/schema-dump.ts does not print yet (extend it): ${unprinted.join('; ')}`);
    }
    const cat = await readCatalog(q);
    if (cat.tables.length === 0) throw new Error(`schema dump: schema ${schema.q} has no tables: not migrated?`);
    unqualify(cat, schema.q);
    return render(cat);
  } finally {
    await client.query('ROLLBACK').catch(() => (broken = true));
    client.release(broken);
  }
}

/** `npm run schema:dump`: migrate a throwaway schema, dump it into SCHEMA_FILE, drop it. */
async function main(): Promise<number> {
  const cfg = loadConfig();
  const db = await openDatabase(cfg, { share: false, log: (m) => process.stderr.write(`${m}\n`) });
  // A one-off tool, not the hot path: the request-sized timeouts of the gateway's pool would only
  // make it fail on a busy machine.
  const slow = { queryTimeoutMs: 120_000, statementTimeoutMs: 120_000, lockTimeoutMs: 120_000 };
  const pool = createPool({ ...cfg.db, ...slow, url: db.url, poolMax: 2 });
  const schema = `schema_dump_${randomBytes(6).toString('hex')}`;
  try {
    await migrate(pool, schema);
    const text = renderSchemaFile(await dumpSchema(pool, schema));
    let before = '';
    try {
      before = readFileSync(SCHEMA_FILE, 'utf8');
    } catch {
      /* first run: no file yet */
    }
    if (before !== text) writeFileSync(SCHEMA_FILE, text);
    process.stdout.write(`${relative(process.cwd(), SCHEMA_FILE)}: ${before === text ? 'unchanged' : 'written'}\n`);
    return 0;
  } finally {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await pool.end().catch(() => undefined);
    await db.stop();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    (code) => (process.exitCode = code),
    (error: unknown) => {
      process.stderr.write(`schema:dump: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exitCode = 1;
    },
  );
}
