// A real logger (src/util/log.ts) whose lines are kept, parsed, for a test to read: the lines
// checked are the ones an operator gets, bindings and level included.
import { createLogger, type LogLevel, type Logger } from '../../src/util/log.js';

export interface LoggedLine {
  readonly level: string;
  readonly msg: string;
  readonly [field: string]: unknown;
}

export function recordingLogger(level: LogLevel = 'debug'): { log: Logger; lines: LoggedLine[] } {
  const lines: LoggedLine[] = [];
  return { log: createLogger(level, (l) => void lines.push(JSON.parse(l) as LoggedLine)), lines };
}
