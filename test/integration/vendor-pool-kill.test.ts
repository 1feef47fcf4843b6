// A deployment killed (SIGKILL, a simulator in a child process) while streams flow from it: those
// streams end with the failure frame and the usual billing rule, the other deployment's streams
// finish, new requests go to the one left, and no request runs (or is charged) twice.
import t from 'tap';
import { request } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { journalWritten, startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant, keyOf } from '../helpers/ledger-invariant.js';
import { recordingLogger } from '../helpers/log-lines.js';
import { startSimulatorChild } from '../helpers/pool-vendors.js';
import { parseSse } from '../helpers/sse.js';

const KEY = 'sk-ant-kill-test';
const STREAMS = 8;
const AFTER = 10;

t.test('a deployment killed mid-stream: its streams end with the failure frame, new requests go to the other', async (t) => {
  // 40 pieces 100 ms apart: each stream on the child runs about 4 s, long enough to be cut.
  const doomed = await startSimulatorChild(t, KEY, 100);
  const healthy = await startAnthropicSimulator({ apiKey: KEY });
  t.teardown(() => healthy.close());
  const rec = recordingLogger('info');
  const g = await startTestGateway(
    t,
    {
      vendors: {
        anthropic: {
          deployments: [
            { name: 'doomed', baseUrl: doomed.url, apiKey: KEY },
            { name: 'healthy', baseUrl: healthy.url, apiKey: KEY },
          ],
        },
      },
      limits: { requestsPerMinute: 10_000 },
    },
    { log: rec.log, accessLog: rec.log },
  );
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');
  const post = (stream: boolean) =>
    request(`${g.url}/v1/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sonnet', max_tokens: 200, stream, messages: [{ role: 'user', content: 'a long one [[sim:tokens=40]]' }] }),
    });

  const streams = await Promise.all(Array.from({ length: STREAMS }, () => post(true)));
  for (const r of streams) t.equal(r.statusCode, 200, 'each stream admitted');
  const texts = streams.map((r) => {
    let text = '';
    let flowing: () => void;
    const first = new Promise<void>((r) => (flowing = r));
    const done = new Promise<string>((resolve, reject) => {
      r.body.on('data', (c: Buffer) => {
        text += c.toString('utf8');
        if (text.includes('content_block_delta')) flowing();
      });
      r.body.on('end', () => (flowing(), resolve(text)));
      r.body.on('error', reject);
    });
    return { first, done, requestId: r.headers['x-service-request-id'] as string };
  });
  await Promise.all(texts.map((s) => s.first)); // every stream has text flowing
  doomed.child.kill('SIGKILL');
  const bodies = await Promise.all(texts.map((s) => s.done));

  const lineOf = (id: string) => rec.lines.find((l) => l.msg === 'http.request' && l.request_id === id);
  const where = texts.map((s) => lineOf(s.requestId)?.vendor_deployment);
  const onDoomed = where.filter((w) => w === 'doomed').length;
  t.ok(onDoomed >= 1 && onDoomed < STREAMS, `streams on both deployments (${onDoomed} on the one killed)`);
  let toldCharged = 0;
  for (const [i, body] of bodies.entries()) {
    const last = parseSse(body).at(-1)!;
    if (where[i] === 'healthy') {
      t.equal(last.event, 'service.usage', 'a stream from the deployment left finishes with its usage frame');
      toldCharged += JSON.parse(last.data).ink_charged;
      continue;
    }
    t.equal(last.event, 'error', 'a stream from the killed deployment ends with the failure frame');
    const code = JSON.parse(last.data).error.code;
    t.ok(code === 'incomplete_stream' || code === 'usage_unknown', `the existing ending (${code})`);
  }

  const after = await Promise.all(Array.from({ length: AFTER }, () => post(false)));
  for (const r of after) t.equal(r.statusCode, 200, 'a new request after the kill is served');
  for (const r of after) toldCharged += Number(r.headers['x-service-ink-charged']);
  await Promise.all(after.map((r) => r.body.text()));
  t.equal(healthy.requestCount, STREAMS - onDoomed + AFTER, 'the deployment left ran each of its requests once: nothing was sent again');

  await journalWritten(g);
  const killedRecords = await Promise.all(texts.filter((_, i) => where[i] === 'doomed').map((s) => g.gw.services.ledger.getRequest(s.requestId)));
  let killedCharged = 0;
  for (const r of killedRecords) {
    t.ok(r?.status === 'settled' || r?.status === 'usage_unknown', `a cut stream is settled on what was reported or left for reconciliation (${r?.status})`);
    killedCharged += r?.status === 'settled' ? Number(r.charged_ink ?? 0) : 0;
  }
  const key = await keyOf(g.db.pool, k.keyId);
  t.equal(key.ink_charged, toldCharged + killedCharged, 'the ledger holds each charge once');
  await assertLedgerInvariant(t, g.db.pool);
});
