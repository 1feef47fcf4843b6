// A request body gathered under a cap, for either engine: into one buffer of the declared size
// when Content-Length is known, else into a list joined at the end.
import { ApiError } from '../errors.js';

export function tooLarge(maxBytes: number): ApiError {
  return new ApiError('payload_too_large', { message: `The request body is larger than ${maxBytes} bytes.` });
}

export class BodyCollector {
  readonly promise: Promise<Buffer>;
  private resolveP!: (body: Buffer) => void;
  private rejectP!: (error: unknown) => void;
  private chunks: Buffer[] = [];
  private fixed: Buffer | undefined;
  private size = 0;
  private finished = false;
  private failure: unknown;

  /**
   * `deferHandOver`: hand the body over a tick later (uWS: once it parsed all it read with the
   * body; when that held a pipelined request it has closed the connection by then, and the
   * request is refused before anything ran for it).
   */
  constructor(
    readonly maxBytes: number,
    declared: number | undefined,
    private readonly deferHandOver: boolean,
  ) {
    this.promise = new Promise((res, rej) => {
      this.resolveP = res;
      this.rejectP = rej;
    });
    // Unhandled until a handler awaits it: that is fine, the response already went out.
    this.promise.catch(() => undefined);
    if (declared !== undefined) this.fixed = Buffer.allocUnsafe(declared);
  }

  /**
   * Adds a chunk; false when the cap (or the declared length) is crossed. `owned`: the chunk is
   * ours to keep (node); otherwise (uWS reuses its buffer) it is copied.
   */
  add(chunk: Buffer, isLast: boolean, owned: boolean): boolean {
    if (this.finished) return true;
    const n = chunk.byteLength;
    if (this.size + n > this.maxBytes || (this.fixed && this.size + n > this.fixed.length)) {
      this.fail(tooLarge(this.maxBytes));
      return false;
    }
    if (this.fixed) chunk.copy(this.fixed, this.size);
    else if (n > 0) this.chunks.push(owned ? chunk : Buffer.from(chunk));
    this.size += n;
    if (isLast) this.finish();
    return true;
  }

  private finish(): void {
    this.finished = true;
    const body = this.fixed
      ? this.size === this.fixed.length
        ? this.fixed
        : this.fixed.subarray(0, this.size)
      : this.chunks.length === 1
        ? this.chunks[0]!
        : Buffer.concat(this.chunks, this.size);
    this.chunks = [];
    const handOver = (): void => (this.failure === undefined ? this.resolveP(body) : this.rejectP(this.failure));
    if (this.deferHandOver) setImmediate(handOver);
    else handOver();
  }

  fail(error: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = error;
    if (this.finished) return; // a deferred hand-over sees the failure
    this.finished = true;
    this.chunks = [];
    this.rejectP(error);
  }
}
