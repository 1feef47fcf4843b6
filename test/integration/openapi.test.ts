// GET /v1/openapi.json: public, valid OpenAPI 3.1 (checked by a real validator), and in agreement
// with the router: every /v1 route is described and every described operation is routed.
import { Validator } from '@seriousme/openapi-schema-validator';
import t from 'tap';
import { ERRORS } from '../../src/errors.js';
import { startTestGateway } from '../helpers/gateway.js';

t.test('the OpenAPI document is valid 3.1 and matches the routes', async (t) => {
  const g = await startTestGateway(t);
  const r = await g.call('GET', '/v1/openapi.json');
  t.equal(r.status, 200, 'public: no key needed');
  const doc = r.json;
  t.equal(doc.openapi, '3.1.0');
  const v = new Validator();
  const res = await v.validate(doc);
  t.same(res.errors, undefined, 'no validation errors');
  t.equal(res.valid, true, 'valid per the OpenAPI 3.1 schema');
  t.equal(v.version, '3.1');

  const documented = new Set<string>();
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    for (const m of Object.keys(ops)) documented.add(`${m.toUpperCase()} ${path}`);
  }
  const routed = new Set(g.gw.routes.map((x) => `${x.method} ${x.pattern.replace(/:([a-z_]+)/g, '{$1}')}`));
  t.ok(routed.size >= 12);
  t.same(
    [...routed].filter((x) => !documented.has(x)),
    [],
    'every route is documented',
  );
  t.same(
    [...documented].filter((x) => !routed.has(x)),
    [],
    'every documented operation is routed',
  );

  // Every error status documented is one the error table gives to one of its codes.
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [m, op] of Object.entries(ops)) {
      for (const [status, resp] of Object.entries(op.responses as Record<string, any>)) {
        const codes = /Error codes: (.*)$/.exec(resp.description)?.[1]?.split(', ') ?? [];
        for (const c of codes) t.equal((ERRORS as Record<string, { status: number }>)[c]?.status, Number(status), `${m} ${path}: ${c} is ${status}`);
      }
    }
  }
  // The model enums come from the catalogue the lanes use.
  const msgModels = doc.paths['/v1/messages'].post.requestBody.content['application/json'].schema.properties.model.enum as string[];
  t.ok(msgModels.includes('assistant-sonnet-5') && msgModels.includes('sonnet'));
  t.notOk(
    msgModels.some((m) => m.startsWith('text-')),
    'Messages offers no Responses models',
  );
});

t.test('each documented path answers on the router (not a routing 404)', async (t) => {
  const g = await startTestGateway(t);
  const doc = (await g.call('GET', '/v1/openapi.json')).json;
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    const concrete = path.replace(/\{[a-z_]+\}/g, 'x');
    for (const m of Object.keys(ops)) {
      const r = await g.call(m.toUpperCase(), concrete, { headers: {} });
      const routingMiss = r.status === 404 && typeof r.json?.error?.message === 'string' && r.json.error.message.startsWith('No route');
      t.notOk(routingMiss, `${m.toUpperCase()} ${concrete} is routed (got ${r.status})`);
    }
  }
});
