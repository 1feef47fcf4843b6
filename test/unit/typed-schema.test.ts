// The schema checker behind the configuration and the model catalogue: every shape it knows, what
// it accepts, and the JSON pointer and words of each problem it names.
import t from 'tap';
import { Compile, Type } from '../../src/util/typed-schema.js';

const Doc = Type.Object(
  {
    port: Type.Integer({ minimum: 0, maximum: 65535 }),
    ratio: Type.Number({ minimum: 0, maximum: 1 }),
    name: Type.String({ minLength: 1, maxLength: 8, pattern: '^[a-z]+$' }),
    on: Type.Boolean(),
    url: Type.Union([Type.String({ minLength: 1 }), Type.Null()]),
    mode: Type.Union([Type.Literal('a'), Type.Literal('b')]),
    tags: Type.Array(Type.String(), { minItems: 1, maxItems: 3, uniqueItems: true }),
    nested: Type.Object({ 'a/b': Type.Optional(Type.Integer()) }, { additionalProperties: false }),
    extra: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
const check = Compile(Doc);
const good = { port: 8080, ratio: 0.5, name: 'abc', on: true, url: null, mode: 'a', tags: ['x', 'y'], nested: {} };

t.test('a document with every shape right passes, optional properties left out or given', async (t) => {
  t.ok(check.Check(good));
  t.same(check.Errors(good), []);
  t.ok(check.Check({ ...good, extra: false, url: 'http://x', nested: { 'a/b': 3 } }));
});

t.test('each problem is named at its pointer, all of them at once', async (t) => {
  const bad = {
    ...good,
    port: 70_000,
    ratio: Number.NaN,
    name: 'ABCDEFGHIJ',
    on: 'yes',
    url: '',
    mode: 'c',
    tags: ['x', 'x', 1, 'z'],
    nested: { q: 1, 'a/b': 1.5 },
    more: 1,
  };
  t.notOk(check.Check(bad));
  t.same(
    check.Errors(bad).map((e) => `${e.instancePath} ${e.message}`),
    [
      '/port must be <= 65535',
      '/ratio must be number',
      '/name must NOT have more than 8 characters',
      '/name must match pattern "^[a-z]+$"',
      '/on must be boolean',
      '/url must be one of: string, null',
      '/mode must be one of: "a", "b"',
      '/tags must NOT have more than 3 items',
      '/tags must NOT have duplicate items',
      '/tags/2 must be string',
      '/nested/a~1b must be integer',
      '/nested/q must NOT be here (unknown property)',
      '/more must NOT be here (unknown property)',
    ],
  );
});

t.test('missing required properties, wrong container types, bounds from below', async (t) => {
  t.same(
    check.Errors({ ...good, port: -1, tags: [], nested: [] }).map((e) => `${e.instancePath} ${e.message}`),
    ['/port must be >= 0', '/tags must NOT have fewer than 1 items', '/nested must be object'],
  );
  const { name: _name, ...noName } = good;
  t.same(check.Errors(noName), [{ instancePath: '', message: "must have required property 'name'" }]);
  t.same(check.Errors([]), [{ instancePath: '', message: 'must be object' }]);
  t.same(check.Errors({ ...good, port: 1.5 }), [{ instancePath: '/port', message: 'must be integer' }]);
  t.same(check.Errors({ ...good, name: '' }).length, 2, 'too short and not the pattern');
});

t.test('a flood of problems is cut at 200', async (t) => {
  const many = Compile(Type.Array(Type.Integer(), { maxItems: 100_000 }));
  t.equal(many.Errors(Array.from({ length: 10_000 }, () => 'x')).length, 200);
});
