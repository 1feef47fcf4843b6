// The Responses lane's test set-up: an OpenAI simulator, a gateway with the lane open, a funded
// key, the official SDK pointed at the gateway, and a raw-stream reader for wire-level checks.
import OpenAI from 'openai';
import type { Test } from 'tap';
import { request } from 'undici';
import { textChargeInk, textUsageFromResponses } from '../../src/catalog/pricing.js';
import { setLane } from '../../src/deployment/state.js';
import { startOpenAISimulator, type OpenAISimulator } from '../../simulators/openai/simulator.js';
import { startTestGateway, type TestGateway } from './gateway.js';
import { assertLedgerInvariant } from './ledger-invariant.js';
import { parseSse, sseComments } from './sse.js';

export const VENDOR_KEY = 'sk-openai-test-vendor';

export interface ResponsesHarnessOptions {
  /** Gateway config overrides (startTestGateway's). */
  gateway?: Record<string, unknown>;
  /** The vendor URL the gateway uses, given the simulator (e.g. a rewriting server in front of it). */
  vendorUrl?: (sim: OpenAISimulator) => Promise<string>;
}

export async function startResponsesHarness(t: Test, o: ResponsesHarnessOptions = {}) {
  const sim = await startOpenAISimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const baseUrl = o.vendorUrl ? await o.vendorUrl(sim) : sim.url;
  const g = await startTestGateway(t, { vendors: { openai: { baseUrl, apiKey: VENDOR_KEY } }, ...o.gateway });
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 50_000, 'test');
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: k.key, maxRetries: 0 });
  return { sim, g, k, client, invariant: () => assertLedgerInvariant(t, g.db.pool) };
}

export const me = async (g: TestGateway, key: string) => (await g.call('GET', '/v1/me', { key })).json;

/** A streamed /v1/responses call read whole: status, headers, text, events and comment lines. */
export async function rawResponsesStream(g: TestGateway, key: string, body: Record<string, unknown>) {
  const r = await request(g.url + '/v1/responses', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'astra', stream: true, ...body }),
  });
  const text = await r.body.text();
  return { status: r.statusCode, headers: r.headers, text, events: parseSse(text), comments: sseComments(text) };
}

/** What a Responses usage object (`response.usage` of the terminal event or the answer) prices to. */
export function responsesCharge(
  usage: { input_tokens: number; output_tokens: number; input_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number } | null },
  model = 'text-6-astra',
): number {
  return textChargeInk(
    model,
    textUsageFromResponses({
      inputTokens: usage.input_tokens,
      cachedTokens: usage.input_tokens_details?.cached_tokens ?? 0,
      cacheWriteTokens: usage.input_tokens_details?.cache_write_tokens ?? 0,
      outputTokens: usage.output_tokens,
    }),
  );
}
