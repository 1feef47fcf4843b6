// Vendor faults on both text lanes, injected by our own HTTP-aware fault proxy between inkgate and
// the vendor simulators (test/helpers/fault-proxy.ts). Each fault must end in the documented answer
// with the right hold outcome (docs/api/errors.md, docs/api/billing.md, the streaming failures of
// docs/api/messages.md):
//   refused (never sent)                 -> 503 provider_unavailable, hold released
//   reset / stall / garbage / truncated  -> 502 provider_error (before the stream's headers), or
//     after dispatch                        a final `event: error` code usage_unknown (stream);
//                                           hold kept (ink_reserved > 0, status usage_unknown)
//   1-byte slices / slow drip            -> the normal answer, charged exactly as without a fault
// Stalls are bounded by short upstream timeouts, and each answer must arrive about when its
// timeout says. Every case ends with the ledger invariant.
import t, { type Test } from 'tap';
import { request } from 'undici';
import { setLane, type Lane } from '../../src/deployment/state.js';
import { textChargeInk } from '../../src/catalog/pricing.js';
import { responsesCharge } from '../helpers/responses-harness.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { cutAt, startFaultProxy, type Fault, type FaultProxy } from '../helpers/fault-proxy.js';
import { journalWritten, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { messagesStreamCharge } from '../helpers/messages-stack.js';
import { parseSse, sseComments } from '../helpers/sse.js';

const HEADERS_TIMEOUT_MS = 400;
const IDLE_TIMEOUT_MS = 400;
const STREAM_TOTAL_MS = 2500;
/** How late an answer may arrive after its timeout fired (Postgres writes, scheduling). */
const SLACK_MS = 1500;
const FUNDS_INK = 20_000;

interface LaneSpec {
  readonly lane: Lane;
  readonly path: string;
  readonly body: (stream: boolean, extra?: string) => Record<string, unknown>;
  /** Where a stream's receipt starts: cuts here leave no usage receipt. */
  readonly receiptEvent: string;
  /** Inside the receipt's JSON (after receiptEvent). */
  readonly receiptField: string;
  /** What the client saw -> the charge the usage implies, for a non-stream body and a stream. */
  readonly chargeOfBody: (json: any) => number;
  readonly chargeOfStream: (text: string) => number;
  /** The settled charge the stream's service frame names. */
  readonly frameCharge: (text: string) => number | undefined;
  /** The code of the stream's final error event. */
  readonly errorCode: (data: any) => string | undefined;
}

const MESSAGES: LaneSpec = {
  lane: 'messages',
  path: '/v1/messages',
  body: (stream, extra = '') => ({ model: 'sonnet', max_tokens: 200, stream, messages: [{ role: 'user', content: 'Hello through a faulty network' + extra }] }),
  receiptEvent: 'event: message_delta',
  receiptField: '"output_tokens"',
  chargeOfBody: (j) =>
    textChargeInk('assistant-sonnet-5', {
      inputTokens: j.usage.input_tokens,
      outputTokens: j.usage.output_tokens,
      cacheReadTokens: j.usage.cache_read_input_tokens ?? 0,
      cacheWriteTokens: j.usage.cache_creation_input_tokens ?? 0,
    }),
  chargeOfStream: (text) => messagesStreamCharge(parseSse(text)),
  frameCharge: (text) => {
    const last = parseSse(text).at(-1);
    return last?.event === 'service.usage' ? JSON.parse(last.data).ink_charged : undefined;
  },
  errorCode: (d) => d?.error?.code,
};

const RESPONSES: LaneSpec = {
  lane: 'responses',
  path: '/v1/responses',
  body: (stream, extra = '') => ({ model: 'astra', input: 'Hello through a faulty network' + extra, max_output_tokens: 200, stream }),
  receiptEvent: 'event: response.completed',
  receiptField: '"usage"',
  chargeOfBody: (j) => responsesCharge(j.usage),
  chargeOfStream: (text) => responsesCharge(JSON.parse(parseSse(text).find((e) => e.event === 'response.completed')!.data).response.usage),
  frameCharge: (text) => {
    const c = sseComments(text).find((x) => x.startsWith('service.usage '));
    return c === undefined ? undefined : JSON.parse(c.slice('service.usage '.length)).ink_charged;
  },
  errorCode: (d) => d?.code ?? d?.error?.code,
};

interface Rig {
  g: TestGateway;
  proxy: FaultProxy;
  spec: LaneSpec;
}

async function rig(t: Test, spec: LaneSpec): Promise<Rig> {
  let host: { port: number; baseUrl: (p: FaultProxy) => string };
  if (spec.lane === 'messages') {
    const sim = await startAnthropicSimulator({ apiKey: 'sk-ant-faults' });
    t.teardown(() => sim.close());
    host = { port: sim.port, baseUrl: (p) => p.url() };
  } else {
    const sim = await startOpenAISimulator({ apiKey: 'sk-openai-faults' });
    t.teardown(() => sim.close());
    host = { port: Number(new URL(sim.origin).port), baseUrl: (p) => p.url('/v1') };
  }
  const proxy = await startFaultProxy('127.0.0.1', host.port);
  t.teardown(() => proxy.close());
  const vendor = { baseUrl: host.baseUrl(proxy), apiKey: spec.lane === 'messages' ? 'sk-ant-faults' : 'sk-openai-faults' };
  const g = await startTestGateway(t, {
    vendors: spec.lane === 'messages' ? { anthropic: vendor } : { openai: vendor },
    // Non-streaming calls wait nonStreamTimeoutMs for their headers: the same short bound here.
    upstream: {
      headersTimeoutMs: HEADERS_TIMEOUT_MS,
      nonStreamTimeoutMs: HEADERS_TIMEOUT_MS,
      idleTimeoutMs: IDLE_TIMEOUT_MS,
      streamTotalMs: STREAM_TOTAL_MS,
      connectTimeoutMs: 1000,
    },
  });
  await setLane(g.db.pool, spec.lane, true);
  await g.gw.services.state.refresh();
  return { g, proxy, spec };
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: any;
  elapsedMs: number;
  endedAt: number;
}

async function send(r: Rig, key: string, stream: boolean, extra?: string): Promise<Answer> {
  const t0 = performance.now();
  const res = await request(r.g.url + r.spec.path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(r.spec.body(stream, extra)),
  });
  const text = await res.body.text();
  const endedAt = performance.now();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, text, json, elapsedMs: endedAt - t0, endedAt };
}

