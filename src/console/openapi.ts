import type { Catalog } from '../catalog/models.js';
import { packageVersion } from '../config/config.js';
import type { Route } from '../server/router.js';
import { endpointErrors, ENDPOINTS, openApiPath, type Endpoint } from './api-reference.js';

const errorBody = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['type', 'code', 'message', 'request_id'],
      properties: {
        type: { type: 'string' },
        code: { type: 'string' },
        message: { type: 'string' },
        param: { type: 'string' },
        request_id: { type: 'string', pattern: '^req_' },
      },
    },
  },
};

function operation(endpoint: Endpoint, catalog: Catalog): Record<string, unknown> {
  const responses: Record<string, unknown> = {
    [String(endpoint.ok.status)]: { description: endpoint.ok.description, content: { [endpoint.ok.type]: { schema: endpoint.ok.schema } } },
  };
  const byStatus = new Map<number, string[]>();
  for (const er of endpointErrors(endpoint)) byStatus.set(er.status, [...(byStatus.get(er.status) ?? []), er.code]);
  for (const [status, codes] of byStatus) {
    responses[String(status)] = {
      description: `Error codes: ${codes.join(', ')}`,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
    };
  }
  const params = [...endpoint.pattern.matchAll(/:([a-z_]+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
  return {
    operationId: endpoint.slug.replace(/-([a-z])/g, (_m, x: string) => x.toUpperCase()),
    summary: endpoint.title,
    description: endpoint.summary,
    ...(endpoint.auth === 'public' ? { security: [] } : {}),
    ...(params.length ? { parameters: params } : {}),
    ...(endpoint.body ? { requestBody: { required: true, content: { 'application/json': { schema: endpoint.body(catalog) } } } } : {}),
    responses,
  };
}

export function buildOpenApi(catalog: Catalog, version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const e of ENDPOINTS) {
    const p = (paths[openApiPath(e.pattern)] ??= {});
    p[e.method.toLowerCase()] = operation(e, catalog);
  }
  return {
    openapi: '3.1.0',
    info: { title: 'inkgate', version, description: 'One API key, one prepaid Ink wallet (1 Ink = 0.01 USD): text, video and image generation.' },
    servers: [{ url: '/' }],
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'An API key (svc_...) from the console.' } },
      schemas: { Error: errorBody },
    },
  };
}

export function openApiRoute(catalog: Catalog, version: string = packageVersion()): Route {
  const text = JSON.stringify(buildOpenApi(catalog, version));
  return { method: 'GET', pattern: '/v1/openapi.json', access: 'public', handler: async (ctx) => ctx.sendJson(200, text) };
}
