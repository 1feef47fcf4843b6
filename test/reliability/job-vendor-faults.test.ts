// Vendor faults on the job products, injected by our own HTTP-aware fault proxy
// (test/helpers/fault-proxy.ts) between inkgate and the Ark (video) and Gemini (image) simulators.
// The text lanes have their own suite (vendor-faults.test.ts); here each fault hits one of the
// three vendor calls the job runner makes, and must end in the answer docs/api/ and the README give:
//
//   video create (inside POST /v1/video/generations, before the 202)
//     connection refused, reset, stall, garbage      -> 503 provider_unavailable, hold released, row voided
//     a 2xx whose JSON is cut short (no task id)     -> 502 provider_error, hold released, row voided
//     1-byte slices, slow drip                       -> 202, the task is created once
//   video poll (GET task, by the job runner)         -> any fault is retried: the generation stays
//     queued/running with its hold, then succeeds and settles once when the vendor answers again;
//     a fault that lasts past jobs.timeoutMs fails it `timeout` and refunds the whole hold
//   image call (generateContent, by the job runner)
//     refused, reset, stall, garbage                 -> retried with back-off, the client pays once
//     a 2xx whose JSON is cut short                  -> failed provider_failed, refunded in full
//     1-byte slices, slow drip                       -> succeeded, charged the fixed price
//
// Every vendor wait is bounded (the Ark client's total timeout is half the lease, so leaseMs 2 s
// gives 1 s; the Gemini client is built with a 1 s bound), and every case ends with the ledger
// invariant. The engine runs on the Ark simulator's clock, driven by tick(): no sleeps.
import t, { type Test } from 'tap';
import { setLane } from '../../src/deployment/state.js';
import { MAX_VENDOR_CALLS } from '../../src/generations/images/run.js';
import { startArkSimulator } from '../../simulators/ark/simulator.js';
import { startGeminiSimulator } from '../../simulators/gemini/simulator.js';
import { cutAt, startFaultProxy, type Fault, type FaultProxy } from '../helpers/fault-proxy.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { rowOf, walletOf } from '../helpers/generations.js';
import { testCert } from '../helpers/https-server.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const RENDER_MS = 60_000;
const LEASE_MS = 2_000; // the Ark client's whole-call bound is half of it: 1 s
const VENDOR_CALL_MS = 1_000;
const POLL_MS = 5_000;
const JOB_TIMEOUT_MS = 600_000;
const SLACK_MS = 1_500;
const FUNDS_INK = 1_000;

// ---- one gateway, both vendors behind fault proxies ------------------------------------------

const cert = testCert();
const ark = await startArkSimulator({ renderMs: RENDER_MS, queueMs: 15_000, tls: cert });
t.teardown(() => ark.close());
const gem = await startGeminiSimulator();
t.teardown(() => gem.close());
const arkProxy = await startFaultProxy('127.0.0.1', ark.port);
t.teardown(() => arkProxy.close());
const gemProxy = await startFaultProxy('127.0.0.1', gem.port);
t.teardown(() => gemProxy.close());

const g: TestGateway = await startTestGateway(
  t,
  {
    vendors: {
      ark: { baseUrl: arkProxy.url('/api/v3'), apiKey: ark.apiKey },
      gemini: { baseUrl: gemProxy.url('/v1beta'), apiKey: gem.apiKey },
    },
    upstream: { connectTimeoutMs: 1_000 },
    // The production Gemini client waits up to jobs.imageCallTimeoutMs (180 s) for one image; a 1 s
    // bound keeps the stall cases short.
    jobs: {
      pollIntervalMs: POLL_MS,
      maxPollIntervalMs: 20_000,
      timeoutMs: JOB_TIMEOUT_MS,
      leaseMs: LEASE_MS,
      batchSize: 50,
      imageCallTimeoutMs: VENDOR_CALL_MS,
    },
  },
  {
    jobs: {
      clock: ark.now,
      fetch: { allowList: new Set([ark.contentHostPort]), ca: cert.cert },
      owner: 'faults-instance',
      runner: { timers: false },
    },
  },
);
await setLane(g.db.pool, 'video', true);
await setLane(g.db.pool, 'images', true);
await g.gw.services.state.refresh();
const pool = g.db.pool;
const engine = g.gw.jobs.runner;
const h = { services: g.gw.services };

// ---- helpers ------------------------------------------------------------------------------------

async function funded() {
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, FUNDS_INK, 'job faults');
  return k;
}

const submitVideo = (key: string, prompt: string) => g.call('POST', '/v1/video/generations', { key, body: { model: 'clip-2.0-fast', prompt } });
const submitImage = (key: string, prompt: string) => g.call('POST', '/v1/images/generations', { key, body: { model: 'image-1', prompt } });
const getGen = (key: string, kind: 'video' | 'images', id: string) => g.call('GET', `/v1/${kind}/generations/${id}`, { key });

