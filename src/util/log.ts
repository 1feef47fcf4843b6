// JSON-lines logs on stdout, written by pino: {"level":"info","time":"<ISO>","msg":"...", fields}.
// Never log a raw key, a prompt, a completion or a vendor key (test/reliability/auth-leaks.test.ts
// scans a debug-level log of every kind of request for them); lines about one request carry its
// request_id. An Error in the fields is written as its message and code only: a stack or a cause
// chain can quote what a vendor or a client sent.
import { pino, type Logger as PinoLogger } from 'pino';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /** Writes out what a buffered logger still holds (at shutdown); absent where nothing is held. */
  flush?(): void;
}

/** A buffered stdout logger holds at most this much when stdout is slower than the lines (more is dropped). */
const BUFFERED_MAX_BYTES = 16 * 1024 * 1024;
/**
 * It writes once this much is held, or every BUFFERED_FLUSH_MS: one write per line cost a thread
 * pool round trip per request (the bench's profile: ~8 % of a busy gateway's CPU in the write).
 */
const BUFFERED_MIN_BYTES = 4096;
const BUFFERED_FLUSH_MS = 1000;

const liteError = (v: unknown): unknown => (v instanceof Error ? { message: v.message, code: (v as { code?: unknown }).code } : v);

/** Fields as written: top-level Errors reduced to message and code. */
function fieldsOut(fields: Record<string, unknown>): Record<string, unknown> {
  for (const k in fields) {
    if (fields[k] instanceof Error) return Object.fromEntries(Object.entries(fields).map(([key, v]) => [key, liteError(v)]));
  }
  return fields;
}

/**
 * A logger at `level`. `write` (tests, the bench) receives each line without its newline instead
 * of stdout. `buffered` (the access log: a line per request) writes stdout asynchronously, in writes of at
 * least 4 KiB or once a second, so a busy instance does not make a system call per
 * request nor wait on a slow reader of its stdout; what is held is bounded and dropped beyond
 * (BUFFERED_MAX_BYTES), and `flush` writes it out at shutdown. Other loggers write each line at
 * once: an error line must not wait.
 */
export function createLogger(level: LogLevel, write?: (line: string) => void, buffered = false, fd = 1): Logger {
  const stdout = write ? undefined : pino.destination({ dest: fd, sync: !buffered, ...(buffered ? { minLength: BUFFERED_MIN_BYTES, maxLength: BUFFERED_MAX_BYTES } : {}) });
  const destination = write ? { write: (s: string) => write(s.endsWith('\n') ? s.slice(0, -1) : s) } : stdout!;
  const p: PinoLogger = pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // fieldsOut already reduced an Error to { message, code }: written as it is.
      serializers: { err: (v: unknown) => v },
      // Belt and braces: the code never puts these in a line; if it ever did, they are censored.
      redact: { paths: ['authorization', 'headers.authorization', 'apiKey', 'api_key', 'key', 'prompt', 'input', 'messages'], censor: '[redacted]' },
    },
    destination,
  );
  const at = (fn: PinoLogger['info']) => (msg: string, fields?: Record<string, unknown>) => {
    if (fields === undefined) fn.call(p, msg);
    else fn.call(p, fieldsOut(fields), msg);
  };
  const logger: Logger = { debug: at(p.debug), info: at(p.info), warn: at(p.warn), error: at(p.error) };
  if (buffered && stdout) {
    // What is held goes out within a second on a quiet instance; the timer keeps no process alive.
    const timer = setInterval(() => {
      try {
        stdout.flush();
      } catch {
        /* a write is in flight (it takes what is held with it) or stdout is gone */
      }
    }, BUFFERED_FLUSH_MS);
    timer.unref();
    logger.flush = () => {
      clearInterval(timer);
      try {
        stdout.flushSync();
      } catch {
        /* nothing held, or stdout is gone: nothing more to do at shutdown */
      }
    };
  }
  return logger;
}

export const silentLogger: Logger = createLogger('silent');
