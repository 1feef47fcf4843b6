// Postgres KILLED (SIGKILL to the postmaster and every backend, by pid) while the
// gateway serves, then restarted on the same data directory and port. Pausing is covered by
// soak.test.ts and store-faults-money.test.ts; this is the crash: every connection of the gateway's
// pool dies at once, nothing answers on the port, and the server comes back through crash recovery.
//   - Killed mid-request: a Messages stream and a non-stream request are at the vendor (holds taken,
//     the stream's vendor id on its record) when Postgres dies. The client still gets the vendor's
//     answer (stream: the content, then one final `usage_unknown` error; non-stream: 200 without
//     X-Service-Ink-Charged); the holds stay OPEN (never settled to 0 or to the hold) and carry the
//     vendor ids; the vendor's usage records settle each exactly once through reconciliation.
//   - While it is down: Messages requests (stream and non-stream) answer 503 within the configured
//     db timeouts, and the vendor is never called (no vendor call without a hold).
//   - Restarted: the gateway recovers by itself (no restart of the gateway, same pool); the next
//     request is served within 10 s of Postgres accepting connections again.
// The cluster is a private one (test/helpers/private-postgres-restart.ts): the shared server is
// never signalled. Ends with the ledger invariant.
import t from 'tap';
import { chargeForRecord } from '../../src/admin/ledger-commands.js';
import { loadConfig, type DeepPartial, type Config } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway } from '../../src/gateway.js';
import { textChargeInk } from '../../src/catalog/pricing.js';
import { createPool } from '../../src/store/pool.js';
import { silentLogger } from '../../src/util/log.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { fundedKey } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { assertUsageUnknownStream, keyRow, messagesProbe, requestRow, resolutions, textOf, walletRow } from '../helpers/messages-probe.js';
import { startRestartablePostgres } from '../helpers/private-postgres-restart.js';
import { parseSse } from '../helpers/sse.js';

const VENDOR_KEY = 'sk-ant-postgres-kill';
const FUNDS_INK = 20_000;
/** Per content delta (stream) or per output token before the body (non-stream): the vendor is still busy when we kill. */
const PACE_MS = 40;
const REPLY_TOKENS = 40;
const MODEL = 'assistant-sonnet-5';
const POLL_DEADLINE_MS = 5_000;
/** The issue: the gateway recovers by itself; we give it 10 s from Postgres accepting connections. */
const RECOVERY_DEADLINE_MS = 10_000;
/**
 * The usage_unknown mark that failed with the settle is retried in the background at 0.5, 2.5, 7.5
 * and 22.5 s (Ledger abandonRetryMs): the attempt after the restart may be the 22.5 s one.
 */
const MARK_DEADLINE_MS = 25_000;
/** Requests sent while Postgres is dead, alternating non-stream and stream. */
const DOWN_PROBES = 6;

/** Polls `probe` until it returns a value other than undefined, or fails at the deadline. */
async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, deadlineMs = POLL_DEADLINE_MS, everyMs = 20): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs)); // polling interval of a bounded wait, not a sleep standing in for sync
  }
}

const probe = messagesProbe({ label: 'postgres kill', vendorKey: VENDOR_KEY, paceMs: PACE_MS, replyTokens: REPLY_TOKENS });
const { send, vendorReference } = probe;
const messagesBody = probe.body;

