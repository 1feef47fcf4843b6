// The production entry's operations around a gateway: the admin listener, and the SIGTERM order
// (readiness fails, the balancer gets drainDelayMs to notice, then the public port drains and
// everything stops). Kept out of createGateway so the many in-process gateways of the tests and
// the bench open no admin port unless they ask.
import type { Config } from '../config/config.js';
import type { GatewayMetrics } from '../metrics/metrics.js';
import type { Logger } from '../util/log.js';
import { startAdminServer, type AdminServer } from './admin-server.js';
import type { ReadinessCheck } from './readiness.js';

/** What this needs of a gateway (gateway.ts's Gateway has it; named here so ops imports no composition). */
export interface Operated {
  readonly ops: { readonly metrics: GatewayMetrics; readonly readiness: ReadinessCheck };
  close(): Promise<void>;
}

export function serveAdmin(gateway: Operated, cfg: Config, log: Logger): Promise<AdminServer> {
  return startAdminServer({ host: cfg.admin.host, port: cfg.admin.port, metrics: gateway.ops.metrics, readiness: gateway.ops.readiness, log });
}

/** /readyz turns 503 now; the public port keeps admitting for drainDelayMs, then drains and the gateway stops. */
export async function drainAndClose(gateway: Operated, cfg: Config, admin: AdminServer | undefined, log: Logger): Promise<void> {
  gateway.ops.readiness.drain();
  if (cfg.admin.drainDelayMs > 0) {
    log.info({ drain_delay_ms: cfg.admin.drainDelayMs }, 'ops.draining');
    await new Promise((r) => setTimeout(r, cfg.admin.drainDelayMs));
  }
  await gateway.close();
  await admin?.close();
}
