// GET /v1/responses with a WebSocket upgrade: Responses over one socket, each `response.create`
// event one POST /v1/responses through the same route (server/ws-hub.ts). Opened only while the
// lane is: a closed lane is the same 503 a POST gets, before the upgrade.
import type { Config } from '../../config/config.js';
import { ApiError } from '../../errors.js';
import type { TextBilling } from '../../ledger/text-billing.js';
import type { WebSocketRoute } from '../../server/ws-hub.js';
import type { Services } from '../../services.js';
import { closedLaneMessage } from '../text-lane.js';

const RESPONSES_PATH = '/v1/responses';

export function responsesWebSocketRoute(services: Services, billing: TextBilling, configured: boolean, cfg: Config['responses']['websocket']): WebSocketRoute {
  const closed = closedLaneMessage({ product: 'responses', lane: 'responses' }, configured);
  return {
    path: RESPONSES_PATH,
    maxSocketsPerKey: cfg.maxSocketsPerKey,
    idleMs: cfg.idleTimeoutMs,
    maxLifeMs: cfg.maxLifeMs,
    check: () => {
      billing.admit(); // a stopped instance opens no socket (the fail-stop's 503)
      if (!configured || !services.state.current.lanes.responses) throw new ApiError('provider_unavailable', { message: closed, retryAfterS: 300 });
    },
  };
}
