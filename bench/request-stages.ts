// Stage micro-benches of one billed Messages request: what each step the gateway runs for it costs
// alone, in microseconds of this process's CPU, on the bench's own request and a real simulator
// answer (captured once from the Anthropic simulator). The CPU profile of the gateway under load
// (bench/request-budget.ts) is the budget; these say what a step costs with nothing around it, so
// a cut can be measured in isolation. The escrow steps run against the real ledger (a billing
// gateway in this process, Postgres as DATABASE_URL says, a private schema dropped at the end):
// reserve and settle come from the key's lease in memory, and the journal's group commits run
// meanwhile, so their client-side CPU is in that figure.
//   node --import ./test/loader/register.js bench/request-stages.ts [--n 20000] [--repeat 5]
import { openSync } from 'node:fs';
import { Pool } from 'undici';
import { vendorUserHash } from '../src/accounts/api-key.js';
import { messagesHoldInk } from '../src/catalog/pricing.js';
import { MessagesUsageTally, tallyMessageBody } from '../src/lanes/messages/usage-tally.js';
import { parseMessagesRequest } from '../src/lanes/messages/request.js';
import { MemoryRateLimiter } from '../src/limits/memory-rate-limiter.js';
import { GatewayMetrics } from '../src/metrics/metrics.js';
import { startAnthropicSimulator } from '../simulators/anthropic/simulator.js';
import { createAccessLog } from '../src/server/access-log.js';
import type { HttpContext } from '../src/server/http-context.js';
import { newRequestId } from '../src/server/http-context.js';
import { checkJsonShape } from '../src/server/json-shape.js';
import { parseJsonObject } from '../src/server/json-parse.js';
import { createLogger } from '../src/util/log.js';
import { startBillingGateway } from './lib/billing-gateway.js';
import { numberArg } from './lib/argv.js';
import { median } from './lib/stats.js';

const N = numberArg('n', 20_000);
const REPEAT = numberArg('repeat', 5);

const cpuUs = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/** Median CPU µs per call of `run` over REPEAT rounds of N calls (after one unmeasured round). */
async function measure(run: (i: number) => unknown | Promise<unknown>, n = N): Promise<number> {
  const rounds: number[] = [];
  for (let r = 0; r <= REPEAT; r++) {
    const t0 = cpuUs();
    for (let i = 0; i < n; i++) {
      const v = run(i);
      if (v instanceof Promise) await v;
    }
    if (r > 0) rounds.push((cpuUs() - t0) / n);
  }
  return median(rounds);
}

const sim = await startAnthropicSimulator({ apiKey: 'sk-ant-bench', maxRecordedRequests: 0 });
const gw = await startBillingGateway({ anthropic: sim.url, openai: sim.url }, 'bench_stages');
const catalog = gw.gw.services.catalog;
const clientBody = Buffer.from(JSON.stringify({ model: 'sonnet', max_tokens: 256, messages: [{ role: 'user', content: 'Benchmark prompt of modest size.' }] }));
const streamBody = JSON.stringify({
  model: 'sonnet',
  max_tokens: 256,
  stream: true,
  messages: [{ role: 'user', content: 'Benchmark prompt of modest size.' }],
});

// One real answer of each kind from the simulator, as the gateway would receive it.
const up = new Pool(sim.url);
const ask = async (body: string): Promise<Buffer> => {
  const headers = { 'x-api-key': 'sk-ant-bench', 'anthropic-version': '2023-06-01', 'content-type': 'application/json' };
  const r = await up.request({ path: '/v1/messages', method: 'POST', headers, body });
  return Buffer.from(await r.body.arrayBuffer());
};
// The model the bench's id resolves to (an alias of a catalogue model).
const { vendorBody, model } = parseMessagesRequest(JSON.parse(clientBody.toString()) as Record<string, unknown>, catalog, { keyUserId: 'u' });
const answer = await ask(vendorBody);
const stream = await ask(vendorBody.replace('{', '{"stream":true,'));
await up.close();
void streamBody;

