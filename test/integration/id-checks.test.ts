// The id CHECKs of migrations 005 and 012 accept exactly what the original bounded-repetition
// patterns accepted. Each candidate is inserted for real: a CHECK runs before any foreign-key
// trigger, so a refused id fails with check_violation (23514) and an accepted one reaches the
// foreign key (23503), which these rows (no account, no key) always break, or, for a request (whose
// key the writers check, not a foreign key), is written.
import t from 'tap';
import { testDb, type TestDb } from '../helpers/db.js';

async function sqlState(db: TestDb, sql: string, params: unknown[]): Promise<string> {
  try {
    await db.pool.query(sql, params);
    return 'ok';
  } catch (e) {
    return (e as { code?: string }).code ?? 'unknown';
  }
}

const REQUEST_INSERT = `INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
    hold_ink, hold_grant_ink, hold_payg_ink, grant_period, created_at)
  VALUES ($1, 'usr_none', 'key_none', 'messages', 'sonnet', 'open', 'running', 0, 0, 0, 0, now())`;

const GENERATION_INSERT = `INSERT INTO generations (id, kind, account_id, key_id, request_id, model, state, request, price_set, hold_ink,
    created_at, updated_at, next_poll_at)
  VALUES ($1, 'video', 'usr_none', 'key_none', 'req_none', 'm', 'submitting', '{}', 'p', 0, now(), now(), now())`;

const IDEM_INSERT = `INSERT INTO idempotency_keys (key_id, product, idem_key, generation_id, claimed_until, created_at)
  VALUES ('key_none', 'video', $1, 'vgen_x', now(), now())`;

const cases: Array<{ what: string; sql: string; pattern: RegExp; accepted: string; ids: string[] }> = [
  {
    what: 'request id',
    sql: REQUEST_INSERT,
    pattern: /^req_[A-Za-z0-9_-]{1,120}$/,
    accepted: 'ok',
    ids: ['req_', 'req_a', 'req_' + 'a'.repeat(120), 'req_' + 'a'.repeat(121), 'req_a b', 'req_a\n', 'REQ_a', 'req_é', 'req_a-_Z9', 'xreq_a'],
  },
  {
    what: 'generation id',
    sql: GENERATION_INSERT,
    pattern: /^(vgen|igen)_[A-Za-z0-9]{1,64}$/,
    accepted: '23503',
    ids: ['vgen_', 'vgen_a', 'igen_' + 'b'.repeat(64), 'vgen_' + 'b'.repeat(65), 'vgen_a_b', 'agen_a', 'vgen_a\n', 'igen_Z9'],
  },
  {
    what: 'Idempotency-Key',
    sql: IDEM_INSERT,
    pattern: /^[A-Za-z0-9._:-]{1,128}$/,
    accepted: '23503',
    ids: ['', 'a', 'a'.repeat(128), 'a'.repeat(129), 'a b', 'a.b:c-d_e', 'a/b', 'a\n'],
  },
];

t.test('the id checks accept exactly the original patterns', async (t) => {
  const db = await testDb(t);
  for (const c of cases) {
    for (const id of c.ids) {
      const state = await sqlState(db, c.sql, [id]);
      const expected = c.pattern.test(id) ? c.accepted : '23514';
      t.equal(
        state,
        expected,
        `${c.what} ${JSON.stringify(id.length > 20 ? id.slice(0, 12) + '…(' + id.length + ')' : id)}: ${expected === c.accepted ? 'accepted' : 'refused'}`,
      );
    }
  }
});
