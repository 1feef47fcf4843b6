// Shared set-up of the image tests (not a test file itself): a real gateway on 127.0.0.1:0 with the
// image routes, the Gemini simulator, a local HTTPS server for reference URLs, and the job runner
// driven by tick() with an injected clock. No sleeps: time moves only when a test calls advance().
import { runToEnd as runGenerationToEnd } from '../helpers/generations.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { Config, DeepPartial } from '../../src/config/config.js';
import type { Services } from '../../src/services.js';
import type { JobRunner } from '../../src/generations/job-runner.js';
import type { GenerationDeps as VideoDeps } from '../../src/generations/deps.js';
import { solidPng } from '../../simulators/gemini/png.js';
import { startGeminiSimulator, type GeminiSimulator } from '../../simulators/gemini/simulator.js';
import { startTestGateway, type Reply, type TestGateway } from '../helpers/gateway.js';
import { startHttpsServer, type TestHttpsServer } from '../helpers/https-server.js';
import type { TestDeployment } from '../helpers/pool-vendors.js';

export interface ImageHarness {
  readonly tg: TestGateway;
  readonly services: Services;
  readonly sim: GeminiSimulator;
  readonly refs: TestHttpsServer;
  readonly deps: VideoDeps;
  readonly engine: JobRunner;
  readonly config: Config;
  /** The PNG the reference server serves at /ok*.png. */
  readonly refPng: Buffer;
  ref(path: string): string;
  now(): number;
  advance(ms: number): void;
  funded(ink?: number, plan?: string, inkLimit?: number | null): Promise<{ key: string; accountId: string; keyId: string }>;
  submit(key: string, body: unknown, headers?: Record<string, string>): Promise<Reply>;
  get(key: string, id: string): Promise<Reply>;
  content(key: string, id: string): Promise<Reply>;
  /** advance(ms) then one engine round. */
  step(ms: number): Promise<number>;
}

/** Starts 2026-11-20T12:00:00Z, well inside a UTC day. */
export const START_MS = Date.UTC(2026, 10, 20, 12, 0, 0);

export async function startImageHarness(
  t: Test,
  opts: {
    config?: DeepPartial<Config>;
    geminiConfigured?: boolean;
    /** Gemini as deployments around the simulator (given its base URL and key) instead of the simulator alone. */
    deployments?: (url: string, apiKey: string) => TestDeployment[];
  } = {},
): Promise<ImageHarness> {
  let nowMs = START_MS;
  const clock = () => nowMs;
  const sim = await startGeminiSimulator();
  t.teardown(() => sim.close());
  const refPng = solidPng(8, 6, [10, 200, 30]);
  const refs = await startHttpsServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (path.startsWith('/ok')) {
      res.writeHead(200, { 'content-type': 'image/png', 'content-length': String(refPng.length) });
      res.end(req.method === 'HEAD' ? undefined : refPng);
    } else if (path.startsWith('/no-head')) {
      if (req.method === 'HEAD') res.writeHead(405).end();
      else res.writeHead(200, { 'content-type': 'image/png' }).end(refPng);
    } else if (path.startsWith('/text')) {
      res.writeHead(200, { 'content-type': 'text/plain' }).end(req.method === 'HEAD' ? undefined : 'not an image');
    } else if (path.startsWith('/gone-on-get')) {
      // HEAD succeeds at submit; the download at run time fails.
      if (req.method === 'HEAD') res.writeHead(200, { 'content-type': 'image/png' }).end();
      else res.writeHead(500).end();
    } else {
      res.writeHead(404).end();
    }
  });
  t.teardown(() => refs.close());
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-image-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

  const over = opts.config ?? {};
  const on = opts.geminiConfigured ?? true;
  // Every test URL is an IP literal; a host name must never reach real DNS (or the network) from a test.
  const resolver = async (host: string): Promise<string[]> => {
    throw new Error(`test resolver: no DNS for ${host}`);
  };
  const fetch = { allowList: new Set([`127.0.0.1:${refs.port}`]), ca: refs.ca, resolver };
  const tg = await startTestGateway(
    t,
    {
      ...over,
      dataDir,
      vendors: {
        gemini: opts.deployments
          ? { deployments: opts.deployments(sim.url, sim.apiKey) }
          : on
            ? { baseUrl: sim.url, apiKey: sim.apiKey }
            : { baseUrl: null, apiKey: null },
        ...(over.vendors ?? {}),
      },
      jobs: { pollIntervalMs: 5_000, maxPollIntervalMs: 20_000, timeoutMs: 600_000, leaseMs: 30_000, batchSize: 50, ...(over.jobs ?? {}) },
    },
    { jobs: { clock, fetch, owner: 'image-test-a', runner: { timers: false } } },
  );
  const services = tg.gw.services;
  const { deps, runner: engine } = tg.gw.jobs;
  return {
    tg,
    services,
    sim,
    refs,
    deps,
    engine,
    config: tg.config,
    refPng,
    ref: (path) => `https://127.0.0.1:${refs.port}${path}`,
    now: clock,
    advance: (ms) => {
      nowMs += ms;
    },
    async funded(ink = 1_000, plan = 'pro', inkLimit = null) {
      const k = await tg.newKey({ plan, inkLimit });
      if (ink > 0) await services.ledger.topUp(k.accountId, ink);
      return k;
    },
    submit: (key, body, headers) => tg.call('POST', '/v1/images/generations', { key, body, headers }),
    get: (key, id) => tg.call('GET', `/v1/images/generations/${id}`, { key }),
    content: (key, id) => tg.call('GET', `/v1/images/generations/${id}/content`, { key }),
    async step(ms) {
      nowMs += ms;
      return engine.tick();
    },
  };
}

export { rowOf, walletOf } from '../helpers/generations.js';

/** Engine rounds, advancing `stepMs` before each, until the generation is terminal. */
export const runToEnd = (h: ImageHarness, key: string, id: string, stepMs = 5_000, max = 40): Promise<Record<string, any>> =>
  runGenerationToEnd(h, key, id, stepMs, max);
