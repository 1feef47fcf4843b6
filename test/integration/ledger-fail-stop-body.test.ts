// Fail-stop on a non-streaming text request: the settle of a body answer meets a broken money rule
// (a test-only fault makes the lease disagree with the hold about what the end gives back, the
// first end). The request must not get a generic 500: the rule reaches the fail-stop (the instance
// stops: readiness fails, exit 70 after the halt) and the client gets the fail-stop's own answer,
// 503 provider_unavailable with Retry-After (docs/api/errors.md, docs/ledger.md). Its hold is never
// charged. A settle that fails on a plain store outage keeps its own path (the store-fault tests,
// test/reliability/store-faults-money.test.ts): the vendor's answer is delivered and the hold left open.
import t from 'tap';
import { loadConfig, type Config } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { FAIL_STOP_EXIT_CODE } from '../../src/ledger/fail-stop.js';
import { checkLedger } from '../../src/ledger/invariant.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { silentLogger } from '../../src/util/log.js';
import { testDb } from '../helpers/db.js';
import { fundedKey } from '../helpers/gateway.js';
import { recordingLogger } from '../helpers/log-lines.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { messagesProbe } from '../helpers/messages-probe.js';

const VENDOR_KEY = 'sk-ant-fail-stop-body';
const INSTANCE_ID = 'fail-stop-body';

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

let broken: string | undefined;
const exits: number[] = [];
let exited!: () => void;
const exitCalled = new Promise<void>((r) => (exited = r));
const gw: Gateway = await createGateway(config, {
  log,
  skipMigrate: true,
  exit: (code) => {
    exits.push(code);
    exited();
  },
  ledgerFaults: {
    skewLeaseCharge: (requestId, chargeInk) => {
      if (broken !== undefined) return undefined;
      broken = requestId;
      return chargeInk + 1; // the lease would give back one Ink less than the hold releases
    },
  },
});
t.teardown(() => gw.close());
const account = await fundedKey(gw, 'fail stop body', 1_000_000);
const probe = messagesProbe({ label: 'fail stop body', vendorKey: VENDOR_KEY, paceMs: 0, replyTokens: 4 });

t.test('a non-streaming settle that breaks a money rule answers the fail-stop 503 and stops the instance', async (t) => {
  const r = await probe.send(gw.url, account.key, probe.body(false, 'the one that breaks'));
  t.equal(r.status, 503, `503, not a generic 500 (${r.text.slice(0, 200)})`);
  t.equal(r.json?.error?.code ?? r.json?.error?.type, 'provider_unavailable');
  t.ok(Number(r.headers['retry-after']) >= 1, 'with Retry-After');
  t.match(r.json?.error?.message ?? r.text, /stopped on an internal ledger fault/, "the fail-stop's own answer");
  t.notOk(r.headers['x-service-ink-charged'], 'no charge reported');
  t.ok(broken, 'the fault broke the end');

  await exitCalled;
  await gw.services.failStop!.finished;
  t.same(exits, [FAIL_STOP_EXIT_CODE], 'the instance exits 70, once');
  t.ok(gw.services.failStop!.stopped);
  t.equal(gw.services.failStop!.violation?.figures.request_id, broken, 'the violation kept is the settle that broke');
  t.match(
    errors.find((e) => e.msg === 'ledger.fail_stop'),
    { level: 'fatal', component: 'fail_stop' },
    'logged at fatal level',
  );

  const after = await probe.send(gw.url, account.key, probe.body(false, 'after the stop'));
  t.equal(after.status, 503, 'a new request is refused');
  t.equal(after.json?.error?.code ?? after.json?.error?.type, 'provider_unavailable');
});

t.test('the hold of the request that broke is never charged', async (t) => {
  await gw.close(); // what a kill would leave; recovery turns the lease's holds into open holds
  const gw2 = await createGateway(config, { log: silentLogger, skipMigrate: true, exit: (code) => t.fail(`the restart exited ${code}`) });
  t.teardown(() => gw2.close());
  const row = (await db.pool.query<{ hold_state: string; charged_ink: number }>('SELECT hold_state, charged_ink FROM requests WHERE id = $1', [broken]))
    .rows[0];
  t.ok(row === undefined || (row.hold_state === 'open' && Number(row.charged_ink) === 0), 'open for reconciliation (or never written), not charged');
  t.same(await checkLedger(db.pool), [], 'the ledger checker finds no violation');
  await assertLedgerInvariant(t, db.pool);
});
