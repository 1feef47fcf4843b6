// The text lanes' pools (Anthropic, OpenAI): one undici Pool per deployment, made at start-up, and
// the log lines a deployment entering or leaving a cooldown writes.
import { type Config, deploymentsOf } from '../../config/config.js';
import type { Logger } from '../../util/log.js';
import { createUpstream, type Upstream } from '../text-upstream.js';
import { type PoolOptions, VendorPool } from './pool.js';

export type TextPool = VendorPool<Upstream>;

/** The cooldown settings of upstream.* as the pools take them. */
export function cooldownOf(cfg: Config): PoolOptions['cooldown'] {
  const u = cfg.upstream;
  return { failures: u.cooldownFailures, minMs: u.cooldownMinMs, maxMs: u.cooldownMaxMs };
}

/** `vendor.deployment_cooling` and `vendor.deployment_recovered` (docs/operations.md#logs). */
export function logPoolChanges(log: Logger): NonNullable<PoolOptions['onChange']> {
  return (change, m, vendor) => {
    if (change === 'recovered') {
      log.info({ vendor, deployment: m.name }, 'vendor.deployment_recovered');
      return;
    }
    const h = m.health;
    log.warn(
      { vendor, deployment: m.name, reason: h.reason, failures: h.failures, reopens_in_ms: Math.max(0, Math.round(h.reopensAtMs - performance.now())) },
      'vendor.deployment_cooling',
    );
  };
}

/** The pool of a text vendor, or undefined when it has no deployment (the lane then says it is not configured). */
export function createTextPool(vendor: 'anthropic' | 'openai', cfg: Config, log: Logger): TextPool | undefined {
  const list = deploymentsOf(cfg.vendors, vendor);
  if (list.length === 0) return undefined;
  return new VendorPool(vendor, list, (d) => createUpstream(d.baseUrl, d.apiKey, cfg.upstream), {
    cooldown: cooldownOf(cfg),
    onChange: logPoolChanges(log),
  });
}
