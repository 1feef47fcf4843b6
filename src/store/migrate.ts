// The database schema in two kinds of file, applied under one advisory lock per schema so instances starting
// together are safe:
// - Numbered migrations (src/store/migrations/NNN_name.sql): schema changes only (tables, columns,
//   constraints, indexes, triggers, data). Each is applied once, in order, in its own transaction,
//   and recorded in schema_migrations. An applied migration is never edited.
// - Function files (src/store/functions/<function>.sql): the one current definition of each SQL
//   function, edited in place. After the migrations, every file whose text changed since it was
//   last applied (its SHA-256 differs from the one in schema_functions) is applied, all changed
//   files in one transaction, so callers see either the old set or the new one. A file is a
//   CREATE OR REPLACE FUNCTION; a signature change starts it with DROP FUNCTION IF EXISTS for the
//   old signature. From now on no numbered migration defines a function (002 to 015 still do:
//   they are history, and a fresh database runs them before the files replace their functions).
// docs/operations.md (Migrations) says how to change each kind.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../config/config.js';
import type { QueryConfig, QueryResultRow } from 'pg';
import type { Pool } from './pool.js';

// The .sql files are read from src/ in both the TS and the compiled (dist/) run: src/ ships with the package.
export const MIGRATIONS_DIR = join(PROJECT_ROOT, 'src', 'store', 'migrations');
export const FUNCTIONS_DIR = join(PROJECT_ROOT, 'src', 'store', 'functions');
/**
 * The advisory lock is (this key, the schema's hash): instances of one deployment share a schema
 * and take turns; deployments (or test files) in other schemas of the same database do not queue
 * behind each other, as nothing a migration writes lies outside its own schema.
 */
const LOCK_KEY = 0x1a7e_9a7e; // arbitrary, fixed: "inkgate migrate"
/**
 * Migrations may take longer than a request's budget: on the server (statement_timeout,
 * lock_timeout, set on the session) and on the client (pg's query_timeout, given per query: the
 * pool's is sized for the hot path, and a busy machine once needed more than it for 002).
 */
const MIGRATION_TIMEOUT_MS = 60_000;

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

export interface FunctionFile {
  /** The file's name without .sql: the name of the function it defines. */
  readonly name: string;
  readonly sql: string;
  /** SHA-256 of the file's text, hex: what schema_functions records. */
  readonly sha256: string;
}

export interface MigrateOptions {
  /** Where the function files are read from (tests apply edited copies); FUNCTIONS_DIR by default. */
  readonly functionsDir?: string;
}

export interface MigrateReport {
  /** Versions of the numbered migrations applied, in order. */
  readonly migrations: number[];
  /** Names of the function files applied (their text was new or changed), in order. */
  readonly functions: string[];
  /**
   * True when the database holds a migration this code does not know: it was migrated by a newer
   * release, whose function files are newer than these, so these are not applied (an older
   * instance restarting during a rolling deploy must not put its old functions back).
   */
  readonly functionsSkipped: boolean;
}

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  const out: Migration[] = [];
  for (const f of readdirSync(dir).sort()) {
    const m = /^(\d{3})_([a-z0-9_]+)\.sql$/.exec(f);
    if (!m) continue;
    out.push({ version: Number(m[1]), name: m[2]!, sql: readFileSync(join(dir, f), 'utf8') });
  }
  // Versions only need to increase (gaps are allowed: 008, 009 and 016 were never used); a
  // duplicate number is a mistake.
  out.forEach((migration, index) => {
    if (index > 0 && migration.version <= out[index - 1]!.version)
      throw new Error(`migrations: duplicate or unordered version ${migration.version}_${migration.name}`);
  });
  return out;
}

/** The function files, sorted by name. */
export function listFunctionFiles(dir = FUNCTIONS_DIR): FunctionFile[] {
  const out: FunctionFile[] = [];
  for (const f of readdirSync(dir).sort()) {
    const m = /^([a-z0-9_]+)\.sql$/.exec(f);
    if (!m) continue;
    const sql = readFileSync(join(dir, f), 'utf8');
    out.push({ name: m[1]!, sql, sha256: createHash('sha256').update(sql).digest('hex') });
  }
  return out;
}

type Q = <R extends QueryResultRow = QueryResultRow>(text: string, values?: unknown[]) => Promise<{ rows: R[] }>;