const limiter = new MemoryRateLimiter();
const metrics = new GatewayMetrics();
const accessLog = createAccessLog(createLogger('info', undefined, true, openSync('/dev/null', 'w')));
const fakeCtx = {
  requestId: newRequestId(),
  auth: { keyPrefix: 'svc_AbCdEfGh' },
  method: 'POST',
  loggedStatus: 200,
  caller: undefined,
  remoteAddress: '127.0.0.1',
  error: undefined,
  clientClosed: false,
  tries: 1,
  vendorDeployment: 'default',
} as unknown as HttpContext;
const billing = gw.gw.services.escrow;
const auth = { keyId: '', accountId: '' };
{
  // The bench key's ids, as the server's authentication would give them.
  const r = await gw.gw.services.pool.query<{ id: string; account_id: string }>('SELECT id, account_id FROM api_keys LIMIT 1');
  auth.keyId = r.rows[0]!.id;
  auth.accountId = r.rows[0]!.account_id;
}

let sink = 0;
const results: Array<[string, number]> = [];
const stage = async (name: string, run: (i: number) => unknown | Promise<unknown>, n?: number) => {
  results.push([name, await measure(run, n)]);
};

await stage('request id (newRequestId)', () => (sink += newRequestId().length));
await stage('rate limit (in-process take)', () => limiter.take('key:bench', 1_000_000));
await stage('body: shape check (checkJsonShape)', () => (sink += checkJsonShape(clientBody).keys));
await stage('body: parse (parseJsonObject)', () => (sink += Object.keys(parseJsonObject(clientBody)).length));
await stage('validation: key user hash (vendorUserHash)', (i) => (sink += vendorUserHash(`key_${i & 7}`).length));
await stage('validation: parseMessagesRequest', () => {
  sink += parseMessagesRequest(JSON.parse(clientBody.toString()) as Record<string, unknown>, catalog, { keyUserId: 'u' }).vendorBody.length;
});
await stage('hold sizing (messagesHoldInk)', (i) => (sink += messagesHoldInk(model, 20 + (i & 7), 256)));
await stage(
  'escrow: reserve + settle, lease in memory, journal written behind',
  async (i) => {
    const requestId = newRequestId();
    await billing.reserve({ requestId, accountId: auth.accountId, keyId: auth.keyId, product: 'messages', model: model.id, holdInk: 40 + (i & 3) });
    await billing.settle(requestId, 3, { usage: { input_tokens: 12, output_tokens: 30 } });
  },
  Math.min(N, 5_000),
);
await stage('relay, non-streaming: parse, tally, rewrite, stringify the answer', () => {
  const json = JSON.parse(answer.toString('utf8')) as Record<string, unknown>;
  sink += tallyMessageBody(json).usage.outputTokens ?? 0;
  json.model = 'sonnet';
  sink += JSON.stringify(json).length;
});
await stage('relay, streaming: tally one whole answer', () => {
  const t = new MessagesUsageTally();
  t.push(stream);
  t.end();
  sink += t.usage().outputTokens ?? 0;
});
await stage('access log line (pino, buffered, /dev/null)', () => accessLog(fakeCtx, '/v1/messages', performance.now() - 1));
await stage('metrics: request, Ink held and charged', (i) => {
  metrics.http.observe('POST', '/v1/messages', 200, 0.002 + (i & 7) / 1000);
  metrics.inkHeld('messages', model.id, 40);
  metrics.inkCharged('messages', model.id, 3);
});

await gw.stop();
await sim.close();
process.stdout.write(
  `# stage micro-benches, median of ${REPEAT} rounds of ${N} (escrow: ${Math.min(N, 5_000)}), CPU µs per call (${sink > 0 ? 'ok' : '-'})\n\n`,
);
process.stdout.write('| stage | CPU µs |\n|---|---|\n');
for (const [name, us] of results) process.stdout.write(`| ${name} | ${us.toFixed(2)} |\n`);
