// Faults: a real gateway process SIGKILLed under streaming load, billing from leases with the
// journal written behind (the defaults). 24 clients stream on both text lanes over three keys;
// once a few hundred streams have ended, the process is killed with streams in flight. A new
// start under the same instance id recovers what it left. Then, request by request, against what
// each client was told in its `service.usage` frame:
//   - nobody is charged more than the vendor's usage priced (what the frame said), nor twice;
//   - a stream cut by the kill is never charged: its hold stays open as usage_unknown (or was
//     never written);
//   - what is unbilled (told to the client, not in Postgres) ended within the documented window
//     before the kill: flushMs plus one flush. The amount and the window are printed.
// The ledger invariant holds, and no lease is left live.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { createGateway } from '../../src/gateway.js';
import { silentLogger } from '../../src/util/log.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { testDb } from '../helpers/db.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { assertLedgerInvariant, keyOf } from '../helpers/ledger-invariant.js';
import { operatorCli } from '../helpers/operator-cli.js';
import { parseSse, sseComments } from '../helpers/sse.js';

const ANTHROPIC_KEY = 'sk-ant-kill-load';
const OPENAI_KEY = 'sk-openai-kill-load';
const CLIENTS = 24;
const KEYS = 3;
const ENDED_BEFORE_KILL = 300;
const FLUSH_MS = 20;
/**
 * One flush's own duration under this load, at most (measured: tens of ms). Generous: on a busy
 * two-core machine one commit can wait on the WAL for a second; a record left behind for longer
 * than flushes take (a journal that stopped flushing) is what this catches.
 */
const FLUSH_DURATION_BOUND_MS = 2_500;
const INSTANCE_ID = 'kill-under-load';
// Short streams (6 deltas 5 ms apart): many end every second, and many are in flight at any time.
const DIRECTIVES = '[[sim:pace=5]] [[sim:tokens=6]]';

const db = await testDb(t);
const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY, maxRecordedRequests: 0 });
t.teardown(() => anthropic.close());
const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY, maxRecordedRequests: 0 });
t.teardown(() => openai.close());
const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-kill-load-'));
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

const shared: DeepPartial<Config> = {
  dataDir,
  server: { host: '127.0.0.1', port: 0 },
  db: { url: db.url, schema: db.schema },
  redis: { url: null },
  limits: { requestsPerMinute: 1_000_000 },
  vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }, openai: { baseUrl: openai.url, apiKey: OPENAI_KEY } },
  ledger: { instanceId: INSTANCE_ID, flushMs: FLUSH_MS, durability: 'write-behind' },
};
const { cli, operatorKey } = operatorCli(loadConfig({}, { db: { url: db.url, schema: db.schema } }));
await cli('lane', 'enable', 'messages');
await cli('lane', 'enable', 'responses');

interface Sent {
  readonly id: string;
  readonly keyId: string;
  /** The `service.usage` frame's ink_charged: null when the stream never got that far. */
  chargedInk: number | null;
  /** performance.now() when the body ended (or broke off). */
  endMs: number;
}

const LANES = [
  { path: '/v1/messages', body: { model: 'sonnet', max_tokens: 200, stream: true, messages: [{ role: 'user', content: `load ${DIRECTIVES}` }] } },
  { path: '/v1/responses', body: { model: 'astra', max_output_tokens: 200, stream: true, input: `load ${DIRECTIVES}` } },
] as const;

/** The service.usage frame's charge, on either lane (Messages: an event of its own; Responses: an SSE comment). */
function usageFrameInk(text: string): number | null {
  const frames = [...parseSse(text).map((e) => e.data), ...sseComments(text).map((c) => c.replace(/^\s*service\.usage\s*/, ''))];
  for (const f of frames) {
    if (!f.includes('"service.usage"')) continue;
    const d = JSON.parse(f) as { type?: string; ink_charged?: number };
    if (d.type === 'service.usage' && typeof d.ink_charged === 'number') return d.ink_charged;
  }
  return null;
}