t.test('Postgres killed (SIGKILL, whole cluster) and restarted: 503s while dead, open holds for what the vendor served, recovery by itself', async (t) => {
  // One teardown, in reverse order of start: the gateway and pools close while Postgres still runs.
  const closers: Array<() => Promise<unknown> | unknown> = [];
  t.teardown(async () => {
    for (const c of closers.reverse()) await c();
  });
  const pg = await startRestartablePostgres((m) => t.comment(m));
  closers.push(() => pg.stop());
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  closers.push(() => sim.close());
  const overrides: DeepPartial<Config> = {
    server: { port: 0, host: '127.0.0.1' },
    db: { url: pg.url, schema: 'public' },
    redis: { url: null },
    vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } },
    // The exact path: every hold a durable move of its own, as for a wallet near its edge. What a
    // key holding an Ink lease sees when Postgres goes away is escrow-faults.test.ts.
    ledger: { lease: { enabled: false } },
  };
  const config = loadConfig({}, overrides);
  const gw = await createGateway(config, { log: silentLogger }); // migrates the fresh cluster
  closers.push(() => gw.close());
  // The test's own view of the database: a separate pool, so the gateway's recovery is its own.
  const pool = createPool({ ...config.db, url: pg.url });
  closers.push(() => pool.end());
  await setLane(pool, 'messages', true);
  await gw.services.state.refresh();

  const funded = (name: string) => fundedKey(gw, name, FUNDS_INK);
  const ks = await funded('killed mid-stream');
  const kn = await funded('killed mid-body');
  const kp = await funded('probes while dead');

  // 1. Warm: one request succeeds (and the probe key is now in the instance's key cache, so the
  //    dead store is met by the reserve, the step before any vendor call).
  const warm = await send(gw.url, kp.key, messagesBody(false, 'warm', '[[sim:tokens=3]]'));
  t.equal(warm.status, 200, `a normal request first (${warm.text.slice(0, 120)})`);
  t.ok(Number(warm.headers['x-service-ink-charged']) > 0, 'and it is charged');
  const before = { stream: await walletRow(pool, ks.accountId), body: await walletRow(pool, kn.accountId), probe: await walletRow(pool, kp.accountId) };
  const probeRows0 = (await pool.query('SELECT count(*)::int AS n FROM requests WHERE account_id = $1', [kp.accountId])).rows[0].n;

  // 2. Two requests at the vendor, paced so it is still answering when Postgres dies.
  const calls0 = sim.requests.length;
  const streamP = send(gw.url, ks.key, messagesBody(true, 'mid-stream'));
  const bodyP = send(gw.url, kn.key, messagesBody(false, 'mid-body'));
  await until('both requests at the vendor', () => (sim.requests.length >= calls0 + 2 ? true : undefined));
  const streamVid = await until('the stream vendor id on its record', async () => {
    const { rows } = await pool.query(`SELECT vendor_request_id FROM requests WHERE account_id = $1 AND vendor_request_id IS NOT NULL`, [ks.accountId]);
    return rows[0]?.vendor_request_id as string | undefined;
  });
  const pidsBefore = pg.pids();
  const killed = await pg.kill();
  const killedAt = performance.now();
  t.comment(`SIGKILLed postmaster ${killed[0]} and ${killed.length - 1} backends: ${killed.join(' ')}`);
  t.ok(killed.length >= 2, 'the postmaster and at least one backend were killed');
  t.ok(
    pidsBefore.every((p) => killed.includes(p)),
    'every process of the cluster was killed',
  );
  t.same(pg.pids(), [], 'nothing of the cluster runs');
  const pending = sim.requests.slice(calls0).filter((q) => q.end === undefined).length;
  t.equal(pending, 2, 'both vendor replies were still running when Postgres died');

  // 3. While it is dead: 503 within the db timeouts, and no vendor call.
  const calls1 = sim.requests.length;
  const count1 = sim.requestCount;
  const budgetMs = config.db.connectionTimeoutMs + config.db.queryTimeoutMs + 300;
  const latencies: number[] = [];
  for (let i = 0; i < DOWN_PROBES; i++) {
    const stream = i % 2 === 1;
    const what = `${stream ? 'stream' : 'non-stream'} #${i + 1}`;
    const a = await send(gw.url, kp.key, messagesBody(stream, `dead-${i}`));
    latencies.push(a.elapsedMs);
    t.equal(a.status, 503, `${what}: 503 (${a.text.slice(0, 120)})`);
    t.equal(a.json?.error?.code, 'provider_unavailable', `${what}: provider_unavailable`);
    t.ok(Number(a.headers['retry-after']) >= 1, `${what}: Retry-After ${a.headers['retry-after']}`);
    t.ok(a.elapsedMs < budgetMs, `${what}: answered in ${a.elapsedMs.toFixed(0)} ms (budget ${budgetMs} ms)`);
  }
  t.equal(sim.requests.length, calls1, 'no vendor call without a hold (sim.requests unchanged)');
  t.equal(sim.requestCount, count1, 'no vendor call (total count unchanged)');
  t.same(pg.pids(), [], 'Postgres was dead for every probe');
  t.comment(
    `503 while dead: max ${Math.max(...latencies).toFixed(0)} ms, min ${Math.min(...latencies).toFixed(0)} ms over ${DOWN_PROBES} requests (budget ${budgetMs} ms)`,
  );

  // 4. The requests that were at the vendor: the client gets the vendor's answer.
  const [s, b] = await Promise.all([streamP, bodyP]);
  t.same(pg.pids(), [], 'both answers completed while Postgres was still dead');

  t.equal(s.status, 200, 'stream: 200');
  const streamReq = s.headers['x-service-request-id'] as string;
  t.match(streamReq, /^req_/, 'stream: X-Service-Request-Id');
  const evs = parseSse(s.text);
  assertUsageUnknownStream(t, evs, textOf((await vendorReference(sim, 'mid-stream')).content));
  const start = JSON.parse(evs.find((e) => e.event === 'message_start')!.data).message;
  const delta = JSON.parse(evs.find((e) => e.event === 'message_delta')!.data).usage;
  t.equal(start.id, streamVid, 'the vendor id on the record is the message id the vendor produced');

  const ref = await vendorReference(sim, 'mid-body');
  t.equal(b.status, 200, 'non-stream: 200');
  t.equal(b.headers['x-service-ink-charged'], undefined, 'non-stream: no X-Service-Ink-Charged (nothing was recorded)');
  const bodyReq = b.headers['x-service-request-id'] as string;
  t.match(bodyReq, /^req_/, 'non-stream: X-Service-Request-Id');
  t.equal(b.json?.model, MODEL, 'the product model id, as always');
  t.same(
    [textOf(b.json.content), b.json.stop_reason, b.json.usage],
    [textOf(ref.content), ref.stop_reason, ref.usage],
    'non-stream: content, stop reason and usage as the vendor gave them',
  );

  // 5. Restart on the same data directory and port; the gateway is left alone.
  const deadFor = performance.now() - killedAt;
  const r0 = performance.now();
  await pg.restart();
  const readyAt = performance.now();
  t.ok(pg.pid() > 0 && !killed.includes(pg.pid()), `a new postmaster (pid ${pg.pid()}) on the same port ${pg.port}`);
  let attempts = 0;
  const first = await until(
    'a request served after the restart',
    async () => {
      attempts++;
      const a = await send(gw.url, kp.key, messagesBody(false, `recovered-${attempts}`, '[[sim:tokens=3]]'));
      return a.status === 200 ? a : undefined;
    },
    RECOVERY_DEADLINE_MS,
    50,
  );
  const recoveryMs = performance.now() - readyAt;
  t.ok(Number(first.headers['x-service-ink-charged']) > 0, 'the first request after the restart is charged');
  t.ok(recoveryMs < RECOVERY_DEADLINE_MS, `recovered ${recoveryMs.toFixed(0)} ms after Postgres accepted connections (${attempts} attempt(s))`);
  t.comment(
    `dead for ${deadFor.toFixed(0)} ms; restart (crash recovery) took ${(readyAt - r0).toFixed(0)} ms; ` +
      `first 200 ${recoveryMs.toFixed(0)} ms after ready, ${(performance.now() - killedAt).toFixed(0)} ms after the kill`,
  );

  // 6. The holds of what the vendor served are open, nothing charged, and carry the vendor ids.
  //    The non-stream id reaches its hold only through the background usage_unknown retry.
  const holds: Record<string, number> = {};
  for (const [k, reqId, w0] of [
    [ks, streamReq, before.stream],
    [kn, bodyReq, before.body],
  ] as const) {
    const rec = await requestRow(pool, reqId);
    t.equal(rec.hold_state, 'open', `${reqId}: hold still open`);
    t.equal(rec.charged_ink, 0, 'never settled to 0 or to the hold: nothing charged');
    t.equal(await resolutions(pool, reqId), 0, 'no resolution row');
    t.ok(rec.hold_ink > 0, `hold ${rec.hold_ink} Ink`);
    t.same(await keyRow(pool, k.keyId), { ink_reserved: rec.hold_ink, ink_charged: 0 }, 'key.ink_reserved = the hold');
    const w = await walletRow(pool, k.accountId);
    t.same([w.balance, w.held, w.charged_ink], [w0.balance - rec.hold_ink, rec.hold_ink, 0], 'the wallet holds it, charges nothing');
    holds[reqId] = rec.hold_ink;
  }
  const m0 = performance.now();
  const marked = await until(
    'both holds marked usage_unknown with their vendor ids',
    async () => {
      const [sr, br] = [await requestRow(pool, streamReq), await requestRow(pool, bodyReq)];
      return sr.status === 'usage_unknown' && br.status === 'usage_unknown' && br.vendor_request_id !== null ? { sr, br } : undefined;
    },
    MARK_DEADLINE_MS,
    100,
  );
  t.comment(`usage_unknown marks landed ${(performance.now() - m0).toFixed(0)} ms after recovery`);
  t.equal(marked.sr.vendor_request_id, streamVid, 'stream: vendor id on the hold');
  t.equal(marked.br.vendor_request_id, b.json.id, "non-stream: the vendor's id reached the hold after the restart");
  t.same([marked.sr.hold_state, marked.br.hold_state], ['open', 'open'], 'still open: the mark moves no money');

  // The probes refused while Postgres was dead left nothing behind: no hold, no charge.
  const probeRows = (await pool.query('SELECT id, hold_state, charged_ink FROM requests WHERE account_id = $1 ORDER BY created_at', [kp.accountId])).rows;
  t.equal(probeRows.length, probeRows0 + 1, 'no request record from the refused probes (only the first request after recovery)');
  const pw = await walletRow(pool, kp.accountId);
  t.same([pw.held, pw.balance], [0, before.probe.balance - Number(first.headers['x-service-ink-charged'])], 'probe wallet: charged only for what was served');
  await assertLedgerInvariant(t, pool);

  // 7. Reconciliation from the vendor's usage records settles each hold exactly once.
  const usageOf = (u: any, out: number) => ({
    inputTokens: u.input_tokens,
    outputTokens: out,
    cacheReadTokens: u.cache_read_input_tokens ?? 0,
    cacheWriteTokens: u.cache_creation_input_tokens ?? 0,
  });
  const streamUsage = usageOf(start.usage, delta.output_tokens);
  const bodyUsage = usageOf(b.json.usage, b.json.usage.output_tokens);
  const streamCharge = textChargeInk(MODEL, streamUsage);
  const bodyCharge = textChargeInk(MODEL, bodyUsage);
  t.ok(streamCharge > 0 && streamCharge < holds[streamReq]!, `stream: a charge (${streamCharge}) that is neither 0 nor the hold`);
  t.ok(bodyCharge > 0 && bodyCharge < holds[bodyReq]!, `non-stream: a charge (${bodyCharge}) that is neither 0 nor the hold`);
  const records = [
    { vendorRequestId: streamVid, usage: streamUsage },
    { vendorRequestId: b.json.id as string, usage: bodyUsage },
  ];
  const opts = { olderThanMs: 0, chargeFor: chargeForRecord(gw.services.catalog) };
  const rec1 = await gw.services.ledger.reconcile(records, opts);
  t.equal(rec1.recordsRead, 2);
  t.equal(rec1.settled.count, 2, 'both holds settled from their records');
  const byReq = Object.fromEntries(rec1.settled.items.map((x: any) => [x.requestId, x]));
  t.same(
    byReq[streamReq],
    {
      requestId: streamReq,
      vendorRequestId: streamVid,
      holdInk: holds[streamReq],
      chargedInk: streamCharge,
      releasedInk: holds[streamReq]! - streamCharge,
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
      chargedInk: bodyCharge,
      releasedInk: holds[bodyReq]! - bodyCharge,
      expiredInk: 0,
    },
    `non-stream settled at the vendor's usage: ${bodyCharge} Ink`,
  );
  t.same(rec1.unmatched.items, [], 'every record matched its hold');
  t.same(rec1.stale.items, [], 'no hold left without a record');

  const journal = Number((await pool.query('SELECT count(*) FROM ledger_journal')).rows[0].count);
  const rec2 = await gw.services.ledger.reconcile(records, opts);
  t.equal(rec2.settled.count + rec2.released.count, 0, 'a second run resolves nothing');
  t.equal(Number((await pool.query('SELECT count(*) FROM ledger_journal')).rows[0].count), journal, 'no journal row added');
  t.equal(await resolutions(pool, streamReq), 1, 'stream: resolved exactly once');
  t.equal(await resolutions(pool, bodyReq), 1, 'non-stream: resolved exactly once');
  t.same(await keyRow(pool, ks.keyId), { ink_reserved: 0, ink_charged: streamCharge });
  t.same(await keyRow(pool, kn.keyId), { ink_reserved: 0, ink_charged: bodyCharge });
  t.equal((await walletRow(pool, ks.accountId)).balance, before.stream.balance - streamCharge, 'stream wallet: charged the vendor usage only');
  t.equal((await walletRow(pool, kn.accountId)).balance, before.body.balance - bodyCharge, 'non-stream wallet: charged the vendor usage only');
  await assertLedgerInvariant(t, pool);
});