const me = async (g: TestGateway, key: string) => (await g.call('GET', '/v1/me', { key })).json;
/** The request's record once the gateway's journal is written (the lanes write records behind). */
const record = async (g: TestGateway, requestId: string) => {
  await journalWritten(g);
  return (await g.db.pool.query('SELECT status, hold_state, charged_ink FROM requests WHERE id = $1', [requestId])).rows[0];
};

async function newFundedKey(g: TestGateway) {
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, FUNDS_INK, 'faults');
  return k;
}

/** The hold is kept: open, usage_unknown, visible as ink_reserved, nothing charged. */
async function assertHoldKept(t: Test, g: TestGateway, key: string, requestId: string) {
  const m = await me(g, key);
  t.ok(m.key.ink_reserved > 0, `hold kept: ink_reserved ${m.key.ink_reserved}`);
  t.equal(m.key.ink_charged, 0, 'never silently charged');
  t.same(await record(g, requestId), { status: 'usage_unknown', hold_state: 'open', charged_ink: 0 }, 'request usage_unknown, hold open');
}

function withinTimeout(t: Test, elapsedMs: number, timeoutMs: number, what: string) {
  t.ok(elapsedMs >= timeoutMs - 50, `${what}: answered after ${Math.round(elapsedMs)} ms, not before the ${timeoutMs} ms timeout`);
  t.ok(elapsedMs <= timeoutMs + SLACK_MS, `${what}: answered within ${timeoutMs} + ${SLACK_MS} ms`);
}

/** A non-stream failure after dispatch, or a stream one before its headers: 502 and the hold kept. */
async function expect502Kept(t: Test, r: Rig, key: string, a: Answer) {
  t.equal(a.status, 502, 'HTTP 502');
  t.equal(a.json?.error?.code, 'provider_error', 'code provider_error');
  t.equal(a.json?.error?.type, 'provider_error');
  t.match(a.json?.error?.request_id, /^req_/);
  await assertHoldKept(t, r.g, key, a.json.error.request_id);
}

/** A stream failure after its headers: 200, then one final `event: error` code usage_unknown, hold kept. */
async function expectStreamUsageUnknown(t: Test, r: Rig, key: string, a: Answer) {
  t.equal(a.status, 200, 'the stream had started');
  const evs = parseSse(a.text);
  const errors = evs.filter((e) => e.event === 'error');
  t.equal(errors.length, 1, 'exactly one error event');
  t.equal(evs.at(-1)?.event, 'error', 'and it is the last event');
  t.equal(r.spec.errorCode(JSON.parse(errors[0]!.data)), 'usage_unknown', 'code usage_unknown');
  t.equal(r.spec.frameCharge(a.text), undefined, 'no usage frame');
  const requestId = a.headers['x-service-request-id'] as string;
  t.match(requestId, /^req_/);
  await assertHoldKept(t, r.g, key, requestId);
}

