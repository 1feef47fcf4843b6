// Exact o200k counts of large prompts, off the event loop. Counting costs ~70 ms per MiB of
// ordinary text and up to ~0.5 us per byte (request.ts's rules block): a 4 MiB prompt counted on
// the event loop would stall every other client for ~0.3-2 s. No cheap bound can refuse such a
// prompt first: the longest o200k token is 128 bytes, so a 4 MiB body may hold as few as ~33,000
// tokens, well inside the context; only the count can tell. So prompts of up to
// INLINE_COUNT_CHARS are counted in place (a few ms at most), longer ones by one worker thread,
// one request at a time, with a bound on what may wait for it.
import { Worker } from 'node:worker_threads';
import { ApiError } from '../../errors.js';
import { countTexts, type TextCounts } from './token-count.js';
import type { CountJob } from './token-count-thread.js';

/** Up to this many UTF-16 code units, counted on the event loop (~4 ms of ordinary text, ~30 ms worst case). */
export const INLINE_COUNT_CHARS = 64 * 1024;
/** Text waiting for (or in) the worker beyond this is refused 503 (several full-size prompts already queue). */
export const MAX_QUEUED_COUNT_CHARS = 64 * 1024 * 1024;
/** The worker answers in seconds at most; past this the job fails (and the worker is replaced). */
const COUNT_TIMEOUT_MS = 60_000;

interface Pending {
  resolve(c: TextCounts): void;
  reject(e: unknown): void;
  chars: number;
  timer: NodeJS.Timeout;
}

/** One worker for the process, started on first use; unref'd, so it never keeps the process alive. */
export class TokenCountPool {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private queuedChars = 0;

  count(verbatim: readonly string[], hold: readonly string[], chars: number): Promise<TextCounts> {
    if (this.queuedChars + chars > MAX_QUEUED_COUNT_CHARS) {
      return Promise.reject(
        new ApiError('provider_unavailable', { message: 'Too many large prompts are being counted on this instance; retry.', retryAfterS: 1 }),
      );
    }
    const w = this.worker ?? this.start();
    const id = this.nextId++;
    this.queuedChars += chars;
    return new Promise<TextCounts>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new Error(`token count took more than ${COUNT_TIMEOUT_MS} ms`)), COUNT_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, chars, timer });
      const job: CountJob = { id, verbatim, hold };
      w.postMessage(job);
    });
  }

  private start(): Worker {
    // Under the test runner this module is TypeScript and so is the thread's; built, both are .js.
    const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
    const w = new Worker(new URL(`./token-count-thread${ext}`, import.meta.url));
    w.on('message', (m: { id: number; verbatim: number; hold: number[] }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.settle(m.id, p);
      p.resolve({ verbatim: m.verbatim, hold: m.hold });
    });
    // Only the current worker's end fails the jobs: a replaced worker still emits 'exit' once its
    // terminate() completes, and must not take down its successor's jobs.
    w.on('error', (e) => {
      if (this.worker === w) this.fail(e);
    });
    w.on('exit', () => {
      if (this.worker === w) this.fail(new Error('the token-count thread exited'));
    });
    // After the listeners: attaching a message listener refs the worker's port again.
    w.unref();
    this.worker = w;
    return w;
  }

  private settle(id: number, p: Pending): void {
    clearTimeout(p.timer);
    this.pending.delete(id);
    this.queuedChars -= p.chars;
  }

  /** Fails every waiting job and drops the worker; the next count starts a fresh one. */
  private fail(e: unknown): void {
    const w = this.worker;
    this.worker = undefined;
    if (w) void w.terminate();
    for (const [id, p] of [...this.pending]) {
      this.settle(id, p);
      p.reject(e);
    }
  }
}

const pool = new TokenCountPool();

/** The counts of a request's texts: in place when short, on the worker thread when long. */
export function countRequestTexts(verbatim: readonly string[], hold: readonly string[], chars: number): TextCounts | Promise<TextCounts> {
  if (chars <= INLINE_COUNT_CHARS) return countTexts(verbatim, hold);
  return pool.count(verbatim, hold, chars);
}

/**
 * Starts the worker and waits until it counts (its first start loads the rank table: ~2 s of one
 * core). Otherwise the first long prompt waits for that itself (only that request: it happens off
 * the event loop).
 */
export async function warmTokenCountPool(): Promise<void> {
  await pool.count(['warm'], [], 4);
}
