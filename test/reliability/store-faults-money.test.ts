// Faults on the stores, seen from the money side, on the exact path (every hold a durable move of its
// own, as for a wallet near its edge; a key holding an Ink lease is escrow-faults.test.ts): what a Postgres or Redis outage does to
// holds, charges and vendor calls on the text lanes (Messages, stream and non-stream).
//   1. Postgres frozen AFTER dispatch (the gateway's pool runs through a TCP proxy we freeze while
//      the vendor is still answering): the client still gets the vendor's answer (non-stream 200
//      without X-Service-Ink-Charged; stream: the content, then one final `usage_unknown` error),
//      the hold stays open (never settled to 0 or to the hold), and the vendor's usage record
//      settles it exactly once through reconciliation.
//   2. Postgres frozen BEFORE dispatch: 503 within the configured db timeouts, no vendor call,
//      no hold once Postgres answers again (a reserve whose outcome was unknown is cleaned up).
//   3. Redis paused (SIGSTOP on a private redis-server): 503 rate_limiter_unavailable within
//      300 ms, no vendor call, no hold, no balance change; after SIGCONT requests succeed again.
// The shared Postgres and Redis are never signalled: Postgres is frozen through the proxy, Redis is
// a private server this file spawns. Every case ends with the ledger invariant.
import t, { type Test } from 'tap';
import { chargeForRecord } from '../../src/admin/ledger-commands.js';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { textChargeInk } from '../../src/catalog/pricing.js';
import { silentLogger } from '../../src/util/log.js';
import { startAnthropicSimulator, type AnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { call, journalWritten, startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { assertUsageUnknownStream, keyRow, messagesProbe, requestRow, resolutions, textOf, walletRow } from '../helpers/messages-probe.js';
import { startPrivateRedis } from '../helpers/redis-server.js';
import { parseSse } from '../helpers/sse.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';

const VENDOR_KEY = 'sk-ant-store-faults';
const FUNDS_INK = 20_000;
/** Per content delta (stream) or per output token before the body (non-stream): the vendor is still busy when we freeze. */
const PACE_MS = 30;
const REPLY_TOKENS = 30;
/**
 * Redis down answers 503 at its command timeout (docs/api/rate-limits.md: within about 300 ms);
 * generous for a loaded machine, while a wait for Redis itself lasts the whole freeze.
 */
const REDIS_BUDGET_MS = 1_000;
const POLL_DEADLINE_MS = 5_000;
const MODEL = 'assistant-sonnet-5';

/** Polls `probe` until it returns a value other than undefined, or fails at the deadline. */
async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, deadlineMs = POLL_DEADLINE_MS): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20)); // polling interval of a bounded wait, not a sleep standing in for sync
  }
}

interface Rig {
  gw: Gateway;
  url: string;
  db: TestDb;
  sim: AnthropicSimulator;
  proxy: TcpProxy | undefined;
  config: Config;
}

async function startSim(t: Test): Promise<AnthropicSimulator> {
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  return sim;
}

/**
 * A real gateway whose Postgres pool goes through a TCP proxy (startTestGateway always points the
 * pool at the database itself, so it cannot be frozen from outside; this mirrors it otherwise).
 */
async function proxiedGateway(t: Test): Promise<Rig> {
  const sim = await startSim(t);
  const db = await testDb(t);
  const target = new URL(db.url);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
  t.teardown(() => proxy.close());
  const auth = target.password ? `${target.username}:${target.password}` : target.username;
  const viaProxy = `postgres://${auth}@127.0.0.1:${proxy.port}${target.pathname}`;
  const overrides: DeepPartial<Config> = {
    server: { port: 0, host: '127.0.0.1' },
    db: { url: viaProxy, schema: db.schema },
    redis: { url: null },
    vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } },
    ledger: { lease: { enabled: false } },
  };
  const config = loadConfig({}, overrides);
  const gw = await createGateway(config, { log: silentLogger, skipMigrate: true });
  t.teardown(() => gw.close());
  await setLane(db.pool, 'messages', true);
  await gw.services.state.refresh();
  return { gw, url: gw.url, db, sim, proxy, config };
}

