// The text lanes' pools (Anthropic, OpenAI): one undici Pool per deployment, made at start-up.
import type { Config } from '../../config/config.js';
import type { Logger } from '../../util/log.js';
import { createUpstream, type Upstream } from '../text-upstream.js';
import { createVendorPool } from './from-config.js';
import type { VendorPool } from './pool.js';

export type TextPool = VendorPool<Upstream>;

/** The pool of a text vendor, or undefined when it has no deployment (the lane then says it is not configured). */
export function createTextPool(vendor: 'anthropic' | 'openai', cfg: Config, log: Logger): TextPool | undefined {
  return createVendorPool(vendor, cfg, log, (d) => createUpstream(d.baseUrl, d.apiKey, cfg.upstream));
}
