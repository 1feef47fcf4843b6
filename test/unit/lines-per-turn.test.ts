// The buffered logger's per-turn batch (src/util/lines-per-turn.ts): a turn's lines reach the
// stream as one write at the turn's end, whole and in order; a turn that logs its limit hands them
// over at once; drain hands over what is held now, and nothing twice.
import t from 'tap';
import { LINES_PER_TURN_MAX, LinesPerTurn } from '../../src/util/lines-per-turn.js';

function recorder(): { writes: string[]; sink: { write(data: string): boolean } } {
  const writes: string[] = [];
  return { writes, sink: { write: (data: string) => (writes.push(data), true) } };
}

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

t.test("a turn's lines go out as one write when the turn ends", async (t) => {
  const { writes, sink } = recorder();
  const turns = new LinesPerTurn(sink);
  turns.write('a\n');
  turns.write('b\n');
  turns.write('c\n');
  t.same(writes, [], 'held during the turn');
  await nextTurn();
  t.same(writes, ['a\nb\nc\n']);
  turns.write('d\n');
  await nextTurn();
  t.same(writes, ['a\nb\nc\n', 'd\n'], 'the next turn, its own write');
  await nextTurn();
  t.equal(writes.length, 2, 'an empty turn writes nothing');
});

t.test('a turn at the limit hands its lines over at once, in order', async (t) => {
  const { writes, sink } = recorder();
  const turns = new LinesPerTurn(sink);
  for (let i = 0; i < LINES_PER_TURN_MAX + 3; i++) turns.write(`${i}\n`);
  t.equal(writes.length, 1, 'the first limit-full went out within the turn');
  t.equal(writes[0]!.split('\n').length - 1, LINES_PER_TURN_MAX);
  await nextTurn();
  const all = writes.join('').trimEnd().split('\n').map(Number);
  t.same(
    all,
    Array.from({ length: LINES_PER_TURN_MAX + 3 }, (_, i) => i),
  );
});

t.test('drain hands over what is held now, once', async (t) => {
  const { writes, sink } = recorder();
  const turns = new LinesPerTurn(sink);
  turns.write('x\n');
  turns.drain();
  t.same(writes, ['x\n']);
  await nextTurn();
  t.same(writes, ['x\n'], 'the turn end finds nothing left');
});
