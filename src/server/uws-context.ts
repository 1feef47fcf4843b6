// One HTTP exchange on uWebSockets.js. uWS lends the request only during the handler's synchronous
// call, so the snapshot is copied at once; writes are corked so each answer leaves in one syscall.
import { ApiError } from '../errors.js';
import { HttpContext, MAX_HEADER_FIELDS, statusLine, type HeaderList, type RequestSnapshot } from './http-context.js';
import type { BodyCollector } from './body-collector.js';
import type { HttpRequest, HttpResponse } from './uws-loader.js';

/** Placeholder for the chunk field between writes (keeps no chunk alive). */
const EMPTY_CHUNK = new Uint8Array(0);
const EMPTY_BUFFER = Buffer.alloc(0);
/** At most this much of a stream's tail is kept to go out with its end (holdTail). */
const MAX_TAIL_BYTES = 64 * 1024;

/**
 * Refused before any route on uWS: a chunked body. This uWS build's chunk parser does not check
 * the CRLF after chunk data, loses the next request after a trailer and closes on a chunk
 * extension, so no chunked body is ever read here (RFC 9110 section 15.5.12 allows the 411).
 */
const CHUNKED_REFUSAL = (): ApiError => new ApiError('length_required', { param: 'Transfer-Encoding' });

function snapshot(res: HttpResponse, req: HttpRequest): RequestSnapshot {
  const headers: Record<string, string> = Object.create(null) as Record<string, string>;
  let n = 0;
  let contentLengths = 0;
  let hosts = 0;
  req.forEach((name, value) => {
    if (name === 'content-length') contentLengths += value.includes(',') ? 2 : 1;
    else if (name === 'host') hosts++;
    if (++n > MAX_HEADER_FIELDS) return;
    // uWS lowercases names.
    if (headers[name] === undefined) headers[name] = value;
  });
  return {
    method: req.getCaseSensitiveMethod(),
    path: req.getUrl(),
    query: req.getQuery() ?? '',
    headers,
    remoteAddress: Buffer.from(res.getRemoteAddressAsText()).toString(),
    contentLengths,
    hosts,
    refusal: headers['transfer-encoding'] !== undefined ? CHUNKED_REFUSAL() : undefined,
  };
}

export class UwsContext extends HttpContext {
  readonly res: HttpResponse;
  readonly admitsAfterParse = true;
  /** uWS stopped reading this connection (holdReading) until our answer starts. */
  private readingHeld = false;

  constructor(res: HttpResponse, req: HttpRequest) {
    super(snapshot(res, req));
    this.res = res;
    res.onAborted(() => this.markAborted());
  }

  proxiedAddress(): string {
    return this.aborted ? '' : Buffer.from(this.res.getProxiedRemoteAddressAsText()).toString();
  }

  protected readBodyChunks(collector: BodyCollector): void {
    // uWS requires onData attached in the handler's first tick (collectBody is called there).
    this.res.onData((chunk, isLast) => {
      if (!collector.add(Buffer.from(chunk), isLast, false)) this.bodyTooLarge();
      else if (isLast) this.holdReading();
    });
  }

  /**
   * Stops uWS reading this connection until our answer ends (releaseReading, as the last bytes go).
   * uWS refuses asynchronous pipelining: a request read while another is unanswered closes the
   * connection, and the unanswered one would then run for a client that never gets its answer.
   * Held, a pipelined request waits in the kernel's buffer and is read once this one is answered.
   * Writing (and backpressure) still works while held, and a client hanging up is seen at the next
   * write; before the first write it is not seen (a non-streaming call runs to its end, which the
   * spec charges the same anyway). Reading resumes only as the answer ends, never at a stream's
   * start: uWS's resume() arms its 10 s idle timer, which would cut any stream longer than that.
   */
  holdReading(): void {
    if (this.readingHeld || this.done) return;
    this.readingHeld = true;
    this.res.pause();
  }

  private releaseReading(): void {
    if (!this.readingHeld) return;
    this.readingHeld = false;
    if (!this.aborted) this.res.resume();
  }

  private readonly writeHeader = (k: string, v: string): void => void this.res.writeHeader(k, v);

  private writeCommon(status: number, extra: HeaderList | undefined): void {
    this.res.writeStatus(statusLine(status));
    this.commonHeaders(extra, this.writeHeader);
  }

  protected sendWhole(status: number, extra: HeaderList | undefined, contentType: string | undefined, text: string, close: boolean): void {
    this.res.cork(() => {
      this.releaseReading();
      this.writeCommon(status, extra);
      if (contentType !== undefined) this.res.writeHeader('Content-Type', contentType);
      // uWS writes a body even to HEAD, which a keep-alive client would read as the next response.
      if (this.method !== 'HEAD') this.res.end(text, close);
      else if (close) this.res.end(undefined, true);
      else this.endHead(Buffer.byteLength(text));
    });
  }

  protected sendHeadOnly(status: number, extra: HeaderList, contentLength: number): void {
    this.res.cork(() => {
      this.releaseReading();
      this.writeCommon(status, extra);
      this.endHead(contentLength);
    });
  }

  /**
   * Ends a HEAD answer, headers written. The length goes in as our own header: this uWS build's
   * endWithoutBody(length) sends nothing at all when another request is pipelined behind the HEAD
   * (measured), while endWithoutBody() after a Content-Length header of ours works either way.
   */
  private endHead(contentLength: number): void {
    this.res.writeHeader('Content-Length', String(contentLength));
    this.res.endWithoutBody();
  }

  /**
   * The head waits for the stream's first chunk (or its end), to leave with it in one send: a
   * head sent alone was one of a stream's three dearest sends in the profile. The vendor's first
   * event follows its own head at once, so a client sees no later status.
   */
  protected sendStreamHead(status: number, extra: HeaderList, contentLength?: number): void {
    this.headStatus = status;
    this.headExtra = extra;
    if (contentLength !== undefined) this.sized = new SizedBody(contentLength);
  }

