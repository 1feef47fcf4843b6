// `npm run demo`: the vendor simulators on 127.0.0.1, and the vendor configuration that points the
// gateway at them, so every endpoint can be tried offline with the same data dir and demo key.
// Video results are fetched by the gateway through its SSRF-safe fetcher, which refuses loopback:
// the demo lets exactly the Ark simulator's content host through, trusting its self-signed
// certificate. That exemption exists only here, in code; no configuration can open it.
import { startAnthropicSimulator } from './anthropic/simulator.js';
import { startArkSimulator } from './ark/simulator.js';
import { startGeminiSimulator } from './gemini/simulator.js';
import { startOpenAISimulator } from './openai/simulator.js';
import { selfSignedCert } from './self-signed-cert.js';

export interface DemoVendors {
  readonly config: {
    anthropic: { baseUrl: string; apiKey: string };
    openai: { baseUrl: string; apiKey: string };
    ark: { baseUrl: string; apiKey: string };
    gemini: { baseUrl: string; apiKey: string };
  };
  /** For createGateway's `video.fetch`. */
  readonly videoFetch: { allowList: ReadonlySet<string>; ca: string };
  close(): Promise<void>;
}

const DEMO_MODEL_SNAPSHOT = '20260901';

/**
 * The demo's video task: queued 5 s, done 15 s after it was made. The gateway first looks 5 s after
 * submit (jobs.pollIntervalMs), then 10 s later (the wait doubles): that second look, 15 s after
 * submit, finds the task done, so a demo video is ready in about 15 s (docs/simulators.md). A render
 * a little longer would wait for the third look, at 35 s.
 */
export const DEMO_VIDEO_TIMING = Object.freeze({ queueMs: 5_000, renderMs: 15_000 });

export async function startDemoVendors(): Promise<DemoVendors> {
  // Like the real APIs, the demo vendors answer with a dated snapshot of the model asked for.
  const anthropic = await startAnthropicSimulator({ apiKey: 'sk-ant-demo', tokenPaceMs: 20, modelSuffix: DEMO_MODEL_SNAPSHOT });
  const openai = await startOpenAISimulator({ apiKey: 'sk-openai-demo', tokenPaceMs: 20, modelSuffix: DEMO_MODEL_SNAPSHOT });
  const cert = selfSignedCert();
  const ark = await startArkSimulator({ apiKey: 'ark-demo', ...DEMO_VIDEO_TIMING, tls: cert });
  const gemini = await startGeminiSimulator({ apiKey: 'gemini-demo' });
  return {
    config: {
      anthropic: { baseUrl: anthropic.url, apiKey: 'sk-ant-demo' },
      openai: { baseUrl: openai.url, apiKey: 'sk-openai-demo' },
      ark: { baseUrl: ark.url, apiKey: 'ark-demo' },
      gemini: { baseUrl: gemini.url, apiKey: 'gemini-demo' },
    },
    videoFetch: { allowList: new Set([ark.contentHostPort]), ca: cert.cert },
    close: async () => {
      await Promise.all([anthropic.close(), openai.close(), ark.close(), gemini.close()]);
    },
  };
}
