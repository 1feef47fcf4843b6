// The structural pre-check of JSON bodies (src/server/json-shape.ts), the cut of client text
// (src/errors.ts: clipped) and the field-name hint (src/util/request-fields.ts).
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { JSON_SHAPE_LIMITS, checkJsonShape } from '../../src/server/json-shape.js';
import { parseJsonObject } from '../../src/server/json-parse.js';
import { clipped, CUT_MARK } from '../../src/errors.js';
import { closestField } from '../../src/util/request-fields.js';

const refusal = (text: string): { code: string; param: string | undefined } | undefined => {
  try {
    checkJsonShape(Buffer.from(text));
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return { code: e.code, param: e.param };
  }
};
const keys = (n: number): string => `{${Array.from({ length: n }, (_, i) => `"k${i}":1`).join(',')}}`;
const L = JSON_SHAPE_LIMITS;

t.test('what real clients send passes', async (t) => {
  const long = 'lorem ipsum "quoted" \\ back\\slash ünïcödé '.repeat(90_000);
  t.equal(refusal(JSON.stringify({ model: 'sonnet', messages: [{ role: 'user', content: long }] })), undefined, 'a 4 MiB body of long strings');
  const turns = Array.from({ length: 4_000 }, (_, i) => ({
    role: i % 2 ? 'assistant' : 'user',
    content: [
      { type: 'text', text: 'x'.repeat(500) },
      { type: 'tool_use', id: `toolu_${i}`, name: 'Bash', input: { command: 'ls', description: 'list' } },
    ],
  }));
  const tools = Array.from({ length: 300 }, (_, i) => ({
    name: `t${i}`,
    input_schema: { type: 'object', properties: { a: { type: 'string' }, b: { type: 'array', items: { type: 'number' } } } },
  }));
  t.equal(refusal(JSON.stringify({ model: 'sonnet', messages: turns, tools }, null, 2)), undefined, 'a long agent session, pretty-printed');
  t.equal(refusal(`{"a":${keys(L.objectKeys)}}`), undefined, 'an object at its limit');
  t.equal(refusal(`{"a":[${'0,'.repeat(L.arrayItems - 1)}0]}`), undefined, 'an array at its limit');
  t.equal(refusal(`{"a":"\\"}","b":"\\\\","c":{"d":"}]"}}`), undefined, 'escapes and brackets inside strings are text');
});

t.test('absurd shapes are refused with the place and the limit', async (t) => {
  t.same(refusal(`{"system":${keys(L.objectKeys + 1)}}`), { code: 'too_many', param: 'system' });
  t.same(refusal(`{"a":{"b":[1,${keys(L.objectKeys + 1)}]}}`), { code: 'too_many', param: 'a.b.1' });
  t.same(refusal(`{"m":[${'0,'.repeat(L.arrayItems)}0]}`), { code: 'too_many', param: 'm' });
  t.same(refusal(`{"a":[${Array.from({ length: 120 }, () => keys(1_000)).join(',')}]}`), { code: 'too_many', param: 'body' }, 'keys of the body');
  const distinct = Array.from({ length: L.distinctKeys + 1 }, (_, i) => `{"n${i}":1}`).join(',');
  t.same(refusal(`{"a":[${distinct}]}`), { code: 'too_many', param: 'body' }, 'different key names of the body');
  t.equal(refusal(`{"a":[${Array.from({ length: 80 }, () => keys(1_000)).join(',')}]}`), undefined, '80,000 keys of 1,000 names');
  t.same(
    refusal(`{"a":[${Array.from({ length: 3 }, () => `[${'0,'.repeat(90_000)}0]`).join(',')}]}`),
    { code: 'too_many', param: 'body' },
    'values of the body',
  );
  t.same(refusal(`{"${'k'.repeat(L.keyBytes + 1)}":1}`)?.code, 'too_long');
  t.same(refusal(`{"a":${'['.repeat(L.depth)}${']'.repeat(L.depth)}}`)?.code, 'invalid_body');
  t.same(refusal(`{"a":${'['.repeat(L.depth - 1)}${']'.repeat(L.depth - 1)}}`), undefined, 'at the depth limit');
  t.same(refusal('{"a":{"__proto__":1}}'), { code: 'invalid_body', param: 'a.__proto__' });
  t.same(refusal('{"a":{"\\u005f_proto__":1}}')?.code, 'invalid_body', 'an escaped prototype key');
  t.same(refusal('{"a":[1e309]}'), { code: 'invalid_json', param: 'a.0' });
  t.same(refusal(`{"a":${'9'.repeat(400)}}`)?.code, 'invalid_json', 'an overflow without an exponent');
  t.equal(refusal('{"a":1e308,"b":-2.5E-10}'), undefined);
});

t.test('text that is not JSON is left to the parse', async (t) => {
  for (const bad of ['{"a":', '{"a":"unclosed', ']]]', '{"a":1}}', '']) {
    t.equal(refusal(bad), undefined, bad);
    t.throws(() => parseJsonObject(Buffer.from(bad)), { code: 'invalid_json' });
  }
});

t.test('clipped: short text as it is, long text cut and marked', async (t) => {
  t.equal(clipped('abc'), 'abc');
  const cut = clipped('x'.repeat(1_000_000));
  t.equal(cut, 'x'.repeat(200) + CUT_MARK);
  t.equal(clipped(`${'x'.repeat(199)}😀`), `${'x'.repeat(199)}${CUT_MARK}`, 'a surrogate pair is not split');
  t.equal(new ApiError('invalid_type', { param: 'p'.repeat(10_000), message: 'm'.repeat(10_000) }).param, `${'p'.repeat(200)}${CUT_MARK}`);
});

t.test('closestField: close names, prefixes, nothing for the far or the long', async (t) => {
  const known = ['model', 'messages', 'max_tokens', 'system', 'stop_sequences', 'temperature'];
  t.equal(closestField('max_token', known), 'max_tokens');
  t.equal(closestField('maxtokens', known), 'max_tokens');
  t.equal(closestField('max_tokens_to_sample', known), 'max_tokens');
  t.equal(closestField('temprature', known), 'temperature');
  t.equal(closestField('modle', known), 'model');
  t.equal(closestField('frobnicate', known), undefined);
  t.equal(closestField(`max_tokens${'x'.repeat(100)}`, known), undefined, 'a name above 64 characters gets no guess');
});
