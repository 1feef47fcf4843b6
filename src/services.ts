// The shared vocabulary of the products: what every lane and job is handed by the composition
// (gateway.ts). It sits below the products and above the stores, so products import it and never
// the composition itself (which imports them).
import type { Catalog } from './catalog/models.js';
import type { Config } from './config/config.js';
import type { DeploymentState } from './deployment/state.js';
import type { Escrow } from './ledger/escrow.js';
import type { FailStop } from './ledger/fail-stop.js';
import type { Ledger } from './ledger/ledger.js';
import type { RateLimiter } from './limits/rate-limiter.js';
import type { Pool } from './store/pool.js';
import type { Logger } from './util/log.js';
import type { GatewayMetrics } from './metrics/metrics.js';
import type { Tracing } from './tracing/hooks.js';

export interface Services {
  readonly config: Config;
  readonly pool: Pool;
  readonly state: DeploymentState;
  readonly limiter: RateLimiter;
  readonly catalog: Catalog;
  readonly ledger: Ledger;
  /** The text lanes' billing: escrow leases over the ledger. */
  readonly escrow: Escrow;
  /**
   * The one fail-stop handler: `trip` on any LedgerAssertionError met around a money move (never
   * catch one to carry on); `stopped` refuses billed admissions. Absent only in hand-built test services.
   */
  readonly failStop?: FailStop;
  readonly log: Logger;
  /** Counters the products feed (time to first token, upstream errors, Ink held and charged). */
  readonly metrics?: GatewayMetrics;
  /** OpenTelemetry traces (tracing/); absent: traces are off. */
  readonly tracing?: Tracing;
}
