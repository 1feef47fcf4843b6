// Postgres PAUSED (SIGSTOP to the postmaster and every backend of a private cluster) for 5 s while
// a key that holds an Ink escrow lease is under load on the Messages lane, stream and non-stream.
//   - The leased key (A) is admitted and settled from memory: ZERO failed requests during the pause
//     (every reply 200 with X-Service-Ink-Charged; every stream ends with its service.usage frame).
//   - Keys without a lease need Postgres and answer 503 provider_unavailable within about a second,
//     never reaching the vendor: B (never used: not even authenticated yet) and B2 (authenticated
//     by an earlier request that failed validation, so its request gets as far as the lease take).
//   - After SIGCONT the write-behind journal is written: every 200 of A has its requests row,
//     settled at exactly the charge A was told, key and wallet totals match, the ledger invariant
//     holds; closing the gateway returns every lease (no live lease left) and the invariant holds.
//     A lease take that the gateway gave up on (query timeout) but that the stopped backend runs
//     once it continues must not leave B2 a lease: no live lease but A's, B2's wallet untouched.
// What a key WITHOUT escrow (the exact path) sees when Postgres dies is postgres-kill.test.ts; the
// shared server at 127.0.0.1:5432 is never signalled: the cluster here is a private one
// (test/helpers/private-postgres.ts), paused and continued by pid.
import t from 'tap';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { createPool } from '../../src/store/pool.js';
import { createLogger } from '../../src/util/log.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { fundedKey } from '../helpers/gateway.js';
import { messagesProbe, walletRow, type Answer } from '../helpers/messages-probe.js';
import { startPrivatePostgres } from '../helpers/private-postgres.js';
import { procStat } from '../helpers/proc.js';
import { parseSse } from '../helpers/sse.js';

const VENDOR_KEY = 'sk-ant-escrow-faults';
const FUNDS_INK = 100_000;
/** How long Postgres stays stopped. */
const PAUSE_MS = 5_000;
/** Concurrent load loops on key A, each alternating non-stream and stream requests. */
const LOOPS = 4;
/** Each loop stops by itself after this many requests or this long, whichever comes first. */
const MAX_PER_LOOP = 300;
const LOAD_MAX_MS = 20_000;
/** Load served before the pause starts (A's lease is busy when Postgres stops). */
const WARM_LOAD_REQUESTS = 8;
/** A key without a lease: 503 "within about a second" (pool timeouts ~0.8-0.9 s); asserted per request. */
const B_BUDGET_MS = 2_000;
/** Start no new B probe this close to the end of the pause (one probe takes about a second). */
const B_PROBE_TAIL_MS = 1_300;
const FLUSH_DEADLINE_MS = 20_000;
const POLL_DEADLINE_MS = 5_000;
/** Short, quick replies: the vendor answers in ~40 ms; the hold (max_tokens 20,000) is far above the charge. */
const A_DIRECTIVES = '[[sim:pace=5]] [[sim:tokens=8]]';

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

const probe = messagesProbe({ label: 'escrow faults', vendorKey: VENDOR_KEY, paceMs: 5, replyTokens: 8 });
const { send } = probe;

/** One request of key A, as the client saw it. */
interface AOutcome {
  readonly loop: number;
  readonly stream: boolean;
  readonly startMs: number;
  readonly endMs: number;
  readonly status: number;
  readonly requestId: string | undefined;
  /** X-Service-Ink-Charged (non-stream) or the service.usage frame's ink_charged (stream). */
  readonly charged: number | undefined;
  /** Why it does not count as served ('' when it does). */
  readonly failure: string;
}

