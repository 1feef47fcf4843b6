// 1,000 clients that disconnect mid-stream: the vendor is never aborted, every hold is settled for
// what the vendor produced, and no socket or hold is left behind.
import { request, Agent } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { eachEngine } from '../helpers/engines.js';

const TOTAL = Number(process.env.DISC_TOTAL ?? 1000);
const AT_ONCE = Number(process.env.DISC_AT_ONCE ?? 50);

eachEngine(
  '1,000 mid-stream disconnects',
  async (t, engine) => {
    const sim = await startAnthropicSimulator({ apiKey: 'sk-ant-disc', maxRecordedRequests: TOTAL + 10 });
    t.teardown(() => sim.close());
    const g = await startTestGateway(t, {
      server: { engine },
      vendors: { anthropic: { baseUrl: sim.url, apiKey: 'sk-ant-disc' } },
      limits: { requestsPerMinute: 100_000 },
    });
    await setLane(g.db.pool, 'messages', true);
    await g.gw.services.state.refresh();
    const k = await g.newKey();
    await g.gw.services.ledger.topUp(k.accountId, 1_000_000, 'test');

    const agent = new Agent({ connections: AT_ONCE });
    const body = JSON.stringify({
      model: 'sonnet',
      max_tokens: 200,
      stream: true,
      messages: [{ role: 'user', content: 'go [[sim:tokens=40]] [[sim:pace=1]]' }],
    });
    const ended = new Promise<void>((resolve) => {
      let n = 0;
      sim.events.on('response-end', () => {
        if (++n === TOTAL) resolve();
      });
    });
    let started = 0;
    const failures: number[] = [];
    const one = async () => {
      const ac = new AbortController();
      const r = await request(g.url + '/v1/messages', {
        method: 'POST',
        headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
        body,
        signal: ac.signal,
        dispatcher: agent,
      });
      if (r.statusCode !== 200) {
        failures.push(r.statusCode);
        await r.body.text();
        return;
      }
      for await (const _ of r.body) {
        ac.abort(); // gone after the first bytes
        break;
      }
    };
    const lane = async () => {
      while (started < TOTAL) {
        started++;
        await one().catch((e: Error) => void failures.push(e.message as never));
      }
    };
    // A first round opens the pools (Postgres, vendor keep-alive); sockets are counted after it.
    const warm = Math.min(AT_ONCE, TOTAL);
    await Promise.all(Array.from({ length: warm }, () => (started++, one().catch(() => undefined))));
    const handlesBefore = (process as any)._getActiveHandles().length as number;
    await Promise.all(Array.from({ length: AT_ONCE }, lane));
    t.same(failures, [], 'every request was answered 200 before the client went away');
    if (failures.length > 0) return;
    const dbg = process.env.DISC_DEBUG
      ? setInterval(
          () =>
            console.log(
              'started',
              started,
              'sim',
              sim.requestCount,
              'ends',
              sim.requests.filter((r) => r.end).length,
              'pg',
              g.gw.services.pool.totalCount,
              g.gw.services.pool.waitingCount,
            ),
          1000,
        )
      : undefined;
    await ended; // the vendor finished every response: none was aborted by the gateway
    if (dbg) clearInterval(dbg);
    const ends = sim.requests.map((r) => r.end);
    t.equal(ends.filter((e) => e === 'complete').length, TOTAL, 'every vendor response ran to completion');

    // The settle follows the vendor's last byte; wait for the ledger to catch up, bounded.
    const count = async () => (await g.db.pool.query(`SELECT hold_state, count(*)::int AS n FROM requests WHERE key_id = $1 GROUP BY 1`, [k.keyId])).rows;
    let rows = await count();
    for (let i = 0; i < 200 && !(rows.length === 1 && rows[0].hold_state === 'settled' && rows[0].n === TOTAL); i++) {
      await new Promise((r) => setTimeout(r, 25)); // polling the database, bounded at 5 s
      rows = await count();
    }
    t.same(rows, [{ hold_state: 'settled', n: TOTAL }], 'every hold settled exactly once');
    const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
    t.equal(me.key.ink_reserved, 0);
    t.ok(me.key.ink_charged > 0);
    await agent.close();
    const handlesAfter = (process as any)._getActiveHandles().length as number;
    // Keep-alive sockets to the vendor stay pooled for a while; they are bounded by the pool size, not
    // by the number of requests: 1,000 requests may not leave more than the pools can hold.
    const bound = g.config.upstream.connections + g.config.db.poolMax;
    t.ok(handlesAfter - handlesBefore <= bound, `active handles ${handlesBefore} -> ${handlesAfter} (bound +${bound}): no socket per request`);
    await assertLedgerInvariant(t, g.db.pool);
  },
  { timeout: 180_000 },
);
