// GET /v1/models and GET /v1/models/{id}: public, limited per client address.
import type { Config } from '../config/config.js';
import type { DeploymentState } from '../deployment/state.js';
import { ApiError } from '../errors.js';
import type { Route } from '../server/router.js';
import { unavailability } from './availability.js';
import { createCardBuilder } from './cards.js';
import type { Catalog } from './models.js';

export function catalogRoutes(cfg: Config, catalog: Catalog, state: DeploymentState): Route[] {
  const cards = createCardBuilder(catalog, cfg.pricing.videoPriceSet);
  const available = (id: string) => {
    const m = catalog.get(id);
    return m !== undefined && unavailability(cfg, state.current, m) === null;
  };
  return [
    {
      method: 'GET',
      pattern: '/v1/models',
      access: 'public',
      handler: async (ctx) => ctx.sendJson(200, cards.list(available)),
    },
    {
      method: 'GET',
      pattern: '/v1/models/:id',
      access: 'public',
      handler: async (ctx) => {
        const card = cards.get(ctx.params[0]!, available);
        if (!card) throw new ApiError('model_not_found', { message: `Unknown model ${JSON.stringify(ctx.params[0]!.slice(0, 100))}.`, param: 'id' });
        ctx.sendJson(200, card);
      },
    },
  ];
}
