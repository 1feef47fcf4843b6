// The ledger's operator commands, run the way the CLI runs them (a context with pool, ledger,
// config and catalogue), against the real Postgres.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { AdminContext } from '../../src/admin/command.js';
import { ledgerCommands, usdToInk } from '../../src/admin/ledger-commands.js';
import { loadCatalog } from '../../src/catalog/models.js';
import { loadConfig } from '../../src/config/config.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { parseUsageLine } from '../../src/ledger/reconcile-file.js';
import { testDb } from '../helpers/db.js';
import { assertLedgerInvariant, newRequestId, seedAccount, walletOf } from '../helpers/ledger-invariant.js';

const db = await testDb(t);
const pool = db.pool;
const ledger = new Ledger(pool);
const ctx: AdminContext = { pool, ledger, config: loadConfig({}, { db: { schema: db.schema } }), catalog: () => loadCatalog() };
const dir = mkdtempSync(join(tmpdir(), 'inkgate-ledger-admin-'));
t.teardown(async () => {
  await ledger.close();
  rmSync(dir, { recursive: true, force: true });
});

const run = (name: string, flags: Record<string, string | true>, positional: string[] = []) => ledgerCommands[name]!.run({ flags, positional }, ctx);

t.test('USD to Ink is exact, whole cents only', async (t) => {
  t.equal(usdToInk('12.34'), 1234);
  t.equal(usdToInk('5'), 500);
  t.equal(usdToInk('0.5'), 50);
  t.equal(usdToInk('0.01'), 1);
  t.equal(usdToInk('19.99'), 1999);
  t.throws(() => usdToInk('1.005'), /fraction of an Ink/);
  t.throws(() => usdToInk('0'), /at least 0.01/);
  t.throws(() => usdToInk('-3'), /at most two decimals/);
  t.throws(() => usdToInk('1e3'), /at most two decimals/);
  t.throws(() => usdToInk('2000000'), /at most 1000000/);
});

t.test('topup, grant, roll-period and requests', async (t) => {
  const a = await seedAccount(pool, { plan: 'starter' });
  t.same(await run('topup', { account: a.accountId, usd: '12.34' }), {
    credited_ink: 1234,
    account: a.accountId,
    balance_ink: 1234,
    period_grant_remaining_ink: 0,
    payg_ink: 1234,
    held_ink: 0,
    topups_completed: 1,
  });
  await t.rejects(run('topup', { account: a.accountId, usd: '1.005' }), /fraction of an Ink/);
  await t.rejects(run('topup', { account: 'usr_nobody', usd: '1' }), /unknown account/);
  await t.rejects(run('topup', { usd: '1' }), /--account is required/);
  t.match(await run('grant', { account: a.accountId, ink: '300' }), { granted_ink: 300, balance_ink: 1534, period_grant_remaining_ink: 300 });
  await t.rejects(run('grant', { account: a.accountId, ink: '2.5' }), /whole number/);
  t.match(await run('roll-period', { account: a.accountId }), { expired_ink: 300, period_grant_ink: 1000, period_grant_remaining_ink: 1000, payg_ink: 1234 });

  const id = newRequestId();
  await ledger.reserve({ requestId: id, accountId: a.accountId, keyId: a.keyIds[0]!, product: 'video', model: 'clip-2.5', holdInk: 284 });
  await ledger.settle(id, 230, { usage: { seconds: 4 } });
  const list = (await run('requests', { account: a.accountId, limit: '5' })) as Array<Record<string, unknown>>;
  t.equal(list.length, 1);
  t.match(list[0], { id, product: 'video', status: 'settled', hold_ink: 284, hold_grant_ink: 284, charged_ink: 230, usage: { seconds: 4 } });
  await t.rejects(run('requests', { account: a.accountId, limit: '0' }), /--limit/);
  await assertLedgerInvariant(t, pool);
});

