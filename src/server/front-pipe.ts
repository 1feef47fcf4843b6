// The HTTP front's raw path (http-front.ts): a connection whose first request uWS can answer is
// forwarded to uWS byte for byte in both directions, by hand rather than with pipe(), because
// - uWS reads a PROXY v2 header at the start of every request, not only the first, and believes it
//   from loopback: what the caller sends is searched for the header's signature, and a connection
//   carrying one is closed (bodies on this API are JSON, which holds no raw NUL);
// - a caller that stops reading would otherwise pause the loopback socket forever (a paused socket
//   never sees uWS's FIN), holding two sockets and their buffers: a stall is bounded in time;
// - a caller's FIN after its request (half-close) must reach uWS, and uWS's FIN the caller.
import { connect, type Socket } from 'node:net';
import { newRequestId, retryAfter, statusLine } from './http-context.js';
import { SIGNATURE } from './proxy-header.js';
import { shuttingDown } from './server.js';

/** A caller not taking uWS's bytes for this long has both its sockets destroyed (uWS alone frees them in about 15 s). */
export const STALL_MS = 15_000;

/** After uWS closed, the caller has this long to take the last bytes before its socket is destroyed. */
const CLOSE_GRACE_MS = 10_000;

const SIG_LEN = SIGNATURE.length;
const CARRY = SIG_LEN - 1;

/**
 * Finds the PROXY v2 signature in a byte stream fed chunk by chunk, including one that straddles
 * chunks: the last 11 bytes seen are kept in a buffer allocated once per connection.
 */
export class SignatureScanner {
  private readonly carry = Buffer.allocUnsafe(CARRY);
  private carryLen = 0;

  /** True when the stream, with `chunk` appended, holds the signature. */
  feed(chunk: Buffer): boolean {
    if (chunk.indexOf(SIGNATURE) >= 0 || this.straddles(chunk)) return true;
    this.keepTail(chunk);
    return false;
  }

  /** True when a signature begins in the carried bytes and ends in `chunk`. */
  private straddles(chunk: Buffer): boolean {
    const n = this.carryLen;
    for (let start = 0; start < n; start++) {
      let j = 0;
      for (; j < SIG_LEN; j++) {
        const at = start + j;
        const byte = at < n ? this.carry[at] : chunk[at - n];
        if (byte !== SIGNATURE[j]) break; // undefined past the chunk's end: a match still to come
      }
      if (j === SIG_LEN) return true;
    }
    return false;
  }

  private keepTail(chunk: Buffer): void {
    if (chunk.length >= CARRY) {
      chunk.copy(this.carry, 0, chunk.length - CARRY);
      this.carryLen = CARRY;
      return;
    }
    const keep = Math.min(this.carryLen, CARRY - chunk.length);
    this.carry.copy(this.carry, 0, this.carryLen - keep, this.carryLen); // copy() handles the overlap
    chunk.copy(this.carry, keep);
    this.carryLen = keep + chunk.length;
  }
}

/** What uWS answers while it stops (server.ts), for a head that arrives after its listener closed. */
function stoppingAnswer(): Buffer {
  const err = shuttingDown();
  const requestId = newRequestId();
  const body = JSON.stringify(err.toBody(requestId));
  const head =
    `HTTP/1.1 ${statusLine(err.status)}\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nRetry-After: ${retryAfter(err)}\r\nConnection: close\r\n\r\n`;
  return Buffer.from(head + body, 'latin1');
}

export interface RawLink {
  /** Shutdown: the loopback side is ended, so uWS flushes what it still has and closes. */
  finish(): void;
}

/**
 * Forwards `client` to uWS in both directions, after the PROXY header and the bytes read so far.
 * When uWS closes first (after `Connection: close`, or an early 413 while the body still comes,
 * often with a reset), what it sent is still delivered: the caller's side is ended, not destroyed,
 * and what the caller still sends is read and dropped, so its socket closes without a reset.
 */
export function pipeRaw(client: Socket, proxyHeader: Buffer, first: Buffer, uwsPort: number, stallMs = STALL_MS): RawLink {
  const up = connect({ port: uwsPort, host: '127.0.0.1', noDelay: true });
  const scanner = new SignatureScanner();
  const both = (): void => {
    client.destroy();
    up.destroy();
  };
  let stall: NodeJS.Timeout | undefined;
  let heard = false; // uWS sent something (else a refused connect is answered here)
  if (scanner.feed(first)) both();
  else {
    // Queued until the connect, then sent together (one writev): no copy of the head.
    up.write(proxyHeader);
    up.write(first);
  }
  client.on('data', (chunk: Buffer) => {
    if (up.destroyed) return; // uWS gone: dropped, so the caller's socket closes without a reset
    if (scanner.feed(chunk)) return both();
    if (!up.write(chunk)) client.pause();
  });
  up.on('drain', () => client.resume());
  up.on('data', (chunk: Buffer) => {
    heard = true;
    if (client.write(chunk)) return;
    up.pause();
    stall ??= setTimeout(both, stallMs);
  });
  client.on('drain', () => {
    clearTimeout(stall);
    stall = undefined;
    up.resume();
  });
  client.on('end', () => up.end()); // the caller's FIN after its request: uWS answers, then closes
  client.on('error', both);
  client.on('close', () => {
    clearTimeout(stall);
    up.destroy(); // a caller gone: uWS sees its connection closed
  });
  up.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'ECONNREFUSED' && !heard && !client.destroyed) client.write(stoppingAnswer());
    up.destroy(); // its close ends the caller's side
  });
  up.on('close', () => endCaller(client));
  client.resume();
  return { finish: () => up.end() };
}

/** uWS closed: the caller gets what was written, then a FIN; a hard deadline, not an idle timeout, since its own trickled bytes would reset that. */
function endCaller(client: Socket): void {
  if (client.destroyed) return;
  client.resume();
  client.end();
  const grace = setTimeout(() => client.destroy(), CLOSE_GRACE_MS);
  client.once('close', () => clearTimeout(grace));
}