/** One case: the fault is in force only inside `fn`; the invariant is checked after. */
function faultCase(t: Test, name: string, proxy: FaultProxy, f: Fault, fn: (t: Test) => Promise<void>) {
  return t.test(name, async (t) => {
    await proxy.setFault(f);
    try {
      await fn(t);
    } finally {
      await proxy.setFault({ kind: 'pass' });
    }
    await assertLedgerInvariant(t, pool);
  });
}

async function timed<T>(fn: () => Promise<T>): Promise<{ v: T; ms: number }> {
  const t0 = performance.now();
  const v = await fn();
  return { v, ms: performance.now() - t0 };
}

/** Engine rounds after advancing the clock, until the generation is terminal (bounded). */
async function runToEnd(key: string, kind: 'video' | 'images', id: string, stepMs: number, max = 20): Promise<any> {
  for (let i = 0; i < max; i++) {
    const r = (await getGen(key, kind, id)).json;
    if (r.status === 'succeeded' || r.status === 'failed') return r;
    ark.advance(stepMs);
    await engine.tick();
  }
  throw new Error(`${id} not terminal after ${max} rounds`);
}

// Cut points inside each vendor answer, found by content, not byte counts.
const CREATE_BEFORE_ID = cutAt('"id"');
const CREATE_INSIDE_ID = cutAt('cgt-', { offset: 4 });
const TASK_BEFORE_STATUS = cutAt('"status"');
const TASK_INSIDE_STATUS = cutAt('"status"', { offset: 5 });
const IMAGE_BEFORE_DATA = cutAt('"inlineData"');
const IMAGE_INSIDE_DATA = cutAt('"inlineData"', { offset: 20 });

/** Faults that lose the answer: each must be treated as "the vendor is unavailable". */
const LOST: Array<[string, (before: ReturnType<typeof cutAt>) => Fault, boolean]> = [
  ['connection refused', () => ({ kind: 'refuse' }), false],
  ['stall before headers', () => ({ kind: 'stall-before-headers' }), true],
  ['reset after the request, before headers', () => ({ kind: 'reset-before-headers' }), false],
  ['garbage instead of the status line', () => ({ kind: 'garbage-head' }), false],
  ['reset mid-body', (at) => ({ kind: 'reset-mid-body', at }), false],
  ['stall mid-body', (at) => ({ kind: 'stall-mid-body', at }), true],
  ['garbage bytes mid-body', (at) => ({ kind: 'garbage-body', at }), false],
];

// ---- video create -------------------------------------------------------------------------------

t.test('video: faults on the vendor create (inside the submit)', async (t) => {
  for (const [name, make, stalls] of LOST) {
    await faultCase(t, `${name} -> 503 provider_unavailable, hold released, nothing visible`, arkProxy, make(CREATE_BEFORE_ID), async (t) => {
      const k = await funded();
      const creates = ark.creates.length;
      const { v: r, ms } = await timed(() => submitVideo(k.key, `create fault: ${name}`));
      t.equal(r.status, 503, r.text);
      t.equal(r.json?.error?.code, 'provider_unavailable');
      t.ok(Number(r.headers['retry-after']) >= 1, 'Retry-After');
      if (stalls) t.ok(ms >= VENDOR_CALL_MS - 50 && ms <= VENDOR_CALL_MS + SLACK_MS, `bounded by the vendor call timeout: ${Math.round(ms)} ms`);
      if (name === 'connection refused') t.equal(ark.creates.length, creates, 'nothing reached the vendor');
      await assertVoidedAndReleased(t, k, r.json.error.request_id);
    });
  }

  await faultCase(
    t,
    'a 2xx with its JSON cut short (no task id) -> 502 provider_error, hold released',
    arkProxy,
    { kind: 'truncate-body', at: CREATE_INSIDE_ID },
    async (t) => {
      const k = await funded();
      const r = await submitVideo(k.key, 'create fault: truncated');
      t.equal(r.status, 502, r.text);
      t.equal(r.json?.error?.code, 'provider_error');
      await assertVoidedAndReleased(t, k, r.json.error.request_id);
    },
  );

  for (const f of [
    { kind: 'slices', sliceBytes: 1 },
    { kind: 'drip', sliceBytes: 4, delayMs: 20 },
  ] as const) {
    await faultCase(t, `${f.kind} -> 202, one task, then succeeds and settles once`, arkProxy, f, async (t) => {
      const k = await funded();
      const creates = ark.creates.length;
      const r = await submitVideo(k.key, `create ${f.kind}`);
      t.equal(r.status, 202, r.text);
      t.ok(arkProxy.writes > 3, `the answer came in ${arkProxy.writes} writes`);
      t.equal(ark.creates.length, creates + 1, 'one vendor task');
      await arkProxy.setFault({ kind: 'pass' });
      const done = await runToEnd(k.key, 'video', r.json.id, RENDER_MS);
      t.equal(done.status, 'succeeded');
      t.equal(done.ink_charged, r.json.ink_reserved);
      t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK - r.json.ink_reserved, held: 0, charged: r.json.ink_reserved });
    });
  }
});

