// One HTTP exchange on node:http. Node parses, frames (chunked, or close-delimited for HTTP/1.0),
// orders pipelined answers and applies socket backpressure; this class adapts it to the seam.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError } from '../errors.js';
import type { BodyCollector } from './body-collector.js';
import { HttpContext, MAX_HEADER_FIELDS, type HeaderList, type RequestSnapshot } from './http-context.js';
import { closeWhenFlushed, unmapped } from './socket-context.js';

const EMPTY = Buffer.alloc(0);

/** The path and query of a target: origin-form as sent, absolute-form (RFC 9112 3.2.2) reduced to its path. */
function splitTarget(url: string): { path: string; query: string } | undefined {
  let target = url;
  if (target.charCodeAt(0) !== 0x2f) {
    const m = /^https?:\/\/[^/?#]+/i.exec(target);
    if (m === null) return undefined; // `*` and the like: nothing here answers them
    target = target.slice(m[0].length) || '/';
    if (target.charCodeAt(0) !== 0x2f) target = '/' + target;
  }
  const q = target.indexOf('?');
  return q === -1 ? { path: target, query: '' } : { path: target.slice(0, q), query: target.slice(q + 1) };
}

/** Why node's request cannot be served at all, or undefined. */
function engineRefusal(req: IncomingMessage, headers: Record<string, string>, fields: number): ApiError | undefined {
  // node's parser takes HTTP/0.9 (a request line without a version) and HTTP/2.0 request lines.
  if (req.httpVersionMajor !== 1 || req.httpVersionMinor > 1) return new ApiError('http_version_not_supported');
  const coding = headers['transfer-encoding'];
  // node decodes chunked and passes any other coding through undecoded: refused rather than misread.
  if (coding !== undefined && coding.trim().toLowerCase() !== 'chunked')
    return new ApiError('unsupported_media_type', { message: 'The gateway decodes no Transfer-Encoding but chunked.', param: 'Transfer-Encoding' });
  if (fields > MAX_HEADER_FIELDS) return new ApiError('too_many_headers', { message: `A request may carry at most ${MAX_HEADER_FIELDS} header fields.` });
  if (req.httpVersionMajor === 1 && req.httpVersionMinor >= 1 && headers.host === undefined) return new ApiError('missing_host');
  return undefined;
}

export function snapshot(req: IncomingMessage): RequestSnapshot {
  const raw = req.rawHeaders;
  const headers: Record<string, string> = Object.create(null) as Record<string, string>;
  let contentLengths = 0;
  let hosts = 0;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const k = raw[i]!.toLowerCase();
    const v = raw[i + 1]!;
    if (k === 'content-length') contentLengths += v.includes(',') ? 2 : 1;
    else if (k === 'host') hosts++;
    if (headers[k] === undefined) headers[k] = v;
  }
  const target = splitTarget(req.url ?? '/');
  const refusal = engineRefusal(req, headers, raw.length / 2) ?? (target === undefined ? new ApiError('invalid_target') : undefined);
  return {
    method: req.method ?? 'GET',
    path: target?.path ?? '/',
    query: target?.query ?? '',
    headers,
    remoteAddress: unmapped(req.socket.remoteAddress ?? ''),
    contentLengths,
    hosts,
    refusal,
  };
}

/** The context of each answer node is writing, for a refusal of its body from node's parser (node-engine.ts). */
export const contexts = new WeakMap<ServerResponse, NodeContext>();

export class NodeContext extends HttpContext {
  readonly admitsAfterParse = false;
  private readonly req: IncomingMessage;
  private readonly res: ServerResponse;
  private readonly proxied: string;

  constructor(req: IncomingMessage, res: ServerResponse, proxied: string) {
    super(snapshot(req));
    contexts.set(res, this);
    this.req = req;
    this.res = res;
    this.proxied = proxied;
    // 'close' comes after a finished answer too; only one cut short is the client leaving.
    res.on('close', () => {
      if (!res.writableFinished) this.markAborted();
    });
  }

  proxiedAddress(): string {
    return this.proxied;
  }

  protected readBodyChunks(collector: BodyCollector): void {
    const req = this.req;
    req.on('data', (chunk: Buffer) => {
      if (collector.add(chunk, false, true)) return;
      req.pause();
      this.bodyTooLarge();
    });
    req.on('end', () => collector.add(EMPTY, true, true));
  }

  /** Node reads a pipelined request as soon as it arrives and holds its answer until this one ends: nothing to hold. */
  holdReading(): void {}

  /** The flat [name, value, ...] list node's writeHead takes. */
  private headerList(extra: HeaderList | undefined): string[] {
    const h: string[] = [];
    this.commonHeaders(extra, (k, v) => void h.push(k, v));
    return h;
  }

  protected sendWhole(status: number, extra: HeaderList | undefined, contentType: string | undefined, text: string, close: boolean): void {
    const h = this.headerList(extra);
    if (contentType !== undefined) h.push('Content-Type', contentType);
    // 204 and 304 have no body to measure; everything else says how long its body is.
    if (status !== 204 && status !== 304) h.push('Content-Length', String(Buffer.byteLength(text)));
    if (close) h.push('Connection', 'close');
    this.res.writeHead(status, h);
    // Node sends no body to HEAD by itself.
    this.res.end(this.method === 'HEAD' || text === '' ? undefined : text);
    // node destroys the socket once the answer is flushed; bounded for a client that never reads it.
    if (close && this.res.socket) closeWhenFlushed(this.res.socket);
  }

  protected sendHeadOnly(status: number, extra: HeaderList, contentLength: number): void {
    const h = this.headerList(extra);
    h.push('Content-Length', String(contentLength));
    this.res.writeHead(status, h);
    this.res.end();
  }

  protected sendStreamHead(status: number, extra: HeaderList, contentLength?: number): void {
    // Not flushed: node sends the head with the first chunk, one write instead of two (a head
    // written alone was the dearest send of a stream in the profile). The vendor's first event
    // follows its own head at once, so a client sees no later status. A declared length turns
    // node's chunked framing off.
    const h = this.headerList(extra);
    if (contentLength !== undefined) h.push('Content-Length', String(contentLength));
    this.res.writeHead(status, h);
  }

  protected closeConnection(): void {
    this.res.destroy();
  }

  write(chunk: Uint8Array | string): boolean {
    if (this.aborted) return true;
    return this.res.write(chunk);
  }

  /** 0: not held; 1: the socket corked by holdTail; 2: released (once, by end or the next turn). */
  private tail = 0;

  override holdTail(): void {
    if (this.tail !== 0 || this.aborted) return;
    const socket = this.res.socket;
    if (socket === null) return;
    // One cork level over node's own per-write cork: the writes stay in the socket's buffer until
    // releaseTail, with the end's bytes when end comes first. Nothing is copied or reordered.
    this.tail = 1;
    socket.cork();
    setImmediate(releaseTail, this);
  }

  /** Undoes holdTail's cork, once. */
  releaseTail(): void {
    if (this.tail !== 1) return;
    this.tail = 2;
    this.res.socket?.uncork();
  }

  waitWritable(): Promise<void> {
    if (this.aborted || !this.res.writableNeedDrain) return Promise.resolve();
    return new Promise((resolveW) => {
      this.drainWaiter = resolveW;
      // Listened for only while someone waits: most answers never fill the socket.
      this.res.once('drain', this.wakeWriter);
    });
  }

  end(last?: Uint8Array | string): void {
    if (this.aborted) return this.releaseTail();
    this.res.end(last);
    this.releaseTail();
  }
}

function releaseTail(ctx: NodeContext): void {
  ctx.releaseTail();
}
