// The text lanes' routes: POST /v1/messages and /v1/responses through the shared proxy
// (text-proxy.ts), and the Messages token count, which is not billed. The billed two are marked so
// the server knows their reserve re-checks a remembered key (keyRecheckedByReserve).
import type { Catalog } from '../catalog/models.js';
import type { TextBilling } from '../ledger/text-billing.js';
import type { Route } from '../server/router.js';
import type { Services } from '../services.js';
import type { TextPool } from '../vendors/pool/text-pools.js';
import { createCountTokensHandler } from './messages/count-tokens.js';
import { messagesLane } from './messages/lane.js';
import { responsesLane } from './responses/lane.js';
import { createTextHandler } from './text-proxy.js';

/** What the text routes bill through and send to. */
export interface TextRouteDeps {
  /** The one billing boundary (over the escrow, or over a ledger that bills nothing: a bench's billing-off gateway). */
  readonly billing: TextBilling;
  readonly catalog: Catalog;
  /** Each text vendor's deployments; undefined where none is configured (the lane then says what opens it). */
  readonly anthropic: TextPool | undefined;
  readonly openai: TextPool | undefined;
}

export function textRoutes(services: Services, deps: TextRouteDeps): Route[] {
  const { config } = services;
  const bodyBytes = config.limits.textBodyBytes;
  const messages = messagesLane(config, deps.catalog);
  return [
    {
      method: 'POST',
      pattern: '/v1/messages',
      access: 'key',
      keyRecheckedByReserve: true,
      requestIdHeader: 'request-id',
      bodyBytes,
      handler: createTextHandler(messages, { services, billing: deps.billing, upstream: deps.anthropic }),
    },
    {
      // Not billed, so no reserve re-checks the key: it is looked up on every call.
      method: 'POST',
      pattern: '/v1/messages/count_tokens',
      access: 'key',
      requestIdHeader: 'request-id',
      bodyBytes,
      rateBucket: {
        prefix: 'count-tokens:',
        perMinute: config.limits.countTokensPerMinute,
        message: `More than ${config.limits.countTokensPerMinute} token counts per minute on this key (the count_tokens limit, apart from the key's other requests).`,
      },
      handler: createCountTokensHandler({ services, lane: messages, upstream: deps.anthropic }),
    },
    {
      method: 'POST',
      pattern: '/v1/responses',
      access: 'key',
      keyRecheckedByReserve: true,
      bodyBytes,
      handler: createTextHandler(responsesLane(config, deps.catalog), { services, billing: deps.billing, upstream: deps.openai }),
    },
  ];
}
