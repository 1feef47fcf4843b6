// The Vercel AI SDK (`ai` with @ai-sdk/anthropic and @ai-sdk/openai, what opencode and other agent
// tools are built on) driving a tool round trip through inkgate: streamText with a tool that runs,
// then a second step that answers with text. Its Anthropic provider checks every event type of a
// stream against the protocol's list and fails on our named `service.usage` event, so a key used
// with it is set to `comment` (or a request asks for it with X-Service-Usage-Frame); the Responses
// lane sends its frame as a comment already. The failing default is shown too, so this file
// notices if the setting stops working.
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { jsonSchema, stepCountIs, streamText, tool, type LanguageModel } from 'ai';
import t, { type Test } from 'tap';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import type { UsageFrame } from '../../src/accounts/usage-frame.js';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { journalWritten, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const ANTHROPIC_KEY = 'sk-ant-aisdk';
/** What the tool returns, which both simulators quote in their answer to the tool result. */
const TOOL_OUTPUT = /"temperature_c":21/;
const OPENAI_KEY = 'sk-oai-aisdk';

async function setup(t: Test) {
  const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY });
  const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY });
  t.teardown(() => Promise.all([anthropic.close(), openai.close()]));
  const g = await startTestGateway(t, {
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }, openai: { baseUrl: openai.url, apiKey: OPENAI_KEY } },
  });
  await setLane(g.db.pool, 'messages', true);
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  /** A funded account with one key in `usageFrame`. */
  const key = async (usageFrame: UsageFrame): Promise<{ id: string; key: string }> => {
    const acc = await createAccount(g.db.pool, { name: `AI SDK ${usageFrame}`, planId: 'pro' });
    await g.gw.services.ledger.topUp(acc.id, 50_000, 'test');
    return createKey(g.db.pool, { accountId: acc.id, name: 'agent', usageFrame });
  };
  return { g, anthropic, openai, key };
}

interface AgentRun {
  /** How many times the tool's execute ran. */
  toolRuns: number;
  /** Each step's text and why it ended. */
  steps: Array<{ text: string; finishReason: string }>;
  errors: unknown[];
}

/** One agent turn: the model calls `weather`, the SDK runs it and sends the result back, at most 3 steps. */
async function runAgent(model: LanguageModel, prompt: string): Promise<AgentRun> {
  let toolRuns = 0;
  const errors: unknown[] = [];
  const result = streamText({
    model,
    prompt,
    maxRetries: 0,
    // Our model ids are not the vendor's: the provider would otherwise warn and pick a default.
    maxOutputTokens: 300,
    tools: {
      weather: tool({
        description: 'The weather in a city.',
        inputSchema: jsonSchema<{ city: string }>({
          type: 'object',
          properties: { city: { type: 'string' } },
          required: ['city'],
          additionalProperties: false,
        }),
        execute: async ({ city }) => {
          toolRuns++;
          return { city, temperature_c: 21 };
        },
      }),
    },
    stopWhen: stepCountIs(3),
    onError: ({ error }) => void errors.push(error),
  });
  for await (const part of result.fullStream) if (part.type === 'error' && !errors.includes(part.error)) errors.push(part.error);
  const steps = (await result.steps).map((s) => ({ text: s.text, finishReason: String(s.finishReason) }));
  return { toolRuns, steps, errors };
}

/** The key's request records (written), and its spend as GET /v1/me reports it. */
async function billed(g: TestGateway, k: { id: string; key: string }) {
  await journalWritten(g);
  const rows = (await g.db.pool.query(`SELECT charged_ink, hold_state FROM requests WHERE key_id = $1 ORDER BY created_at`, [k.id])).rows;
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  return { rows, me };
}

