// A fresh Postgres schema per test file, migrated, dropped at the end: real storage, isolated.
import { randomBytes } from 'node:crypto';
import type { QueryConfig } from 'pg';
import type { Test } from 'tap';
import { loadConfig, type Config } from '../../src/config/config.js';
import { migrate } from '../../src/store/migrate.js';
import { createPool, type Pool } from '../../src/store/pool.js';
import { testDatabaseUrl } from './env.js';

export interface TestDb {
  readonly url: string;
  readonly schema: string;
  readonly pool: Pool;
  readonly dbConfig: Config['db'];
}

export async function testDb(t: Test): Promise<TestDb> {
  const schema = 't_' + randomBytes(6).toString('hex');
  const base = loadConfig({}, { db: { url: testDatabaseUrl, schema } });
  const pool = createPool({ ...base.db, url: testDatabaseUrl });
  await migrate(pool, schema);
  t.teardown(async () => {
    try {
      await dropSchema(pool, schema);
    } finally {
      await pool.end();
    }
  });
  return { url: testDatabaseUrl, schema, pool, dbConfig: base.db };
}

/** Bulk teardown work gets its own limits: the pool's are the hot path's (under a second). */
const DROP_TIMEOUT_MS = 60_000;

/**
 * Drops a test schema. A schema holds a few hundred objects, and on a loaded machine dropping them
 * (and waiting for a straggling connection's locks) can outlast the pool's sub-second limits, so
 * the drop sets its own server-side and client-side timeouts.
 */
async function dropSchema(pool: Pool, schema: string): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL statement_timeout = ${DROP_TIMEOUT_MS}`);
    await client.query(`SET LOCAL lock_timeout = ${DROP_TIMEOUT_MS}`);
    await client.query({ text: `DROP SCHEMA IF EXISTS ${schema} CASCADE`, query_timeout: DROP_TIMEOUT_MS } as QueryConfig);
    await client.query('COMMIT');
    client.release();
  } catch (e) {
    client.release(true);
    throw e;
  }
}
