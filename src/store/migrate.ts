// Numbered SQL migrations, applied in order under an advisory lock so instances starting together are safe.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../config/config.js';
import type { QueryConfig, QueryResultRow } from 'pg';
import type { Pool } from './pool.js';

// The .sql files are read from src/ in both the TS and the compiled (dist/) run: src/ ships with the package.
export const MIGRATIONS_DIR = join(PROJECT_ROOT, 'src', 'store', 'migrations');
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

export function listMigrations(dir = MIGRATIONS_DIR): Migration[] {
  const out: Migration[] = [];
  for (const f of readdirSync(dir).sort()) {
    const m = /^(\d{3})_([a-z0-9_]+)\.sql$/.exec(f);
    if (!m) continue;
    out.push({ version: Number(m[1]), name: m[2]!, sql: readFileSync(join(dir, f), 'utf8') });
  }
  // Versions only need to increase (gaps are allowed: 008, 009 and 016 were never used); a
  // duplicate number is a mistake.
  out.forEach((m, i) => {
    if (i > 0 && m.version <= out[i - 1]!.version) throw new Error(`migrations: duplicate or unordered version ${m.version}_${m.name}`);
  });
  return out;
}

/** Applies every pending migration; returns the versions applied. */
export async function migrate(pool: Pool, schema: string): Promise<number[]> {
  const client = await pool.connect();
  const applied: number[] = [];
  try {
    // pg reads `query_timeout` per query (lib/client.js); @types/pg does not list it on QueryConfig.
    const q = <R extends QueryResultRow = QueryResultRow>(text: string, values?: unknown[]) =>
      client.query<R>({ text, values, query_timeout: MIGRATION_TIMEOUT_MS } as QueryConfig);
    await q(`SET statement_timeout = ${MIGRATION_TIMEOUT_MS}; SET lock_timeout = ${MIGRATION_TIMEOUT_MS}`);
    await q('SELECT pg_advisory_lock($1)', [LOCK_KEY]);
    try {
      await q(`CREATE SCHEMA IF NOT EXISTS ${client.escapeIdentifier(schema)}`);
      await q(`SET search_path = ${client.escapeIdentifier(schema)}, public`);
      await q('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
      const done = new Set((await q<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
      for (const m of listMigrations()) {
        if (done.has(m.version)) continue;
        await q('BEGIN');
        try {
          await q(m.sql);
          await q('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
          await q('COMMIT');
          applied.push(m.version);
        } catch (e) {
          await q('ROLLBACK');
          throw new Error(`migration ${m.version}_${m.name} failed: ${(e as Error).message}`, { cause: e });
        }
      }
    } finally {
      await q('SELECT pg_advisory_unlock($1)', [LOCK_KEY]);
    }
  } finally {
    // The session was given migration-sized timeouts and its own search_path: close it rather
    // than hand the pool a connection whose lock_timeout is a minute instead of the hot path's.
    client.release(true);
  }
  return applied;
}
