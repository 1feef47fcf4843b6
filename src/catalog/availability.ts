// Whether a model is on sale right now: its lane is switched on (certified), its vendor is
// configured (base URL and key), and it is not paused. Shared by the catalogue and the lanes.
import type { Config } from '../config/config.js';
import type { Lane, Snapshot } from '../deployment/state.js';
import type { CatalogModel, VendorName } from './models.js';

export function laneOf(model: CatalogModel): Lane {
  if (model.type === 'video') return 'video';
  if (model.type === 'image') return 'images';
  return model.protocol === 'anthropic-messages' ? 'messages' : 'responses';
}

export function vendorConfigured(cfg: Config, vendor: VendorName): boolean {
  const v = cfg.vendors[vendor];
  return v.baseUrl !== null && v.apiKey !== null;
}

export type Unavailable = { reason: 'lane' | 'paused'; retryAfterS: number } | null;

/** null when the model can be used now; otherwise why not, with the Retry-After to send. */
export function unavailability(cfg: Config, snap: Snapshot, model: CatalogModel): Unavailable {
  if (!snap.lanes[laneOf(model)] || !vendorConfigured(cfg, model.vendor)) return { reason: 'lane', retryAfterS: 300 };
  const pausedFor = snap.paused.get(model.id);
  if (pausedFor !== undefined) return { reason: 'paused', retryAfterS: pausedFor };
  return null;
}
