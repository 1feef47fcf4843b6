// A burst: 500 Messages streams started at once against a gateway in a process of its own keep its
// event loop moving. The gateway's own event-loop delay histogram (its /metrics, reset by each
// scrape) is read over the burst; the bound is generous (the bench's paced scenario carries the
// real goal, docs/performance.md), so only a freeze of the kind a client sees as "it hung" fails
// it. Every stream ends whole and billed once, and the ledger holds its invariant afterwards.
import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { setLane } from '../../src/deployment/state.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { testDb } from '../helpers/db.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { parseExposition } from '../helpers/prometheus.js';

const STREAMS = 500;
const DELTAS = 20;
const PACE_MS = 20;
const VENDOR_KEY = 'sk-ant-burst';
/**
 * Generous bounds on the gateway's event-loop delay over the burst (the goal, 50 ms at p99, is the
 * bench's). The longest single delay is bounded loosely: on a loaded two-core machine one tick of a
 * process that runs under the TypeScript loader has reached 2 s with nothing wrong.
 */
const P99_BOUND_S = 1;
const MAX_BOUND_S = 5;

t.test(`${STREAMS} streams started at once keep the gateway's event loop moving`, async (t) => {
  const db = await testDb(t);
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY, maxRecordedRequests: 0 });
  t.teardown(() => sim.close());
  await setLane(db.pool, 'messages', true);
  const acc = await createAccount(db.pool, { name: 'burst', planId: 'pro' });
  const key = await createKey(db.pool, { accountId: acc.id, name: 'burst' });
  const ledger = new Ledger(db.pool);
  await ledger.topUp(acc.id, 1_000_000, 'burst test');
  await ledger.close();
  const gw = await startGatewayProcess(t, {
    server: { host: '127.0.0.1', port: 0 },
    db: { url: db.url, schema: db.schema },
    redis: { url: null },
    vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } },
    limits: { requestsPerMinute: 100_000 },
  });
  const client = new Anthropic({ baseURL: gw.url, authToken: key.key, apiKey: null, maxRetries: 0 });
  /** Every stream's charge as the client was told it (the service.usage event), warm-ups included. */
  const told: number[] = [];
  const stream = async (): Promise<string> => {
    const s = await client.messages.create({
      model: 'sonnet',
      max_tokens: 256,
      stream: true,
      messages: [{ role: 'user', content: `burst [[sim:pace=${PACE_MS}]] [[sim:tokens=${DELTAS}]]` }],
    });
    let text = '';
    for await (const ev of s) {
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
      if ((ev as { type: string }).type === 'service.usage') told.push((ev as unknown as { ink_charged: number }).ink_charged);
    }
    return text;
  };
  const metrics = async () => parseExposition(await (await fetch(`${gw.adminUrl}/metrics`)).text());

  // Warm: the first requests pay for connections, caches and code compiled on first use.
  const expected = await stream();
  t.ok(expected.length > 0, 'a warm-up stream carries text');
  await Promise.all(Array.from({ length: 20 }, stream));
  await metrics(); // resets the gateway's event-loop histogram: what follows is the burst's

  const texts = await Promise.all(Array.from({ length: STREAMS }, stream));
  const m = await metrics();
  t.equal(texts.filter((x) => x === expected).length, STREAMS, `all ${STREAMS} streams ended whole`);
  const p99 = m.value('nodejs_eventloop_lag_p99_seconds');
  const max = m.value('nodejs_eventloop_lag_max_seconds');
  t.ok(p99 < P99_BOUND_S, `event-loop delay p99 over the burst ${(p99 * 1000).toFixed(0)} ms < ${P99_BOUND_S * 1000} ms`);
  t.ok(max < MAX_BOUND_S, `event-loop delay max over the burst ${(max * 1000).toFixed(0)} ms < ${MAX_BOUND_S * 1000} ms`);

  t.equal(await gw.stop(), 0, 'the gateway drains and stops cleanly');
  const open = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM requests WHERE hold_state = 'open'`);
  t.equal(open.rows[0]!.n, 0, 'no hold left open');
  t.equal(told.length, 1 + 20 + STREAMS, 'every stream told its charge');
  const charged = await db.pool.query<{ n: string }>('SELECT ink_charged::text AS n FROM api_keys WHERE id = $1', [key.id]);
  t.equal(
    Number(charged.rows[0]!.n),
    told.reduce((a, b) => a + b, 0),
    'billed once: the key was charged exactly the sum of what its streams were told',
  );
  await assertLedgerInvariant(t, db.pool);
});