async function fundedKey(r: Rig): Promise<{ accountId: string; keyId: string; key: string }> {
  const acc = await createAccount(r.db.pool, { name: 'store faults', planId: 'pro' });
  const k = await createKey(r.db.pool, { accountId: acc.id, name: 'store faults key' });
  await r.gw.services.ledger.topUp(acc.id, FUNDS_INK, 'store faults');
  return { accountId: acc.id, keyId: k.id, key: k.key };
}

const probe = messagesProbe({ label: 'store fault', vendorKey: VENDOR_KEY, paceMs: PACE_MS, replyTokens: REPLY_TOKENS });
const { send, vendorReference } = probe;
const messagesBody = probe.body;

const requestCount = async (db: TestDb, accountId: string): Promise<number> =>
  (await db.pool.query(`SELECT count(*)::int AS n FROM requests WHERE account_id = $1`, [accountId])).rows[0].n;
const openHolds = async (db: TestDb, accountId: string): Promise<number> =>
  (await db.pool.query(`SELECT count(*)::int AS n FROM requests WHERE account_id = $1 AND hold_state = 'open'`, [accountId])).rows[0].n;

/** Postgres answers the gateway again (its pool reconnects through the thawed proxy). */
async function recovered(r: Rig, key: string): Promise<void> {
  await until('the gateway to reach Postgres again', async () => ((await call(r.url, 'GET', '/v1/me', { key })).status === 200 ? true : undefined));
}

