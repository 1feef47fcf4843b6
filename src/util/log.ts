// JSON-lines logs on stdout, written by pino: {"level":"info","time":"<ISO>", bindings, fields, "msg":"<event id>"}.
// Called in pino's order, `log.warn({ fields }, 'area.event_name')`: the message is always a stable
// event id from log-events.ts (the compiler checks it), and the why goes in the fields. A request
// or a background part logs through a child (`log.child({ request_id })`, `{ component }`), so
// its lines carry the binding without each call passing it. Never log a raw key, a prompt, a completion or a vendor key (test/reliability/auth-leaks.test.ts
// scans a debug-level log of every kind of request for them); lines about one request carry its
// request_id. An Error in the fields is written as its message and code only: a stack or a cause
// chain can quote what a vendor or a client sent.
import { pino, type Logger as PinoLogger } from 'pino';
import { levelOf, type LogEvent } from './log-events.js';
import { LinesPerTurn } from './lines-per-turn.js';
import { loopDelayMs, startLoopDelayProbe } from './loop-delay.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';
export type LogFields = Record<string, unknown>;

/** pino's order: fields first, then the event id (log-events.ts); or the event id alone. */
export interface LogFn {
  (fields: LogFields, msg: LogEvent): void;
  (msg: LogEvent): void;
}

export interface Logger {
  readonly debug: LogFn;
  readonly info: LogFn;
  readonly warn: LogFn;
  readonly error: LogFn;
  readonly fatal: LogFn;
  /** A logger whose every line also carries `bindings` (a request's `request_id`, a part's `component`). */
  child(bindings: LogFields): Logger;
  /**
   * Writes out what a buffered logger still holds (at shutdown), after the write in flight, so no
   * line overtakes another; resolves once written or after BUFFERED_FLUSH_WAIT_MS (a reader of
   * stdout that stopped reading cannot hold a shutdown). Absent where nothing is held.
   */
  flush?(): Promise<void>;
  /**
   * Writes one `info` line whose fields the caller has already serialised (`"a":1,"b":"x"`, none
   * that the redaction below names): `{"level":"info","time":...,<fields>,"msg":<msg>}`, the same
   * line `info(fields, msg)` writes, without pino's generic walk of the fields. For the access log,
   * a line per request (the request budget in docs/performance.md). Absent on a child.
   */
  infoLine?(fieldsJson: string, msg: LogEvent): void;
}

/** A buffered stdout logger holds at most this much when stdout is slower than the lines (more is dropped). */
const BUFFERED_MAX_BYTES = 16 * 1024 * 1024;
/**
 * It writes once this much is held, or every BUFFERED_FLUSH_MS: one write per line cost a thread
 * pool round trip per request (the bench's profile: ~8 % of a busy gateway's CPU in the write);
 * at 4 KiB the writes were still 3.6 % of a busy node-engine gateway (~20 µs a request, the request budget).
 */
export const BUFFERED_MIN_BYTES = 32 * 1024;
/** A shutdown waits at most this long for a buffered logger's writes. */
const BUFFERED_FLUSH_WAIT_MS = 2_000;
/** One write's most (sonic-boom's own default, 16 KiB, must stay above the least). */
const BUFFERED_MAX_WRITE_BYTES = 64 * 1024;
const BUFFERED_FLUSH_MS = 1000;

/** pino's number for `warn`: lines at it and above carry the event loop's delay. */
const WARN_LEVEL = 40;
const NO_FIELDS = Object.freeze({});

/**
 * A warn, error or fatal line's extra field: the event loop's delay at that moment (util/loop-delay.ts),
 * so a store or Redis timeout logged after a long tick of ours is not read as the peer's slowness.
 */
function loopDelayField(_fields: object, level: number): object {
  if (level < WARN_LEVEL) return NO_FIELDS;
  const ms = loopDelayMs();
  return ms === undefined ? NO_FIELDS : { loopDelayMs: ms };
}

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
 * of stdout. `buffered` (the access log: a line per request) collects a loop turn's lines into one
 * string (util/lines-per-turn.ts) and writes stdout asynchronously, in writes of at least 32 KiB or
 * once a second, so a busy instance does not make a system call per
 * request nor wait on a slow reader of its stdout; what is held is bounded and dropped beyond
 * (BUFFERED_MAX_BYTES), and `flush` writes it out at shutdown. Other loggers write each line at
 * once: an error line must not wait. Warn lines and worse carry `loopDelayMs` (loopDelayField).
 */
