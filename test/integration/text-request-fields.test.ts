// The text lanes' top-level field tables (src/lanes/*/request-fields.ts) are both what the lanes
// validate with and what /v1/openapi.json describes: every field of a table, sent over HTTP with a
// wrong JSON type (or outside its enum or bounds), is refused by the real lane naming that field, and
// the OpenAPI request schema of the route lists exactly the table's fields, required ones required.
import t, { type Test } from 'tap';
import { ERRORS, type ErrorCode } from '../../src/errors.js';
import { setLane } from '../../src/deployment/state.js';
import { COUNT_TOKENS_FIELDS, MESSAGES_FIELDS } from '../../src/lanes/messages/request-fields.js';
import { RESPONSES_FIELDS } from '../../src/lanes/responses/request-fields.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { isJsonType, type FieldRule, type FieldTable } from '../../src/util/request-fields.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startResponsesHarness } from '../helpers/responses-harness.js';

/** A JSON value of none of the rule's types. */
function wrongTypeFor(rule: FieldRule): unknown {
  const candidates: unknown[] = [42.5, 'x', true, { a: 1 }, [1]];
  const v = candidates.find((c) => !rule.types.some((ty) => isJsonType(c, ty)));
  if (v === undefined) throw new Error('no wrong type for ' + rule.types.join(','));
  return v;
}

async function checkLane(t: Test, g: TestGateway, key: string, route: string, table: FieldTable, valid: Record<string, unknown>) {
  const doc = (await g.call('GET', '/v1/openapi.json')).json;
  const schema = doc.paths[route].post.requestBody.content['application/json'].schema;
  t.same(Object.keys(schema.properties).sort(), Object.keys(table).sort(), `${route}: the OpenAPI fields are the table's`);
  t.same(
    [...schema.required].sort(),
    Object.keys(table)
      .filter((k) => table[k]!.required)
      .sort(),
    `${route}: required as in the table`,
  );
  t.equal(schema.additionalProperties, false);

  const expectRefusal = async (body: Record<string, unknown>, code: string, param: string, what: string) => {
    const r = await g.call('POST', route, { key, body });
    t.equal(r.status, ERRORS[code as ErrorCode].status, `${what}: ${ERRORS[code as ErrorCode].status}`);
    t.equal(r.json?.error?.code, code, `${what}: ${code}`);
    t.equal(r.json?.error?.param, param, `${what}: param ${param}`);
  };
  for (const [field, rule] of Object.entries(table)) {
    await expectRefusal({ ...valid, [field]: wrongTypeFor(rule) }, rule.code ?? 'invalid_type', field, `${route} ${field} of a wrong type`);
    if (rule.items !== undefined)
      await expectRefusal(
        { ...valid, [field]: [wrongTypeFor({ types: [rule.items.type], expect: '' })] },
        rule.code ?? 'invalid_type',
        `${field}.0`,
        `${route} ${field} item of a wrong type`,
      );
    if (rule.enum !== undefined)
      await expectRefusal({ ...valid, [field]: 'not-a-listed-value' }, rule.code ?? 'invalid_enum', field, `${route} ${field} outside its enum`);
    if (rule.minimum !== undefined)
      await expectRefusal({ ...valid, [field]: rule.minimum - 1 }, rule.code ?? 'invalid_value', field, `${route} ${field} below its minimum`);
    if (rule.maximum !== undefined)
      await expectRefusal({ ...valid, [field]: rule.maximum + 1 }, rule.code ?? 'invalid_value', field, `${route} ${field} above its maximum`);
    if (rule.modelMaximum) {
      const max = schema.properties[field].maximum as number;
      await expectRefusal({ ...valid, [field]: max + 1 }, 'too_large', field, `${route} ${field} above the models' maximum`);
    }
  }
  await expectRefusal({ ...valid, not_in_the_table: 1 }, 'unsupported_parameter', 'not_in_the_table', `${route}: a field outside the table`);
  const ok = await g.call('POST', route, { key, body: valid });
  t.equal(ok.status, 200, `${route}: the valid body used above is accepted`);
}

t.test('Messages: the field table is the validator and the reference', async (t) => {
  const sim = await startAnthropicSimulator({ apiKey: 'sk-ant-test-vendor' });
  t.teardown(() => sim.close());
  const g = await startTestGateway(t, { vendors: { anthropic: { baseUrl: sim.url, apiKey: 'sk-ant-test-vendor' } } });
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  await checkLane(t, g, k.key, '/v1/messages', MESSAGES_FIELDS, { model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
  await checkLane(t, g, k.key, '/v1/messages/count_tokens', COUNT_TOKENS_FIELDS, { model: 'sonnet', messages: [{ role: 'user', content: 'hi' }] });
  // What only a reply uses is valid on /v1/messages and refused on the count, naming the field.
  const replyFields: Record<string, unknown> = { max_tokens: 10, stream: false, metadata: {}, temperature: 0.5, stop_sequences: [] };
  for (const [field, value] of Object.entries(replyFields)) {
    t.ok(field in MESSAGES_FIELDS && !(field in COUNT_TOKENS_FIELDS), `${field}: a Messages field the count does not take`);
    const r = await g.call('POST', '/v1/messages/count_tokens', {
      key: k.key,
      body: { model: 'sonnet', messages: [{ role: 'user', content: 'hi' }], [field]: value },
    });
    t.equal(r.json?.error?.code, 'unsupported_parameter', `count_tokens refuses ${field}`);
    t.equal(r.json?.error?.param, field);
  }
});

t.test('Responses: the field table is the validator and the reference', async (t) => {
  const { g, k } = await startResponsesHarness(t);
  await checkLane(t, g, k.key, '/v1/responses', RESPONSES_FIELDS, { model: 'astra', input: 'hi', max_output_tokens: 100 });
});