t.test('Postgres frozen after dispatch: the answer is delivered, the hold stays open, reconciliation settles it once', async (t) => {
  const r = await proxiedGateway(t);
  const ks = await fundedKey(r); // stream
  const kn = await fundedKey(r); // non-stream
  const before = { stream: await walletRow(r.db.pool, ks.accountId), body: await walletRow(r.db.pool, kn.accountId) };
  const calls0 = r.sim.requests.length;

  const streamP = send(r.url, ks.key, messagesBody(true, 'after-stream'));
  const bodyP = send(r.url, kn.key, messagesBody(false, 'after-body'));
  // Both requests reached the vendor (so both holds were taken), and the stream's vendor id is on
  // its record (written as soon as message_start passes): then Postgres stops answering, while the
  // vendor is still pacing its reply.
  await until('both requests at the vendor', () => (r.sim.requests.length >= calls0 + 2 ? true : undefined));
  const streamVid = await until('the stream vendor id on its record', async () => {
    const { rows } = await r.db.pool.query(`SELECT vendor_request_id FROM requests WHERE account_id = $1 AND vendor_request_id IS NOT NULL`, [ks.accountId]);
    return rows[0]?.vendor_request_id as string | undefined;
  });
  r.proxy!.freeze();
  const pending = r.sim.requests.slice(calls0).filter((q) => q.end === undefined).length;
  t.equal(pending, 2, 'both vendor replies were still running when Postgres froze');

  const [s, b] = await Promise.all([streamP, bodyP]);
  // The answers arrived while Postgres was still frozen: both ledger moves (settle, then
  // markUsageUnknown) had already failed by then, because the answer is sent after them.
  r.proxy!.cut(); // the frozen bytes (the settle, the mark) are dropped, as if Postgres restarted
  r.proxy!.thaw();

  // Non-stream: 200, the vendor's answer intact, no charge header.
  const ref = await vendorReference(r.sim, 'after-body');
  t.equal(b.status, 200, 'non-stream: 200');
  t.equal(b.headers['x-service-ink-charged'], undefined, 'non-stream: no X-Service-Ink-Charged (nothing was recorded)');
  const bodyReq = b.headers['x-service-request-id'] as string;
  t.match(bodyReq, /^req_/, 'non-stream: X-Service-Request-Id');
  t.equal(b.json?.model, MODEL, 'the product model id, as always');
  t.match(b.json?.id, /^msg_/);
  t.same(
    [textOf(b.json.content), b.json.stop_reason, b.json.usage],
    [textOf(ref.content), ref.stop_reason, ref.usage],
    'non-stream: content, stop reason and usage as the vendor gave them',
  );

  // Stream: the whole content, message_stop, then exactly one final error event usage_unknown.
  t.equal(s.status, 200, 'stream: 200');
  const streamReq = s.headers['x-service-request-id'] as string;
  const evs = parseSse(s.text);
  assertUsageUnknownStream(t, evs, textOf((await vendorReference(r.sim, 'after-stream')).content));
  const start = JSON.parse(evs.find((e) => e.event === 'message_start')!.data).message;
  const delta = JSON.parse(evs.find((e) => e.event === 'message_delta')!.data).usage;
  t.equal(start.id, streamVid, 'the vendor id on the record is the message id the vendor produced');

  // After Postgres is back: both holds open, nothing charged, visible as key.ink_reserved.
  await recovered(r, ks.key);
  const holds: Record<string, number> = {};
  for (const [k, reqId, w0] of [
    [ks, streamReq, before.stream],
    [kn, bodyReq, before.body],
  ] as const) {
    const rec = await requestRow(r.db.pool, reqId);
    t.equal(rec.hold_state, 'open', `${reqId}: hold still open`);
    t.equal(rec.charged_ink, 0, 'never settled to 0 or to the hold: nothing charged');
    t.equal(await resolutions(r.db.pool, reqId), 0, 'no resolution row');
    t.ok(rec.hold_ink > 0, `hold ${rec.hold_ink} Ink`);
    const me = (await call(r.url, 'GET', '/v1/me', { key: k.key })).json;
    t.same([me.key.ink_reserved, me.key.ink_charged], [rec.hold_ink, 0], 'key.ink_reserved = the hold (on /v1/me)');
    t.same(await keyRow(r.db.pool, k.keyId), { ink_reserved: rec.hold_ink, ink_charged: 0 });
    const w = await walletRow(r.db.pool, k.accountId);
    t.same([w.balance, w.held, w.charged_ink], [w0.balance - rec.hold_ink, rec.hold_ink, 0], 'the wallet holds it, charges nothing');
    holds[reqId] = rec.hold_ink;
  }
  // The usage_unknown mark failed with the settle, and is retried in the background
  // (Ledger.markUsageUnknownEventually): once Postgres is back, both holds carry their vendor id.
  const deadline = Date.now() + 15_000;
  let bodyRec = await requestRow(r.db.pool, bodyReq);
  while ((bodyRec.status !== 'usage_unknown' || (await requestRow(r.db.pool, streamReq)).status !== 'usage_unknown') && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 100));
    bodyRec = await requestRow(r.db.pool, bodyReq);
  }
  t.equal(bodyRec.status, 'usage_unknown', 'non-stream: marked usage_unknown once Postgres answered again');
  t.equal(bodyRec.vendor_request_id, b.json.id, "non-stream: the vendor's id reached the hold");
  t.equal(bodyRec.hold_state, 'open', 'still open: the mark moves no money');
  t.equal((await requestRow(r.db.pool, streamReq)).vendor_request_id, streamVid, 'stream: vendor id on the hold');
  await assertLedgerInvariant(t, r.db.pool);

  // Reconciliation from the vendor's usage records (what its usage export would carry).
  const usageOf = (u: any, out: number) => ({
    inputTokens: u.input_tokens,
    outputTokens: out,
    cacheReadTokens: u.cache_read_input_tokens ?? 0,
    cacheWriteTokens: u.cache_creation_input_tokens ?? 0,
  });
  const streamUsage = usageOf(start.usage, delta.output_tokens);
  const streamCharge = textChargeInk(MODEL, streamUsage);
  const records = [
    { vendorRequestId: streamVid, usage: streamUsage },
    { vendorRequestId: b.json.id as string, usage: usageOf(b.json.usage, b.json.usage.output_tokens) },
  ];
  const opts = { olderThanMs: 0, chargeFor: chargeForRecord(r.gw.services.catalog) };
  const first = await r.gw.services.ledger.reconcile(records, opts);
  t.equal(first.recordsRead, 2);
  const bodyUsage = usageOf(b.json.usage, b.json.usage.output_tokens);
  const bodyCharge = textChargeInk(MODEL, bodyUsage);
  t.equal(first.settled.count, 2, 'both holds settled from their records');
  const byReq = Object.fromEntries(first.settled.items.map((x: any) => [x.requestId, x]));
  t.same(
    byReq[streamReq],
    {
      requestId: streamReq,
      vendorRequestId: streamVid,
      holdInk: holds[streamReq],
      chargedInk: Math.min(streamCharge, holds[streamReq]!),
      releasedInk: holds[streamReq]! - Math.min(streamCharge, holds[streamReq]!),
      expiredInk: 0,
    },
    `stream settled at the vendor's usage: ${streamCharge} Ink`,
  );
  t.same(
    byReq[bodyReq],
    {
      requestId: bodyReq,
      vendorRequestId: b.json.id,
      holdInk: holds[bodyReq],
      chargedInk: Math.min(bodyCharge, holds[bodyReq]!),
      releasedInk: holds[bodyReq]! - Math.min(bodyCharge, holds[bodyReq]!),
      expiredInk: 0,
    },
    `non-stream settled at the vendor's usage: ${bodyCharge} Ink`,
  );
  t.ok(streamCharge > 0 && streamCharge < holds[streamReq]!, 'a charge that is neither 0 nor the hold');
  t.ok(bodyCharge > 0 && bodyCharge < holds[bodyReq]!, 'a charge that is neither 0 nor the hold');
  t.same(first.unmatched.items, [], 'every record matched its hold');
  t.same(first.stale.items, [], 'no hold left without a record');

  // A second run changes nothing: exactly once.
  const journal = Number((await r.db.pool.query('SELECT count(*) FROM ledger_journal')).rows[0].count);
  const second = await r.gw.services.ledger.reconcile(records, opts);
  t.equal(second.settled.count + second.released.count, 0, 'the second run resolves nothing');
  t.equal(Number((await r.db.pool.query('SELECT count(*) FROM ledger_journal')).rows[0].count), journal, 'no journal row added');

  t.equal(await resolutions(r.db.pool, streamReq), 1, 'stream: resolved exactly once');
  t.equal(await resolutions(r.db.pool, bodyReq), 1, 'non-stream: resolved exactly once');
  t.same(await keyRow(r.db.pool, ks.keyId), { ink_reserved: 0, ink_charged: streamCharge });
  t.same(await keyRow(r.db.pool, kn.keyId), { ink_reserved: 0, ink_charged: Math.min(bodyCharge, holds[bodyReq]!) });
  t.same((await walletRow(r.db.pool, ks.accountId)).balance, before.stream.balance - streamCharge, 'stream wallet: charged the vendor usage only');
  t.same(
    (await walletRow(r.db.pool, kn.accountId)).balance,
    before.body.balance - Math.min(bodyCharge, holds[bodyReq]!),
    'non-stream wallet: charged the vendor usage only',
  );
  await assertLedgerInvariant(t, r.db.pool);
});

