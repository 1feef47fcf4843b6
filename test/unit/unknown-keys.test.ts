// The negative cache (src/auth/unknown-keys.ts) on a clock the test moves: an entry lives exactly
// unknownKeyMs, the oldest leaves first when full, and 0 turns it off.
import t from 'tap';
import { UnknownKeys } from '../../src/auth/unknown-keys.js';

function setup(unknownKeyMs = 30_000, unknownKeyEntries = 3) {
  const clock = { ms: 5_000 };
  return { clock, keys: new UnknownKeys({ unknownKeyMs, unknownKeyEntries, nowMs: () => clock.ms }) };
}

t.test('an entry is held for unknownKeyMs, then dropped', async (t) => {
  const { clock, keys } = setup();
  t.notOk(keys.has('a'));
  keys.add('a');
  t.ok(keys.has('a'));
  clock.ms += 29_999;
  t.ok(keys.has('a'), '1 ms before its end');
  clock.ms += 1;
  t.notOk(keys.has('a'), 'at its end');
  t.equal(keys.size, 0, 'an expired entry met is dropped');
});

t.test('adding again restarts the lifetime', async (t) => {
  const { clock, keys } = setup();
  keys.add('a');
  clock.ms += 20_000;
  keys.add('a');
  clock.ms += 20_000;
  t.ok(keys.has('a'));
});

t.test('bounded: the oldest entry leaves first', async (t) => {
  const { keys } = setup(30_000, 3);
  for (const k of ['a', 'b', 'c', 'd']) keys.add(k);
  t.equal(keys.size, 3);
  t.same(
    ['a', 'b', 'c', 'd'].map((k) => keys.has(k)),
    [false, true, true, true],
  );
});

t.test('unknownKeyMs 0: nothing is remembered; a bad size is refused at start', async (t) => {
  const { keys } = setup(0);
  keys.add('a');
  t.notOk(keys.has('a'));
  t.equal(keys.size, 0);
  t.throws(() => new UnknownKeys({ unknownKeyMs: 1, unknownKeyEntries: 0, nowMs: () => 0 }), /unknownKeyEntries/);
});