/** Runs `run` in one transaction on the migration's own session: committed whole, or rolled back. */
async function inTx(query: Q, run: () => Promise<void>): Promise<void> {
  await query('BEGIN');
  try {
    await run();
    await query('COMMIT');
  } catch (e) {
    await query('ROLLBACK');
    throw e;
  }
}

async function applyMigrations(query: Q): Promise<{ applied: number[]; ahead: boolean }> {
  await query('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
  const done = new Set((await query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
  const all = listMigrations();
  const known = new Set(all.map((m) => m.version));
  const applied: number[] = [];
  for (const m of all) {
    if (done.has(m.version)) continue;
    try {
      await inTx(query, async () => {
        await query(m.sql);
        await query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
      });
    } catch (e) {
      throw new Error(`migration ${m.version}_${m.name} failed: ${(e as Error).message}`, { cause: e });
    }
    applied.push(m.version);
  }
  return { applied, ahead: [...done].some((v) => !known.has(v)) };
}

/** Applies the function files whose text differs from what schema_functions recorded; returns their names. */
async function applyFunctions(query: Q, dir: string): Promise<string[]> {
  await query('CREATE TABLE IF NOT EXISTS schema_functions (name text PRIMARY KEY, sha256 text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
  const files = listFunctionFiles(dir);
  const recorded = new Map((await query<{ name: string; sha256: string }>('SELECT name, sha256 FROM schema_functions')).rows.map((r) => [r.name, r.sha256]));
  const changed = files.filter((f) => recorded.get(f.name) !== f.sha256);
  const gone = [...recorded.keys()].filter((n) => !files.some((f) => f.name === n));
  if (changed.length === 0 && gone.length === 0) return [];
  await inTx(query, async () => {
    for (const f of changed) {
      try {
        await query(f.sql);
      } catch (e) {
        throw new Error(`function file ${f.name}.sql failed: ${(e as Error).message}`, { cause: e });
      }
      await query(
        `INSERT INTO schema_functions (name, sha256) VALUES ($1, $2)
               ON CONFLICT (name) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now()`,
        [f.name, f.sha256],
      );
    }
    // A file removed: its function is dropped by a numbered migration (a schema change); only the record goes here.
    if (gone.length > 0) await query('DELETE FROM schema_functions WHERE name = ANY($1)', [gone]);
  });
  return changed.map((f) => f.name);
}

/** Applies every pending migration, then every changed function file; says what it applied. */
export async function migrateAll(pool: Pool, schema: string, opts: MigrateOptions = {}): Promise<MigrateReport> {
  const client = await pool.connect();
  try {
    // pg reads `query_timeout` per query (lib/client.js); @types/pg does not list it on QueryConfig.
    const q: Q = <R extends QueryResultRow = QueryResultRow>(text: string, values?: unknown[]) =>
      client.query<R>({ text, values, query_timeout: MIGRATION_TIMEOUT_MS } as QueryConfig);
    await q(`SET statement_timeout = ${MIGRATION_TIMEOUT_MS}; SET lock_timeout = ${MIGRATION_TIMEOUT_MS}`);
    await q('SELECT pg_advisory_lock($1, hashtext($2))', [LOCK_KEY, schema]);
    try {
      await q(`CREATE SCHEMA IF NOT EXISTS ${client.escapeIdentifier(schema)}`);
      await q(`SET search_path = ${client.escapeIdentifier(schema)}, public`);
      const { applied, ahead } = await applyMigrations(q);
      const functions = ahead ? [] : await applyFunctions(q, opts.functionsDir ?? FUNCTIONS_DIR);
      return { migrations: applied, functions, functionsSkipped: ahead };
    } finally {
      await q('SELECT pg_advisory_unlock($1, hashtext($2))', [LOCK_KEY, schema]);
    }
  } finally {
    // The session was given migration-sized timeouts and its own search_path: close it rather
    // than hand the pool a connection whose lock_timeout is a minute instead of the hot path's.
    client.release(true);
  }
}

/** Applies every pending migration and changed function file; returns the migration versions applied. */
export async function migrate(pool: Pool, schema: string, opts: MigrateOptions = {}): Promise<number[]> {
  return (await migrateAll(pool, schema, opts)).migrations;
}
