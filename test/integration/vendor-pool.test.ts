// Vendor pools end to end: the official SDKs -> inkgate -> several deployments of one vendor, one
// refusing connections, one at capacity (429, Retry-After: 30), one healthy. Every call must be
// served, by the healthy one, each charged exactly once, nothing left held; with every deployment
// down the answer is 503 provider_unavailable with a Retry-After and no hold.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { responsesCharge } from '../helpers/responses-harness.js';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { journalWritten, startTestGateway } from '../helpers/gateway.js';
import { seriesValue } from '../helpers/prometheus.js';
import { assertLedgerInvariant, keyOf } from '../helpers/ledger-invariant.js';
import { recordingLogger } from '../helpers/log-lines.js';
import { operatorCli } from '../helpers/operator-cli.js';
import { refusingUrl, startBusyVendor } from '../helpers/pool-vendors.js';
import { startAdminServer } from '../../src/ops/admin-server.js';

const ANTHROPIC_KEY = 'sk-ant-pool-test';
const OPENAI_KEY = 'sk-openai-pool-test';
const CALLS = 200;
const PARALLEL = 8;

async function poolStack(t: Test) {
  const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY });
  t.teardown(() => anthropic.close());
  const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY });
  t.teardown(() => openai.close());
  const busyA = await startBusyVendor(t, 30);
  const busyO = await startBusyVendor(t, 30);
  const three = async (busy: string, healthy: string, key: string) => [
    { name: 'refusing', baseUrl: await refusingUrl(), apiKey: key },
    { name: 'busy', baseUrl: busy, apiKey: key },
    { name: 'healthy', baseUrl: healthy, apiKey: key },
  ];
  const rec = recordingLogger('info');
  const g = await startTestGateway(
    t,
    {
      vendors: {
        anthropic: { deployments: await three(busyA.url, anthropic.url, ANTHROPIC_KEY) },
        openai: { deployments: await three(busyO.url, openai.url, OPENAI_KEY) },
      },
      limits: { requestsPerMinute: 100_000 },
      // A deployment that cools stays cooling for the whole test (the default first cooldown is 1 s,
      // which a loaded machine can outlast between two reads of the state).
      upstream: { cooldownMinMs: 60_000, cooldownMaxMs: 60_000 },
    },
    { log: rec.log, accessLog: rec.log },
  );
  for (const lane of ['messages', 'responses'] as const) await setLane(g.db.pool, lane, true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 1_000_000, 'test');
  return {
    g,
    k,
    anthropic,
    openai,
    busyA,
    busyO,
    lines: rec.lines,
    claude: new Anthropic({ baseURL: g.url, authToken: k.key, apiKey: null, maxRetries: 0 }),
    gpt: new OpenAI({ baseURL: `${g.url}/v1`, apiKey: k.key, maxRetries: 0 }),
  };
}
type Stack = Awaited<ReturnType<typeof poolStack>>;

/** One call of the mix; resolves with the Ink the client was told it was charged. */
async function oneCall(s: Stack, i: number): Promise<number> {
  const stream = i % 2 === 1;
  if (i % 4 < 2) {
    if (!stream) {
      const { response } = await s.claude.messages
        .create({ model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: `hello ${i}` }] })
        .withResponse();
      return Number(response.headers.get('x-service-ink-charged'));
    }
    const events = await s.claude.messages.create({ model: 'sonnet', max_tokens: 50, stream: true, messages: [{ role: 'user', content: `hello ${i}` }] });
    let charged = Number.NaN;
    for await (const ev of events) if ((ev as { type: string }).type === 'service.usage') charged = (ev as unknown as { ink_charged: number }).ink_charged;
    return charged;
  }
  if (!stream) {
    const { response } = await s.gpt.responses.create({ model: 'astra', input: `hello ${i}`, max_output_tokens: 200 }).withResponse();
    return Number(response.headers.get('x-service-ink-charged'));
  }
  // The Responses lane's usage frame is a comment the SDK skips: the charge is what the receipt prices to.
  const events = await s.gpt.responses.create({ model: 'astra', input: `hello ${i}`, max_output_tokens: 200, stream: true });
  let charged = Number.NaN;
  for await (const ev of events) {
    if (ev.type !== 'response.completed') continue;
    charged = responsesCharge(ev.response.usage!);
  }
  return charged;
}

