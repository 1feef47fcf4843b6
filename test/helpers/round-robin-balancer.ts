// A small round-robin TCP balancer for tests of several gateway processes behind one address:
// each new connection goes to the next backend in turn, bytes are piped both ways, and with
// `proxyV2` every connection starts with a PROXY protocol v2 header naming the client (as HAProxy's
// send-proxy-v2 does). Backends may be set after the balancer listens (their ports come later).
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface Balancer {
  readonly port: number;
  readonly url: string;
  /** Connections handed to each backend so far, in backend order. */
  readonly handed: number[];
  setBackends(ports: readonly number[]): void;
  close(): Promise<void>;
}

const SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

/** PROXY v2, PROXY command, TCP over IPv4, from the client's address and port to ours. */
export function proxyV2Header(srcIp: string, srcPort: number, dstIp: string, dstPort: number): Buffer {
  const body = Buffer.alloc(12);
  srcIp.split('.').forEach((o, i) => {
    body.writeUInt8(Number(o), i);
  });
  dstIp.split('.').forEach((o, i) => {
    body.writeUInt8(Number(o), 4 + i);
  });
  body.writeUInt16BE(srcPort, 8);
  body.writeUInt16BE(dstPort, 10);
  return Buffer.concat([SIGNATURE, Buffer.from([0x21, 0x11, 0x00, 12]), body]);
}

export async function startBalancer(opts: { proxyV2?: boolean } = {}): Promise<Balancer> {
  let backends: number[] = [];
  let next = 0;
  const handed: number[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    if (backends.length === 0) return void client.destroy();
    const i = next++ % backends.length;
    handed[i] = (handed[i] ?? 0) + 1;
    const upstream = connect({ host: '127.0.0.1', port: backends[i]! });
    sockets.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    if (opts.proxyV2) upstream.write(proxyV2Header(client.remoteAddress!.replace(/^::ffff:/, ''), client.remotePort!, '127.0.0.1', backends[i]!));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    handed,
    setBackends(ports) {
      backends = [...ports];
      for (let i = 0; i < ports.length; i++) handed[i] ??= 0;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