async function assertVoidedAndReleased(t: Test, k: { key: string; accountId: string }, requestId: string) {
  t.match(requestId, /^req_/);
  const req = (await pool.query('SELECT status, hold_state, charged_ink FROM requests WHERE id = $1', [requestId])).rows[0];
  t.same(req, { status: 'released', hold_state: 'released', charged_ink: 0 }, 'the hold is released, nothing charged');
  const gens = (await pool.query('SELECT state FROM generations WHERE account_id = $1', [k.accountId])).rows;
  t.same(
    gens.map((x) => x.state),
    ['voided'],
    'the generation is voided (never shown)',
  );
  t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK, held: 0, charged: 0 }, 'wallet whole');
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(me.key.ink_reserved, 0);
  // The slot is free again: the next submit goes through.
  await arkProxy.setFault({ kind: 'pass' });
  const next = await submitVideo(k.key, 'after the fault');
  t.equal(next.status, 202, 'the next submit is accepted');
}

// ---- video poll ---------------------------------------------------------------------------------

t.test('video: faults on the vendor poll are retried; the generation settles once', async (t) => {
  const cases: Array<[string, Fault]> = [
    ...LOST.map(([name, make]) => [name, make(TASK_BEFORE_STATUS)] as [string, Fault]),
    ['a 2xx with its JSON cut short', { kind: 'truncate-body', at: TASK_INSIDE_STATUS }],
  ];
  for (const [name, f] of cases) {
    await t.test(`${name} -> poll error, hold kept, then succeeded and settled once`, async (t) => {
      const k = await funded();
      const r = await submitVideo(k.key, `poll fault: ${name}`);
      t.equal(r.status, 202, r.text);
      const id = r.json.id;
      const hold = r.json.ink_reserved;
      ark.advance(RENDER_MS + 1_000); // the vendor has finished: only the fault stands between
      await arkProxy.setFault(f);
      let row: Record<string, any>;
      try {
        const { v: n, ms } = await timed(() => engine.tick());
        t.ok(n >= 1, 'the engine took the row');
        t.ok(ms <= VENDOR_CALL_MS + SLACK_MS, `the poll was bounded: ${Math.round(ms)} ms`);
        row = await rowOf(h, id);
      } finally {
        await arkProxy.setFault({ kind: 'pass' });
      }
      t.ok(['queued', 'running'].includes(row.state), `still ${row.state}`);
      t.equal(row.poll_errors, 1, 'counted as a poll error');
      t.equal(row.hold_state, 'open', 'the hold is kept');
      t.equal((await getGen(k.key, 'video', id)).json.status === 'failed', false, 'not failed by one lost poll');
      const downloads = ark.downloads();
      const done = await runToEnd(k.key, 'video', id, POLL_MS * 4);
      t.equal(done.status, 'succeeded');
      t.equal(done.ink_charged, hold);
      t.equal(ark.downloads(), downloads + 1, 'downloaded once');
      const after = await rowOf(h, id);
      t.equal(after.hold_state, 'settled');
      t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK - hold, held: 0, charged: hold });
      await assertLedgerInvariant(t, pool);
    });
  }

  for (const f of [
    { kind: 'slices', sliceBytes: 1 },
    { kind: 'drip', sliceBytes: 64, delayMs: 20 },
  ] as const) {
    await t.test(`${f.kind} on the poll -> succeeded at once, settled once`, async (t) => {
      const k = await funded();
      const r = await submitVideo(k.key, `poll ${f.kind}`);
      ark.advance(RENDER_MS + 1_000);
      await arkProxy.setFault(f);
      try {
        await engine.tick();
        t.ok(arkProxy.writes > 3, `the task answer came in ${arkProxy.writes} writes`);
      } finally {
        await arkProxy.setFault({ kind: 'pass' });
      }
      const row = await rowOf(h, r.json.id);
      t.equal(row.state, 'succeeded');
      t.equal(row.poll_errors, 0);
      t.equal(row.hold_state, 'settled');
      t.equal(Number(row.ledger_charged), r.json.ink_reserved);
      await assertLedgerInvariant(t, pool);
    });
  }

  await t.test('a vendor unreachable past jobs.timeoutMs -> failed timeout, whole hold refunded', async (t) => {
    const k = await funded();
    const r = await submitVideo(k.key, 'poll fault: for good');
    await arkProxy.setFault({ kind: 'refuse' });
    let done: any;
    try {
      done = await runToEnd(k.key, 'video', r.json.id, JOB_TIMEOUT_MS / 4, 10);
    } finally {
      await arkProxy.setFault({ kind: 'pass' });
    }
    t.equal(done.status, 'failed');
    t.equal(done.error.code, 'timeout');
    t.equal(done.ink_charged, 0);
    t.ok((await rowOf(h, r.json.id)).poll_errors >= 1);
    t.equal((await rowOf(h, r.json.id)).hold_state, 'refunded');
    t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK, held: 0, charged: 0 }, 'refunded in full');
    await assertLedgerInvariant(t, pool);
  });
});

