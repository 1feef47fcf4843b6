// The journal flush sends its column arrays as Postgres binary parameters (src/store/binary-array.ts).
// Each encoder is read back by a real server: every element comes back as sent (the strings an
// array literal would have to escape, NULLs, empty strings, any Unicode; integers at their bounds;
// JSON as jsonb reads it), a column declared as another type is refused by the server, and a number
// the column cannot hold is refused before anything is sent.
import t from 'tap';
import { int4Array, int8Array, jsonbArray, textArray } from '../../src/store/binary-array.js';
import { testDb } from '../helpers/db.js';

const TRICKY = ['', 'NULL', 'null', '"', '\\', '\\"', '{}', '{a,b}', 'a,b', ' spaced ', 'tab\there', 'line\nend', 'é', '日本語', '👩‍💻', "o'quote"];

t.test('text, bigint, integer and jsonb arrays arrive as sent', async (t) => {
  const db = await testDb(t);
  const texts = [...TRICKY, null, 'req_0000018f3b2c' + 'a'.repeat(20)];
  const got = await db.pool.query('SELECT $1::text[] AS v, array_length($1::text[], 1) AS n', [textArray(texts)]);
  t.same(got.rows[0].v, texts, 'every string and NULL, in order');
  t.equal(got.rows[0].n, texts.length);

  const bigints = [
    0,
    1,
    -1,
    2 ** 31,
    -(2 ** 31) - 1,
    2 ** 32 - 1,
    2 ** 32,
    -(2 ** 32),
    Number.MAX_SAFE_INTEGER,
    Number.MIN_SAFE_INTEGER,
    4_294_967_297,
    -4_294_967_297,
  ];
  const b = await db.pool.query('SELECT array_to_json($1::bigint[])::text AS v', [int8Array(bigints)]);
  t.same(JSON.parse(b.rows[0].v), bigints, 'bigints across the 32-bit halves, negatives in two-complement');

  const ints = [0, 1, -1, 2_147_483_647, -2_147_483_648, 3];
  const i = await db.pool.query('SELECT $1::integer[] AS v', [int4Array(ints)]);
  t.same(i.rows[0].v, ints);

  const json = ['{"input_tokens":10,"output_tokens":20}', null, '{"text":"日本語 \\"q\\" \\\\ 👩‍💻","n":[1,2.5,null,true]}', '{}'];
  const j = await db.pool.query('SELECT $1::jsonb[] AS v', [jsonbArray(json)]);
  t.same(
    j.rows[0].v,
    json.map((v) => (v === null ? null : JSON.parse(v))),
    'each element read by the server as the JSON it is',
  );

  const empty = await db.pool.query('SELECT cardinality($1::text[]) AS n, cardinality($2::bigint[]) AS m', [textArray([]), int8Array([])]);
  t.same(empty.rows[0], { n: 0, m: 0 }, 'empty arrays');
});

t.test('a column under another declared type is refused by the server', async (t) => {
  const db = await testDb(t);
  await t.rejects(db.pool.query('SELECT $1::integer[] AS v', [int8Array([1, 2])]), /array element type/);
  await t.rejects(db.pool.query('SELECT $1::bigint[] AS v', [textArray(['1'])]), /array element type/);
  await t.rejects(db.pool.query('SELECT $1::jsonb[] AS v', [jsonbArray(['{not json'])]), /invalid input syntax for type json/);
});

t.test('a number the column cannot hold is refused before sending', async (t) => {
  t.throws(() => int8Array([1, 2 ** 53]), RangeError);
  t.throws(() => int8Array([0.5]), RangeError);
  t.throws(() => int8Array([Number.NaN]), RangeError);
  t.throws(() => int4Array([2_147_483_648]), RangeError);
  t.throws(() => int4Array([-2_147_483_649]), RangeError);
  t.throws(() => int4Array([1.5]), RangeError);
});
