// Both text-vendor simulators in a child process of a bench (bench/text-breakdown.ts), so their
// CPU does not count as the measured process's. Sends {anthropic, openai} URLs once listening;
// any message from the parent stops it.
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';

const a = await startAnthropicSimulator({ apiKey: 'sk-ant-bench', maxRecordedRequests: 0 });
const o = await startOpenAISimulator({ apiKey: 'sk-oai-bench', maxRecordedRequests: 0 });
process.send!({ anthropic: a.url, openai: o.url });
process.on('message', () => void Promise.all([a.close(), o.close()]).then(() => process.exit(0)));
process.on('disconnect', () => process.exit(0));
