// docs/api/conventions.md, the error object (docs/api/errors.md), authentication: driven over HTTP.
import type { Test } from 'tap';
import { Client } from 'undici';
import { startTestGateway, type Reply } from '../helpers/gateway.js';
import { eachEngine } from '../helpers/engines.js';
import { setApiOpen } from '../../src/deployment/state.js';

function assertEnvelope(t: Test, r: Reply, status: number, code: string) {
  t.equal(r.status, status, `status ${status} for ${code}`);
  t.equal(r.headers['cache-control'], 'no-store');
  t.match(r.headers['x-request-id'], /^req_[0-9a-f]{32}$/);
  t.equal(r.json?.error?.code, code);
  t.type(r.json.error.type, 'string');
  t.type(r.json.error.message, 'string');
  t.equal(r.json.error.request_id, r.headers['x-request-id'], 'request_id equals the X-Request-Id header');
}

eachEngine('shared conventions', async (t, engine) => {
  const g = await startTestGateway(t, { server: { engine }, limits: { requestsPerMinute: 100_000, publicRequestsPerMinute: 100_000 } });
  const { key } = await g.newKey();

  t.test('unknown /v1 path: JSON 404 not_found', async (t) => {
    assertEnvelope(t, await g.call('GET', '/v1/nope', { key }), 404, 'not_found');
    assertEnvelope(t, await g.call('GET', '/v1', {}), 404, 'not_found');
  });

  t.test('every /v1 response carries no-store and a request id, success too', async (t) => {
    const r = await g.call('GET', '/v1/models');
    t.equal(r.status, 200);
    t.equal(r.headers['cache-control'], 'no-store');
    t.match(r.headers['x-request-id'], /^req_/);
    const r2 = await g.call('GET', '/v1/models');
    t.not(r2.headers['x-request-id'], r.headers['x-request-id'], 'a fresh id per request');
  });

  t.test('401 carries WWW-Authenticate: Bearer, for every bad key shape', async (t) => {
    for (const auth of [undefined, 'Bearer', 'Bearer svc_short', 'Basic abc', `Bearer svc_${'A'.repeat(43)}`, `Token ${key}`]) {
      const r = await g.call('GET', '/v1/me', { headers: auth ? { authorization: auth } : {} });
      assertEnvelope(t, r, 401, 'invalid_api_key');
      t.equal(r.json.error.type, 'authentication_error');
      t.equal(r.headers['www-authenticate'], 'Bearer');
    }
  });

  t.test('x-api-key and query-string keys are ignored', async (t) => {
    assertEnvelope(t, await g.call('GET', '/v1/me', { headers: { 'x-api-key': key } }), 401, 'invalid_api_key');
    assertEnvelope(t, await g.call('GET', `/v1/me?api_key=${key}`), 401, 'invalid_api_key');
  });

  t.test('a known path with another method answers 404 not_found with Allow', async (t) => {
    const r = await g.call('POST', '/v1/me', { key, body: {} });
    assertEnvelope(t, r, 404, 'not_found');
    t.notOk(r.json.error.param, 'no param: no field is at fault');
    t.equal(r.headers.allow, 'GET, HEAD');
  });

  t.test('HEAD answers as GET would, without a body, and the connection stays usable', async (t) => {
    // One keep-alive connection: a body sent after a HEAD answer would be read as the next answer.
    const client = new Client(g.url, { pipelining: 1 });
    t.teardown(() => client.close());
    for (const [path, auth, status] of [
      ['/v1/models', undefined, 200],
      ['/v1/models/astra', undefined, 200],
      ['/v1/me', `Bearer ${key}`, 200],
      ['/v1/me', undefined, 401],
      ['/v1/nope', undefined, 404],
    ] as const) {
      const headers = auth ? { authorization: auth } : {};
      const head = await client.request({ method: 'HEAD', path, headers });
      const headBody = await head.body.text();
      const get = await client.request({ method: 'GET', path, headers });
      const getBody = await get.body.text();
      t.equal(head.statusCode, status, `HEAD ${path}`);
      t.equal(get.statusCode, status, `GET ${path} after it, same connection`);
      t.equal(headBody, '', 'no body');
      t.equal(head.headers['content-type'], get.headers['content-type']);
      // (The 404's message names the method, one letter longer for HEAD.)
      const sameLength = Buffer.byteLength(getBody) + (status === 404 ? 1 : 0);
      t.equal(Number(head.headers['content-length']), sameLength, "the GET answer's length");
      t.match(head.headers['x-request-id'], /^req_/);
    }
  });

  t.test('keep-alive: many requests on one connection', async (t) => {
    const client = new Client(g.url, { pipelining: 1 });
    t.teardown(() => client.close());
    let connects = 0;
    client.on('connect', () => connects++);
    const statuses = new Set<number>();
    for (let i = 0; i < 300; i++) {
      const r = await client.request({ method: 'GET', path: i % 2 === 0 ? '/v1/models' : '/v1/me', headers: { authorization: `Bearer ${key}` } });
      await r.body.text();
      statuses.add(r.statusCode);
    }
    t.same([...statuses], [200], 'every answer 200');
    t.equal(connects, 1, 'one connection served them all');
  });

  t.test('a closed API answers 404 external_api_disabled on every /v1 path', async (t) => {
    await setApiOpen(g.db.pool, false);
    await g.gw.services.state.refresh();
    for (const p of ['/v1/models', '/v1/me', '/v1/nope', '/v1/models/clip-2.5']) {
      assertEnvelope(t, await g.call('GET', p, { key }), 404, 'external_api_disabled');
    }
    await setApiOpen(g.db.pool, true);
    await g.gw.services.state.refresh();
    t.equal((await g.call('GET', '/v1/me', { key })).status, 200);
  });
});