t.test('refusing, at capacity and healthy deployments: 200 SDK calls all served, each charged once', async (t) => {
  const s = await poolStack(t);
  const charges: number[] = [];
  // One call at a time until each lane's deployment at capacity has answered its 429: from then on
  // it is cooling, and the parallel calls that follow must leave it alone. (Calls already in flight
  // when a 429 comes back were sent before anyone knew.) Each call of the mix tries both lanes in turn.
  let next = 0;
  while ((s.busyA.answers.length === 0 || s.busyO.answers.length === 0) && next < 60) charges.push(await oneCall(s, next++));
  t.ok(s.busyA.answers.length === 1 && s.busyO.answers.length === 1, `both deployments at capacity met within the first ${next} calls`);
  for (let start = next; start < CALLS; start += PARALLEL) {
    const batch = Array.from({ length: Math.min(PARALLEL, CALLS - start) }, (_, j) => oneCall(s, start + j));
    charges.push(...(await Promise.all(batch)));
  }
  t.equal(charges.length, CALLS, 'every call succeeded (the SDKs, with no retries of their own, threw on none)');
  t.ok(
    charges.every((c) => Number.isInteger(c) && c > 0),
    'each told its charge',
  );
  await journalWritten(s.g);
  const key = await keyOf(s.g.db.pool, s.k.keyId);
  t.equal(
    key.ink_charged,
    charges.reduce((a, b) => a + b, 0),
    'the ledger holds the sum of the charges the clients were told: each call charged once',
  );
  t.equal(key.ink_reserved, 0, 'no hold open');
  t.equal(s.anthropic.requestCount, CALLS / 2, 'each Messages call ran once on the vendor (the healthy deployment)');
  t.equal(s.openai.requests.length, CALLS / 2, 'each Responses call ran once on the vendor');
  for (const [name, busy] of [
    ['Messages', s.busyA],
    ['Responses', s.busyO],
  ] as const) {
    // The test runs well within the 30 s it asked for: nothing may arrive after its first 429.
    t.equal(busy.arrivals.length, 1, `the ${name} deployment at capacity got no request during its Retry-After`);
  }
  const access = s.lines.filter((l) => l.msg === 'http.request' && l.status === 200);
  t.equal(access.length, CALLS);
  t.ok(
    access.every((l) => l.vendor_deployment === 'healthy' && Number(l.tries) >= 1 && Number(l.tries) <= 3),
    'the access line names the deployment that answered and the tries',
  );
  t.ok(
    access.some((l) => Number(l.tries) > 1),
    'some calls moved',
  );
  const cooling = s.lines.filter((l) => l.msg === 'vendor.deployment_cooling');
  t.ok(
    cooling.some((l) => l.deployment === 'busy' && l.reason === 'retry_after'),
    'the 429 with Retry-After is logged as a cooldown',
  );
  t.ok(
    cooling.some((l) => l.deployment === 'refusing' && l.reason === 'failures'),
    'refused connections in a row are logged as a cooldown',
  );
  t.notOk(JSON.stringify(s.lines).includes(ANTHROPIC_KEY), 'no vendor key in any log line');
  const { body: metrics } = await s.g.gw.ops.metrics.scrape();
  const figure = (series: string) => seriesValue(metrics, series);
  t.equal(figure('inkgate_vendor_requests_total{vendor="anthropic",deployment="busy"}'), 1, 'metrics: one try to the one at capacity');
  t.equal(figure('inkgate_vendor_tries_moved_total{vendor="anthropic",deployment="busy",reason="status_429"}'), 1, 'moved away once, for its 429');
  t.ok(figure('inkgate_vendor_tries_moved_total{vendor="openai",deployment="refusing",reason="connect"}') >= 1, 'moved away from refused connections');
  t.equal(figure('inkgate_vendor_cooldowns_total{vendor="openai",deployment="busy",reason="retry_after"}'), 1);
  t.equal(figure('inkgate_vendor_in_flight{vendor="anthropic",deployment="healthy"}'), 0, 'nothing in flight once every call ended');
  t.equal(figure('inkgate_vendor_deployment_up{vendor="anthropic",deployment="busy"}'), 0, 'the one at capacity is down');
  t.equal(figure('inkgate_vendor_requests_total{vendor="openai",deployment="healthy"}'), CALLS / 2);
  const ready = await s.g.gw.ops.readiness.check();
  t.same(
    ready.vendors.anthropic?.map((d) => [d.name, d.state === 'cooling' ? 'cooling' : 'taking requests']),
    [
      ['refusing', 'cooling'],
      ['busy', 'cooling'],
      ['healthy', 'taking requests'],
    ],
    '/readyz lists each deployment and its state',
  );
  const admin = await startAdminServer({ host: '127.0.0.1', port: 0, metrics: s.g.gw.ops.metrics, readiness: s.g.gw.ops.readiness, log: s.g.gw.services.log });
  t.teardown(() => admin.close());
  const listed = await operatorCli(s.g.config).cli('vendor', 'list', '--admin', admin.url);
  const shown = listed
    .filter((d: { vendor: string }) => d.vendor === 'anthropic')
    .map((d: Record<string, unknown>) => [d.name, d.weight, d.key, d.state === 'cooling']);
  t.same(
    shown,
    [
      ['refusing', 1, 'sk-a…', true],
      ['busy', 1, 'sk-a…', true],
      ['healthy', 1, 'sk-a…', false],
    ],
    '`inkgate vendor list`: name, weight, key prefix and the instance state',
  );
  t.notOk(JSON.stringify(listed).includes(ANTHROPIC_KEY), 'never the key itself');
  t.ok(ready.vendors.anthropic![1]!.reopens_in_s > 0 && ready.vendors.anthropic![1]!.reopens_in_s <= 30, "the busy one's reopening within its Retry-After");
  await assertLedgerInvariant(t, s.g.db.pool);
});