async function expectSuccess(t: Test, r: Rig, key: string, a: Answer, stream: boolean, baselineInk: number) {
  t.equal(a.status, 200, 'HTTP 200');
  let charged: number | undefined;
  if (stream) {
    charged = r.spec.frameCharge(a.text);
    t.equal(charged, r.spec.chargeOfStream(a.text), `the usage frame names the usage's charge (${charged} Ink)`);
    t.notOk(
      parseSse(a.text).some((e) => e.event === 'error'),
      'no error event',
    );
  } else {
    charged = Number(a.headers['x-service-ink-charged']);
    t.equal(charged, r.spec.chargeOfBody(a.json), `X-Service-Ink-Charged is the usage's charge (${charged} Ink)`);
  }
  t.equal(charged, baselineInk, 'the same charge as the same request without a fault');
  const m = await me(r.g, key);
  t.equal(m.key.ink_charged, charged);
  t.equal(m.key.ink_reserved, 0, 'hold settled');
  t.equal(m.ink.balance, FUNDS_INK - charged!);
}

for (const spec of [MESSAGES, RESPONSES]) {
  t.test(`${spec.lane} lane`, async (t) => {
    const r = await rig(t, spec);
    const { g, proxy } = r;
    // The charge and size of each answer without a fault, for the slices and drip cases.
    const baseline: Record<'stream' | 'body', number> = { stream: 0, body: 0 };
    const baselineBytes: Record<'stream' | 'body', number> = { stream: 0, body: 0 };

    /** One case: a fresh key, the fault, the request, the checks, then the ledger invariant. */
    const fault = (name: string, f: Fault, check: (t: Test, key: string) => Promise<void>) =>
      t.test(name, async (t) => {
        await proxy.setFault(f);
        const k = await newFundedKey(g);
        try {
          await check(t, k.key);
        } finally {
          await proxy.setFault({ kind: 'pass' });
        }
        await assertLedgerInvariant(t, g.db.pool);
      });

    for (const stream of [false, true]) {
      const mode = stream ? 'stream' : 'non-stream';
      // Where the body is broken: before the receipt (stream) / inside the JSON, before usage.
      const beforeReceipt = stream ? cutAt(spec.receiptEvent) : cutAt('"usage"');
      const insideReceipt = stream ? cutAt(spec.receiptField, { after: spec.receiptEvent, offset: 3 }) : cutAt('"usage"', { offset: 4 });

      await fault(`${mode}: no fault (baseline)`, { kind: 'pass' }, async (t, key) => {
        const a = await send(r, key, stream);
        t.equal(a.status, 200);
        const ink = stream ? r.spec.frameCharge(a.text) : Number(a.headers['x-service-ink-charged']);
        t.ok(Number.isInteger(ink) && ink! > 0, `charged ${ink} Ink`);
        baseline[stream ? 'stream' : 'body'] = ink!;
        baselineBytes[stream ? 'stream' : 'body'] = Buffer.byteLength(a.text);
        t.equal((await me(g, key)).key.ink_reserved, 0);
      });

      await fault(`${mode}: connection refused -> 503 provider_unavailable, hold released`, { kind: 'refuse' }, async (t, key) => {
        const a = await send(r, key, stream);
        t.equal(a.status, 503);
        t.equal(a.json?.error?.code, 'provider_unavailable');
        t.ok(Number(a.headers['retry-after']) >= 1, 'Retry-After');
        t.same(await record(g, a.json.error.request_id), { status: 'released', hold_state: 'released', charged_ink: 0 });
        const m = await me(g, key);
        t.equal(m.key.ink_reserved, 0, 'hold released');
        t.equal(m.ink.balance, FUNDS_INK, 'wallet whole');
      });

      await fault(`${mode}: stall before headers -> 502 within headersTimeoutMs, hold kept`, { kind: 'stall-before-headers' }, async (t, key) => {
        const stalled = proxy.next('stalled');
        const a = await send(r, key, stream);
        const s = await stalled;
        await expect502Kept(t, r, key, a);
        t.ok(s.atMs < a.endedAt, 'the vendor had answered: the proxy withheld it');
        withinTimeout(t, a.elapsedMs, HEADERS_TIMEOUT_MS, 'headers stall');
      });

      await fault(`${mode}: reset after the request, before headers -> 502, hold kept`, { kind: 'reset-before-headers' }, async (t, key) => {
        const a = await send(r, key, stream);
        await expect502Kept(t, r, key, a);
      });

      await fault(`${mode}: garbage instead of the status line -> 502, hold kept`, { kind: 'garbage-head' }, async (t, key) => {
        const a = await send(r, key, stream);
        await expect502Kept(t, r, key, a);
      });

      await fault(
        `${mode}: reset mid-body -> ${stream ? 'event: error usage_unknown' : '502'}, hold kept`,
        { kind: 'reset-mid-body', at: beforeReceipt },
        async (t, key) => {
          const a = await send(r, key, stream);
          if (stream) await expectStreamUsageUnknown(t, r, key, a);
          else await expect502Kept(t, r, key, a);
        },
      );

      await fault(`${mode}: stall mid-body -> bounded by idleTimeoutMs, hold kept`, { kind: 'stall-mid-body', at: beforeReceipt }, async (t, key) => {
        const stalled = proxy.next('stalled');
        const a = await send(r, key, stream);
        const s = await stalled;
        if (stream) await expectStreamUsageUnknown(t, r, key, a);
        else await expect502Kept(t, r, key, a);
        withinTimeout(t, a.endedAt - s.atMs, IDLE_TIMEOUT_MS, 'body stall');
      });

      await fault(
        `${mode}: garbage bytes mid-body -> ${stream ? 'event: error usage_unknown' : '502'}, hold kept`,
        { kind: 'garbage-body', at: beforeReceipt },
        async (t, key) => {
          const a = await send(r, key, stream);
          if (stream) await expectStreamUsageUnknown(t, r, key, a);
          else await expect502Kept(t, r, key, a);
        },
      );

      await fault(
        `${mode}: truncated JSON in a cleanly ended answer -> ${stream ? 'event: error usage_unknown' : '502'}, hold kept`,
        { kind: 'truncate-body', at: insideReceipt },
        async (t, key) => {
          const a = await send(r, key, stream);
          if (stream) await expectStreamUsageUnknown(t, r, key, a);
          else await expect502Kept(t, r, key, a);
        },
      );

      await fault(`${mode}: 1-byte slices -> the normal answer and charge`, { kind: 'slices', sliceBytes: 1 }, async (t, key) => {
        const a = await send(r, key, stream);
        t.ok(proxy.writes > 200, `the answer went out in ${proxy.writes} one-byte writes`);
        await expectSuccess(t, r, key, a, stream, baseline[stream ? 'stream' : 'body']);
      });

      // The whole answer takes several idle timeouts, in gaps of a third of one: the idle timer must
      // restart on every slice, and the total stays under streamTotalMs. (Gaps nearer the timeout
      // left a loaded machine a pause of a few hundred ms to turn a healthy drip into a timeout.)
      const gapMs = Math.round(IDLE_TIMEOUT_MS * 0.3);
      const dripSliceBytes = Math.ceil(baselineBytes[stream ? 'stream' : 'body'] / 8); // about 8 gaps
      await fault(
        `${mode}: slow drip (${gapMs} ms gaps) -> the normal answer and charge`,
        { kind: 'drip', sliceBytes: dripSliceBytes, delayMs: gapMs },
        async (t, key) => {
          const a = await send(r, key, stream);
          t.ok(proxy.writes >= 6, `${proxy.writes} writes`);
          t.ok(a.elapsedMs > IDLE_TIMEOUT_MS, `the answer took ${Math.round(a.elapsedMs)} ms, longer than one idle timeout`);
          await expectSuccess(t, r, key, a, stream, baseline[stream ? 'stream' : 'body']);
        },
      );

      // A drip that never ends: every gap under the idle timeout, so only the total cap stops it.
      await fault(`${mode}: endless drip -> bounded by streamTotalMs, hold kept`, { kind: 'drip', sliceBytes: 8, delayMs: gapMs }, async (t, key) => {
        const a = await send(r, key, stream);
        if (stream) {
          await expectStreamUsageUnknown(t, r, key, a);
          withinTimeout(t, a.elapsedMs, STREAM_TOTAL_MS, 'endless drip');
        } else {
          await expect502Kept(t, r, key, a);
          withinTimeout(t, a.elapsedMs, STREAM_TOTAL_MS, 'endless drip');
        }
      });

      // The same drip on the vendor's error body (a 500): its message is best effort, the wait is not.
      await fault(
        `${mode}: endless drip of a vendor 500 body -> 502 bounded by streamTotalMs, hold kept`,
        { kind: 'drip', sliceBytes: 4, delayMs: gapMs },
        async (t, key) => {
          const a = await send(r, key, stream, ' [[sim:status=500]]');
          await expect502Kept(t, r, key, a);
          withinTimeout(t, a.elapsedMs, STREAM_TOTAL_MS, 'endless error-body drip');
        },
      );
    }
  });
}
