// Every connection the gateway answers and closes gives its file descriptor back at once, on both
// engines, even when the client never closes its side: hundreds of clients that keep their
// sockets open after the answer (half-open, as a hostile client does) must not use up the
// process's descriptors. The gateway runs in a process of its own, whose descriptors are counted
// in /proc/<pid>/fd; the clients are raw sockets that read their answers and never close.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { request } from 'undici';
import type { EngineName } from '../../src/server/engine.js';
import { testDb } from '../helpers/db.js';
import { eachEngine } from '../helpers/engines.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';

const CLIENTS = 300;
/** Descriptors the process may open meanwhile for its own work (pool connections, timers' files). */
const SLACK = 25;
/**
 * How long the descriptors may take to come back after the last answer: the gateway destroys a
 * closing socket once its answer is flushed (at most 2 s for a client that does not read), so
 * this is a generous bound on a loaded machine, not a sleep. Time is the behaviour under test.
 */
const RELEASE_BOUND_MS = 10_000;
/** uWS closes a silent connection at its fixed ~10 s idle timeout. */
const SILENT_BOUND_MS = 30_000;

const fds = (pid: number): number => readdirSync(`/proc/${pid}/fd`).length;

/** Polls the descriptor count until `ok` holds or the bound passes; returns the last count. */
async function countUntil(pid: number, ok: (n: number) => boolean, boundMs: number): Promise<number> {
  const deadline = performance.now() + boundMs;
  let n = fds(pid);
  while (!ok(n) && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    n = fds(pid);
  }
  return n;
}

/**
 * Opens `CLIENTS` half-open sockets (a FIN from the server does not make them close their side),
 * writes `bytes` on each (nothing when empty), and resolves once every one has seen the server
 * end its side: with the first bytes of an answer, or none. The sockets stay open.
 */
async function holdClients(t: Test, port: number, bytes: string, boundMs: number): Promise<{ sockets: Socket[]; heads: string[] }> {
  const sockets: Socket[] = [];
  t.teardown(() => {
    for (const s of sockets) s.destroy();
  });
  const heads = await Promise.all(
    Array.from(
      { length: CLIENTS },
      () =>
        new Promise<string>((resolve, reject) => {
          const s = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
          sockets.push(s);
          let got = '';
          const timer = setTimeout(() => reject(new Error(`no end from the server within ${boundMs} ms (got ${JSON.stringify(got.slice(0, 40))})`)), boundMs);
          s.on('data', (d: Buffer) => void (got += d.toString('latin1')));
          s.on('end', () => {
            clearTimeout(timer);
            resolve(got);
          });
          s.on('error', (e) => {
            clearTimeout(timer);
            resolve(got + `<${(e as NodeJS.ErrnoException).code}>`);
          });
          if (bytes !== '') s.on('connect', () => s.write(bytes));
        }),
    ),
  );
  return { sockets, heads };
}

async function gateway(t: Test, engine: EngineName): Promise<GatewayProcess> {
  const db = await testDb(t);
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-fds-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  return startGatewayProcess(t, {
    dataDir,
    // A short head timeout, so silent clients are answered 408 quickly on node.
    server: { host: '127.0.0.1', port: 0, engine, headersTimeoutMs: 1_000 },
    db: { url: db.url, schema: db.schema },
    redis: { url: null },
  });
}

async function stillServes(t: Test, gw: GatewayProcess): Promise<void> {
  const health = await request(gw.adminUrl + '/healthz');
  t.equal(health.statusCode, 200, '/healthz answers');
  await health.body.text();
  const models = await request(gw.url + '/v1/models');
  t.equal(models.statusCode, 200, 'a new client is served');
  await models.body.text();
}

eachEngine(
  'refused and closed connections give their descriptors back while the clients hold them open',
  async (t, engine) => {
    const gw = await gateway(t, engine);
    await stillServes(t, gw); // warm: the pools and listeners a first request opens
    const baseline = fds(gw.pid);
    const port = Number(new URL(gw.url).port);

    // A request the gateway refuses and closes (two Host headers: 400 invalid_header).
    const refused = await holdClients(t, port, 'GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n', RELEASE_BOUND_MS);
    t.equal(refused.heads.filter((h) => h.startsWith('HTTP/1.1 400 ')).length, CLIENTS, `${CLIENTS} answered 400`);
    t.ok(
      refused.sockets.every((s) => !s.destroyed),
      'every client still holds its socket',
    );
    const afterRefused = await countUntil(gw.pid, (n) => n <= baseline + SLACK, RELEASE_BOUND_MS);
    t.ok(afterRefused <= baseline + SLACK, `descriptors back near the baseline: ${afterRefused} (baseline ${baseline}, ${CLIENTS} clients still open)`);

    // Silent clients: node answers 408 after headersTimeoutMs; uWS closes them at its idle timeout without an answer.
    const silent = await holdClients(t, port, '', SILENT_BOUND_MS);
    const answered = silent.heads.filter((h) => h.startsWith('HTTP/1.1 408 ')).length;
    t.equal(answered, engine === 'node' ? CLIENTS : 0, engine === 'node' ? `${CLIENTS} answered 408` : 'uWS answers a silent client nothing');
    const afterSilent = await countUntil(gw.pid, (n) => n <= baseline + SLACK, RELEASE_BOUND_MS);
    t.ok(afterSilent <= baseline + SLACK, `descriptors back near the baseline: ${afterSilent} (baseline ${baseline}, ${2 * CLIENTS} clients still open)`);
    await stillServes(t, gw);
  },
  { timeout: 180_000 },
);