// ---- image call ---------------------------------------------------------------------------------

t.test('images: faults on the vendor call', async (t) => {
  for (const [name, make, stalls] of LOST) {
    await t.test(`${name} -> retried with back-off; succeeded, charged once`, async (t) => {
      const k = await funded();
      const r = await submitImage(k.key, `image fault: ${name}`);
      t.equal(r.status, 202, r.text);
      const id = r.json.id;
      await gemProxy.setFault(make(IMAGE_BEFORE_DATA));
      let row: Record<string, any>;
      try {
        const { ms } = await timed(() => engine.tick());
        if (stalls) t.ok(ms >= VENDOR_CALL_MS - 50 && ms <= VENDOR_CALL_MS + SLACK_MS, `bounded by the call timeout: ${Math.round(ms)} ms`);
        row = await rowOf(h, id);
      } finally {
        await gemProxy.setFault({ kind: 'pass' });
      }
      t.equal(row.state, 'queued', 'back to queued');
      t.equal(row.poll_errors, 1);
      t.equal(row.hold_state, 'open', 'the hold is kept');
      t.ok(row.next_poll_at.getTime() > ark.now(), 'not due again at once (back-off)');
      const done = await runToEnd(k.key, 'images', id, POLL_MS * 4);
      t.equal(done.status, 'succeeded');
      t.equal(done.ink_charged, 3);
      t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK - 3, held: 0, charged: 3 }, 'the client pays once');
      await assertLedgerInvariant(t, pool);
    });
  }

  await faultCase(
    t,
    'a 2xx with its JSON cut short -> failed provider_failed, refunded in full',
    gemProxy,
    { kind: 'truncate-body', at: IMAGE_INSIDE_DATA },
    async (t) => {
      const k = await funded();
      const r = await submitImage(k.key, 'image fault: truncated');
      await engine.tick();
      const done = (await getGen(k.key, 'images', r.json.id)).json;
      t.equal(done.status, 'failed');
      t.equal(done.error.code, 'provider_failed');
      t.equal(done.ink_charged, 0);
      t.equal((await rowOf(h, r.json.id)).hold_state, 'refunded');
      t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK, held: 0, charged: 0 });
    },
  );

  // An image answer is a few KB of base64: in 1-byte writes (thousands of them) a loaded machine
  // can spend the whole 1-second call budget just relaying it, so slices of 7 bytes (an odd size:
  // every JSON token and base64 quartet still splits across writes, hundreds of them).
  for (const f of [
    { kind: 'slices', sliceBytes: 7 },
    { kind: 'drip', sliceBytes: 256, delayMs: 20 },
  ] as const) {
    await faultCase(t, `${f.kind} -> succeeded, charged the fixed price once`, gemProxy, f, async (t) => {
      const k = await funded();
      const r = await submitImage(k.key, `image ${f.kind}`);
      await engine.tick();
      t.ok(gemProxy.writes > 3, `the answer came in ${gemProxy.writes} writes`);
      const done = (await getGen(k.key, 'images', r.json.id)).json;
      t.equal(done.status, 'succeeded');
      t.equal(done.ink_charged, 3);
      t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK - 3, held: 0, charged: 3 });
    });
  }

  await t.test('a vendor unreachable for every call -> failed after the call budget, refunded', async (t) => {
    const k = await funded();
    const r = await submitImage(k.key, 'image fault: for good');
    await gemProxy.setFault({ kind: 'reset-before-headers' });
    let done: any;
    try {
      done = await runToEnd(k.key, 'images', r.json.id, 20_000, 20);
    } finally {
      await gemProxy.setFault({ kind: 'pass' });
    }
    t.equal(done.status, 'failed');
    t.equal(done.error.code, 'provider_failed');
    t.equal(done.ink_charged, 0);
    t.equal((await rowOf(h, r.json.id)).polls, MAX_VENDOR_CALLS, `${MAX_VENDOR_CALLS} calls, no more`);
    t.same(await walletOf(h, k.accountId), { balance: FUNDS_INK, held: 0, charged: 0 }, 'refunded in full');
    await assertLedgerInvariant(t, pool);
  });
});
