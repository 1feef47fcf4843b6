// The group commit's answer, read per record by item number: rows in any order map to their
// records; an answer that misses, repeats or invents an item fails the batch (it is sent again).
import t from 'tap';
import { resultsByItem } from '../../src/ledger/write-behind.js';

t.test('rows in any order map to their items', async (t) => {
  t.same(
    resultsByItem(
      [
        { item: 3, result: 'late' },
        { item: 1, result: 'ok' },
        { item: 2, result: 'deferred' },
      ],
      3,
    ),
    ['ok', 'deferred', 'late'],
  );
  t.same(resultsByItem([], 0), []);
});

t.test('an answer that does not cover every record exactly once is refused', async (t) => {
  t.throws(() => resultsByItem([{ item: 1, result: 'ok' }], 2), /answered 1 of 2/);
  t.throws(
    () =>
      resultsByItem(
        [
          { item: 1, result: 'ok' },
          { item: 1, result: 'ok' },
        ],
        2,
      ),
    /item 1 of 2/,
  );
  t.throws(() => resultsByItem([{ item: 0, result: 'ok' }], 1), /item 0 of 1/);
  t.throws(() => resultsByItem([{ item: 2, result: 'ok' }], 1), /item 2 of 1/);
});