t.test('Postgres frozen before dispatch: 503 within the db timeouts, no vendor call, no hold', async (t) => {
  const r = await proxiedGateway(t);
  const k = await fundedKey(r);
  // One request first: the key is now in the instance's key cache, so the frozen store is met by
  // the reserve (the step that must come before any vendor call), not by authentication.
  const warm = await send(r.url, k.key, messagesBody(false, 'warm', '[[sim:tokens=3]]'));
  t.equal(warm.status, 200, 'a normal request first');
  const w0 = await walletRow(r.db.pool, k.accountId);
  const rows0 = await requestCount(r.db, k.accountId);
  const calls0 = r.sim.requests.length;
  const budgetMs = r.config.db.queryTimeoutMs + r.config.db.connectionTimeoutMs + 300;

  r.proxy!.freeze();
  const answers = await Promise.all([send(r.url, k.key, messagesBody(false, 'before-body')), send(r.url, k.key, messagesBody(true, 'before-stream'))]);
  for (const [a, what] of [
    [answers[0], 'non-stream'],
    [answers[1], 'stream'],
  ] as const) {
    t.equal(a.status, 503, `${what}: 503 (${a.text.slice(0, 120)})`);
    t.equal(a.json?.error?.code, 'provider_unavailable', `${what}: provider_unavailable`);
    t.ok(Number(a.headers['retry-after']) >= 1, `${what}: Retry-After`);
    t.ok(a.elapsedMs < budgetMs, `${what}: answered in ${a.elapsedMs.toFixed(0)} ms (query timeout ${r.config.db.queryTimeoutMs} ms, budget ${budgetMs} ms)`);
  }
  t.equal(r.sim.requests.length, calls0, 'no vendor call without a hold');

  // Postgres comes back with the frozen bytes (a reserve that may still commit) delivered: the
  // ledger's clean-up must void or release whatever it left. No request may end up holding Ink.
  r.proxy!.thaw();
  await recovered(r, k.key);
  await until(
    'no open hold and the wallet back where it was',
    async () => {
      const w = await walletRow(r.db.pool, k.accountId);
      return (await openHolds(r.db, k.accountId)) === 0 && w.held === 0 ? true : undefined;
    },
    20_000,
  );
  const after = (await r.db.pool.query(`SELECT id, hold_state, charged_ink FROM requests WHERE account_id = $1 ORDER BY created_at`, [k.accountId])).rows;
  t.comment(`request rows after the outage: ${JSON.stringify(after.slice(rows0))}`);
  // A reserve that reached Postgres only after the thaw is released by the ledger's clean-up; one
  // the clean-up got to first is void; one never sent left no row at all.
  for (const row of after.slice(rows0)) {
    t.ok(row.hold_state === 'released' || row.hold_state === 'void', `${row.id}: ${row.hold_state}, never settled for a refused request`);
    t.equal(row.charged_ink, 0, `${row.id}: nothing charged`);
  }
  t.same(await walletRow(r.db.pool, k.accountId), w0, 'no balance change');
  t.same(await keyRow(r.db.pool, k.keyId), { ink_reserved: 0, ink_charged: w0.charged_ink });
  t.equal(r.sim.requests.length, calls0, 'still no vendor call');
  const next = await send(r.url, k.key, messagesBody(false, 'after-thaw', '[[sim:tokens=3]]'));
  t.equal(next.status, 200, 'requests succeed again');
  t.ok(Number(next.headers['x-service-ink-charged']) > 0, 'and are charged');
  await assertLedgerInvariant(t, r.db.pool);
});

