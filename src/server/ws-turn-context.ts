// One turn on a WebSocket as the server sees it: a POST of the message to the socket's path, run
// through the same route, limits, handler, access log and metrics as an HTTP request. What the
// handler writes as an SSE stream leaves as one JSON text message per event; an error answer
// leaves as an `error` event. The socket stays open across turns (ws-session.ts).
import type { ApiError } from '../errors.js';
import type { BodyCollector } from './body-collector.js';
import { HttpContext, type HeaderList } from './http-context.js';
import type { WsPeer } from './ws-peer.js';

/** What a turn needs of its socket. */
export interface TurnSocket {
  readonly peer: WsPeer;
  readonly path: string;
  readonly remoteAddress: string;
  readonly proxied: string;
  /** The upgrade request's headers a turn carries on (Authorization, X-Service-Usage-Frame). */
  readonly carried: Readonly<Record<string, string>>;
  /** The turn's answer is over (its last event sent, or the client gone). */
  turnEnded(ctx: WsTurnContext): void;
}

const DATA = Buffer.from('data:');
const USAGE_COMMENT = Buffer.from(': service.usage ');

/** The error envelope as an `error` event: the flat fields and the nested `error` the SDK reads, as the stream's own error event has. */
export function errorEvent(err: ApiError, requestId: string): string {
  const body = err.toBody(requestId).error;
  return JSON.stringify({ type: 'error', status: err.status, code: err.code, message: err.message, param: err.param ?? null, error: body });
}

export class WsTurnContext extends HttpContext {
  override readonly transport = 'websocket' as const;
  readonly admitsAfterParse = false;
  private finished = false;
  /** The vendor's terminal event has been sent: the client may send its next message (ws-session.ts). */
  pastReceipt = false;
  /** The `data` lines of the event being read; one array per turn, emptied at each event's end. */
  private readonly dataLines: Buffer[] = [];

  constructor(
    private readonly socket: TurnSocket,
    private readonly message: Buffer,
  ) {
    const headers = Object.create(null) as Record<string, string>;
    Object.assign(headers, socket.carried);
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(message.length);
    super({ method: 'POST', path: socket.path, query: '', headers, remoteAddress: socket.remoteAddress, contentLengths: 1, hosts: 1 });
  }

  proxiedAddress(): string {
    return this.socket.proxied;
  }

  protected readBodyChunks(collector: BodyCollector): void {
    collector.add(this.message, true, true);
  }

  holdReading(): void {}

  override receiptRelayed(): void {
    this.pastReceipt = true;
  }

  /** The socket closed during the turn: the handler sees the client gone, as on HTTP. */
  clientGone(): void {
    this.markAborted();
    this.finish();
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.socket.turnEnded(this);
  }

  protected sendWhole(_status: number, _extra: HeaderList | undefined, _contentType: string | undefined, text: string): void {
    const err = this.error;
    // A whole answer on a socket is an error (a turn always streams): its envelope as an `error` event.
    if (!this.aborted) this.socket.peer.send(err !== undefined ? errorEvent(err, this.requestId) : text);
    this.finish();
  }

  protected sendHeadOnly(): void {
    this.finish();
  }

  /** Nothing goes out for a stream's head: its events follow as messages. */
  protected sendStreamHead(): void {}

  /**
   * Relays each SSE event of `chunk` (the proxy writes whole events) as one message: its `data`
   * (lines joined by a newline), or the usage comment's JSON; other comments are dropped. Per
   * chunk this allocates no closure and no array: one view per data line, the message itself.
   */
  write(chunk: Uint8Array | string): boolean {
    if (this.aborted) return true;
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const peer = this.socket.peer;
    let ok = true;
    let at = 0;
    while (at < buf.length) {
      let stop = buf.indexOf(0x0a, at);
      if (stop === -1) stop = buf.length;
      const end = stop > at && buf[stop - 1] === 0x0d ? stop - 1 : stop;
      if (end === at) {
        if (!this.sendEvent()) ok = false;
      } else if (startsWith(buf, at, end, DATA)) {
        const from = at + DATA.length;
        this.dataLines.push(buf.subarray(from < end && buf[from] === 0x20 ? from + 1 : from, end));
      } else if (startsWith(buf, at, end, USAGE_COMMENT) && !peer.send(buf.subarray(at + USAGE_COMMENT.length, end))) ok = false;
      at = stop + 1;
    }
    if (!this.sendEvent()) ok = false;
    return ok;
  }

  /** Sends the event whose data lines were gathered, if any; false once the socket is past its mark. */
  private sendEvent(): boolean {
    const lines = this.dataLines;
    if (lines.length === 0) return true;
    const msg = lines.length === 1 ? lines[0]! : joinLines(lines);
    lines.length = 0;
    return this.socket.peer.send(msg);
  }

  waitWritable(): Promise<void> {
    if (this.aborted) return Promise.resolve();
    return this.socket.peer.waitDrained();
  }

  end(last?: Uint8Array | string): void {
    if (last !== undefined && last.length > 0) this.write(last);
    this.finish();
  }

  /** A stream the gateway cut: the turn ends with what was sent; the socket closes as the cut connection would. */
  protected closeConnection(): void {
    this.finish();
  }
}

/** True when `buf[start, end)` starts with `prefix` (compared in place: no view made). */
function startsWith(buf: Buffer, start: number, end: number, prefix: Buffer): boolean {
  return end - start >= prefix.length && buf.compare(prefix, 0, prefix.length, start, start + prefix.length) === 0;
}

/** An event's data lines joined by a newline, as an SSE reader joins them (rare: a vendor writes one data line). */
function joinLines(lines: readonly Buffer[]): Buffer {
  let n = lines.length - 1;
  for (const l of lines) n += l.length;
  const out = Buffer.allocUnsafe(n);
  let at = 0;
  for (let i = 0; i < lines.length; i++) {
    if (i > 0) out[at++] = 0x0a;
    at += lines[i]!.copy(out, at);
  }
  return out;
}
