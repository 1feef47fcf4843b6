// The admin CLI against a real database: every core command, --json, one-line errors with exit 1.
import t from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { runCli } from '../../src/admin/cli.js';
import { startTestGateway } from '../helpers/gateway.js';

t.test('inkgate CLI', async (t) => {
  const g = await startTestGateway(t);
  const cfg = loadConfig({}, { db: { url: g.db.url, schema: g.db.schema } });
  const run = async (...argv: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli(
      argv,
      (s) => void (out += s),
      (s) => void (err += s),
      cfg,
    );
    return { code, out, err, json: argv.includes('--json') && out ? JSON.parse(out) : undefined };
  };

  const acc = await run('account', 'create', '--name', 'Ada', '--plan', 'pro', '--json');
  t.equal(acc.code, 0);
  t.match(acc.json.id, /^usr_/);
  const top = await run('topup', '--account', acc.json.id, '--usd', '12.34', '--json');
  t.equal(top.code, 0, top.err);
  const key = await run('key', 'create', '--account', acc.json.id, '--name', 'ci', '--ink-limit', '300', '--json');
  t.equal(key.code, 0, key.err);
  t.match(key.json.key, /^svc_[A-Za-z0-9_-]{43}$/, 'the raw key is printed once');
  const me = await g.call('GET', '/v1/me', { key: key.json.key });
  t.equal(me.json.ink.payg_balance, 1234);
  t.equal(me.json.key.ink_limit, 300);

  const list = await run('key', 'list', '--account', acc.json.id, '--json');
  t.equal(list.json.length, 1);
  t.notOk(list.out.includes(key.json.key), 'key list never shows the raw key');
  t.equal(list.json[0].prefix, key.json.key.slice(0, 12));

  t.equal((await run('key', 'set-limit', key.json.id, '--ink-limit', 'none')).code, 0);
  t.equal((await g.call('GET', '/v1/me', { key: key.json.key })).json.key.ink_limit, null);

  t.equal((await run('lane', 'enable', 'messages')).code, 0);
  t.equal((await run('model', 'pause', 'sonnet', '--retry-after', '60', '--json')).json.model, 'assistant-sonnet-5', 'aliases resolve');
  const paused = await g.db.pool.query('SELECT retry_after_s FROM model_pauses');
  t.same(paused.rows, [{ retry_after_s: 60 }]);
  t.equal((await run('model', 'resume', 'sonnet')).code, 0);

  t.equal((await run('api', 'close')).code, 0);
  await g.gw.services.state.refresh();
  t.equal((await g.call('GET', '/v1/models')).json.error.code, 'external_api_disabled');
  t.equal((await run('api', 'open')).code, 0);
  await g.gw.services.state.refresh();

  t.equal((await run('key', 'revoke', key.json.id)).code, 0);
  t.equal((await g.call('GET', '/v1/me', { key: key.json.key })).status, 401);

  const reqs = await run('requests', '--account', acc.json.id, '--json');
  t.equal(reqs.code, 0, reqs.err);

  // Errors: one clear line; exit status 1 for a refusal, 2 for a wrong command line.
  for (const [argv, status] of [
    [['account', 'create', '--name', 'x', '--plan', 'platinum'], 1],
    [['key', 'create', '--name', 'x'], 2],
    [['lane', 'enable', 'telepathy'], 2],
    [['model', 'pause', 'gpt-9'], 1],
    [['frobnicate'], 2],
    [['topup', '--account', acc.json.id, '--usd', '-5'], 2],
    [['topup', '--account', acc.json.id, '--usd', '5.001'], 2],
  ] as const) {
    const r = await run(...argv);
    t.equal(r.code, status, argv.join(' '));
    t.equal(r.err.trim().split('\n').length, 1, `one line: ${r.err.trim()}`);
    t.match(r.err, /^inkgate: /);
  }
  // Flags are strict: a typo, a flag with no value, a value where none belongs, a flag given twice,
  // a flag another command takes. Each is refused before anything is written.
  const keysBefore = (await run('key', 'list', '--account', acc.json.id, '--json')).json.length;
  for (const [argv, why] of [
    [['key', 'create', '--account', acc.json.id, '--name', 'typo', '--ink-limt', '100'], /unknown flag --ink-limt/],
    [['key', 'create', '--account', acc.json.id, '--name', 'bare', '--ink-limit'], /--ink-limit needs a value/],
    [['key', 'create', '--account', acc.json.id, '--ink-limit', '--name', 'x'], /--ink-limit needs a value/],
    [['key', 'create', '--account', acc.json.id, '--name', 'twice', '--ink-limit', '5', '--ink-limit', '500'], /--ink-limit is given twice/],
    [['key', 'create', '--account', acc.json.id, '--name', 'v', '--json=yes'], /--json takes no value/],
    [['key', 'create', '--account', acc.json.id, '--name', 'other', '--usd', '5'], /unknown flag --usd/],
  ] as const) {
    const r = await run(...argv);
    t.equal(r.code, 2, `${argv.join(' ')}: a usage error`);
    t.match(r.err, why, r.err.trim());
    t.equal(r.err.trim().split('\n').length, 1, 'one line');
  }
  t.equal((await run('key', 'list', '--account', acc.json.id, '--json')).json.length, keysBefore, 'no key was created by a refused command');
  const withEq = await run('key', 'create', '--account', acc.json.id, '--name', 'eq', '--ink-limit=250', '--json');
  t.equal(withEq.code, 0, withEq.err);
  t.equal(withEq.json.ink_limit ?? (await g.call('GET', '/v1/me', { key: withEq.json.key })).json.key.ink_limit, 250, '--flag=value is read');
  const help = await run('key', 'create', '--help');
  t.equal(help.code, 0);
  t.match(help.out, /key create --account A --name N \[--ink-limit N\]/, "a command's --help prints its usage");

  const free = await run('account', 'create', '--name', 'f', '--plan', 'free', '--json');
  const denied = await run('key', 'create', '--account', free.json.id, '--name', 'k');
  t.equal(denied.code, 1);
  t.match(denied.err, /paid plan or at least one completed/);
});

