// `npm run demo`: the vendor simulators on 127.0.0.1, and the vendor configuration that points the
// gateway at them, so every endpoint can be tried offline with the same data dir and demo key.
import { startAnthropicSimulator } from './anthropic/simulator.js';
import { startOpenAISimulator } from './openai/simulator.js';

export interface DemoVendors {
  readonly config: {
    anthropic: { baseUrl: string; apiKey: string };
    openai: { baseUrl: string; apiKey: string };
  };
  close(): Promise<void>;
}

export async function startDemoVendors(): Promise<DemoVendors> {
  const anthropic = await startAnthropicSimulator({ apiKey: 'sk-ant-demo', tokenPaceMs: 20 });
  const openai = await startOpenAISimulator({ apiKey: 'sk-openai-demo', tokenPaceMs: 20 });
  return {
    config: {
      anthropic: { baseUrl: anthropic.url, apiKey: 'sk-ant-demo' },
      openai: { baseUrl: openai.url, apiKey: 'sk-openai-demo' },
    },
    close: async () => {
      await Promise.all([anthropic.close(), openai.close()]);
    },
  };
}
