import t from 'tap';
import { dropSchema, testDb } from '../helpers/db.js';
import { listMigrations, migrate } from '../../src/store/migrate.js';
import { createPool } from '../../src/store/pool.js';

t.test('migrations apply once, and a second run applies nothing', async (t) => {
  const db = await testDb(t);
  const again = await migrate(db.pool, db.schema);
  t.same(again, []);
  const { rows } = await db.pool.query('SELECT api_open FROM deployment');
  t.same(rows, [{ api_open: true }]);
});

t.test('two instances migrating at once are serialised by the advisory lock', async (t) => {
  const db = await testDb(t);
  await dropSchema(db.pool, db.schema);
  const [a, b] = await Promise.all([migrate(db.pool, db.schema), migrate(db.pool, db.schema)]);
  t.ok((a.length === 0) !== (b.length === 0), 'exactly one of them applied the migrations');
  t.same(
    [...a, ...b].sort((x, y) => x - y),
    listMigrations().map((m) => m.version),
    'every migration applied exactly once',
  );
});

t.test('the wallet invariant is a constraint the database enforces', async (t) => {
  const db = await testDb(t);
  await db.pool.query("INSERT INTO accounts (id, name, plan_id) VALUES ('usr_a', 'a', 'pro')");
  await db.pool.query("INSERT INTO wallets (account_id) VALUES ('usr_a')");
  await t.rejects(db.pool.query("UPDATE wallets SET payg_ink = 10 WHERE account_id = 'usr_a'"), /wallet_balances/);
  await db.pool.query("UPDATE wallets SET payg_ink = 10, credited_ink = 10 WHERE account_id = 'usr_a'");
});

t.test("migrating leaves no connection with the migration's timeouts in the pool", async (t) => {
  const db = await testDb(t);
  await dropSchema(db.pool, db.schema);
  await migrate(db.pool, db.schema);
  // Check every connection the pool holds (as many as it has opened, all checked out at once).
  const clients = await Promise.all(Array.from({ length: Math.max(db.pool.totalCount, 1) }, () => db.pool.connect()));
  try {
    for (const c of clients) {
      const { rows } = await c.query<{ lock_ms: number; statement_ms: number }>(
        `SELECT (extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)::int AS lock_ms,
                (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::int AS statement_ms`,
      );
      t.same(rows[0], { lock_ms: db.dbConfig.lockTimeoutMs, statement_ms: db.dbConfig.statementTimeoutMs });
    }
  } finally {
    for (const c of clients) c.release();
  }
});

t.test("migrations are not cut by the pool's hot-path query timeout", async (t) => {
  // A pool whose client-side query timeout (pg's query_timeout) is far below what migration 002
  // takes: the migration's own statements carry their own, longer one.
  const db = await testDb(t);
  const tight = createPool({ ...db.dbConfig, url: db.url, queryTimeoutMs: 5 });
  t.teardown(() => tight.end());
  const schema = db.schema + '_tight';
  t.teardown(() => dropSchema(db.pool, schema));
  const applied = await migrate(tight, schema);
  t.same(
    applied,
    listMigrations().map((m) => m.version),
    'every migration applied',
  );
  // The pool's own queries keep its tight timeout: one that sleeps is cut.
  await t.rejects(tight.query('SELECT pg_sleep(0.5)'), /timeout/i);
});
