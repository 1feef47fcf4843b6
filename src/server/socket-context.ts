// An exchange node:http never made a request of: a head its parser refused (or took too long to
// send), or a CONNECT. It carries only the refusal, and writes that answer straight to the socket,
// so the refusal goes through the server like any request: the error envelope, an access line
// and a count with its real status and the request id it sent.
import type { Socket } from 'node:net';
import type { ApiError } from '../errors.js';
import { HttpContext, statusLine, type HeaderList, type RequestSnapshot } from './http-context.js';

/** `::ffff:1.2.3.4` (a dual-stack listener's IPv4 caller) as `1.2.3.4`, as uWS names it. */
export const unmapped = (a: string): string => (a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a);

/**
 * How long a closing connection may take to flush its answer before it is destroyed anyway: a
 * client that never reads would otherwise keep the descriptor for as long as it likes.
 */
export const CLOSE_FLUSH_BOUND_MS = 2_000;

/**
 * Releases the socket's descriptor once the answer already written (and ended) has left: node's
 * end() only half-closes, and a client that never closes its side would keep the descriptor.
 */
export function closeWhenFlushed(socket: Socket): void {
  if (socket.destroyed) return;
  const timer = setTimeout(() => socket.destroy(), CLOSE_FLUSH_BOUND_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  if (socket.writableFinished) socket.destroy();
  else socket.once('finish', () => socket.destroy());
}

/** The method token a refused head began with, when it has one (for the access line); else '-'. */
export function methodOf(head: Buffer | undefined): string {
  if (head === undefined) return '-';
  const m = /^([A-Z]{1,16}) /.exec(head.subarray(0, 18).toString('latin1'));
  return m === null ? '-' : m[1]!;
}

/**
 * An exchange answered straight on its raw socket, outside node's response machinery: the answer
 * is written whole with `Connection: close`, then the descriptor is released once it has left.
 * Nothing streams and no body is read (a refused head, a CONNECT, an upgrade request refused).
 */
export abstract class RawSocketContext extends HttpContext {
  readonly admitsAfterParse = false;

  constructor(
    snap: RequestSnapshot,
    protected readonly socket: Socket,
    private readonly proxied: string,
  ) {
    super(snap);
  }

  proxiedAddress(): string {
    return this.proxied;
  }

  /** Never called: such an exchange reaches no body-reading route. */
  protected readBodyChunks(): void {}

  holdReading(): void {}

  protected sendWhole(status: number, extra: HeaderList | undefined, contentType: string | undefined, text: string): void {
    if (this.socket.destroyed) return;
    let head = `HTTP/1.1 ${statusLine(status)}\r\n`;
    this.commonHeaders(extra, (k, v) => void (head += `${k}: ${v}\r\n`));
    if (contentType !== undefined) head += `Content-Type: ${contentType}\r\n`;
    // Always closed: no next request can follow on this connection.
    const body = this.method === 'HEAD' ? '' : text;
    this.socket.end(`${head}Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${body}`);
    closeWhenFlushed(this.socket);
  }

  protected sendHeadOnly(status: number, extra: HeaderList): void {
    this.sendWhole(status, extra, undefined, '');
  }

  protected sendStreamHead(status: number, extra: HeaderList): void {
    this.sendWhole(status, extra, undefined, '');
  }

  write(): boolean {
    return true;
  }

  waitWritable(): Promise<void> {
    return Promise.resolve();
  }

  end(): void {}

  protected closeConnection(): void {
    this.socket.destroy();
  }
}

/** A head node's parser refused (or a CONNECT): it carries only the refusal. */
export class SocketContext extends RawSocketContext {
  constructor(socket: Socket, method: string, refusal: ApiError, proxied: string) {
    const headers = Object.create(null) as Record<string, string>;
    super(
      { method, path: '/', query: '', headers, remoteAddress: unmapped(socket.remoteAddress ?? ''), contentLengths: 0, hosts: 0, refusal },
      socket,
      proxied,
    );
  }
}
