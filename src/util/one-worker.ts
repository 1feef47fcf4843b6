// One worker thread for the process, for work too slow for the event loop (a large body's parse, a
// long prompt's token count). What it guarantees to its users:
// - the thread starts on first use and is unref'd: an idle gateway pays nothing for it and it never
//   keeps the process alive;
// - what waits for (or is in) the thread is bounded by the users' own measure of size: past
//   maxQueued a job is refused 503 provider_unavailable with Retry-After 1 before anything is sent;
// - every job ends exactly once: with its answer, or with an error after timeoutMs, or when the
//   thread fails or exits; then every waiting job fails with it and the thread is dropped, and the
//   next job starts a fresh one (a thread that failed once is not trusted with more work);
// - only the current thread's end fails the jobs: a replaced thread still emits 'exit' once its
//   terminate() completes, and must not take down its successor's jobs.
import { type TransferListItem, Worker } from 'node:worker_threads';
import { ApiError } from '../errors.js';

export interface OneWorkerOptions {
  /** The user's import.meta.url: the thread's module is resolved beside it. */
  readonly base: string;
  /** The thread's module name, without extension (e.g. 'json-parse-thread'). */
  readonly thread: string;
  /** Size (in the user's unit) that may wait for or be in the thread; past it, 503. */
  readonly maxQueued: number;
  readonly timeoutMs: number;
  /** The 503's message, in the user's words. */
  readonly busyMessage: string;
  /** The error of a job past timeoutMs. */
  readonly timeoutMessage: string;
  /** The error of the jobs waiting when the thread exits. */
  readonly exitMessage: string;
  /** What the thread starts with (its `workerData`): shared memory is shared, not copied. */
  readonly workerData?: unknown;
}

/** The Node flags a thread takes from its process: how modules load, nothing else (with a value when it takes one). */
const THREAD_FLAGS: ReadonlyMap<string, boolean> = new Map([
  ['--import', true],
  ['--require', true],
  ['-r', true],
  ['--loader', true],
  ['--experimental-loader', true],
  ['--conditions', true],
  ['-C', true],
  ['--enable-source-maps', false],
]);

/**
 * The process's Node flags a thread needs: the module loaders (a source checkout runs its threads'
 * TypeScript through one) and source maps. Only those: Node refuses to start a thread given a
 * process-wide flag (`--expose-gc`, `--max-old-space-size`, ...), which an operator may well pass,
 * and `--input-type` is about a script given as a string, under which a thread's file failed to load.
 */
export function threadExecArgv(argv: readonly string[] = process.execArgv): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const takesValue = THREAD_FLAGS.get(name);
    if (takesValue === undefined) continue;
    out.push(arg);
    if (takesValue && eq === -1 && i + 1 < argv.length) out.push(argv[++i]!);
  }
  return out;
}

/** What goes to the thread: the job, and the buffers to move rather than copy. */
export interface Outgoing<Job> {
  readonly job: Job;
  readonly transfer?: readonly TransferListItem[];
}

interface Pending<Context, Result> {
  readonly context: Context;
  resolve(result: Result): void;
  reject(error: unknown): void;
  readonly size: number;
  readonly timer: NodeJS.Timeout;
}

/**
 * The shared mechanism; a user subclasses it with its job, answer, result and per-job context (what
 * its answer handling needs back, e.g. the body), and turns an answer into a result in answer().
 */
export abstract class OneWorker<Job, Answer extends { readonly id: number }, Result, Context> {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending<Context, Result>>();
  private nextId = 1;
  private queued = 0;

  protected constructor(private readonly options: OneWorkerOptions) {}

  /** The result of one answer; a throw rejects the job with what was thrown. */
  protected abstract answer(message: Answer, context: Context): Result;

  /** Sends one job (built from its id) unless the queue is full; settles once, as the header says. */
  protected run(size: number, context: Context, outgoing: (id: number) => Outgoing<Job>): Promise<Result> {
    const { maxQueued, timeoutMs, busyMessage, timeoutMessage } = this.options;
    if (this.queued + size > maxQueued) {
      return Promise.reject(new ApiError('provider_unavailable', { message: busyMessage, retryAfterS: 1 }));
    }
    const w = this.worker ?? this.start();
    const id = this.nextId++;
    this.queued += size;
    return new Promise<Result>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new Error(timeoutMessage)), timeoutMs);
      this.pending.set(id, { context, resolve, reject, size, timer });
      const { job, transfer } = outgoing(id);
      w.postMessage(job, transfer);
    });
  }

  private start(): Worker {
    const { base, thread, exitMessage } = this.options;
    // Under the test runner the user's module is TypeScript and so is the thread's; built, both are .js.
    const ext = base.endsWith('.ts') ? '.ts' : '.js';
    const w = new Worker(new URL(`./${thread}${ext}`, base), { workerData: this.options.workerData, execArgv: threadExecArgv() });
    w.on('message', (answer: Answer) => {
      const p = this.pending.get(answer.id);
      if (!p) return;
      this.settle(answer.id, p);
      try {
        p.resolve(this.answer(answer, p.context));
      } catch (e) {
        p.reject(e);
      }
    });
    w.on('error', (error) => {
      if (this.worker === w) this.fail(error);
    });
    w.on('exit', () => {
      if (this.worker === w) this.fail(new Error(exitMessage));
    });
    // After the listeners: attaching a message listener refs the worker's port again.
    w.unref();
    this.worker = w;
    return w;
  }

  private settle(id: number, job: Pending<Context, Result>): void {
    clearTimeout(job.timer);
    this.pending.delete(id);
    this.queued -= job.size;
  }

  /** Fails every waiting job and drops the worker; the next job starts a fresh one. */
  private fail(error: unknown): void {
    const w = this.worker;
    this.worker = undefined;
    if (w) void w.terminate();
    for (const [id, p] of [...this.pending]) {
      this.settle(id, p);
      p.reject(error);
    }
  }
}