t.test('every deployment down: 503 provider_unavailable with Retry-After, nothing held', async (t) => {
  const busy = await startBusyVendor(t, 30);
  const g = await startTestGateway(t, {
    upstream: { cooldownMinMs: 5000 },
    vendors: {
      anthropic: {
        deployments: [
          { name: 'refusing', baseUrl: await refusingUrl(), apiKey: ANTHROPIC_KEY },
          { name: 'busy', baseUrl: busy.url, apiKey: ANTHROPIC_KEY },
        ],
      },
    },
  });
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  const body = { model: 'sonnet', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] };
  const first = await g.call('POST', '/v1/messages', { key: k.key, body });
  t.equal(first.status, 503);
  t.equal(first.json.error.code, 'provider_unavailable');
  t.ok(Number(first.headers['retry-after']) >= 1, 'a Retry-After of at least 1 s');
  // Both tried: refused, then 429. Three more calls cool the refusing one down too: then the
  // Retry-After is the soonest reopening: the refusing one's back-off (5 s), not the busy one's 30 s.
  for (let i = 0; i < 3; i++) await g.call('POST', '/v1/messages', { key: k.key, body });
  const down = await g.call('POST', '/v1/messages', { key: k.key, body });
  t.equal(down.status, 503);
  t.equal(down.json.error.code, 'provider_unavailable');
  const wait = Number(down.headers['retry-after']);
  t.ok(wait >= 1 && wait <= 5, `the soonest deployment's reopening (${wait} s)`);
  t.equal(busy.arrivals.length, 1, 'the one at capacity was asked once, then left alone');
  await journalWritten(g);
  const key = await keyOf(g.db.pool, k.keyId);
  t.same([key.ink_reserved, key.ink_charged], [0, 0], 'every hold released, nothing charged');
  await assertLedgerInvariant(t, g.db.pool);
});