  /** A stream declared by its length (startStream's contentLength), else undefined: chunked. */
  private sized: SizedBody | undefined;

  /** A stream's head not sent yet (0: none pending). */
  private headStatus = 0;
  private headExtra: HeaderList = [];

  /** Writes the pending head, inside the caller's cork. */
  private writePendingHead(): void {
    if (this.headStatus === 0) return;
    const status = this.headStatus;
    this.headStatus = 0;
    this.writeCommon(status, this.headExtra);
    this.headExtra = [];
  }

  write(chunk: Uint8Array | string): boolean {
    if (this.aborted) return true;
    if (this.sized !== undefined) return this.writeSized(this.sized, typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    if (this.tail === 1) return this.keepTail(chunk);
    // The chunk and the answer travel through fields so that the corked callback is made once per
    // response, not once per relayed chunk (the stream hot path allocates nothing per chunk).
    this.pendingChunk = chunk;
    this.res.cork(this.corkedWrite);
    this.pendingChunk = EMPTY_CHUNK;
    return this.writeOk;
  }

  /** 0: not held; 1: holdTail keeps what is written; 2: released (once, by end or the next turn). */
  private tail = 0;
  /** What was written while held: copies, as the caller owns its chunks. */
  private tailBytes: Buffer = EMPTY_BUFFER;

  override holdTail(): void {
    if (this.tail !== 0 || this.aborted || this.sized !== undefined) return;
    this.tail = 1;
    setImmediate(flushTail, this);
  }

  private keepTail(chunk: Uint8Array | string): boolean {
    const copy = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : Buffer.from(chunk);
    this.tailBytes = this.tailBytes.length === 0 ? copy : Buffer.concat([this.tailBytes, copy]);
    // Bounded: a vendor writing on after its receipt gets its bytes sent at once.
    if (this.tailBytes.length > MAX_TAIL_BYTES) this.flushTail();
    return true;
  }

  /** Sends what holdTail kept, once (the next turn's call, or too much kept). */
  flushTail(): void {
    if (this.tail !== 1) return;
    this.tail = 2;
    const kept = this.tailBytes;
    this.tailBytes = EMPTY_BUFFER;
    if (kept.length > 0) this.write(kept);
  }

  private pendingChunk: Uint8Array | string = EMPTY_CHUNK;
  private writeOk = true;
  private readonly corkedWrite = (): void => {
    this.writePendingHead();
    this.writeOk = this.res.write(this.pendingChunk);
  };

  waitWritable(): Promise<void> {
    if (this.aborted) return Promise.resolve();
    return new Promise((resolveW) => {
      this.drainWaiter = resolveW;
      this.res.onWritable(this.onWritable);
    });
  }

  private readonly onWritable = (offset: number): boolean => {
    if (this.sized !== undefined && !this.sendSized(this.sized, offset)) return false;
    this.wakeWriter();
    return true;
  };

  /**
   * One chunk of a sized stream, through tryEnd (uWS writes our length as Content-Length and no
   * chunked framing). What the socket does not take is not buffered by uWS: it is kept here and
   * sent from onWritable, from the offset uWS reports; false until then, like write().
   */
  private writeSized(sized: SizedBody, chunk: Uint8Array): boolean {
    if (sized.done) return true;
    sized.rest = chunk;
    sized.restOffset = -1;
    this.res.cork(this.corkedSized);
    return this.writeOk;
  }

  private readonly corkedSized = (): void => {
    this.writePendingHead();
    const sized = this.sized!;
    this.writeOk = this.sendSized(sized, this.res.getWriteOffset());
  };

  /** Sends what is left of the kept chunk from `offset`; true once all of it is taken. Reading resumes before the last byte (the answer's end). */
  private sendSized(sized: SizedBody, offset: number): boolean {
    if (sized.done || sized.rest.length === 0) return true;
    const rest = sized.restOffset < 0 ? sized.rest : sized.rest.subarray(offset - sized.restOffset);
    if (offset + rest.length >= sized.totalBytes) this.releaseReading();
    const [ok, done] = this.res.tryEnd(rest, sized.totalBytes);
    sized.done = done;
    sized.rest = ok ? EMPTY_CHUNK : rest;
    sized.restOffset = offset;
    return ok;
  }

  protected closeConnection(): void {
    this.res.close();
  }

  end(last?: Uint8Array | string): void {
    if (this.aborted) return;
    if (this.sized !== undefined && last !== undefined && last.length > 0) this.write(last);
    // A sized stream ends itself with its last byte (then uWS forbids touching the response); one
    // that got fewer bytes than it declared cannot end cleanly: the connection is cut.
    if (this.sized?.done === true) return;
    if (this.sized !== undefined && this.sized.totalBytes > 0) return this.cutStream();
    const kept = this.tailBytes;
    this.tail = 2;
    this.tailBytes = EMPTY_BUFFER;
    this.res.cork(() => {
      this.writePendingHead();
      if (kept.length > 0) this.res.write(kept);
      this.releaseReading();
      this.res.end(last);
    });
  }
}

function flushTail(ctx: UwsContext): void {
  ctx.flushTail();
}

/** The state of a stream declared by its length (uWS tryEnd). */
class SizedBody {
  /** True once uWS took the last byte: the answer is over. */
  done = false;
  /** The chunk (or what is left of it) the socket has not taken yet. */
  rest: Uint8Array = EMPTY_CHUNK;
  /** The response's write offset at rest's first byte; -1: not tried yet. */
  restOffset = -1;
  constructor(readonly totalBytes: number) {}
}
