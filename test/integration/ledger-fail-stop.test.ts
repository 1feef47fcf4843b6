// Fail-stop on a broken money rule, on a real gateway under streaming load. A test-only fault
// (GatewayOptions.ledgerFaults, code-only) makes the lease disagree with the hold about what one
// end gives back, on the N-th end: the lease's precondition throws LedgerAssertionError before
// anything moves. Then:
//   - the instance stops admitting: 503 provider_unavailable with Retry-After, on text and on a
//     generation submit, and its readiness fails;
//   - the violation is logged at fatal level with its figures;
//   - the injected exit is called once, with a non-zero code, after the known-good journal is
//     written; the instance's leases are NOT returned (still live in Postgres);
//   - a restart under the same instance id recovers them; the ledger checker finds nothing wrong;
//     no request is charged twice or above its hold, every charge a client was told is the charge
//     recorded, and the request that broke is left open for reconciliation, never charged.
import t from 'tap';
import { loadConfig, type Config } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { FAIL_STOP_EXIT_CODE } from '../../src/ledger/fail-stop.js';
import { checkLedger } from '../../src/ledger/invariant.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { silentLogger } from '../../src/util/log.js';
import { testDb } from '../helpers/db.js';
import { call, fundedKey } from '../helpers/gateway.js';
import { recordingLogger } from '../helpers/log-lines.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { messagesProbe } from '../helpers/messages-probe.js';
import { parseSse } from '../helpers/sse.js';
import { upgradeAnswer } from '../helpers/responses-ws.js';

const VENDOR_KEY = 'sk-ant-fail-stop';
const INSTANCE_ID = 'fail-stop-a';
/** Concurrent clients, each sending streams one after another until the instance refuses. */
const LOOPS = 6;
/** The end that breaks (ends before it are known good and must be billed as told). */
const BREAK_AT_END = 25;
/** Each loop's bound: it stops by itself after this many requests. */
const MAX_PER_LOOP = 200;

const db = await testDb(t);
const anthropic = await startAnthropicSimulator({ apiKey: VENDOR_KEY, maxRecordedRequests: 0 });
t.teardown(() => anthropic.close());
await setLane(db.pool, 'messages', true);
const config: Config = loadConfig(
  {},
  {
    server: { host: '127.0.0.1', port: 0 },
    db: { url: db.url, schema: db.schema },
    redis: { url: null },
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: VENDOR_KEY } },
    ledger: { instanceId: INSTANCE_ID },
  },
);

/** A logger that keeps the error and fatal lines (the fail-stop's report). */
const { log, lines: errors } = recordingLogger('error');

let ends = 0;
let broken: string | undefined;
const exits: number[] = [];
let exited!: () => void;
const exitCalled = new Promise<void>((r) => (exited = r));
const gw1: Gateway = await createGateway(config, {
  log,
  skipMigrate: true,
  exit: (code) => {
    exits.push(code);
    exited();
  },
  ledgerFaults: {
    skewLeaseCharge: (requestId, chargeInk) => {
      if (++ends !== BREAK_AT_END) return undefined;
      broken = requestId;
      return chargeInk + 1; // the lease would give back one Ink less than the hold releases
    },
  },
});
t.teardown(() => gw1.close());
const epoch1 = gw1.services.escrow.currentEpoch;
const account = await fundedKey(gw1, 'fail stop', 10_000_000);
const probe = messagesProbe({ label: 'fail stop', vendorKey: VENDOR_KEY, paceMs: 3, replyTokens: 6 });

interface Outcome {
  readonly status: number;
  readonly code: string | undefined;
  readonly retryAfter: string | undefined;
  readonly requestId: string | undefined;
  /** The service.usage frame's ink_charged, when the stream ended with one. */
  readonly charged: number | undefined;
}

async function stream(url: string, tag: string): Promise<Outcome> {
  let r: Awaited<ReturnType<typeof probe.send>>;
  try {
    r = await probe.send(url, account.key, probe.body(true, tag));
  } catch {
    // The stream whose end broke the rule is cut (no billing answer is given for it).
    return { status: 0, code: 'cut', retryAfter: undefined, requestId: undefined, charged: undefined };
  }
  const requestId = r.headers['x-service-request-id'] as string | undefined;
  const retryAfter = r.headers['retry-after'] as string | undefined;
  if (r.status !== 200) return { status: r.status, code: r.json?.error?.code ?? r.json?.error?.type, retryAfter, requestId, charged: undefined };
  const last = parseSse(r.text).at(-1);
  const charged = last?.event === 'service.usage' ? Number(JSON.parse(last.data).ink_charged) : undefined;
  return { status: 200, code: undefined, retryAfter, requestId, charged };
}

const outcomes: Outcome[] = [];
await Promise.all(
  Array.from({ length: LOOPS }, async (_, loop) => {
    for (let i = 0; i < MAX_PER_LOOP; i++) {
      const o = await stream(gw1.url, `loop ${loop} #${i}`);
      outcomes.push(o);
      if (o.status === 503) return;
    }
  }),
);
await exitCalled;
await gw1.services.failStop!.finished;

