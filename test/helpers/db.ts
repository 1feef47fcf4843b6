// A fresh Postgres schema per test file, migrated, dropped at the end: real storage, isolated.
import { randomBytes } from 'node:crypto';
import type { QueryConfig } from 'pg';
import type { Test } from 'tap';
import { loadConfig, type Config } from '../../src/config/config.js';
import { migrate } from '../../src/store/migrate.js';
import { createPool, type Pool } from '../../src/store/pool.js';
import { testDatabaseUrl } from './env.js';
import { boundedTeardown, withinMs } from './teardown.js';

export interface TestDb {
  readonly url: string;
  readonly schema: string;
  readonly pool: Pool;
  readonly dbConfig: Config['db'];
}

export async function testDb(t: Test): Promise<TestDb> {
  const schema = 't_' + randomBytes(6).toString('hex');
  const base = loadConfig({}, { db: { url: testDatabaseUrl, schema } });
  // The test's own pool observes and sets up; it is not the product's. It waits seconds to connect
  // and for an answer: on a busy two-core machine a fresh backend can take longer than the hot
  // path's 800 ms to start, and an assertion that fails on that is about the machine, not the code.
  // The product's pools keep the defaults (dbConfig below); lock and statement timeouts are as shipped.
  const pool = createPool({ ...base.db, url: testDatabaseUrl, connectionTimeoutMs: TEST_POOL_CONNECT_MS, queryTimeoutMs: TEST_POOL_QUERY_MS });
  // Registered before the migration, so a set-up that fails there still drops what it made and
  // closes the pool. Bounded as a whole: a teardown that hangs holds the whole file until tap's
  // timeout.
  boundedTeardown(t, `drop schema ${schema}`, () => dropAndEnd(pool, schema), DROP_LOCK_WAIT_MS + DROP_STATEMENT_MS + POOL_END_MS);
  await migrate(pool, schema);
  return { url: testDatabaseUrl, schema, pool, dbConfig: base.db };
}

/**
 * Bulk teardown work gets its own limits (the pool's are the hot path's, under a second): dropping a
 * schema's few hundred objects on a loaded machine takes seconds. The lock wait is bounded on its
 * own and kept short: the only sessions that can hold locks in a test's schema are the test's own,
 * so a drop that waits for one waits for a leaked transaction, and waiting longer only hides it.
 */
const DROP_LOCK_WAIT_MS = 10_000;
const DROP_STATEMENT_MS = 30_000;
const TEST_POOL_CONNECT_MS = 10_000;
const TEST_POOL_QUERY_MS = 30_000;
/** pool.end() waits for every checked-out client to come back: a leaked one would hold it for ever. */
const POOL_END_MS = 5_000;

async function dropAndEnd(pool: Pool, schema: string): Promise<void> {
  try {
    await dropSchema(pool, schema);
  } finally {
    await withinMs(pool.end(), POOL_END_MS, `pool.end() for ${schema} (a client was never released)`);
  }
}

/**
 * Drops a test schema in one transaction with its own server-side and client-side limits (a test
 * that drops one itself uses this too: the pool's hot-path limits are too short for a drop). When the
 * drop fails (a lock it waited for, a timeout), the error names the sessions that still hold locks
 * in the schema, with what they run and since when: the leak to look for.
 */
export async function dropSchema(pool: Pool, schema: string): Promise<void> {
  const client = await pool.connect();
  try {
    // Every statement gets the drop's client-side limit, the COMMIT too: it syncs the WAL of a few
    // hundred dropped objects, which on a loaded disk outlasts the pool's sub-second query timeout.
    const run = (text: string) => client.query({ text, query_timeout: DROP_STATEMENT_MS + 2_000 } as QueryConfig);
    await run('BEGIN');
    await run(`SET LOCAL statement_timeout = ${DROP_STATEMENT_MS}`);
    await run(`SET LOCAL lock_timeout = ${DROP_LOCK_WAIT_MS}`);
    await run(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await run('COMMIT');
    client.release();
  } catch (e) {
    client.release(true);
    throw new Error(`DROP SCHEMA ${schema} failed: ${(e as Error).message}; ${await lockHolders(pool, schema)}`, { cause: e });
  }
}

/** The other sessions holding locks on objects of `schema` (one line), for a failed drop's message. */
async function lockHolders(pool: Pool, schema: string): Promise<string> {
  try {
    const r = await pool.query({
      text: `SELECT DISTINCT a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
               round(extract(epoch FROM now() - a.xact_start))::int AS xact_s, left(a.query, 160) AS query
             FROM pg_locks l
             JOIN pg_class c ON c.oid = l.relation
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE n.nspname = $1 AND l.granted AND a.pid <> pg_backend_pid()`,
      values: [schema],
      query_timeout: 5_000,
    } as QueryConfig);
    if (r.rows.length === 0) return 'no other session holds a lock in it now';
    return 'sessions holding locks in it: ' + r.rows.map((x) => JSON.stringify(x)).join('; ');
  } catch (e) {
    return `(could not list the sessions holding locks: ${(e as Error).message})`;
  }
}
