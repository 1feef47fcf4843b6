// The optional HTTP front (server.httpFront): a node:net listener on the public address, with uWS
// behind it on a loopback port. uWS leaves some requests unanswered until its idle timeout (an
// HTTP/1.0 request line, HTTP/1.1 without Host, more than 48 header fields) and offers no hook to
// see them, so the front reads the head of each connection's first request: what uWS answers is
// forwarded to it raw in both directions (front-pipe.ts; nothing parsed after that: keep-alive and
// pipelining stay uWS's), the rest goes to a node:http server (http-front-fallback.ts). Every loopback connection
// begins with a PROXY v2 header naming the caller (ops/client-address.ts believes it from loopback).
import { createServer, type Server, type Socket } from 'node:net';
import { pipeRaw, type RawLink } from './front-pipe.js';
import { fallbackServer, type Fallback } from './http-front-fallback.js';
import { leadingProxyHeader, proxyV2Header } from './proxy-header.js';
import { MAX_HEAD_BYTES, sortHead } from './request-head.js';
import { startServer, type RunningServer, type ServerDeps } from './server.js';

/** The first request's head must arrive within this (uWS's own idle timeout). */
const HEAD_TIMEOUT_MS = 10_000;

interface FrontOptions {
  readonly uwsPort: number;
  /** server.proxyProtocol: a balancer's PROXY v2 header may come first; it is passed on as it came. */
  readonly proxyProtocol: boolean;
  /** How long a caller may leave uWS's bytes untaken (front-pipe.ts STALL_MS; tests shorten it). */
  readonly stallMs?: number | undefined;
}

const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
const HEAD_END_LF = Buffer.from('\n\n', 'latin1');

/** True when `chunk`, read after bytes ending in `tail` (their last 3), completes a "\r\n\r\n". */
function endsAHead(tail: Buffer, chunk: Buffer): boolean {
  // A head ended by bare LFs (`\n\n`) ends too: sortHead sends it to node:http, which answers it,
  // instead of it waiting out the head timeout (a CRLF head never holds `\n\n`).
  if (chunk.includes(HEAD_END) || chunk.includes(HEAD_END_LF)) return true;
  // The blank line may straddle reads (a head dripped a byte at a time has no other end).
  if (tail.length === 0) return false;
  const joined = Buffer.concat([tail, chunk.subarray(0, 3)]);
  return joined.includes(HEAD_END) || joined.includes(HEAD_END_LF);
}

/** The last 3 bytes read, after `chunk`. */
const lastThree = (tail: Buffer, chunk: Buffer): Buffer => (chunk.length >= 3 ? chunk.subarray(chunk.length - 3) : Buffer.concat([tail, chunk]).subarray(-3));

/**
 * Reads the head of the connection's first request (bounded in bytes and time), then hands the
 * socket on. The head is looked at only when a blank line or the byte bound arrives, so a head
 * sent a byte at a time costs linear work, not a re-scan per byte.
 */
function sortConnection(client: Socket, o: FrontOptions, fallback: Fallback, links: Links): void {
  client.setNoDelay(true);
  let chunks: Buffer[] = [];
  let total = 0;
  let tail: Buffer = Buffer.alloc(0);
  let skip = o.proxyProtocol ? -1 : 0; // bytes of a balancer's header at the start; -1: not known yet
  const timer = setTimeout(() => client.destroy(), HEAD_TIMEOUT_MS);
  const onError = (): void => void client.destroy();
  // The server keeps half-open sockets (a caller may send its request then FIN); a FIN before a
  // complete head leaves nothing to answer.
  const onEnd = (): void => void client.destroy();
  const onData = (chunk: Buffer): void => {
    const ended = endsAHead(tail, chunk);
    tail = lastThree(tail, chunk);
    chunks.push(chunk);
    total += chunk.length;
    if (!ended && skip >= 0 && total < MAX_HEAD_BYTES) return;
    const seen = chunks.length === 1 ? chunk : Buffer.concat(chunks, total);
    chunks = [seen];
    if (skip < 0 && (skip = leadingProxyHeader(seen)) < 0) return;
    const rest = skip === 0 ? seen : seen.subarray(skip);
    const verdict = sortHead(rest);
    if (verdict === 'incomplete' && rest.length < MAX_HEAD_BYTES) return;
    clearTimeout(timer);
    client.off('data', onData);
    client.off('error', onError);
    client.off('end', onEnd);
    client.pause();
    const header = skip === 0 ? proxyV2Header(client) : Buffer.from(seen.subarray(0, skip));
    if (verdict === 'uws') return void links.set(client, pipeRaw(client, header, rest, o.uwsPort, o.stallMs));
    links.set(client, null);
    fallback.proxyHeaders.set(client, header);
    client.unshift(rest);
    fallback.server.emit('connection', client);
    client.resume(); // node:http reads through 'data' once a stream has been read from
  };
  client.on('data', onData);
  client.on('error', onError);
  client.on('end', onEnd);
  client.on('close', () => clearTimeout(timer));
}

/** Every open caller: its raw link to uWS, null once node:http has it, undefined while its head is read. */
type Links = Map<Socket, RawLink | null | undefined>;

interface Front {
  readonly server: Server;
  readonly links: Links;
}

/** At shutdown, answers still in flight through the front get this long to reach their callers. */
const SHUTDOWN_FLUSH_MS = 2_000;

/**
 * After uWS drained: each raw link is ended towards uWS (uWS flushes and closes, the caller gets the
 * last bytes then a FIN), a connection whose head is still awaited is closed, and what remains
 * after SHUTDOWN_FLUSH_MS is destroyed.
 */
async function closeLinks(links: Links): Promise<void> {
  for (const [s, link] of links) {
    if (link) link.finish();
    else if (link === undefined) s.destroy();
  }
  if (links.size > 0) {
    await new Promise<void>((done) => {
      const timer = setTimeout(done, SHUTDOWN_FLUSH_MS);
      const check = (): void => {
        if (links.size > 0) return;
        clearTimeout(timer);
        done();
      };
      for (const s of links.keys()) s.once('close', check);
    });
  }
  for (const s of links.keys()) s.destroy();
}

function listenFront(host: string, port: number, o: FrontOptions): Promise<Front> {
  const fallback = fallbackServer(o.uwsPort);
  const links: Links = new Map();
  // Half-open kept: a caller may send its request then FIN, and still be owed the answer.
  const server = createServer({ noDelay: true, allowHalfOpen: true }, (client) => {
    links.set(client, undefined);
    client.on('close', () => links.delete(client));
    sortConnection(client, o, fallback, links);
  });
  return new Promise((resolveF, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolveF({ server, links });
    });
  });
}

/**
 * startServer behind the front: uWS on 127.0.0.1 (any free port), the front on `d.host:d.port`.
 * Closing stops the front admitting, drains uWS as before, then closes what connections remain.
 */
export function behindFront(proxyProtocol: boolean, opts: { stallMs?: number | undefined } = {}): (d: ServerDeps) => Promise<RunningServer> {
  return async (d) => {
    const inner = await startServer({ ...d, host: '127.0.0.1', port: 0 });
    let front: Front;
    try {
      front = await listenFront(d.host, d.port, { uwsPort: inner.port, proxyProtocol, stallMs: opts.stallMs });
    } catch (e) {
      await inner.close(0);
      throw e;
    }
    const address = front.server.address();
    return {
      port: typeof address === 'object' && address !== null ? address.port : d.port,
      native: inner.native,
      close: async (drainMs) => {
        front.server.close();
        const drained = await inner.close(drainMs);
        await closeLinks(front.links);
        return drained;
      },
    };
  };
}
