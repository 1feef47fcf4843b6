// A gateway with the Messages lane on the Anthropic simulator, a funded key and the official SDK
// pointed at it: the set-up the Messages tests share.
import Anthropic from '@anthropic-ai/sdk';
import type { Test } from 'tap';
import type { Config, DeepPartial } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import type { EngineName } from '../../src/server/engine.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { textChargeInk } from '../../src/catalog/pricing.js';
import { startTestGateway } from './gateway.js';
import type { SseEvent } from './sse.js';
import { assertLedgerInvariant } from './ledger-invariant.js';
import type { Logger } from '../../src/util/log.js';

export const ANTHROPIC_VENDOR_KEY = 'sk-ant-test-vendor';

export interface MessagesStackOptions {
  /** Open the lane (default true). */
  enable?: boolean;
  engine?: EngineName;
  config?: DeepPartial<Config>;
  /** The gateway's logger (default silent). */
  log?: Logger;
}

export async function startMessagesStack(t: Test, opts: MessagesStackOptions = {}) {
  const sim = await startAnthropicSimulator({ apiKey: ANTHROPIC_VENDOR_KEY });
  t.teardown(() => sim.close());
  const g = await startTestGateway(
    t,
    {
      ...opts.config,
      vendors: { anthropic: { baseUrl: sim.url, apiKey: ANTHROPIC_VENDOR_KEY } },
      ...(opts.engine ? { server: { engine: opts.engine } } : {}),
    },
    opts.log ? { log: opts.log } : {},
  );
  if (opts.enable !== false) {
    await setLane(g.db.pool, 'messages', true);
    await g.gw.services.state.refresh();
  }
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  const client = new Anthropic({ baseURL: g.url, authToken: k.key, apiKey: null, maxRetries: 0 });
  return { sim, g, k, client, invariant: () => assertLedgerInvariant(t, g.db.pool) };
}

/** What the vendor's receipt in a Messages stream (message_start's usage, message_delta's) prices to. */
export function messagesStreamCharge(events: readonly SseEvent[], model = 'assistant-sonnet-5'): number {
  const start = JSON.parse(events.find((e) => e.event === 'message_start')!.data).message.usage;
  const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data).usage;
  return textChargeInk(model, {
    inputTokens: start.input_tokens,
    outputTokens: delta.output_tokens,
    cacheReadTokens: start.cache_read_input_tokens ?? 0,
    cacheWriteTokens: start.cache_creation_input_tokens ?? 0,
  });
}
