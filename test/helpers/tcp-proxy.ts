// A TCP proxy on 127.0.0.1 between the gateway and a real peer (Postgres, Redis, a vendor), so a test
// can freeze the peer without signalling a shared service: `freeze()` stops forwarding bytes both
// ways (connections stay open: the peer looks paused), `thaw()` resumes, `cut()` resets every
// connection, `refuse()` closes new ones at once.
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  readonly url: (scheme: string, rest?: string) => string;
  freeze(): void;
  thaw(): void;
  cut(): void;
  refuse(on: boolean): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  let frozen = false;
  let refusing = false;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = connect({ host: targetHost, port: targetPort });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    // While frozen, a new pair is not piped yet: thaw() pipes every pair, and piping twice would
    // send each byte twice.
    if (frozen) {
      client.pause();
      upstream.pause();
    } else {
      client.pipe(upstream);
      upstream.pipe(client);
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  const each = (f: (s: Socket) => void) => {
    for (const [a, b] of pairs) {
      f(a);
      f(b);
    }
  };
  return {
    port,
    url: (scheme, rest = '') => `${scheme}://127.0.0.1:${port}${rest}`,
    freeze: () => {
      frozen = true;
      // Unpipe so nothing buffered flows either: the peer answers nothing while frozen.
      for (const [a, b] of pairs) {
        a.unpipe(b);
        b.unpipe(a);
        a.pause();
        b.pause();
      }
    },
    thaw: () => {
      frozen = false;
      for (const [a, b] of pairs) {
        a.pipe(b);
        b.pipe(a);
        a.resume();
        b.resume();
      }
    },
    cut: () => each((s) => s.resetAndDestroy()),
    refuse: (on) => {
      refusing = on;
    },
    close: async () => {
      each((s) => s.destroy());
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