/** The run went through both steps: the tool ran once, the second step's text came, each step was charged. */
async function assertRoundTrip(t: Test, g: TestGateway, k: { id: string; key: string }, run: AgentRun, secondText: RegExp): Promise<void> {
  t.same(run.errors.map(String), [], 'no error');
  t.equal(run.toolRuns, 1, 'the tool ran');
  t.equal(run.steps.length, 2, 'two steps: the tool call, then the answer');
  t.equal(run.steps[0]?.finishReason, 'tool-calls');
  t.equal(run.steps[1]?.finishReason, 'stop');
  t.match(run.steps[1]?.text, secondText, "the second step's text arrived");
  const { rows, me } = await billed(g, k);
  t.equal(rows.length, 2, 'two requests recorded');
  for (const r of rows) t.ok(r.charged_ink > 0, `a step charged ${r.charged_ink} Ink`);
  t.equal(
    me.key.ink_charged,
    rows.reduce((n: number, r: { charged_ink: number }) => n + r.charged_ink, 0),
    'GET /v1/me shows both charges',
  );
  t.equal(me.key.ink_reserved, 0, 'nothing left held');
}

t.test('Messages: the AI SDK Anthropic provider, tool round trip, key set to comment', async (t) => {
  const { g, key } = await setup(t);
  const k = await key('comment');
  const anthropic = createAnthropic({ baseURL: `${g.url}/v1`, authToken: k.key });
  const run = await runAgent(anthropic('sonnet'), 'What is the weather in Lisbon? [[sim:tool=weather]]');
  await assertRoundTrip(t, g, k, run, TOOL_OUTPUT);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Messages: a key left at event, the provider sending X-Service-Usage-Frame: comment', async (t) => {
  const { g, key } = await setup(t);
  const k = await key('event');
  const anthropic = createAnthropic({ baseURL: `${g.url}/v1`, authToken: k.key, headers: { 'X-Service-Usage-Frame': 'comment' } });
  const run = await runAgent(anthropic('sonnet'), 'What is the weather in Lisbon? [[sim:tool=weather]]');
  await assertRoundTrip(t, g, k, run, TOOL_OUTPUT);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Messages: the key and the frame both in headers, as a config file (opencode) sets them', async (t) => {
  const { g, key } = await setup(t);
  const k = await key('event');
  // apiKey goes out as x-api-key, which the gateway ignores; the key travels in Authorization.
  const anthropic = createAnthropic({
    baseURL: `${g.url}/v1`,
    apiKey: 'unused',
    headers: { Authorization: `Bearer ${k.key}`, 'X-Service-Usage-Frame': 'comment' },
  });
  const run = await runAgent(anthropic('sonnet'), 'What is the weather in Lisbon? [[sim:tool=weather]]');
  await assertRoundTrip(t, g, k, run, TOOL_OUTPUT);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Messages: with the default event frame the provider fails every step', async (t) => {
  const { g, key } = await setup(t);
  const k = await key('event');
  const anthropic = createAnthropic({ baseURL: `${g.url}/v1`, authToken: k.key });
  const run = await runAgent(anthropic('sonnet'), 'What is the weather in Lisbon? [[sim:tool=weather]]');
  t.ok(run.errors.length > 0, 'the SDK reports errors');
  for (const e of run.errors) {
    t.match(String(e), /Type validation failed[\s\S]*"type":"service\.usage"[\s\S]*No matching discriminator/, 'each refuses our named event');
  }
  t.ok(run.steps.length > 0);
  // The SDK reports the refused event on every step (how it goes on depends on its version); an
  // agent such as opencode treats a reported error as the end of the turn.
  t.ok(run.errors.length >= run.steps.length, `an error on each of the ${run.steps.length} steps (${run.errors.length} reported)`);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Responses: the AI SDK OpenAI provider, tool round trip, key as it is', async (t) => {
  const { g, key } = await setup(t);
  const k = await key('event');
  const openai = createOpenAI({ baseURL: `${g.url}/v1`, apiKey: k.key });
  const run = await runAgent(openai.responses('astra'), 'What is the weather in Lisbon? Please use the tool.');
  await assertRoundTrip(t, g, k, run, TOOL_OUTPUT);
  await assertLedgerInvariant(t, g.db.pool);
});
