// One HTTP exchange over a raw socket, for tests that must write bytes no client library would
// (pipelined requests, smuggling attempts, malformed heads).
import { connect, type Socket } from 'node:net';

export interface RawExchange {
  /** Everything the server sent. */
  readonly buf: Buffer;
  /** The server closed (or reset) the connection before `complete` held or the bound passed. */
  readonly closed: boolean;
  readonly ms: number;
}

/**
 * Connects to 127.0.0.1:`port`, runs `write` once connected, and collects what arrives until
 * `complete(bytes so far)` holds, the server closes, or `boundMs` passes; then destroys the socket.
 */
export function rawExchange(
  port: number,
  write: (s: Socket) => unknown,
  boundMs: number,
  complete: (buf: Buffer) => boolean = () => false,
): Promise<RawExchange> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const s = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      resolve({ buf, closed, ms: performance.now() - t0 });
    };
    const timer = setTimeout(() => finish(false), boundMs);
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (complete(buf)) finish(false);
    });
    s.on('error', () => finish(true));
    s.on('close', () => finish(true));
    s.on('connect', () => void write(s));
  });
}
