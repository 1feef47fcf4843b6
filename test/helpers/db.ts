// A fresh Postgres schema per test file, migrated, dropped at the end: real storage, isolated.
import { randomBytes } from 'node:crypto';
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
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    } finally {
      await pool.end();
    }
  });
  return { url: testDatabaseUrl, schema, pool, dbConfig: base.db };
}