t.test('Redis paused (SIGSTOP): 503 rate_limiter_unavailable at the command timeout, no vendor call, no hold; SIGCONT recovers', async (t) => {
  const redis = await startPrivateRedis();
  t.teardown(() => redis.stop());
  const sim = await startSim(t);
  const g = await startTestGateway(t, {
    redis: { url: redis.url },
    vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } },
  });
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const r: Rig = { gw: g.gw, url: g.url, db: g.db, sim, proxy: undefined, config: g.config };
  const k = await fundedKey(r);
  const warm = await send(r.url, k.key, messagesBody(false, 'warm', '[[sim:tokens=3]]'));
  t.equal(warm.status, 200, 'a normal request first (Redis up)');
  await journalWritten(g); // the warm request's record, written behind, is in before the baseline is read
  const w0 = await walletRow(r.db.pool, k.accountId);
  const rows0 = await requestCount(r.db, k.accountId);
  const calls0 = sim.requests.length;

  redis.pause();
  try {
    for (const stream of [false, true, false, true]) {
      const a = await send(r.url, k.key, messagesBody(stream, 'paused'));
      const what = stream ? 'stream' : 'non-stream';
      t.equal(a.status, 503, `${what}: 503`);
      t.equal(a.json?.error?.code, 'rate_limiter_unavailable', `${what}: rate_limiter_unavailable`);
      t.equal(a.headers['retry-after'], '5', `${what}: Retry-After 5`);
      t.ok(a.elapsedMs < REDIS_BUDGET_MS, `${what}: answered in ${a.elapsedMs.toFixed(0)} ms (< ${REDIS_BUDGET_MS} ms)`);
    }
    t.equal(sim.requests.length, calls0, 'no vendor call while Redis is paused');
    t.equal(await requestCount(r.db, k.accountId), rows0, 'no request record, so no hold');
    t.same(await walletRow(r.db.pool, k.accountId), w0, 'no balance change');
  } finally {
    redis.resume();
  }
  const next = await send(r.url, k.key, messagesBody(false, 'resumed', '[[sim:tokens=3]]'));
  t.equal(next.status, 200, `the next request after SIGCONT succeeds (${next.text.slice(0, 120)})`);
  t.ok(Number(next.headers['x-service-ink-charged']) > 0, 'and is charged');
  t.equal(sim.requests.length, calls0 + 1, 'one vendor call: that request');
  t.equal(await openHolds(r.db, k.accountId), 0, 'no hold left');
  await assertLedgerInvariant(t, r.db.pool);
});