t.test('the usage file format: known fields only, whole numbers', async (t) => {
  t.same(parseUsageLine('{"vendor_request_id":"msg_1","input_tokens":10,"output_tokens":0}'), {
    vendorRequestId: 'msg_1',
    usage: { inputTokens: 10, outputTokens: 0 },
  });
  t.same(parseUsageLine('{"vendor_request_id":"cgt_1","charge_ink":115}'), { vendorRequestId: 'cgt_1', chargeInk: 115 });
  t.throws(() => parseUsageLine('{"vendor_request_id":"x","input_token":1}'), /unknown field "input_token"/);
  t.throws(() => parseUsageLine('{"vendor_request_id":"x","charge_ink":1.5}'), /whole number/);
  t.throws(() => parseUsageLine('{"input_tokens":1}'), /vendor_request_id/);
  t.throws(() => parseUsageLine('[1]'), /JSON object/);
  t.throws(() => parseUsageLine('{'), /not valid JSON/);
});

t.test('reconcile prices token records at the request model, takes charge_ink as given, and refuses a bad file whole', async (t) => {
  const a = await seedAccount(pool, { paygInk: 5000 });
  const mk = async (product: 'messages' | 'video', model: string, hold: number, vid: string) => {
    const id = newRequestId();
    await ledger.reserve({ requestId: id, accountId: a.accountId, keyId: a.keyIds[0]!, product, model, holdInk: hold });
    await ledger.markUsageUnknown(id, { vendorRequestId: vid });
    return id;
  };
  const opus = await mk('messages', 'assistant-opus-5', 100, 'msg_opus');
  const sonnet = await mk('messages', 'assistant-sonnet-5', 100, 'msg_sonnet');
  const clip = await mk('video', 'clip-2.5', 284, 'cgt_clip');
  const noPrice = await mk('video', 'clip-2.5', 52, 'cgt_noprice');
  const before = await walletOf(pool, a.accountId);

  const bad = join(dir, 'bad.jsonl');
  writeFileSync(bad, '{"vendor_request_id":"msg_opus","input_tokens":10000,"output_tokens":2000}\n{"vendor_request_id":"cgt_clip","charge_inc":5}\n');
  await t.rejects(run('reconcile', { file: bad }), /bad\.jsonl:2: unknown field "charge_inc"/);
  t.same(await walletOf(pool, a.accountId), before, 'nothing touched');
  await t.rejects(run('reconcile', { file: join(dir, 'missing.jsonl') }), /no such file/);

  const good = join(dir, 'good.jsonl');
  writeFileSync(
    good,
    [
      // The published worked checks (docs/api/billing.md): 10,000 input + 2,000 output is 11 Ink on opus, 5 on sonnet.
      '{"vendor_request_id":"msg_opus","input_tokens":10000,"output_tokens":2000}',
      '',
      '{"vendor_request_id":"msg_sonnet","input_tokens":10000,"output_tokens":2000,"cache_read_tokens":0}',
      '{"vendor_request_id":"cgt_clip","charge_ink":230}',
      '{"vendor_request_id":"cgt_noprice","input_tokens":1,"output_tokens":1}',
      '{"vendor_request_id":"msg_elsewhere","charge_ink":3}',
    ].join('\n') + '\n',
  );
  const report = (await run('reconcile', { file: good, 'older-than-s': '3600' })) as ReturnType<
    typeof import('../../src/admin/ledger-commands.js').reconcileReportJson
  >;
  t.equal(report.records_read, 5);
  t.same(
    report.settled.items.map((s) => [s.request_id, s.charged_ink, s.released_ink]).sort(),
    [
      [opus, 11, 89],
      [sonnet, 5, 95],
      [clip, 230, 54],
    ].sort(),
  );
  t.same(report.skipped.items, [{ vendor_request_id: 'cgt_noprice', request_id: noPrice, reason: 'a video record needs charge_ink' }]);
  t.same(report.unmatched.items, [{ vendor_request_id: 'msg_elsewhere', reason: 'no_request' }]);
  t.match(await walletOf(pool, a.accountId), { charged_ink: 246, held_payg_ink: 52 });

  // The hold nobody could price: an operator releases it.
  t.same(await run('release', { request: noPrice, reason: 'vendor confirms it never ran' }), { request: noPrice, released_ink: 52, expired_ink: 0 });
  await t.rejects(run('release', { request: noPrice }), /already resolved/);
  await t.rejects(run('release', { request: newRequestId() }), /no such request/);
  await assertLedgerInvariant(t, pool);
});