function outcomeOf(a: Answer, loop: number, stream: boolean, startMs: number): AOutcome {
  const endMs = startMs + a.elapsedMs;
  const requestId = a.headers['x-service-request-id'] as string | undefined;
  const base = { loop, stream, startMs, endMs, status: a.status, requestId };
  if (a.status !== 200) return { ...base, charged: undefined, failure: `status ${a.status}: ${a.text.slice(0, 160)}` };
  if (!stream) {
    const h = a.headers['x-service-ink-charged'];
    const charged = typeof h === 'string' && /^\d+$/.test(h) ? Number(h) : undefined;
    return { ...base, charged, failure: charged === undefined ? `200 without X-Service-Ink-Charged (${String(h)})` : '' };
  }
  const evs = parseSse(a.text);
  const last = evs.at(-1);
  if (evs.some((e) => e.event === 'error'))
    return { ...base, charged: undefined, failure: `stream error event: ${evs.find((e) => e.event === 'error')!.data.slice(0, 160)}` };
  if (last?.event !== 'service.usage') return { ...base, charged: undefined, failure: `stream ended with ${last?.event ?? 'nothing'}, not service.usage` };
  const frame = JSON.parse(last.data) as { ink_charged?: unknown; request_id?: unknown };
  if (typeof frame.ink_charged !== 'number') return { ...base, charged: undefined, failure: `usage frame without ink_charged: ${last.data}` };
  if (frame.request_id !== requestId) return { ...base, charged: undefined, failure: `usage frame names ${String(frame.request_id)}, header ${requestId}` };
  return { ...base, charged: frame.ink_charged, failure: '' };
}

