// Vendor deployments for the pool tests: an address that refuses connections, a vendor at capacity
// (429 with Retry-After on every call, the arrival and answer times recorded), and an Anthropic
// simulator in a child process the test can SIGKILL.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import { freePort } from '../../src/util/process.js';
import { TS_LOADER } from './product-code.js';

/** One vendor deployment as a test configures it (docs/vendor-pools.md). */
export interface TestDeployment {
  name: string;
  baseUrl: string;
  apiKey: string;
  weight?: number;
}

/** http://127.0.0.1:PORT where nothing listens (the port was free a moment ago; nothing here binds it). */
export async function refusingUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

export interface BusyVendor {
  readonly url: string;
  /** performance.now() of each request's arrival. */
  readonly arrivals: number[];
  /** performance.now() of each 429 sent. */
  readonly answers: number[];
}

/** Answers every call 429 with `retry-after: retryAfterS`, in the vendors' error envelope. */
export async function startBusyVendor(t: Test, retryAfterS: number): Promise<BusyVendor> {
  const arrivals: number[] = [];
  const answers: number[] = [];
  const server = createServer((req, res) => {
    arrivals.push(performance.now());
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({ type: 'error', error: { type: 'rate_limit_error', message: 'Too many requests (test vendor).' } });
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(retryAfterS), 'content-length': Buffer.byteLength(body) });
      res.end(body, () => answers.push(performance.now()));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  server.unref();
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrivals, answers };
}

const CHILD = join(import.meta.dirname, 'simulator-child.ts');

/** An Anthropic simulator in a child process (slow deltas, so streams are flowing when it is killed). */
export async function startSimulatorChild(t: Test, apiKey: string, paceMs: number): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', TS_LOADER, CHILD, apiKey, String(paceMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const lines = createInterface({ input: child.stdout! });
  const url = await new Promise<string>((resolve, reject) => {
    lines.once('line', (l) => resolve((JSON.parse(l) as { url: string }).url));
    child.once('exit', (code) => reject(new Error(`simulator child exited (${code}) before it listened`)));
  });
  return { url, child };
}
