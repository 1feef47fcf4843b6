// The video and image submit bodies are described from the validators' own field tables
// (src/generations/*/request-fields.ts). Over HTTP against the real routes: for every row, a value
// of another JSON type answers 400 with the row's code and `param` = the field; and the request
// schema of /v1/openapi.json (and the console's reference page) has exactly the table's fields,
// with its types, enums, bounds and required fields.
import t from 'tap';
import { IMAGE_REQUEST_FIELDS } from '../../src/generations/images/request-fields.js';
import { VIDEO_REQUEST_FIELDS } from '../../src/generations/video/request-fields.js';
import type { FieldRule, FieldTable, JsonType } from '../../src/util/request-fields.js';
import { startImageHarness } from './image-harness.js';

const h = await startImageHarness(t);
const { key } = await h.funded(1_000);
const doc = (await h.tg.call('GET', '/v1/openapi.json')).json;

/** A value of another JSON type than `type` (none of them is a special value such as "auto"). */
const WRONG: Readonly<Record<JsonType, unknown>> = {
  string: 12345,
  integer: 'twelve',
  number: 'twelve',
  boolean: 'yes',
  object: ['not', 'an', 'object'],
  array: 'https://cdn.example.com/a.png',
};

const PRODUCTS: ReadonlyArray<{ name: string; path: string; table: FieldTable; ok: Record<string, unknown> }> = [
  { name: 'video', path: '/v1/video/generations', table: VIDEO_REQUEST_FIELDS, ok: { model: 'clip-2.0-fast', prompt: 'a lighthouse at dusk' } },
  { name: 'images', path: '/v1/images/generations', table: IMAGE_REQUEST_FIELDS, ok: { model: 'image-1', prompt: 'an ink drop, macro' } },
];

for (const p of PRODUCTS) {
  t.test(`${p.name}: a wrong JSON type in any field answers the table's code for it`, async (t) => {
    t.ok(Object.keys(p.table).length >= 7, 'the table lists the body fields');
    for (const [field, rule] of Object.entries(p.table) as Array<[string, FieldRule]>) {
      t.equal(rule.types.length, 1, `${field}: one JSON type`);
      const type = rule.types[0]!;
      const r = await h.tg.call('POST', p.path, { key, body: { ...p.ok, [field]: WRONG[type] } });
      t.same(
        [r.status, r.json?.error?.code, r.json?.error?.param],
        [400, rule.code ?? 'invalid_type', field],
        `${field}: ${JSON.stringify(WRONG[type])} instead of ${type}`,
      );
    }
    const fine = await h.tg.call('POST', p.path, { key, body: { ...p.ok, not_a_field: 1 } });
    t.same(
      [fine.status, fine.json?.error?.code, fine.json?.error?.param],
      [400, 'unsupported_parameter', 'not_a_field'],
      'a field outside the table is refused',
    );
  });

  t.test(`${p.name}: the OpenAPI request schema and the reference page are the table`, async (t) => {
    const schema = doc.paths[p.path].post.requestBody.content['application/json'].schema;
    t.same(Object.keys(schema.properties), Object.keys(p.table), 'the same fields, in the same order');
    t.equal(schema.additionalProperties, false, 'and no other');
    t.same(
      schema.required ?? [],
      Object.entries(p.table)
        .filter(([, r]) => r.required)
        .map(([f]) => f),
      'the same required fields',
    );
    for (const [field, rule] of Object.entries(p.table) as Array<[string, FieldRule]>) {
      const s = schema.properties[field];
      t.equal(s.type, rule.types[0], `${field}: type`);
      for (const k of ['minimum', 'maximum', 'maxLength', 'maxItems', 'format'] as const) t.equal(s[k], rule[k], `${field}: ${k}`);
      if (field === 'model') t.ok(Array.isArray(s.enum) && s.enum.length > 0, 'model: the enum of the catalogue');
      else t.same(s.enum, rule.enum === undefined ? undefined : [...rule.enum], `${field}: enum`);
    }
    const slug = p.name === 'video' ? 'video-submit' : 'images-submit';
    const page = await h.tg.call('GET', `/console/reference/${slug}`);
    t.equal(page.status, 200);
    for (const field of Object.keys(p.table)) t.match(page.text, `<code>${field}</code>`, `the reference page lists ${field}`);
  });
}
