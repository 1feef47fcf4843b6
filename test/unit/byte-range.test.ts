// The Range parser and its resolution against a size: positions of any length read exactly (a
// digit string past Number.MAX_SAFE_INTEGER is "past every end", never a rounded number), first
// byte past the end unsatisfiable, last byte past the end clamped, long suffixes the whole object,
// malformed and backwards headers ignored.
import t from 'tap';
import fc from 'fast-check';
import { clampPosition, parseRange, resolveRange } from '../../src/media/byte-range.js';

const HUGE = '99999999999999999999999';
const MAX = Number.MAX_SAFE_INTEGER;

t.test('clampPosition: exact up to MAX_SAFE_INTEGER, the bound above it', async (t) => {
  t.equal(clampPosition('0'), 0);
  t.equal(clampPosition('000123'), 123, 'leading zeros');
  t.equal(clampPosition(String(MAX)), MAX, 'the largest safe integer itself');
  t.equal(clampPosition('9007199254740992'), MAX, 'one past it');
  t.equal(clampPosition('9007199254740993'), MAX, 'one that rounds in a double');
  t.equal(clampPosition(HUGE), MAX);
  t.equal(clampPosition('0'.repeat(40) + '7'), 7, 'forty leading zeros are still 7');
  fc.assert(
    fc.property(fc.bigInt({ min: 0n, max: 10n ** 40n }), (n) => {
      const got = clampPosition(n.toString());
      return n > BigInt(MAX) ? got === MAX : BigInt(got) === n;
    }),
  );
});

t.test('parseRange: the forms a client sends', async (t) => {
  t.same(parseRange('bytes=0-99'), { start: 0, end: 99 });
  t.same(parseRange('bytes=100-'), { start: 100 });
  t.same(parseRange('bytes=-500'), { suffix: 500 });
  t.same(parseRange('BYTES = 5 - 9'), { start: 5, end: 9 }, 'unit case and spaces');
  t.same(parseRange(`bytes=${HUGE}-`), { start: MAX }, 'a first byte past any size');
  t.same(parseRange(`bytes=0-${HUGE}`), { start: 0, end: MAX }, 'a last byte past any size');
  t.same(parseRange(`bytes=-${HUGE}`), { suffix: MAX }, 'a suffix longer than any object');
  t.same(parseRange(`bytes=${HUGE}-${HUGE}`), { start: MAX, end: MAX });
  t.same(parseRange(`bytes=9007199254740992-${HUGE}`), { start: MAX, end: MAX }, 'both clamped, not backwards');
});

t.test('parseRange: what is ignored (the whole object is sent)', async (t) => {
  for (const h of [
    undefined,
    '',
    'bytes=',
    'bytes=-',
    'bytes=9-0',
    `bytes=${HUGE}-5`,
    `bytes=${HUGE}1-${HUGE}`,
    'bytes=0-9,20-29',
    'items=0-9',
    'bytes=a-b',
    'bytes=0x10-',
    'bytes=-5-',
    `bytes=0-${'9'.repeat(200)}`,
  ]) {
    t.equal(parseRange(h), undefined, JSON.stringify(h));
  }
});

t.test('resolveRange against a size, with clamped positions', async (t) => {
  const size = 10_000;
  const at = (h: string) => resolveRange(parseRange(h)!, size);
  t.equal(at(`bytes=${HUGE}-`), 'unsatisfiable', 'first byte past the end: 416');
  t.equal(at(`bytes=${HUGE}-${HUGE}`), 'unsatisfiable');
  t.equal(at(`bytes=${size}-`), 'unsatisfiable');
  t.same(at(`bytes=0-${HUGE}`), { start: 0, end: size - 1 }, 'last byte clamped to the end: 206');
  t.same(at(`bytes=9990-${HUGE}`), { start: 9990, end: size - 1 });
  t.same(at(`bytes=-${HUGE}`), { start: 0, end: size - 1 }, 'a huge suffix is the whole object, as a range');
  t.same(at('bytes=-500'), { start: 9500, end: size - 1 });
  t.equal(at('bytes=-0'), 'unsatisfiable');
  t.equal(resolveRange({ start: 0 }, 0), 'unsatisfiable', 'nothing of an empty object');
  t.equal(resolveRange({ suffix: 10 }, 0), 'unsatisfiable');
});