t.test('inkgate ledger check: exit 0 on a consistent ledger, 1 with the broken rule named', async (t) => {
  const g = await startTestGateway(t);
  const cfg = loadConfig({}, { db: { url: g.db.url, schema: g.db.schema } });
  const run = async (...argv: string[]) => {
    let out = '';
    const code = await runCli(
      argv,
      (s) => void (out += s),
      () => undefined,
      cfg,
    );
    return { code, json: JSON.parse(out) };
  };
  const acc = await run('account', 'create', '--name', 'Check', '--plan', 'pro', '--json');
  await run('topup', '--account', acc.json.id, '--usd', '5', '--json');
  const ok = await run('ledger', 'check', '--json');
  t.equal(ok.code, 0);
  t.match(ok.json, { ok: true, violations: [] });
  t.ok(ok.json.rules >= 10, `${ok.json.rules} rules checked`);
  // One Ink moved to the held pool with no hold behind it (the table's own CHECKs still pass).
  await g.db.pool.query('UPDATE wallets SET payg_ink = payg_ink - 1, held_payg_ink = held_payg_ink + 1 WHERE account_id = $1', [acc.json.id]);
  const bad = await run('ledger', 'check', '--json');
  t.equal(bad.code, 1, 'a violation exits 1');
  t.equal(bad.json.ok, false);
  t.match(bad.json.violations, [{ rule: /held pools = the durable open holds/, count: 1, rows: [{ account_id: acc.json.id, held_payg_ink: 1 }] }]);
  await g.db.pool.query('UPDATE wallets SET payg_ink = payg_ink + 1, held_payg_ink = held_payg_ink - 1 WHERE account_id = $1', [acc.json.id]);
  // A request whose key does not exist (no foreign key stops such a row; the write paths check keys themselves).
  await g.db.pool.query(
    `INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                           grant_period, created_at, resolved_at)
     VALUES ('req_keyless_check', $1, 'key_missing0000', 'messages', 'sonnet', 'void', 'void', 0, 0, 0, 0, now(), now())`,
    [acc.json.id],
  );
  const keyless = await run('ledger', 'check', '--json');
  t.equal(keyless.code, 1, 'a request without its key exits 1');
  t.match(keyless.json.violations, [{ rule: /its own key, which exists/, count: 1, rows: [{ id: 'req_keyless_check', key_id: 'key_missing0000' }] }]);
  await g.db.pool.query(`DELETE FROM requests WHERE id = 'req_keyless_check'`);
});
