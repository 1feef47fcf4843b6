// A one-line progress bar on stderr, redrawn at most 10 times a second, so stdout stays clean for
// --json. Only on a TTY (or when asked with --progress); otherwise every call is a no-op.
export interface Progress {
  /** Names the run now going and how far the whole bench is (0..1 by planned seconds). */
  update(label: string, fraction: number): void;
  done(): void;
}

const WIDTH = 28;

export function createProgress(enabled: boolean, write: (s: string) => unknown): Progress {
  if (!enabled) return { update: () => undefined, done: () => undefined };
  let last = 0;
  let drawn = false;
  const started = Date.now();
  return {
    update(label, fraction) {
      const now = Date.now();
      if (now - last < 100 && fraction < 1) return;
      last = now;
      const f = Math.max(0, Math.min(1, fraction));
      const full = Math.round(f * WIDTH);
      const bar = '#'.repeat(full) + '-'.repeat(WIDTH - full);
      const secs = ((now - started) / 1000).toFixed(0);
      // \r + erase line: one line, rewritten in place; the label is cut to keep it one line.
      write(`\r\x1b[2K[${bar}] ${(f * 100).toFixed(0).padStart(3)}% ${secs}s ${label.slice(0, 60)}`);
      drawn = true;
    },
    done() {
      if (drawn) write('\r\x1b[2K');
      drawn = false;
    },
  };
}
