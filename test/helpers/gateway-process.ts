// A real gateway in a process of its own (its own pools, timers, leases and journal), for the
// tests that kill an instance or run several side by side on one Postgres. The child runs the
// compiled tree when it is fresh (else the sources through the tap loader), prints its URL when it serves, and on
// SIGTERM closes the way the production entry point does (drain, write the journal, return leases).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import type { Config, DeepPartial } from '../../src/config/config.js';
import { productCode } from './product-code.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const src = (p: string) => productCode().url(p);
// Generous: a loaded two-core machine has taken 13 s to start one process, and tests start three at once.
const READY_TIMEOUT_MS = 90_000;
const STOP_TIMEOUT_MS = 20_000;
const TAIL_BYTES = 4000;

const CHILD = () => `
import { loadConfig } from '${src('config/config.js')}';
import { createGateway } from '${src('gateway.js')}';
import { silentLogger } from '${src('util/log.js')}';
import { drainAndClose, serveAdmin } from '${src('ops/serve.js')}';
const cfg = loadConfig({}, JSON.parse(process.env.CHILD_CONFIG));
const opts = JSON.parse(process.env.CHILD_OPTIONS);
const gw = await createGateway(cfg, { skipMigrate: true, log: silentLogger, ...opts });
const admin = await serveAdmin(gw, cfg, silentLogger);
process.once('SIGTERM', () => void drainAndClose(gw, cfg, admin, silentLogger).then(() => process.exit(0), () => process.exit(1)));
process.stdout.write('READY ' + gw.url + ' ' + admin.url + '\\n');
`;

export interface GatewayProcess {
  readonly url: string;
  /** Its admin listener (/metrics, /healthz, /readyz), on a port of its own. */
  readonly adminUrl: string;
  readonly pid: number;
  readonly child: ChildProcess;
  /** SIGKILL, resolved once the process is gone (and checked it died of that signal). */
  kill(): Promise<void>;
  /** SIGTERM (a drained stop), resolved with the exit code; SIGKILL if it hangs. */
  stop(): Promise<number | null>;
}

/**
 * Starts a gateway process on `config` (migrations already run by the test's schema) and waits
 * until it serves. `options` go to createGateway as they are (JSON only).
 */
export async function startGatewayProcess(t: Test, config: DeepPartial<Config>, options: Record<string, unknown> = {}): Promise<GatewayProcess> {
  // Any free admin port, and no drain delay unless the test asks (a delay is for a real balancer).
  config = { ...config, admin: { port: 0, drainDelayMs: 0, ...config.admin } };
  const child = spawn(process.execPath, [...productCode().execArgv, '--input-type=module', '-e', CHILD()], {
    cwd: root,
    env: { ...process.env, CHILD_CONFIG: JSON.stringify(config), CHILD_OPTIONS: JSON.stringify(options) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  let out = '';
  const keep = (d: Buffer) => void (out = (out + d.toString()).slice(-TAIL_BYTES));
  child.stderr!.on('data', keep);
  const [url, adminUrl] = await new Promise<[string, string]>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway process not ready within ${READY_TIMEOUT_MS} ms: ${out}`)), READY_TIMEOUT_MS);
    child.stdout!.on('data', (d: Buffer) => {
      keep(d);
      const m = /READY (\S+) (\S+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolveUrl([m[1]!, m[2]!]);
      }
    });
    void exited.then(([code]) => {
      clearTimeout(timer);
      reject(new Error(`gateway process exited (${code}) before it was ready: ${out}`));
    });
  });
  return {
    url,
    adminUrl,
    pid: child.pid!,
    child,
    async kill() {
      child.kill('SIGKILL');
      const [, signal] = await exited;
      if (signal !== 'SIGKILL') throw new Error(`gateway process ended by ${String(signal)}, not SIGKILL`);
    },
    async stop() {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      const [code] = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
