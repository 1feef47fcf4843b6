// A real gateway in a process of its own (its own pools, timers, leases and journal), for the
// tests that kill an instance or run several side by side on one Postgres. The child runs the
// source through the same TypeScript loader as the test, prints its URL when it serves, and on
// SIGTERM closes the way the production entry point does (drain, write the journal, return leases).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Test } from 'tap';
import type { Config, DeepPartial } from '../../src/config/config.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const src = (p: string) => pathToFileURL(resolve(root, 'src', p)).href;
const READY_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 20_000;
const TAIL_BYTES = 4000;

const CHILD = `
import { loadConfig } from '${src('config/config.js')}';
import { createGateway } from '${src('gateway.js')}';
import { silentLogger } from '${src('util/log.js')}';
const cfg = loadConfig({}, JSON.parse(process.env.CHILD_CONFIG));
const opts = JSON.parse(process.env.CHILD_OPTIONS);
const gw = await createGateway(cfg, { skipMigrate: true, log: silentLogger, ...opts });
process.once('SIGTERM', () => void gw.close().then(() => process.exit(0), () => process.exit(1)));
process.stdout.write('READY ' + gw.url + '\\n');
`;

export interface GatewayProcess {
  readonly url: string;
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
  const tsLoader = process.execArgv.filter((a) => a.includes('typescript'));
  const child = spawn(process.execPath, [...tsLoader, '--input-type=module', '-e', CHILD], {
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
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway process not ready within ${READY_TIMEOUT_MS} ms: ${out}`)), READY_TIMEOUT_MS);
    child.stdout!.on('data', (d: Buffer) => {
      keep(d);
      const m = /READY (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolveUrl(m[1]!);
      }
    });
    void exited.then(([code]) => {
      clearTimeout(timer);
      reject(new Error(`gateway process exited (${code}) before it was ready: ${out}`));
    });
  });
  return {
    url,
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
