// A local HTTPS server for fetch tests: 127.0.0.1, port 0, with a self-signed certificate made by
// the `openssl` CLI at test time (node:crypto cannot issue certificates). The certificate names
// localhost, media.test, 127.0.0.1 and ::1; tests pass `ca` to trust it. It also counts the TCP
// connections it accepted, so a test can prove a refused fetch never reached it.
import { once } from 'node:events';
import { createServer as createHttpsServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createTcpServer, type Socket } from 'node:net';
import { selfSignedCert, type SelfSignedCert } from '../../simulators/self-signed-cert.js';

export type TestCert = SelfSignedCert;

/** One self-signed certificate per test process (EC P-256, one day). */
export const testCert = (): TestCert => selfSignedCert();

export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export interface TestHttpsServer {
  readonly port: number;
  /** PEM to pass as `ca`. */
  readonly ca: string;
  readonly server: Server;
  /** TCP connections accepted so far. */
  connections(): number;
  /** Requests seen so far (method and path). */
  readonly requests: Array<{ method: string; url: string; headers: IncomingMessage['headers'] }>;
  close(): Promise<void>;
}

export async function startHttpsServer(handler: Handler): Promise<TestHttpsServer> {
  const { key, cert } = testCert();
  const requests: TestHttpsServer['requests'] = [];
  const server = createHttpsServer({ key, cert }, (req, res) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    handler(req, res);
  });
  let accepted = 0;
  const open = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    accepted++;
    open.add(s);
    s.once('close', () => open.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const addr = server.address();
  if (addr === null || typeof addr === 'string') throw new Error('no port');
  return {
    port: addr.port,
    ca: cert,
    server,
    connections: () => accepted,
    requests,
    async close() {
      for (const s of open) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

/** A plain TCP listener that only counts connections: it must stay at zero in SSRF tests. */
export async function startCanary(): Promise<{ port: number; connections(): number; close(): Promise<void> }> {
  let accepted = 0;
  const srv = createTcpServer((s) => {
    accepted++;
    s.destroy();
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const addr = srv.address();
  if (addr === null || typeof addr === 'string') throw new Error('no port');
  return {
    port: addr.port,
    connections: () => accepted,
    async close() {
      srv.close();
      await once(srv, 'close');
    },
  };
}
