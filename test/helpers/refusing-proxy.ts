// An HTTP proxy on 127.0.0.1 that forwards nothing: every CONNECT and every plain proxied request
// is answered 403 and recorded. Clients under test get it as HTTPS_PROXY / HTTP_PROXY (with the
// loopback addresses in NO_PROXY), so any attempt of theirs to reach a public address ends here,
// visibly, instead of leaving the machine.
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface RefusedAttempt {
  readonly method: string;
  /** `host:port` for CONNECT, the absolute URL for a plain proxied request. */
  readonly target: string;
}

export interface RefusingProxy {
  readonly url: string;
  readonly attempts: RefusedAttempt[];
  close(): Promise<void>;
}

const MAX_RECORDED = 1_000;

export async function startRefusingProxy(): Promise<RefusingProxy> {
  const attempts: RefusedAttempt[] = [];
  const sockets = new Set<Socket>();
  const record = (method: string, target: string): void => {
    if (attempts.length < MAX_RECORDED) attempts.push({ method, target });
  };
  const server: Server = createServer((req, res) => {
    record(req.method ?? '', req.url ?? '');
    res.writeHead(403, { 'content-type': 'text/plain', connection: 'close' }).end('refused by the test proxy\n');
  });
  server.on('connect', (req, socket: Socket) => {
    record('CONNECT', req.url ?? '');
    socket.on('error', () => undefined);
    socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    attempts,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
