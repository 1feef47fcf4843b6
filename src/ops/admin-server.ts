// The admin listener: GET /metrics (Prometheus text), /healthz (the process serves) and /readyz
// (ops/readiness.ts). A plain node:http server of its own, bound to 127.0.0.1 by default and never
// to the public port, so a scrape or a health check neither competes with nor reaches /v1.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayMetrics } from '../metrics/metrics.js';
import type { Logger } from '../util/log.js';
import type { ReadinessCheck } from './readiness.js';

export interface AdminServerDeps {
  readonly host: string;
  readonly port: number;
  readonly metrics: GatewayMetrics;
  readonly readiness: ReadinessCheck;
  readonly log: Logger;
}

export interface AdminServer {
  readonly port: number;
  readonly url: string;
  close(): Promise<void>;
}

/** Every peer that can hang has a timeout: a scraper that stops reading is cut off. */
const REQUEST_TIMEOUT_MS = 10_000;
const HEADERS_TIMEOUT_MS = 5_000;

function send(res: ServerResponse, req: IncomingMessage, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'content-length': Buffer.byteLength(body) });
  res.end(req.method === 'HEAD' ? undefined : body);
}

export function startAdminServer(deps: AdminServerDeps): Promise<AdminServer> {
  const server = createServer({ requestTimeout: REQUEST_TIMEOUT_MS, headersTimeout: HEADERS_TIMEOUT_MS, maxHeaderSize: 8192 }, (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, req, 405, 'text/plain', 'GET only\n');
    if (path === '/healthz') return send(res, req, 200, 'application/json', '{"status":"ok"}\n');
    if (path === '/readyz') {
      void deps.readiness.check().then(
        (r) => send(res, req, r.ready ? 200 : 503, 'application/json', JSON.stringify(r) + '\n'),
        () => send(res, req, 503, 'application/json', '{"ready":false}\n'),
      );
      return;
    }
    if (path === '/metrics') {
      void deps.metrics.scrape().then(
        (m) => send(res, req, 200, m.contentType, m.body),
        (error: unknown) => {
          deps.log.error({ err: error as Error }, 'ops.metrics_scrape_failed');
          send(res, req, 500, 'text/plain', 'scrape failed\n');
        },
      );
      return;
    }
    send(res, req, 404, 'text/plain', 'not found: /metrics, /healthz, /readyz\n');
  });
  server.keepAliveTimeout = 5_000;
  return new Promise((resolveS, reject) => {
    server.once('error', reject);
    server.listen(deps.port, deps.host, () => {
      server.off('error', reject);
      const port = (server.address() as AddressInfo).port;
      const host = deps.host.includes(':') ? `[${deps.host}]` : deps.host;
      resolveS({
        port,
        url: `http://${host}:${port}`,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}
