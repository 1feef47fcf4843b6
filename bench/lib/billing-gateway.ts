// The gateway the text benches measure: billing on (real Postgres ledger), both text lanes open and
// pointed at the simulators, limits raised out of the way, one funded key.
import { loadConfig } from '../../src/config/config.js';
import { prepareBenchGateway } from '../tool/bench-account.js';
import { createGateway, type Gateway } from '../../src/gateway.js';
import { silentLogger } from '../../src/util/log.js';
import { benchDatabaseUrl } from './env.js';

export interface BillingGateway {
  readonly gw: Gateway;
  readonly key: string;
  readonly dbKind: string;
  stop(): Promise<void>;
}

/** `server`: the HTTP layer's settings (a bench picks the engine). */
export async function startBillingGateway(
  sims: { anthropic: string; openai: string },
  schemaPrefix: string,
  extra: { server?: { engine: 'uws' | 'node' } } = {},
): Promise<BillingGateway> {
  const db = await benchDatabaseUrl();
  const schema = `${schemaPrefix}_${process.pid}`;
  const cfg = loadConfig(
    {},
    {
      server: { port: 0, ...extra.server },
      db: { url: db.url, schema, poolMax: 32 },
      limits: { requestsPerMinute: 1_000_000, publicRequestsPerMinute: 1_000_000 },
      vendors: { anthropic: { baseUrl: sims.anthropic, apiKey: 'sk-ant-bench' }, openai: { baseUrl: sims.openai, apiKey: 'sk-oai-bench' } },
    },
  );
  const gw = await createGateway(cfg, { log: silentLogger });
  const pool = gw.services.pool;
  const key = await prepareBenchGateway(gw);
  return {
    gw,
    key,
    dbKind: db.kind,
    stop: async () => {
      await pool.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => undefined);
      await gw.close();
      await db.stop();
    },
  };
}
