// An HTTP hop on 127.0.0.1 between the gateway and a vendor simulator that (1) records every
// request's raw header lines exactly as the gateway sent them (duplicates and order kept, which
// node's parsed `headers` object hides: a second `authorization` line is dropped there), and
// (2) adds chosen headers to every vendor answer, so a test can prove vendor headers such as
// `set-cookie` never reach the client. Bodies pass through unchanged, streamed both ways; the
// answer's status is recorded too (the agent tests put a tap in front of the gateway to see
// exactly what a real client sent and whether any of it was refused).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { request } from 'undici';

export interface TappedRequest {
  readonly method: string;
  readonly path: string;
  /** [name (as sent), value] pairs in wire order. */
  readonly rawHeaders: ReadonlyArray<readonly [string, string]>;
  readonly body: Buffer;
  /** The status the tap's target answered (0 until its answer's head arrived, or when it failed). */
  status: number;
  /** The start of the answer's body when the status is 400 or more (the error a client got). */
  errorBody: string;
}

export interface HeaderTap {
  readonly url: (rest?: string) => string;
  readonly requests: TappedRequest[];
  /** Headers added to every answer (a string[] value sends several lines). */
  inject: Record<string, string | string[]>;
  close(): Promise<void>;
}

const HOP_BY_HOP = new Set(['host', 'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'te', 'upgrade', 'proxy-connection']);
const MAX_RECORDED = 1_000;
const MAX_BODY_BYTES = 8 * 1024 * 1024;
const MAX_ERROR_BODY_CHARS = 4_096;

export async function startHeaderTap(targetOrigin: string, inject: Record<string, string | string[]> = {}): Promise<HeaderTap> {
  const requests: TappedRequest[] = [];
  const sockets = new Set<Socket>();
  const tap: HeaderTap = { url: () => '', requests, inject, close: async () => undefined };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    let n = 0;
    for await (const c of req as AsyncIterable<Buffer>) {
      n += c.length;
      if (n > MAX_BODY_BYTES) throw new Error('header tap: body too large');
      chunks.push(c);
    }
    const body = Buffer.concat(chunks);
    const raw: Array<[string, string]> = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) raw.push([req.rawHeaders[i]!, req.rawHeaders[i + 1]!]);
    if (requests.length >= MAX_RECORDED) requests.shift();
    const rec: TappedRequest = { method: req.method ?? '', path: req.url ?? '', rawHeaders: raw, body, status: 0, errorBody: '' };
    requests.push(rec);
    const fwd: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) fwd[k] = v;
    const up = await request(targetOrigin + (req.url ?? '/'), { method: req.method as 'POST', headers: fwd, body: body.length > 0 ? body : undefined });
    rec.status = up.statusCode;
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
    res.writeHead(up.statusCode, { ...out, ...tap.inject });
    res.flushHeaders();
    for await (const c of up.body as AsyncIterable<Buffer>) {
      if (rec.status >= 400 && rec.errorBody.length < MAX_ERROR_BODY_CHARS) rec.errorBody += c.toString('utf8').slice(0, MAX_ERROR_BODY_CHARS);
      res.write(c);
    }
    res.end();
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  (tap as { url: HeaderTap['url'] }).url = (rest = '') => `http://127.0.0.1:${port}${rest}`;
  tap.close = async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  };
  return tap;
}