t.test('SIGKILL under streaming load: nobody overcharged, cut streams unbilled, the unbilled window within its bound', async (t) => {
  const keys = await Promise.all(Array.from({ length: KEYS }, (_, i) => operatorKey(`kill-load-${i}`, 1_000)));
  const gw = await startGatewayProcess(t, shared);
  const sent: Sent[] = [];
  let ended = 0;
  let killed = false;
  let reached!: () => void;
  const enough = new Promise<void>((r) => (reached = r));
  const client = async (n: number) => {
    for (let i = 0; !killed; i++) {
      const k = keys[(n + i) % KEYS]!;
      const lane = LANES[(n + i) % 2]!;
      let s: Sent | undefined;
      try {
        const res = await request(gw.url + lane.path, {
          method: 'POST',
          headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
          body: JSON.stringify(lane.body),
        });
        if (res.statusCode !== 200) throw new Error(`status ${res.statusCode} before the kill: ${await res.body.text()}`);
        s = { id: String(res.headers['x-service-request-id']), keyId: k.keyId, chargedInk: null, endMs: NaN };
        sent.push(s);
        let text = '';
        for await (const c of res.body as AsyncIterable<Buffer>) text += c.toString();
        s.endMs = performance.now();
        s.chargedInk = usageFrameInk(text);
        if (s.chargedInk === null) throw new Error(`a stream ended without its usage frame: ${text.slice(-300)}`);
        if (++ended === ENDED_BEFORE_KILL) reached();
      } catch (e) {
        if (s) s.endMs = performance.now();
        if (!killed) throw e;
        return; // the kill: this client's stream (or connection) broke off
      }
    }
  };
  const clients = Promise.all(Array.from({ length: CLIENTS }, (_, n) => client(n)));
  await Promise.race([enough, clients]);
  killed = true;
  const killMs = performance.now();
  await gw.kill();
  await clients;
  const told = sent.filter((s) => s.chargedInk !== null);
  const cut = sent.filter((s) => s.chargedInk === null);
  t.ok(told.length >= ENDED_BEFORE_KILL, `${told.length} streams ended with their usage frame before the kill`);
  t.ok(cut.length > 0, `${cut.length} streams were cut by the kill`);

  // The restart under the same instance id recovers the killed start's leases as it starts.
  const next = await createGateway(loadConfig({}, shared), { skipMigrate: true, log: silentLogger });
  t.teardown(() => next.close());
  // The new start serves nothing, so it holds no lease of its own: every live lease would be a leftover.
  const live = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM leases WHERE state = 'live'`);
  t.equal(Number(live.rows[0]!.n), 0, 'no lease of the killed start is left live');

  const rows = new Map(
    (
      await db.pool.query<{ id: string; hold_state: string; status: string; charged_ink: string }>(
        `SELECT id, hold_state, status, charged_ink FROM requests WHERE id = ANY($1)`,
        [sent.map((s) => s.id)],
      )
    ).rows.map((r) => [r.id, { ...r, charged: Number(r.charged_ink) }]),
  );
  let billed = 0;
  let unbilledInk = 0;
  let oldestUnbilledMs = 0;
  const problems: string[] = [];
  const chargedByKey = new Map<string, number>();
  for (const s of told) {
    const r = rows.get(s.id);
    if (r && r.hold_state === 'settled') {
      if (r.charged !== s.chargedInk) problems.push(`${s.id}: charged ${r.charged}, the client was told ${s.chargedInk}`);
      billed++;
      chargedByKey.set(s.keyId, (chargedByKey.get(s.keyId) ?? 0) + r.charged);
      continue;
    }
    // Told but not billed: never written, or a written start whose end was lost (an open usage_unknown hold).
    if (r && !(r.hold_state === 'open' && r.status === 'usage_unknown' && r.charged === 0))
      problems.push(`${s.id}: ${r.hold_state}/${r.status} charged ${r.charged}`);
    unbilledInk += s.chargedInk!;
    oldestUnbilledMs = Math.max(oldestUnbilledMs, killMs - s.endMs);
  }
  for (const s of cut) {
    const r = rows.get(s.id);
    if (r && !(r.hold_state === 'open' && r.status === 'usage_unknown' && r.charged === 0))
      problems.push(`cut ${s.id}: ${r.hold_state}/${r.status} charged ${r.charged}`);
  }
  t.same(problems, [], 'every charge is what the client was told; no cut stream is charged; unwritten ends are open usage_unknown holds');
  for (const k of keys) {
    const key = await keyOf(db.pool, k.keyId);
    t.equal(key.ink_charged, chargedByKey.get(k.keyId) ?? 0, `${k.keyId}: charged exactly the settled requests' usage, nothing more`);
  }
  const bound = FLUSH_MS + FLUSH_DURATION_BOUND_MS;
  t.comment(
    `kill under load: ${told.length} streams told their charge, ${billed} billed, ${told.length - billed} unbilled (${unbilledInk} Ink), ` +
      `the oldest of them ended ${oldestUnbilledMs.toFixed(1)} ms before the kill; ${cut.length} cut mid-stream`,
  );
  t.ok(oldestUnbilledMs <= bound, `every unbilled request ended within flushMs + one flush before the kill (${oldestUnbilledMs.toFixed(1)} <= ${bound} ms)`);
  await assertLedgerInvariant(t, db.pool);
});
