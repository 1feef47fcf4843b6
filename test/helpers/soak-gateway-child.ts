// The gateway under soak, in its own process, so the RSS and open file descriptors we sample are
// the gateway's alone (not the load generator's or the simulators'). One argument: JSON
// {config, allowList, ca}. Prints `READY <url>` once listening; SIGTERM closes it cleanly.
// Every second `LAG <ms> <bytes>`: the event loop's worst delay in that second and, every fifth, the V8 heap in use after a full collection (else -1). Errors go to stderr as JSON lines at level `error` (the parent keeps the last few).
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadConfig } from '../../src/config/config.js';
import { createGateway } from '../../src/gateway.js';
import { createLogger } from '../../src/util/log.js';

const arg = JSON.parse(process.argv[2] ?? '{}') as { config: object; allowList: string[]; ca: string };
// Only the configuration given: the parent decides everything, the environment plays no part.
const cfg = loadConfig({}, arg.config);
const gw = await createGateway(cfg, {
  skipMigrate: true,
  log: createLogger('error', (l) => process.stderr.write(l + '\n')),
  jobs: { owner: 'soak-gateway', fetch: { allowList: new Set(arg.allowList), ca: arg.ca }, runner: { timers: true } },
});
process.stdout.write(`READY ${gw.url}\n`);
// The loop's worst delay each second: a stall longer than Redis's 200 ms command timeout turns a
// healthy Redis into a 503, and the soak wants to tell that apart from a pause.
const lag = monitorEventLoopDelay({ resolution: 10 });
const fullGc = (globalThis as { gc?: () => void }).gc;
let ticks = 0;
lag.enable();
setInterval(() => {
  // Every fifth second a full collection first (the parent starts this with --expose-gc): the heap then reported is what is live.
  const full = fullGc !== undefined && ++ticks % 5 === 0;
  if (full) fullGc();
  process.stdout.write(`LAG ${Math.round(lag.max / 1e6)} ${full ? process.memoryUsage().heapUsed : -1}\n`);
  lag.reset();
}, 1_000).unref();
let closing = false;
process.on('SIGTERM', () => {
  if (closing) return;
  closing = true;
  void gw.close().finally(() => process.exit(0));
});
