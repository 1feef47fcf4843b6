// `inkgate` as the real process a cron job or a deploy script runs (node bin/inkgate.js, spawned):
// its exit status is the contract (0 done, 1 failed, 2 usage error), so every command listed by
// `inkgate help` is run once to succeed and once to fail, and the status the shell sees is checked.
// The commands of the table are independent of each other and run a few at a time.
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { Ledger } from '../../src/ledger/ledger.js';
import { testDb } from '../helpers/db.js';
import { newRequestId, seedAccount } from '../helpers/ledger-invariant.js';
import { cliEnvironment, schemaSettings, spawnCli, type CliProcessResult } from '../helpers/operator-cli.js';
import { S3_CREDENTIALS, startS3 } from '../helpers/s3-server.js';

// About 70 processes of node, each ~0.5 s of CPU on a quiet machine and several times that on a
// loaded two-core one: the default two minutes per file is too short for the latter.
t.setTimeout(360_000);
const db = await testDb(t);
const ledger = new Ledger(db.pool);
t.teardown(() => ledger.close());
const settings = schemaSettings(t, db);
const env = cliEnvironment(settings);
const run = (...argv: string[]) => spawnCli(env, argv);
const dir = mkdtempSync(join(tmpdir(), 'inkgate-cli-process-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** stdout of a --json run: exactly one JSON document. */
const jsonOf = (r: CliProcessResult): any => JSON.parse(r.stdout);

/**
 * The command names `inkgate help` lists: the lowercase words after `inkgate`, before the first flag,
 * bracket or placeholder (KEY_ID, messages|responses|...).
 */
const commandsOfHelp = (help: string): string[] => [...help.matchAll(/^ {2}inkgate ([a-z][a-z-]*(?: [a-z][a-z-]*)?)(?= |$)/gm)].map((m) => m[1]!);

const help = await run('help');

t.test('help and --help print the usage and exit 0; no command at all is a usage error', async (t) => {
  t.equal(help.code, 0, help.stderr);
  t.match(help.stdout, /^usage: inkgate <command>/);
  t.match(help.stdout, /exit status: 0 done, 1 the command failed, 2 a usage error/);
  const [dashHelp, one, none] = await Promise.all([run('--help'), run('key', 'create', '--help'), run()]);
  t.equal(dashHelp.code, 0);
  t.equal(dashHelp.stdout, help.stdout);
  t.equal(one.code, 0);
  t.match(one.stdout, /^usage: inkgate key create --account A --name N/);
  t.equal(none.code, 2);
  t.equal(none.stdout, '');
  t.match(none.stderr, /^inkgate: no command given; run inkgate help\n$/);
});

t.test('a failure is one line on stderr and nothing on stdout (with --json: the table below)', async (t) => {
  const [bogus, revoke] = await Promise.all([run('bogus'), run('key', 'revoke', 'key_doesnotexist')]);
  t.equal(bogus.code, 2, 'an unknown command is a usage error');
  t.equal(bogus.stdout, '');
  t.equal(bogus.stderr, 'inkgate: unknown command "bogus"; run inkgate help\n');
  t.equal(revoke.code, 1, 'an unknown id is a failure');
  t.equal(revoke.stdout, '');
  t.equal(revoke.stderr, 'inkgate: unknown key key_doesnotexist\n');
});

t.test('every command: one run that succeeds (exit 0), one that fails (exit 1, or 2 for a usage error)', async (t) => {
  const a = await seedAccount(db.pool, { paygInk: 5_000, keyLimits: [null, null, null] });
  const [revokeKey, limitKey, setKey] = a.keyIds as [string, string, string];
  const heldRequest = newRequestId();
  await ledger.reserve({ requestId: heldRequest, accountId: a.accountId, keyId: setKey, product: 'messages', model: 'assistant-sonnet-5', holdInk: 40 });
  const records = join(dir, 'records.jsonl');
  writeFileSync(records, '{"vendor_request_id":"msg_nowhere","charge_ink":3}\n');
  // media migrate copies to a real S3-protocol server; its dry run of an empty result set succeeds.
  const s3 = await startS3(t);
  await s3.createBucket('cli-bucket');
  const s3Env = (bucket: string) =>
    cliEnvironment({
      ...settings,
      INKGATE_S3_BUCKET: bucket,
      INKGATE_S3_ENDPOINT: s3.endpoint,
      INKGATE_S3_FORCE_PATH_STYLE: '1',
      AWS_ACCESS_KEY_ID: S3_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3_CREDENTIALS.secretAccessKey,
    });
  const nobody = 'usr_nobody';

  type Row = { ok: string[]; fail: string[]; status: 1 | 2; why: RegExp; okEnv?: NodeJS.ProcessEnv; failEnv?: NodeJS.ProcessEnv };
  const rows: Record<string, Row> = {
    migrate: { ok: ['migrate'], fail: ['migrate', '--force'], status: 2, why: /unknown flag --force/ },
    'plan list': { ok: ['plan', 'list'], fail: ['plan', 'list', 'all'], status: 2, why: /unexpected argument "all"/ },
    'account create': {
      ok: ['account', 'create', '--name', 'Ada', '--plan', 'pro'],
      fail: ['account', 'create', '--name', 'x', '--plan', 'platinum'],
      status: 1,
      why: /unknown plan "platinum"/,
    },
    'account set-plan': {
      ok: ['account', 'set-plan', '--account', a.accountId, '--plan', 'pro'],
      fail: ['account', 'set-plan', '--account', nobody, '--plan', 'pro'],
      status: 1,
      why: /unknown account usr_nobody/,
    },
    'key create': {
      ok: ['key', 'create', '--account', a.accountId, '--name', 'ci'],
      fail: ['key', 'create', '--account', nobody, '--name', 'x'],
      status: 1,
      why: /unknown account usr_nobody/,
    },
    'key list': { ok: ['key', 'list', '--account', a.accountId], fail: ['key', 'list', '--acount', a.accountId], status: 2, why: /unknown flag --acount/ },
    'key revoke': { ok: ['key', 'revoke', revokeKey], fail: ['key', 'revoke', 'key_doesnotexist'], status: 1, why: /unknown key key_doesnotexist/ },
    'key set-limit': {
      ok: ['key', 'set-limit', limitKey, '--ink-limit', '100'],
      fail: ['key', 'set-limit', 'key_nope', '--ink-limit', '100'],
      status: 1,
      why: /unknown key key_nope/,
    },
    'key set': {
      ok: ['key', 'set', setKey, '--usage-frame', 'comment'],
      fail: ['key', 'set', 'key_nope', '--usage-frame', 'comment'],
      status: 1,
      why: /unknown key key_nope/,
    },
    'model pause': { ok: ['model', 'pause', 'sonnet', '--retry-after', '60'], fail: ['model', 'pause', 'gpt-9'], status: 1, why: /unknown model "gpt-9"/ },
    'model resume': { ok: ['model', 'resume', 'opus'], fail: ['model', 'resume', 'gpt-9'], status: 1, why: /unknown model "gpt-9"/ },
    'lane enable': {
      ok: ['lane', 'enable', 'video'],
      fail: ['lane', 'enable', 'telepathy'],
      status: 2,
      why: /"telepathy" is not one of messages, responses, video, images/,
    },
    'lane disable': { ok: ['lane', 'disable', 'responses'], fail: ['lane', 'disable'], status: 2, why: /say which: messages, responses, video, images/ },
    'api open': { ok: ['api', 'open'], fail: ['api', 'open', 'now'], status: 2, why: /unexpected argument "now"/ },
    'api close': { ok: ['api', 'close'], fail: ['api', 'close', '--all'], status: 2, why: /unknown flag --all/ },
    topup: { ok: ['topup', '--account', a.accountId, '--usd', '1.50'], fail: ['topup', '--account', nobody, '--usd', '1'], status: 1, why: /usr_nobody/ },
    grant: { ok: ['grant', '--account', a.accountId, '--ink', '10'], fail: ['grant', '--account', nobody, '--ink', '10'], status: 1, why: /usr_nobody/ },
    'roll-period': { ok: ['roll-period', '--account', a.accountId], fail: ['roll-period', '--account', nobody], status: 1, why: /usr_nobody/ },
    requests: {
      ok: ['requests', '--account', a.accountId],
      fail: ['requests', '--account', a.accountId, '--limit', '0'],
      status: 2,
      why: /--limit must be a whole number from 1 to 1000/,
    },
    reconcile: { ok: ['reconcile', '--file', records], fail: ['reconcile', '--file', join(dir, 'missing.jsonl')], status: 1, why: /no such file/ },
    'ledger check': { ok: ['ledger', 'check'], fail: ['ledger', 'check', '--fix'], status: 2, why: /unknown flag --fix/ },
    release: { ok: ['release', '--request', heldRequest], fail: ['release', '--request', 'req_nope'], status: 1, why: /req_nope: no such request/ },
    'console link': {
      ok: ['console', 'link', '--account', a.accountId],
      fail: ['console', 'link', '--account', nobody],
      status: 1,
      why: /unknown account usr_nobody/,
    },
    'media migrate': {
      ok: ['media', 'migrate', '--to', 's3', '--dry-run'],
      okEnv: s3Env('cli-bucket'),
      fail: ['media', 'migrate', '--to', 's3'],
      failEnv: s3Env('not-there'),
      status: 1,
      why: /"not-there" .*does not exist/,
    },
    bench: { ok: ['bench', '--help'], fail: ['bench', '--bogus'], status: 2, why: /unknown option --bogus/ },
    // No instance answers at that port: the configured deployments are listed with the state `unknown`.
    'vendor list': {
      ok: ['vendor', 'list', '--admin', 'http://127.0.0.1:9'],
      fail: ['vendor', 'list', '--admin', 'ftp://127.0.0.1'],
      status: 2, // a bad flag value is a usage error (docs/admin-cli.md)
      why: /--admin must be an http\(s\) URL/,
    },
  };

  const listed = commandsOfHelp(help.stdout);
  t.same([...listed].sort(), Object.keys(rows).sort(), 'the table has one row for each command `inkgate help` lists');

  // bench prints its own usage (no --json there); every other command is run with --json.
  const withJson = (name: string, argv: string[]) => (name === 'bench' ? argv : [...argv, '--json']);
  const jobs = Object.entries(rows).flatMap(([name, row]) => [
    { name, kind: 'ok' as const, row, argv: withJson(name, row.ok), env: row.okEnv ?? env },
    { name, kind: 'fail' as const, row, argv: withJson(name, row.fail), env: row.failEnv ?? env },
  ]);
  // Two at a time: the machine has two cores, and a spawn is mostly CPU.
  const results = await inParallel(2, jobs, (j) => spawnCli(j.env, j.argv));
  jobs.forEach((j, i) => {
    const r = results[i]!;
    const label = `inkgate ${j.argv.join(' ')}`;
    if (j.kind === 'ok') {
      t.equal(r.code, 0, `${label} exits 0 (${r.stderr.trim()})`);
      if (j.name !== 'bench') t.doesNotThrow(() => jsonOf(r), `${label} prints one JSON document`);
      return;
    }
    t.equal(r.code, j.row.status, `${label} exits ${j.row.status} (${r.stderr.trim()})`);
    if (j.name === 'bench') {
      t.match(r.stderr, j.row.why, label);
      return;
    }
    const doc = jsonOf(r);
    t.same(Object.keys(doc), ['error'], `${label}: an error document`);
    t.equal(doc.error.code === 'usage_error', j.row.status === 2, `${label}: ${doc.error.code} goes with exit ${j.row.status}`);
    t.match(doc.error.message, j.row.why, label);
    t.notOk(r.stderr.includes(doc.error.message), `${label}: the error is printed once`);
  });
  const byJob = (name: string, kind: 'ok' | 'fail') => results[jobs.findIndex((j) => j.name === name && j.kind === kind)]!;
  t.equal(jsonOf(byJob('topup', 'ok')).credited_ink, 150, 'the top-up was made');
  t.match(jsonOf(byJob('release', 'ok')), { request: heldRequest, released_ink: 40 });
  t.match(jsonOf(byJob('account create', 'ok')).id, /^usr_/);
  t.match(
    byJob('vendor list', 'ok').stderr,
    /http:\/\/127\.0\.0\.1:9\/readyz did not answer .*every state is unknown/,
    'an instance that does not answer is said, with why',
  );
});

t.test('ledger check exits 1 and names the broken rule when a balance disagrees with the journal', async (t) => {
  const a = await seedAccount(db.pool, { paygInk: 500 });
  const clean = await run('ledger', 'check', '--json');
  t.equal(clean.code, 0, clean.stderr);
  t.match(jsonOf(clean), { ok: true, violations: [] });
  // A wallet credited with 7 Ink the journal never recorded (the row's own CHECKs still pass).
  const credit = (ink: number) =>
    db.pool.query('UPDATE wallets SET payg_ink = payg_ink + $2, credited_ink = credited_ink + $2 WHERE account_id = $1', [a.accountId, ink]);
  await credit(7);
  t.teardown(() => credit(-7));
  const broken = await run('ledger', 'check');
  t.equal(broken.code, 1, 'a violation exits 1');
  t.match(broken.stdout, /^ok: false {2}rules: \d+ {2}violations: /);
  t.match(broken.stderr, /^inkgate: ledger check: \d+ rule\(s\) broken: .+\(1\)/);
  const brokenJson = await run('ledger', 'check', '--json');
  t.equal(brokenJson.code, 1);
  const doc = jsonOf(brokenJson);
  t.equal(doc.ok, false);
  t.ok(doc.violations.length >= 1, `${doc.violations.length} rule(s) broken`);
  t.ok(
    doc.violations.some((v: any) => v.rows.some((row: any) => row.account_id === a.accountId)),
    `a violation names the account: ${doc.violations.map((v: any) => v.rule).join('; ')}`,
  );
  t.ok(
    doc.violations.some((v: any) => v.rule === 'per wallet: the journal sums to the balances, column by column'),
    'the journal rule is among them',
  );
  for (const v of doc.violations) t.ok(broken.stderr.includes(v.rule), `stderr names "${v.rule}"`);
  t.equal(brokenJson.stderr, '', 'with --json the result is the whole report');
});

t.test('a failed migration exits 1', async (t) => {
  // A schema where the first migration cannot run: its first table is there already, in another shape.
  const schema = `${db.schema}_broken`;
  await db.pool.query(`CREATE SCHEMA ${schema}`);
  t.teardown(() => db.pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  await db.pool.query(`CREATE TABLE ${schema}.accounts (nothing int)`);
  const r = await spawnCli(cliEnvironment(schemaSettings(t, { url: db.url, schema })), ['migrate', '--json']);
  t.equal(r.code, 1, r.stdout);
  t.match(jsonOf(r), { error: { code: 'command_failed', message: /./ } });
});

t.test('without DATABASE_URL and without an embedded database, a command refuses and creates nothing', async (t) => {
  const empty = mkdtempSync(join(tmpdir(), 'inkgate-no-db-'));
  t.teardown(() => rmSync(empty, { recursive: true, force: true }));
  const dataDir = join(empty, 'data');
  const noDb = cliEnvironment({ INKGATE_DATA_DIR: dataDir });
  const r = await spawnCli(noDb, ['key', 'list'], empty);
  t.equal(r.code, 1);
  t.equal(r.stdout, '');
  t.equal(r.stderr.split('\n').length, 2, `one line: ${r.stderr}`);
  t.match(r.stderr, /^inkgate: no database: DATABASE_URL is not set and INKGATE_DATA_DIR \(.*\/data\) holds no embedded database/);
  const asJson = await spawnCli(noDb, ['key', 'list', '--json'], empty);
  t.equal(asJson.code, 1);
  t.equal(jsonOf(asJson).error.code, 'database_not_found');
  // Nothing was made: not the data dir, not a ./var beside it.
  t.same(readdirSync(empty), [], 'the directory stays empty');
  // A DATABASE_URL where nothing listens (port 1 on this machine): a failure of its own kind.
  const away = await spawnCli(
    cliEnvironment({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test', INKGATE_DATA_DIR: dataDir }),
    ['plan', 'list', '--json'],
    empty,
  );
  t.equal(away.code, 1);
  t.match(jsonOf(away), { error: { code: 'database_unreachable', message: /^cannot reach the database: / } });
});

t.test('console link says where its address came from: INKGATE_PUBLIC_URL, or the listen address as a guess', async (t) => {
  const a = await seedAccount(db.pool, { paygInk: 100 });
  const guessed = await spawnCli(cliEnvironment({ ...settings, INKGATE_PORT: '9123' }), ['console', 'link', '--account', a.accountId, '--json']);
  t.equal(guessed.code, 0, guessed.stderr);
  t.match(jsonOf(guessed).url, /^http:\/\/127\.0\.0\.1:9123\/console\/signin\?token=[A-Za-z0-9_-]{43}$/);
  t.equal(guessed.stderr, 'inkgate: using http://127.0.0.1:9123 from INKGATE_HOST/INKGATE_PORT (set INKGATE_PUBLIC_URL for the public address)\n');
  const configured = await spawnCli(cliEnvironment({ ...settings, INKGATE_PORT: '9123', INKGATE_PUBLIC_URL: 'https://gw.example.test/' }), [
    'console',
    'link',
    '--account',
    a.accountId,
  ]);
  t.equal(configured.code, 0, configured.stderr);
  t.match(configured.stdout, /^url: https:\/\/gw\.example\.test\/console\/signin\?token=[A-Za-z0-9_-]{43} {2}expires_at: /);
  t.equal(configured.stderr, 'inkgate: using INKGATE_PUBLIC_URL (https://gw.example.test)\n');
  const bad = await spawnCli(cliEnvironment({ ...settings, INKGATE_PUBLIC_URL: 'gw.example.test' }), ['console', 'link', '--account', a.accountId, '--json']);
  t.equal(bad.code, 1, 'a public URL that is not an http(s) URL stops the command');
  t.match(jsonOf(bad), { error: { code: 'configuration_error', message: /INKGATE_PUBLIC_URL/ } });
});

/** Runs `work` over `items`, at most `limit` at once; results in the items' order. */
async function inParallel<T, R>(limit: number, items: readonly T[], work: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await work(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