t.test('Postgres paused 5 s (SIGSTOP, whole cluster): a leased key keeps being served and billed, keys without a lease get fast 503s', async (t) => {
  const closers: Array<() => Promise<unknown> | unknown> = [];
  t.teardown(async () => {
    for (const c of closers.reverse()) await c();
  });
  const pg = await startPrivatePostgres((m) => t.comment(m));
  closers.push(() => pg.stop()); // continues a stopped cluster before stopping it
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY, maxRecordedRequests: 10_000 });
  closers.push(() => sim.close());

  const logLines: string[] = [];
  const log = createLogger('info', (line) => {
    if (logLines.length < 2_000) logLines.push(line);
  });
  const overrides: DeepPartial<Config> = {
    server: { port: 0, host: '127.0.0.1' },
    db: { url: pg.url, schema: 'public' },
    redis: { url: null },
    vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } },
    // The per-key request limit (60/min by default) would refuse this load with 429s.
    limits: { requestsPerMinute: 1_000_000 },
    // The keys' lookups must stay cached from the warm-up to SIGCONT (asserted below; a lookup is a
    // Postgres read): 30 s rather than the default 10, which a loaded machine's set-up could eat into.
    auth: { keyCacheMs: 30_000 },
    ledger: {
      // A lease stops being usable ttlMs - deadlineMarginMs after its last renewal (the heartbeat,
      // every heartbeatMs = 1 s, cannot renew it while Postgres is stopped): 15,000 - 3,000 = 12 s
      // of use past the last renewal, comfortably more than the 5 s pause (plus the up to 1 s
      // since the last heartbeat). The defaults (10,000 - 3,000 = 7 s) would leave a thinner margin.
      //
      // And the lease must hold enough spare Ink to pay for the pause, since a refill needs Postgres.
      // A take is sized max(minHolds x the hold, targetMs of the key's recent holds) and refilled
      // below half its last size, so right after the load starts (a take sized for the quiet
      // warm-up) the spare can be as little as ~500 Ink with the default minHolds (8), while this
      // load charges ~90 Ink/s (1 Ink a request; each hold is 22 Ink). With minHolds 100 every take
      // is at least 2,200 Ink, so the spare never falls much below 1,100 Ink: ~12 s of this load.
      lease: { ttlMs: 15_000, deadlineMarginMs: 3_000, minHolds: 100 },
    },
  };
  const config = loadConfig({}, overrides);
  const gw: Gateway = await createGateway(config, { log }); // migrates the fresh cluster
  let gwClosed = false;
  const closeGateway = async () => {
    if (gwClosed) return;
    gwClosed = true;
    await gw.close();
  };
  closers.push(closeGateway);
  // The test's own view of the database (never used while Postgres is stopped).
  const pool = createPool({ ...config.db, url: pg.url });
  closers.push(() => pool.end());
  await setLane(pool, 'messages', true);
  await gw.services.state.refresh();
  const escrow = gw.services.escrow;

  const funded = (name: string) => fundedKey(gw, name, FUNDS_INK);
  const ka = await funded('leased key A');
  const kb = await funded('never used key B');
  const kb2 = await funded('authenticated key B2');
  const liveLeases = async (keyId: string): Promise<number> =>
    (await pool.query(`SELECT count(*)::int AS n FROM leases WHERE key_id = $1 AND state = 'live'`, [keyId])).rows[0].n;

  // 1. Key A takes its lease with a few requests; its key is now also in the instance's key cache
  //    (auth.keyCacheMs, 30 s from this first lookup: the whole run up to SIGCONT must fit in it,
  //    asserted below, because a lookup is a Postgres read too).
  const aAll: AOutcome[] = [];
  const aFirstLookupMs = performance.now();
  for (const [i, stream] of [false, true, false].entries()) {
    const t0 = performance.now();
    const o = outcomeOf(await send(gw.url, ka.key, probe.body(stream, `keyA-warm-${i}`, A_DIRECTIVES)), -1, stream, t0);
    aAll.push(o);
    t.equal(o.failure, '', `A warm-up #${i + 1} (${stream ? 'stream' : 'non-stream'}): served and charged ${o.charged} Ink`);
  }
  t.ok(escrow.openLeases >= 1, `the gateway holds a lease (openLeases ${escrow.openLeases})`);
  t.ok((await liveLeases(ka.keyId)) >= 1, 'key A has a live lease row');
  t.equal(await liveLeases(kb.keyId), 0, 'key B has no lease');

  // B2: one request that fails validation (no max_tokens) after authentication, so the key is
  // remembered but holds nothing and has no lease; during the pause its requests reach the lease take.
  const b2Warm = await send(gw.url, kb2.key, { model: 'sonnet', messages: [{ role: 'user', content: 'escrow faults keyB2-warm' }] });
  t.equal(b2Warm.status, 400, `B2 is authenticated by a request refused before any hold (${b2Warm.text.slice(0, 120)})`);
  const b2LookupMs = performance.now() - b2Warm.elapsedMs;
  t.equal(await liveLeases(kb2.keyId), 0, 'key B2 has no lease');
  const simWarm = sim.requestCount;
  t.equal(simWarm, aAll.length, 'only A has reached the vendor so far');

  // 2. Bounded load on A: LOOPS loops, each at most MAX_PER_LOOP requests and LOAD_MAX_MS long,
  //    until told to stop (after SIGCONT).
  let stopLoad = false;
  const loadStart = performance.now();
  const loop = async (l: number): Promise<void> => {
    for (let i = 0; i < MAX_PER_LOOP && !stopLoad && performance.now() - loadStart < LOAD_MAX_MS; i++) {
      const stream = (i + l) % 2 === 1;
      const t0 = performance.now();
      let o: AOutcome;
      try {
        o = outcomeOf(await send(gw.url, ka.key, probe.body(stream, `keyA-l${l}-${i}`, A_DIRECTIVES)), l, stream, t0);
      } catch (e) {
        o = {
          loop: l,
          stream,
          startMs: t0,
          endMs: performance.now(),
          status: 0,
          requestId: undefined,
          charged: undefined,
          failure: `transport: ${(e as Error).message}`,
        };
      }
      aAll.push(o);
    }
  };
  const loops = Array.from({ length: LOOPS }, (_, l) => loop(l));
  const loadDone = Promise.all(loops);
  closers.push(async () => {
    stopLoad = true; // after a failed assertion too: the loops end before the gateway closes
    await loadDone;
  });
  await until('A load under way', () => (aAll.length >= 3 + WARM_LOAD_REQUESTS ? true : undefined));
  const stats0 = { ...escrow.stats };
  // Diagnostics only: A's lease as the gateway holds it (spare Ink, not counting holds in flight).
  const spareOfA = () => (escrow as unknown as { book: { byKey: Map<string, { spareInk: number }> } }).book.byKey.get(ka.keyId)?.spareInk;
  const spareAtPause = spareOfA();

  // A busy gateway's pool keeps idle connections (idleTimeoutMillis 30 s): make sure this one has
  // a few, so the first statements sent during the pause go out on open connections to the
  // stopped backends (and are executed when they continue) instead of all waiting to connect.
  await Promise.all(Array.from({ length: 4 }, () => gw.services.pool.query('SELECT 1')));
  // SIGSTOP the whole cluster: postmaster first, then every backend.
  const pidsPaused = pg.pids();
  pg.pause();
  const pausedAt = performance.now();
  let resumedAt = Number.NaN;
  closers.push(() => {
    if (Number.isNaN(resumedAt)) pg.resume(); // a failed assertion must not leave it stopped
  });
  t.ok(pidsPaused.length >= 2, `paused the postmaster and ${pidsPaused.length - 1} backends`);
  // SIGSTOP is delivered asynchronously: wait (bounded) until /proc shows each one stopped (or gone).
  const notStopped = () =>
    pidsPaused.filter((p) => {
      const s = procStat(p)?.state;
      return s !== undefined && s !== 'T' && s !== 'Z';
    });
  await until('every process of the cluster to be stopped', () => (notStopped().length === 0 ? true : undefined), 1_000, 5).catch(() => undefined);
  t.same(
    notStopped().map((p) => `${p}: ${procStat(p)?.state}`),
    [],
    'every process of the cluster is stopped',
  );

  // During the pause: B2 and B, alternately, stream and non-stream, one at a time. B2 goes first:
  // its lease take then finds the pool's idle connection and is really sent to the stopped backend
  // (later probes wait for a new connection, which the stopped postmaster never accepts).
  const bProbes: Array<{ who: string; stream: boolean; ms: number; status: number; code: unknown; retryAfter: unknown; message: string }> = [];
  for (let i = 0; performance.now() - pausedAt < PAUSE_MS - B_PROBE_TAIL_MS; i++) {
    const [who, k] = i % 2 === 1 ? (['B', kb] as const) : (['B2', kb2] as const);
    const stream = Math.floor(i / 2) % 2 === 1;
    const a = await send(gw.url, k.key, probe.body(stream, `keyB-${who}-${i}`, A_DIRECTIVES));
    bProbes.push({
      who,
      stream,
      ms: a.elapsedMs,
      status: a.status,
      code: a.json?.error?.code,
      retryAfter: a.headers['retry-after'],
      message: String(a.json?.error?.message ?? a.text.slice(0, 160)),
    });
  }
  // The fault itself lasts PAUSE_MS: wait out what is left of it (a timed fault, not a synchronisation).
  const left = PAUSE_MS - (performance.now() - pausedAt);
  if (left > 0) await new Promise((r) => setTimeout(r, left));
  t.same(notStopped(), [], 'still stopped at the end of the pause');
  pg.resume();
  resumedAt = performance.now();
  const pauseMs = resumedAt - pausedAt;
  stopLoad = true;
  await loadDone;
  const stats1 = { ...escrow.stats };
  t.comment(`A's lease: ${spareAtPause} Ink spare when Postgres stopped, ${spareOfA()} Ink after the pause`);
  t.comment(
    `Postgres stopped for ${pauseMs.toFixed(0)} ms; escrow stats during the pause: ${JSON.stringify(Object.fromEntries(Object.entries(stats1).map(([k, v]) => [k, v - (stats0 as Record<string, number>)[k]!])))}`,
  );

  t.ok(
    resumedAt - aFirstLookupMs < config.auth.keyCacheMs,
    `A's key stayed in the key cache for the whole pause (${(resumedAt - aFirstLookupMs).toFixed(0)} ms < ${config.auth.keyCacheMs} ms)`,
  );
  t.ok(
    resumedAt - b2LookupMs < config.auth.keyCacheMs,
    `B2's key stayed in the key cache for the whole pause (${(resumedAt - b2LookupMs).toFixed(0)} ms < ${config.auth.keyCacheMs} ms)`,
  );

  // A: zero failures, before, during and after the pause.
  const inPause = aAll.filter((o) => o.startMs >= pausedAt && o.endMs <= resumedAt);
  const overlapping = aAll.filter((o) => o.endMs > pausedAt && o.startMs < resumedAt);
  const failed = aAll.filter((o) => o.failure !== '');
  const failedInPause = overlapping.filter((o) => o.failure !== '');
  t.comment(
    `A: ${aAll.length} requests in all (${aAll.filter((o) => o.stream).length} streams); ${inPause.length} started and ended inside the pause ` +
      `(${inPause.filter((o) => o.stream).length} streams), ${overlapping.length} overlapped it; ${failed.length} failed`,
  );
  t.same(
    failedInPause.map((o) => `${o.stream ? 'stream' : 'non-stream'} at +${(o.startMs - pausedAt).toFixed(0)} ms: ${o.failure}`),
    [],
    'A: zero failed requests during the pause',
  );
  t.same(
    failed.map((o) => o.failure),
    [],
    'A: zero failed requests in the whole run',
  );
  t.ok(inPause.length >= 20, `A was served throughout the pause (${inPause.length} requests inside it)`);
  t.ok(inPause.some((o) => o.stream) && inPause.some((o) => !o.stream), 'both streams and non-streams inside the pause');
  const lastInPause = Math.max(...inPause.map((o) => o.endMs - pausedAt));
  t.ok(lastInPause > PAUSE_MS - 1_000, `A still served in the last second of the pause (last answer at +${lastInPause.toFixed(0)} ms)`);
  t.ok(stats1.leaseHolds - stats0.leaseHolds >= inPause.length, 'every hold during the pause came from the lease');

  // B and B2: 503 provider_unavailable, each within the budget, and no vendor call.
  const bLat = bProbes.map((p) => p.ms);
  t.comment(`B probes during the pause: ${bProbes.map((p) => `${p.who}/${p.stream ? 's' : 'n'} ${p.status} ${p.ms.toFixed(0)} ms`).join(', ')}`);
  t.ok(bProbes.length >= 3 && bProbes.some((p) => p.who === 'B2'), `${bProbes.length} probes of keys without a lease`);
  for (const [i, p] of bProbes.entries()) {
    const what = `${p.who} #${i + 1} (${p.stream ? 'stream' : 'non-stream'})`;
    t.equal(p.status, 503, `${what}: 503 (${p.message})`);
    t.equal(p.code, 'provider_unavailable', `${what}: provider_unavailable`);
    t.ok(Number(p.retryAfter) >= 1, `${what}: Retry-After ${String(p.retryAfter)}`);
    t.ok(p.ms < B_BUDGET_MS, `${what}: answered in ${p.ms.toFixed(0)} ms (< ${B_BUDGET_MS} ms)`);
  }
  t.comment(`B 503 latencies: min ${Math.min(...bLat).toFixed(0)} ms, max ${Math.max(...bLat).toFixed(0)} ms over ${bLat.length}`);
  const bAtVendor = sim.requests.filter((q) => JSON.stringify(q.body ?? '').includes('keyB'));
  t.same(
    bAtVendor.map((q) => q.requestId),
    [],
    'no request of B or B2 reached the vendor',
  );
  t.equal(sim.requestCount, aAll.length, 'the vendor saw exactly the requests of A (every one of them answered 200)');

  // 3. After SIGCONT: the journal is written (bounded poll), then Postgres has exactly what A was told.
  const f0 = performance.now();
  let flushAttempts = 0;
  await until(
    'the write-behind journal to be written',
    async () => {
      flushAttempts++;
      return (await escrow.journal.flushAll(1_000)) ? true : undefined;
    },
    FLUSH_DEADLINE_MS,
    50,
  );
  t.comment(
    `journal written ${(performance.now() - f0).toFixed(0)} ms after SIGCONT returned (${flushAttempts} flushAll call(s)); journal stats ${JSON.stringify(escrow.journal.stats)}`,
  );

  const served = aAll.filter((o) => o.failure === '');
  const rows = new Map<string, { hold_state: string; charged_ink: number; leased: boolean }>(
    (await pool.query(`SELECT id, hold_state, charged_ink, leased FROM requests WHERE key_id = $1`, [ka.keyId])).rows.map((r) => [r.id, r]),
  );
  const wrong: string[] = [];
  for (const o of served) {
    const r = o.requestId === undefined ? undefined : rows.get(o.requestId);
    if (r === undefined) wrong.push(`${o.requestId}: no requests row`);
    else if (r.hold_state !== 'settled' || r.charged_ink !== o.charged || r.leased) {
      wrong.push(`${o.requestId}: ${r.hold_state} charged ${r.charged_ink} leased ${r.leased}, told ${o.charged}`);
    }
  }
  t.same(wrong.slice(0, 20), [], `every 200 of A (${served.length}) has its row, settled at the charge it was told`);
  t.equal(wrong.length, 0, `${wrong.length} rows differ`);
  t.equal(rows.size, served.length, 'and A has no other request row');
  const told = served.reduce((s, o) => s + o.charged!, 0);
  t.ok(told > 0, `A was told ${told} Ink in all (${served.length} requests)`);
  const keyA = (await pool.query('SELECT ink_charged, ink_reserved FROM api_keys WHERE id = $1', [ka.keyId])).rows[0];
  t.same(keyA, { ink_charged: told, ink_reserved: 0 }, "key A's charged total = the sum it was told, nothing reserved");
  t.equal((await walletRow(pool, ka.accountId)).charged_ink, told, "A's wallet charged total = the sum it was told");
  for (const k of [kb, kb2]) {
    t.equal((await pool.query('SELECT count(*)::int AS n FROM requests WHERE key_id = $1', [k.keyId])).rows[0].n, 0, 'no request row for a refused key');
  }
  // B2's lease take timed out on our side while Postgres was stopped and may have committed when it
  // resumed: an orphan the gateway never heard of. The heartbeat does not renew it (it only renews
  // the leases the instance knows), so it expires; the gateway recovers it once it is old enough, or
  // at shutdown, when nothing can be in flight any more.
  const leasesOpen = (await pool.query(`SELECT id, key_id, state, grant_ink + payg_ink AS ink FROM leases WHERE state = 'live' ORDER BY id`)).rows;
  const strays = leasesOpen.filter((l) => l.key_id !== ka.keyId);
  t.comment(`live leases before close: ${JSON.stringify(leasesOpen)}; gateway openLeases ${escrow.openLeases}`);
  if (strays.length > 0) {
    await escrow.beatNow();
    const detail = (
      await pool.query(
        `SELECT id, round(extract(epoch FROM expires_at - created_at) * 1000)::int AS expires_after_created_ms
        FROM leases WHERE id = ANY($1::bigint[])`,
        [strays.map((l) => l.id)],
      )
    ).rows;
    for (const d of detail) t.equal(d.expires_after_created_ms, config.ledger.lease.ttlMs, `orphan lease ${d.id}: never renewed, so it expires`);
  }
  await assertLedgerInvariant(t, pool);

  // Close: the gateway returns its leases; nothing stays live in Postgres.
  await closeGateway();
  t.equal(escrow.openLeases, 0, 'the gateway holds no lease after close');
  const liveAfter = (
    await pool.query(`SELECT id, key_id, state, grant_ink + payg_ink AS ink, recall_at, expires_at FROM leases WHERE state = 'live' ORDER BY id`)
  ).rows;
  t.same(liveAfter, [], 'no live lease remains in Postgres after close (an orphan too)');
  for (const k of [kb, kb2]) t.same(await walletRow(pool, k.accountId), { balance: FUNDS_INK, held: 0, charged_ink: 0 }, "a refused key's wallet is whole");
  const ledgerLog = logLines.filter((l) => /ledger\.(lease_return|close_|lease_recovered|late_flush|end_not_yet)/.test(l));
  if (ledgerLog.length > 0) t.comment(`ledger log: ${ledgerLog.slice(0, 10).join(' | ')}`);
  t.same(
    (await pool.query(`SELECT count(*)::int AS n FROM requests WHERE key_id = $1 AND (hold_state <> 'settled' OR leased)`, [ka.keyId])).rows[0].n,
    0,
    'A: every record still settled, none leased',
  );
  t.equal((await pool.query('SELECT ink_charged FROM api_keys WHERE id = $1', [ka.keyId])).rows[0].ink_charged, told, "key A's total unchanged by the close");
  await assertLedgerInvariant(t, pool);
});
