// Small process and port facts the embedded Postgres and the benches share.
import { createServer } from 'node:net';

/** A TCP port on 127.0.0.1 free at the time of asking. */
export function freePort(): Promise<number> {
  return new Promise((resolveP, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolveP(port));
    });
  });
}

/** True while a process with this pid exists (EPERM: it exists, but is not ours to signal). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
