// Shared set-up of the video tests (not a test file itself): a real gateway on 127.0.0.1:0 with the
// video routes, the Ark simulator (its result files over HTTPS), a local HTTPS server for reference
// URLs, and a job runner driven by tick() with the simulator's clock. No sleeps: time moves only
// when a test calls advance().
import { runToEnd as runGenerationToEnd } from '../helpers/generations.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { Config, DeepPartial } from '../../src/config/config.js';
import type { MediaStore } from '../../src/media/media-store.js';
import type { Logger } from '../../src/util/log.js';
import type { Services } from '../../src/services.js';
import { startJobRunner, type JobRunner } from '../../src/generations/job-runner.js';
import { createGenerationDeps as createVideoDeps, type GenerationDeps as VideoDeps } from '../../src/generations/deps.js';
import { startArkSimulator, type ArkSimulator, type ArkSimulatorOptions } from '../../simulators/ark/simulator.js';
import { startTestGateway, type Reply, type TestGateway } from '../helpers/gateway.js';
import { startHttpsServer, testCert, type TestHttpsServer } from '../helpers/https-server.js';
import type { TestDeployment } from '../helpers/pool-vendors.js';

export interface VideoHarness {
  readonly tg: TestGateway;
  readonly services: Services;
  readonly sim: ArkSimulator;
  readonly refs: TestHttpsServer;
  readonly deps: VideoDeps;
  readonly engine: JobRunner;
  readonly config: Config;
  /** https://127.0.0.1:<port><path> on the reference server. */
  ref(path: string): string;
  advance(ms: number): void;
  /** A key on a fresh account on `plan`, topped up with `ink`. */
  funded(ink?: number, plan?: string, inkLimit?: number | null): Promise<{ key: string; accountId: string; keyId: string }>;
  submit(key: string, body: unknown, headers?: Record<string, string>): Promise<Reply>;
  get(key: string, id: string): Promise<Reply>;
  content(key: string, id: string): Promise<Reply>;
  /** advance(ms) then one engine round. */
  step(ms: number): Promise<number>;
  /** A second engine (another "instance") over the same database. */
  engineAs(owner: string): Promise<{ deps: VideoDeps; engine: JobRunner }>;
}

export const RENDER_MS = 60_000;
export const QUEUE_MS = 15_000;

export async function startVideoHarness(
  t: Test,
  opts: {
    config?: DeepPartial<Config>;
    sim?: ArkSimulatorOptions;
    arkConfigured?: boolean;
    media?: MediaStore;
    log?: Logger;
    /** Ark as deployments around the simulator (given its base URL and key) instead of the simulator alone. */
    deployments?: (url: string, apiKey: string) => TestDeployment[];
  } = {},
): Promise<VideoHarness> {
  const cert = testCert();
  const sim = await startArkSimulator({ renderMs: RENDER_MS, queueMs: QUEUE_MS, tls: cert, ...(opts.sim ?? {}) });
  t.teardown(() => sim.close());
  const refs = await startHttpsServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (path.startsWith('/ok')) {
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': '4' });
      res.end(req.method === 'HEAD' ? undefined : 'PNG!');
    } else if (path.startsWith('/no-head')) {
      if (req.method === 'HEAD') res.writeHead(405).end();
      else res.writeHead(200, { 'content-type': 'image/png' }).end('PNG!');
    } else {
      res.writeHead(404).end();
    }
  });
  t.teardown(() => refs.close());
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-video-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

  const over = opts.config ?? {};
  const arkOn = opts.arkConfigured ?? true;
  const allowList = new Set([`127.0.0.1:${refs.port}`, sim.contentHostPort]);
  const fetch = { allowList, ca: refs.ca };
  const tg = await startTestGateway(
    t,
    {
      ...over,
      dataDir,
      vendors: {
        ark: opts.deployments
          ? { deployments: opts.deployments(sim.url, sim.apiKey) }
          : arkOn
            ? { baseUrl: sim.url, apiKey: sim.apiKey }
            : { baseUrl: null, apiKey: null },
        ...(over.vendors ?? {}),
      },
      jobs: { pollIntervalMs: 5_000, maxPollIntervalMs: 20_000, timeoutMs: 600_000, leaseMs: 30_000, batchSize: 50, ...(over.jobs ?? {}) },
    },
    {
      jobs: { clock: sim.now, fetch, owner: 'test-instance-a', runner: { timers: false }, ...(opts.media !== undefined ? { media: opts.media } : {}) },
      ...(opts.log ? { log: opts.log } : {}),
    },
  );
  const services = tg.gw.services;
  const { deps, runner: engine } = tg.gw.jobs;

  const h: VideoHarness = {
    tg,
    services,
    sim,
    refs,
    deps,
    engine,
    config: tg.config,
    ref: (path) => `https://127.0.0.1:${refs.port}${path}`,
    advance: (ms) => sim.advance(ms),
    async funded(ink = 10_000, plan = 'pro', inkLimit = null) {
      const k = await tg.newKey({ plan, inkLimit });
      if (ink > 0) await services.ledger.topUp(k.accountId, ink);
      return k;
    },
    submit: (key, body, headers) => tg.call('POST', '/v1/video/generations', { key, body, headers }),
    get: (key, id) => tg.call('GET', `/v1/video/generations/${id}`, { key }),
    content: (key, id) => tg.call('GET', `/v1/video/generations/${id}/content`, { key }),
    async step(ms) {
      sim.advance(ms);
      return engine.tick();
    },
    async engineAs(owner) {
      const d = await createVideoDeps(services, { clock: sim.now, fetch, owner });
      t.teardown(() => d.close());
      const e = startJobRunner(services, d, { timers: false });
      t.teardown(() => e.stop());
      return { deps: d, engine: e };
    },
  };
  return h;
}

export { rowOf, walletOf } from '../helpers/generations.js';

/** Engine rounds, advancing `stepMs` before each, until the generation is terminal. */
export const runToEnd = (h: VideoHarness, key: string, id: string, stepMs = 10_000, max = 40): Promise<Record<string, any>> =>
  runGenerationToEnd(h, key, id, stepMs, max);