t.test('the instance stops on the broken rule and exits non-zero', async (t) => {
  t.ok(broken, 'the fault broke one end');
  t.same(exits, [FAIL_STOP_EXIT_CODE], 'exit called once, non-zero');
  t.ok(gw1.services.failStop!.stopped);
  t.ok(gw1.services.escrow.isHalted, 'the escrow halted');
  t.ok(outcomes.length < LOOPS * MAX_PER_LOOP, 'the load stopped because the instance refused');
  const refused = outcomes.filter((o) => o.status === 503);
  t.equal(refused.length, LOOPS, 'every client loop met a refusal');
  for (const o of refused) {
    t.equal(o.code, 'provider_unavailable');
    t.ok(Number(o.retryAfter) >= 1, 'with Retry-After');
  }
  const after = await stream(gw1.url, 'after the stop');
  t.match(after, { status: 503, code: 'provider_unavailable' }, 'a new text request is refused');
  t.ok(Number(after.retryAfter) >= 1);
  const video = await call(gw1.url, 'POST', '/v1/video/generations', { key: account.key, body: { model: 'veo-fast', prompt: 'a cat' } });
  t.equal(video.status, 503, 'a generation submit is refused too');
  t.equal(video.json?.error?.code ?? video.json?.error?.type, 'provider_unavailable');
  const socket = await upgradeAnswer(gw1.url, account.key);
  t.equal(socket.status, 503, 'a Responses WebSocket is not opened');
  t.equal(socket.json?.error?.code, 'provider_unavailable');
  t.match(socket.json?.error?.message, /internal ledger fault/, "the fail-stop's answer");
  t.match(await gw1.ops.readiness.check(), { ready: false, draining: true }, 'readiness fails');
  const line = errors.find((e) => e.msg === 'ledger.fail_stop');
  t.ok(line, 'the violation is logged');
  t.match(line, { level: 'fatal', component: 'fail_stop' }, 'at fatal level (docs/operations.md#logs), from the fail-stop');
  t.match(
    line,
    { figures: { request_id: broken, lease_id: Number, expect_grant_ink: Number, expect_payg_ink: Number, charge_ink: Number } },
    'with its figures',
  );
  const live = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM leases WHERE state = 'live' AND instance_id = $1 AND epoch = $2`, [
    INSTANCE_ID,
    epoch1,
  ]);
  t.ok(live.rows[0]!.n >= 1, 'its leases were not returned');
});

t.test('a restart recovers the leases; nothing charged twice or above its hold', async (t) => {
  await gw1.close(); // what a kill would leave: the halted escrow returns nothing
  const gw2 = await createGateway(config, { log: silentLogger, skipMigrate: true, exit: (code) => t.fail(`the restart exited ${code}`) });
  t.teardown(() => gw2.close());
  const live = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM leases WHERE state = 'live' AND instance_id = $1 AND epoch = $2`, [
    INSTANCE_ID,
    epoch1,
  ]);
  t.equal(live.rows[0]!.n, 0, 'the restart recovered every lease of the stopped start');
  t.same(await checkLedger(db.pool), [], 'the ledger checker finds no violation');
  await assertLedgerInvariant(t, db.pool);

  const told = outcomes.filter((o) => o.charged !== undefined);
  t.equal(told.length, BREAK_AT_END - 1, 'every end before the broken one was told its charge, none after');
  const rows = await db.pool.query<{ id: string; status: string; hold_state: string; hold_ink: string; charged_ink: string }>(
    'SELECT id, status, hold_state, hold_ink, charged_ink FROM requests WHERE account_id = $1',
    [account.accountId],
  );
  const byId = new Map(rows.rows.map((r) => [r.id, r]));
  for (const r of rows.rows) t.ok(Number(r.charged_ink) <= Number(r.hold_ink), `${r.id}: charged ${r.charged_ink} within its hold ${r.hold_ink}`);
  const resolutions = await db.pool.query<{ request_id: string; n: number }>(
    `SELECT request_id, count(*)::int AS n FROM ledger_journal WHERE request_id = ANY($1) AND kind IN ('settle', 'release', 'refund', 'reconcile') GROUP BY request_id HAVING count(*) > 1`,
    [rows.rows.map((r) => r.id)],
  );
  t.same(resolutions.rows, [], 'no request resolved twice');
  for (const o of told) {
    const row = byId.get(o.requestId!);
    t.ok(row, `${o.requestId}: its record was written`);
    t.match(row, { hold_state: 'settled', charged_ink: String(o.charged) }, `${o.requestId}: settled at what the client was told`);
  }
  const b = byId.get(broken!);
  t.ok(
    b === undefined || (b.hold_state === 'open' && Number(b.charged_ink) === 0),
    'the request that broke is not charged (open for reconciliation, or never written)',
  );

  const again = await stream(gw2.url, 'after the restart');
  t.equal(again.status, 200, 'the restarted instance serves');
  t.ok(again.charged !== undefined);
});
