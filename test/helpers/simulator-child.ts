// An Anthropic simulator as a process of its own (pool-vendors.ts): prints {"url"} once it listens,
// then serves until it is killed. argv: the vendor key, the ms between content deltas.
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';

const sim = await startAnthropicSimulator({ apiKey: process.argv[2], tokenPaceMs: Number(process.argv[3] ?? 0) });
process.stdout.write(`${JSON.stringify({ url: sim.url })}\n`);
