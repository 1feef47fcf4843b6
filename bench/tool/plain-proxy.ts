// The second baseline: a plain node:http + undici pass-through proxy. It does what any proxy must
// (read the body, add the vendor's key, pipe the answer back) and nothing inkgate does (no auth,
// no rate limit, no validation, no billing), so inkgate minus this is the cost of being a product.
import { createServer, type Server } from 'node:http';
import { Pool } from 'undici';
import type { LaneName } from './args.js';
import { laneEndpoint, vendorHeaders } from './lanes.js';

export interface ProxyUpstream {
  readonly url: string;
  readonly key: string;
}

export interface PlainProxyOptions {
  readonly upstreams: Readonly<Partial<Record<LaneName, ProxyUpstream>>>;
  readonly anthropicVersion: string;
  readonly connections: number;
}

/** Bodies above this are refused (413): a bench proxy still has limits. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

export async function startPlainProxy(o: PlainProxyOptions): Promise<{ url: string; close(): Promise<void> }> {
  const routes = new Map<string, { pool: Pool; path: string; headers: Record<string, string> }>();
  for (const lane of ['messages', 'responses'] as const) {
    const up = o.upstreams[lane];
    if (!up) continue;
    const ep = laneEndpoint(lane, up.url);
    routes.set(`/v1/${lane}`, {
      pool: new Pool(ep.origin, { connections: o.connections, pipelining: 1 }),
      path: ep.path,
      headers: { ...vendorHeaders(lane, up.key, o.anthropicVersion), 'content-type': 'application/json' },
    });
  }
  const server: Server = createServer((req, res) => {
    const r = routes.get((req.url ?? '').split('?')[0]!);
    if (!r || req.method !== 'POST') {
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        res.writeHead(413, { connection: 'close' }).end();
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (res.headersSent) return;
      r.pool.request({ path: r.path, method: 'POST', headers: r.headers, body: Buffer.concat(chunks) }).then(
        (up) => {
          res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? 'application/json') });
          up.body.pipe(res);
          // A client gone mid-stream: stop reading the vendor too (this proxy bills nothing).
          res.on('close', () => {
            if (!res.writableFinished) up.body.destroy();
          });
        },
        () => {
          if (!res.headersSent) res.writeHead(502).end();
        },
      );
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all([...routes.values()].map((r) => r.pool.close()));
    },
  };
}
