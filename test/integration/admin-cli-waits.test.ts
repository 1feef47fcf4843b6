// An operator's command waits for the database past the hot path's limits: a switch whose row is
// locked by another transaction for longer than the gateway's lock timeout (500 ms) is made once
// the lock goes, instead of failing (it used to exit 1 with a lock timeout while a busy suite or a
// busy gateway held the database's NOTIFY queue). Run as the real process, as a script would.
import t from 'tap';
import { testDb } from '../helpers/db.js';
import { cliEnvironment, schemaSettings, spawnCli } from '../helpers/operator-cli.js';

const db = await testDb(t);
const env = cliEnvironment(schemaSettings(t, db));

/** True once a session waits for the transaction `xid` (a row it locked): the command, blocked. */
async function someoneWaitsFor(xid: string): Promise<boolean> {
  const r = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1`,
    [xid],
  );
  return r.rows[0]!.n > 0;
}

t.test('lane enable waits for a lock held longer than the hot path would wait, then succeeds', async (t) => {
  const holder = await db.pool.connect();
  t.teardown(() => holder.release());
  await holder.query(`SET search_path TO ${db.schema}`);
  await holder.query('BEGIN');
  const locked = await holder.query(`SELECT 1 FROM lanes WHERE lane = 'video' FOR UPDATE`);
  t.equal(locked.rowCount, 1, "the video lane's row, locked");
  const xid = (await holder.query<{ x: string }>('SELECT pg_current_xact_id()::xid::text AS x')).rows[0]!.x;
  const command = spawnCli(env, ['lane', 'enable', 'video', '--json']);
  const deadline = Date.now() + 30_000;
  while (!(await someoneWaitsFor(xid))) {
    if (Date.now() > deadline) throw new Error('the command never reached the lock');
    // Polling pg_locks, bounded above. The holder says something meanwhile, or Postgres ends it as
    // idle in its transaction.
    await holder.query('SELECT 1');
    await new Promise((r) => setTimeout(r, 50));
  }
  // Held past the gateway's 500 ms lock timeout: what is under test is that the command outwaits it.
  await new Promise((r) => setTimeout(r, 1_200));
  await holder.query('COMMIT');
  const r = await command;
  t.equal(r.code, 0, r.stdout + r.stderr);
  const row = await db.pool.query<{ enabled: boolean }>(`SELECT enabled FROM ${db.schema}.lanes WHERE lane = 'video'`);
  t.equal(row.rows[0]!.enabled, true, 'the lane is on');
});
