// A vendor's pool as the configuration describes it, for the text and the generation vendors alike:
// one client per deployment, made at start-up, the cooldown settings of upstream.*, and the log
// lines a deployment entering or leaving a cooldown writes.
import { type Config, deploymentsOf, type VendorDeployment, type VendorId } from '../../config/config.js';
import type { Logger } from '../../util/log.js';
import { type PoolOptions, VendorPool } from './pool.js';

/** The cooldown settings of upstream.* as the pools take them. */
function cooldownOf(cfg: Config): PoolOptions['cooldown'] {
  const u = cfg.upstream;
  return { failures: u.cooldownFailures, minMs: u.cooldownMinMs, maxMs: u.cooldownMaxMs };
}

/** `vendor.deployment_cooling` and `vendor.deployment_recovered` (docs/operations.md#logs). */
function logPoolChanges(log: Logger): NonNullable<PoolOptions['onChange']> {
  return (change, member, vendor) => {
    if (change === 'recovered') {
      log.info({ vendor, deployment: member.name }, 'vendor.deployment_recovered');
      return;
    }
    const h = member.health;
    log.warn(
      { vendor, deployment: member.name, reason: h.reason, failures: h.failures, reopens_in_ms: Math.max(0, Math.round(h.reopensAtMs - performance.now())) },
      'vendor.deployment_cooling',
    );
  };
}

/** The vendor's pool, or undefined when it has no deployment (its lane or submits then say it is not configured). */
export function createVendorPool<C>(vendor: VendorId, cfg: Config, log: Logger, makeClient: (deployment: VendorDeployment) => C): VendorPool<C> | undefined {
  const list = deploymentsOf(cfg.vendors, vendor);
  if (list.length === 0) return undefined;
  return new VendorPool(vendor, list, makeClient, { cooldown: cooldownOf(cfg), onChange: logPoolChanges(log) });
}
