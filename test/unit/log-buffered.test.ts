// The buffered logger (the access log's): lines held in memory are all written by flush, whole and
// in order, to the file descriptor it was given; an unbuffered logger writes each line at once.
import t, { type Test } from 'tap';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BUFFERED_MIN_BYTES, createLogger } from '../../src/util/log.js';

function tempFile(t: Test): { path: string; fd: number } {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-log-'));
  const path = join(dir, 'out.log');
  const fd = openSync(path, 'w');
  t.teardown(() => {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  });
  return { path, fd };
}

t.test('buffered: held until flush, then every line whole and in order', async (t) => {
  const { path, fd } = tempFile(t);
  const log = createLogger('info', undefined, true, fd);
  for (let i = 0; i < 3; i++) log.info({ n: i, route: '/v1/me' }, 'http.request');
  log.debug({ n: 99 }, 'http.request');
  t.equal(readFileSync(path, 'utf8'), '', 'three short lines are held (below the write size)');
  t.type(log.flush, 'function');
  await log.flush!();
  const lines = readFileSync(path, 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as { n: number; msg: string; level: string });
  t.same(
    lines.map((l) => [l.level, l.msg, l.n]),
    [
      ['info', 'http.request', 0],
      ['info', 'http.request', 1],
      ['info', 'http.request', 2],
    ],
  );
});

t.test('buffered: a burst above the write size goes out without a flush', async (t) => {
  const { path, fd } = tempFile(t);
  const log = createLogger('info', undefined, true, fd);
  // Lines of about 60 bytes: three times the write size in all.
  const n = Math.ceil((3 * BUFFERED_MIN_BYTES) / 60);
  for (let i = 0; i < n; i++) log.info({ n: i }, 'http.request');
  // The writes are asynchronous: wait for the file to hold the first full write (bounded).
  let text = '';
  for (let tries = 0; tries < 1000 && text.length < BUFFERED_MIN_BYTES; tries++) {
    await new Promise((r) => setImmediate(r));
    text = readFileSync(path, 'utf8');
  }
  t.ok(text.length >= BUFFERED_MIN_BYTES, `written before any flush: ${text.length} bytes`);
  // More lines while a write may be in flight: the flush must not let them overtake it.
  for (let i = n; i < n + 50; i++) log.info({ n: i }, 'http.request');
  await log.flush!();
  const all = readFileSync(path, 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => (JSON.parse(l) as { n: number }).n);
  t.same(
    all,
    Array.from({ length: n + 50 }, (_, i) => i),
    'nothing lost, nothing reordered',
  );
});

t.test('unbuffered: each line at once, and no flush to call', async (t) => {
  const { path, fd } = tempFile(t);
  const log = createLogger('info', undefined, false, fd);
  log.warn({ a: 1 }, 'jobs.claim_failed');
  t.match(JSON.parse(readFileSync(path, 'utf8')), { level: 'warn', msg: 'jobs.claim_failed', a: 1 });
  t.equal(log.flush, undefined);
});
