// JSON-lines logs on stdout. Never log a raw key or a request body.
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(level: LogLevel, write: (line: string) => void = (l) => process.stdout.write(l + '\n')): Logger {
  const min = ORDER[level];
  const emit = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    let extra = '';
    if (fields) {
      try {
        extra = ',' + JSON.stringify(fields, (_k, v) => (v instanceof Error ? { message: v.message, code: (v as { code?: unknown }).code } : v)).slice(1, -1);
      } catch {
        extra = '';
      }
      if (extra === ',') extra = '';
    }
    write(`{"t":"${new Date().toISOString()}","level":"${lvl}","msg":${JSON.stringify(msg)}${extra}}`);
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}

export const silentLogger: Logger = createLogger('silent');