export function createLogger(level: LogLevel, write?: (line: string) => void, buffered = false, fileDescriptor = 1): Logger {
  if (level !== 'silent') startLoopDelayProbe();
  const stdout = write
    ? undefined
    : pino.destination({
        dest: fileDescriptor,
        sync: !buffered,
        ...(buffered ? { minLength: BUFFERED_MIN_BYTES, maxWrite: BUFFERED_MAX_WRITE_BYTES, maxLength: BUFFERED_MAX_BYTES } : {}),
      });
  const turns = buffered && stdout ? new LinesPerTurn(stdout) : undefined;
  const destination = write ? { write: (s: string) => write(s.endsWith('\n') ? s.slice(0, -1) : s) } : (turns ?? stdout!);
  const p: PinoLogger = pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      mixin: loopDelayField,
      // pino's own merge writes the line's fields into the mixin's object: NO_FIELDS (shared) must
      // stay untouched, and a line below warn costs no object of its own.
      mixinMergeStrategy: (fields, extra) => (extra === NO_FIELDS ? fields : Object.assign(extra, fields)),
      // fieldsOut already reduced an Error to { message, code }: written as it is.
      serializers: { err: (v: unknown) => v },
      // Belt and braces: the code never puts these in a line; if it ever did, they are censored.
      redact: { paths: ['authorization', 'headers.authorization', 'apiKey', 'api_key', 'key', 'prompt', 'input', 'messages'], censor: '[redacted]' },
    },
    destination,
  );
  const logger: Logger = new PinoWrap(p);
  logger.infoLine = (fieldsJson, msg) => {
    if (!p.isLevelEnabled('info')) return;
    destination.write(`{"level":"info","time":"${new Date().toISOString()}",${fieldsJson},"msg":${JSON.stringify(msg)}}\n`);
  };
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
      turns?.drain();
      return new Promise<void>((resolve) => {
        const bound = setTimeout(resolve, BUFFERED_FLUSH_WAIT_MS);
        bound.unref();
        // flush(cb) waits for the write in flight and whatever follows it above the write size;
        // what is left below that size is written at once after it, in order.
        const rest = () => {
          try {
            stdout.flushSync();
          } catch {
            /* nothing held, or stdout is gone: nothing more to do at shutdown */
          }
          clearTimeout(bound);
          resolve();
        };
        try {
          stdout.flush(rest);
        } catch {
          rest();
        }
      });
    };
  }
  return logger;
}

/**
 * Our Logger over a pino logger. A class, so a child costs pino's own child and one small object:
 * no closures per child (a request gets one).
 */
class PinoWrap implements Logger {
  constructor(private readonly pinoLogger: PinoLogger) {}
  debug(fieldsOrEvent: LogFields | LogEvent, msg?: LogEvent): void {
    write(this.pinoLogger, 'debug', fieldsOrEvent, msg);
  }
  info(fieldsOrEvent: LogFields | LogEvent, msg?: LogEvent): void {
    write(this.pinoLogger, 'info', fieldsOrEvent, msg);
  }
  warn(fieldsOrEvent: LogFields | LogEvent, msg?: LogEvent): void {
    write(this.pinoLogger, 'warn', fieldsOrEvent, msg);
  }
  error(fieldsOrEvent: LogFields | LogEvent, msg?: LogEvent): void {
    write(this.pinoLogger, 'error', fieldsOrEvent, msg);
  }
  fatal(fieldsOrEvent: LogFields | LogEvent, msg?: LogEvent): void {
    write(this.pinoLogger, 'fatal', fieldsOrEvent, msg);
  }
  child(bindings: LogFields): Logger {
    return new PinoWrap(this.pinoLogger.child(fieldsOut(bindings)));
  }
}

function write(
  pinoLogger: PinoLogger,
  level: 'debug' | 'info' | 'warn' | 'error' | 'fatal',
  fieldsOrEvent: LogFields | LogEvent,
  msg: LogEvent | undefined,
): void {
  if (typeof fieldsOrEvent === 'string') pinoLogger[level](fieldsOrEvent);
  else pinoLogger[level](fieldsOut(fieldsOrEvent), msg);
}

/**
 * A logging callback for the parts that take one rather than a Logger (the ledger, the traces):
 * `(fields, event)` as pino has it, the event an id of log-events.ts, so the compiler checks the
 * name and the table gives the level.
 */
export type EventLog = (fields: LogFields, event: LogEvent) => void;

/** An EventLog that writes each event to `log` at the level log-events.ts gives it. */
export function eventSink(log: Logger): EventLog {
  return (fields, event) => log[levelOf(event)](fields, event);
}

export const silentLogger: Logger = createLogger('silent');
