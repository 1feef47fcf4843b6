// An HTTP/1.1-aware fault proxy on 127.0.0.1 between the gateway and a vendor simulator. The
// request goes through untouched; the vendor's response is parsed (status line, headers, body
// de-chunked) and re-emitted with one fault applied, so a test can break the answer at a precise
// place in the body rather than at a byte count that shifts with every change to the simulator:
//
//   pass                  the answer as the vendor sent it
//   refuse                nothing listens on the port: the gateway's connect is refused
//   stall-before-headers  the request is read, nothing is ever answered (connection kept open)
//   reset-before-headers  the vendor reads the request and answers; the gateway gets an RST
//   garbage-head          bytes that are not HTTP instead of the status line
//   reset-mid-body        head + body up to `at`, then RST
//   stall-mid-body        head + body up to `at`, then silence (connection kept open)
//   garbage-body          head + body up to `at`, then raw garbage on the wire and a FIN
//   truncate-body         head + body up to `at`, then a clean HTTP end (the JSON is cut short,
//                         the framing is valid: Content-Length rewritten / last chunk sent)
//   slices                the whole answer, `sliceBytes` at a time, one socket write each
//   drip                  the head at once, then the body `sliceBytes` at a time with `delayMs`
//                         after each write
//
// Every answer carries `Connection: close`, so one connection carries one request and a fault
// never leaks into the next call. `at` is a function of the de-chunked body seen so far that
// returns the cut offset once it can tell (the body is held back until then).
import { createServer, connect, type Server, type Socket } from 'node:net';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';

export type CutAt = (bodySoFar: Buffer) => number | undefined;

export type Fault =
  | { kind: 'pass' }
  | { kind: 'refuse' }
  | { kind: 'stall-before-headers' }
  | { kind: 'reset-before-headers' }
  | { kind: 'garbage-head' }
  | { kind: 'reset-mid-body'; at: CutAt }
  | { kind: 'stall-mid-body'; at: CutAt }
  | { kind: 'garbage-body'; at: CutAt }
  | { kind: 'truncate-body'; at: CutAt }
  | { kind: 'slices'; sliceBytes: number }
  | { kind: 'drip'; sliceBytes: number; delayMs: number };

export interface FaultEvent {
  /** What the proxy did, e.g. 'request', 'stalled', 'reset', 'garbage', 'truncated', 'end'. */
  readonly what: string;
  readonly atMs: number;
}

export interface FaultProxy {
  readonly port: number;
  readonly url: (rest?: string) => string;
  /** The fault applied to connections opened from now on. */
  setFault(f: Fault): Promise<void>;
  /** Socket writes made toward the gateway since the last setFault (slices and drip count each). */
  readonly writes: number;
  /** Resolves at the next event of that name on a connection (e.g. 'stalled'), with its time. */
  next(what: string): Promise<FaultEvent>;
  close(): Promise<void>;
}

/** Cut at the first occurrence of `marker`, or `offset` bytes past it (searching after `after`, if given). */
export function cutAt(marker: string, opts: { after?: string; offset?: number } = {}): CutAt {
  const m = Buffer.from(marker);
  const a = opts.after === undefined ? undefined : Buffer.from(opts.after);
  return (body) => {
    let from = 0;
    if (a) {
      const i = body.indexOf(a);
      if (i === -1) return undefined;
      from = i + a.length;
    }
    const i = body.indexOf(m, from);
    return i === -1 ? undefined : i + (opts.offset ?? 0);
  };
}

/** Not HTTP, not UTF-8, not SSE: a control byte, invalid UTF-8 and a stray line. */
const GARBAGE = Buffer.concat([Buffer.from([0x00, 0xff, 0xfe, 0x13, 0x80, 0xc3, 0x28]), Buffer.from('\r\nZZZ garbage ZZZ \x01\x02\r\n\r\n')]);
const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');
const LAST_CHUNK = Buffer.from('0\r\n\r\n');
const MAX_HEAD_BYTES = 64 * 1024;

type Framing = { type: 'length'; remaining: number } | { type: 'chunked' } | { type: 'close' };

export async function startFaultProxy(targetHost: string, targetPort: number): Promise<FaultProxy> {
  let fault: Fault = { kind: 'pass' };
  let writes = 0;
  const waiters = new Map<string, Array<(e: FaultEvent) => void>>();
  const sockets = new Set<Socket>();
  const emit = (what: string) => {
    const list = waiters.get(what);
    if (!list) return;
    waiters.delete(what);
    const ev = { what, atMs: performance.now() };
    for (const w of list) w(ev);
  };

  const server: Server = createServer((client) => onConnection(client));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  let listening = true;

  function onConnection(client: Socket): void {
    // The fault is the one in force when the request arrives, not when the connection opened: the
    // gateway's pool may open a connection ahead of the request it will carry.
    let f = fault;
    client.setNoDelay(true);
    const upstream = connect({ host: targetHost, port: targetPort });
    upstream.setNoDelay(true);
    sockets.add(client);
    sockets.add(upstream);
    let dead = false;
    const drop = () => {
      if (dead) return;
      dead = true;
      sockets.delete(client);
      sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
      emit('closed');
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', () => {
      // The vendor closing after its answer is normal; the client side ends when its output is out.
      sockets.delete(upstream);
    });
    let sawRequest = false;
    client.on('data', (d: Buffer) => {
      if (!sawRequest) {
        sawRequest = true;
        f = fault;
        cuts = f.kind === 'reset-mid-body' || f.kind === 'stall-mid-body' || f.kind === 'garbage-body' || f.kind === 'truncate-body';
        emit('request');
      }
      upstream.write(d);
    });
    client.on('end', () => upstream.end());

    // --- Output toward the gateway, in order, sliced and paced as the fault says.
    let chain: Promise<void> = Promise.resolve();
    const out = (buf: Buffer, isHead = false) => {
      chain = chain.then(async () => {
        if (dead || buf.length === 0) return;
        // A drip delays the body only: the head goes at once, so headersTimeoutMs is not what stops it.
        const p = f;
        if (p.kind === 'slices' || (p.kind === 'drip' && !isHead)) {
          for (let i = 0; i < buf.length && !dead; i += p.sliceBytes) {
            writes++;
            await new Promise<void>((r) => client.write(buf.subarray(i, i + p.sliceBytes), () => r()));
            if (p.kind === 'drip') await sleep(p.delayMs);
            else await tick();
          }
        } else {
          writes++;
          client.write(buf);
        }
      });
    };
    const then = (what: string, act: () => void) => {
      chain = chain.then(() => {
        if (dead) return;
        emit(what);
        act();
      });
    };

    // --- Parse the vendor's answer.
    let head: Buffer | null = null;
    let pendingHead: Buffer = Buffer.alloc(0);
    let framing: Framing = { type: 'close' };
    let chunkBuf: Buffer = Buffer.alloc(0);
    let body: Buffer = Buffer.alloc(0); // de-chunked body held back (cut faults) or kept whole (truncate)
    let cut: number | undefined; // offset where the fault applies, once known
    let faulted = false;
    let finished = false;

    let cuts = false; // set with the fault when the request arrives

    const writeHead = (h: Buffer) => {
      out(h, true);
    };
    const frame = (piece: Buffer): Buffer => (framing.type === 'chunked' ? Buffer.concat([Buffer.from(piece.length.toString(16)), CRLF, piece, CRLF]) : piece);

    const applyCut = () => {
      faulted = true;
      const kept = body.subarray(0, cut);
      if (f.kind === 'truncate-body') {
        // A clean end after the cut: the framing is valid, the JSON inside is not.
        let h = head!.toString('latin1');
        if (framing.type === 'length') h = h.replace(/\r\ncontent-length:[^\r]*/i, `\r\nContent-Length: ${kept.length}`);
        writeHead(Buffer.from(h, 'latin1'));
        if (kept.length > 0) out(frame(kept));
        if (framing.type === 'chunked') out(LAST_CHUNK);
        then('truncated', () => client.end());
        return;
      }
      if (kept.length > 0) out(frame(kept));
      if (f.kind === 'reset-mid-body') then('reset', () => client.resetAndDestroy());
      else if (f.kind === 'stall-mid-body') then('stalled', () => undefined);
      else if (f.kind === 'garbage-body') {
        out(GARBAGE);
        then('garbage', () => client.end());
      }
      upstream.destroy(); // the rest of the vendor's answer is not needed
    };

    const onBody = (piece: Buffer) => {
      if (faulted) return;
      if (!cuts) {
        out(frame(piece));
        return;
      }
      body = Buffer.concat([body, piece]);
      cut = (f as { at: CutAt }).at(body);
      if (cut !== undefined) {
        cut = Math.min(cut, body.length);
        applyCut();
      }
    };

    const onEnd = () => {
      if (finished || faulted) return;
      finished = true;
      if (cuts) {
        // The cut point never showed up: apply the fault at the end of the body.
        cut = body.length;
        applyCut();
        return;
      }
      if (framing.type === 'chunked') out(LAST_CHUNK);
      then('end', () => client.end());
    };

    const feedChunked = (d: Buffer) => {
      chunkBuf = chunkBuf.length === 0 ? d : Buffer.concat([chunkBuf, d]);
      for (;;) {
        const eol = chunkBuf.indexOf(CRLF);
        if (eol === -1) return;
        const size = parseInt(chunkBuf.subarray(0, eol).toString('latin1'), 16);
        if (!Number.isFinite(size)) throw new Error('fault proxy: bad chunk size from the vendor');
        if (size === 0) {
          onEnd();
          return;
        }
        if (chunkBuf.length < eol + 2 + size + 2) return;
        onBody(chunkBuf.subarray(eol + 2, eol + 2 + size));
        chunkBuf = chunkBuf.subarray(eol + 2 + size + 2);
      }
    };

    upstream.on('data', (d: Buffer) => {
      if (dead || faulted) return;
      if (f.kind === 'stall-before-headers') {
        if (head === null) {
          head = Buffer.alloc(0);
          emit('stalled');
        }
        return;
      }
      if (f.kind === 'reset-before-headers') {
        // The vendor has read the whole request (it is answering): the gateway gets an RST instead.
        emit('reset');
        client.resetAndDestroy();
        drop();
        return;
      }
      if (f.kind === 'garbage-head') {
        faulted = true;
        out(GARBAGE);
        then('garbage', () => client.end());
        upstream.destroy();
        return;
      }
      let rest = d;
      if (head === null) {
        pendingHead = Buffer.concat([pendingHead, d]);
        const end = pendingHead.indexOf(HEAD_END);
        if (end === -1) {
          if (pendingHead.length > MAX_HEAD_BYTES) drop();
          return;
        }
        const raw = pendingHead.subarray(0, end).toString('latin1');
        rest = pendingHead.subarray(end + 4);
        const lines = raw.split('\r\n');
        const kept = lines.filter((l) => !/^(connection|keep-alive):/i.test(l));
        const te = lines.find((l) => /^transfer-encoding:/i.test(l));
        const cl = lines.find((l) => /^content-length:/i.test(l));
        if (te && /chunked/i.test(te)) framing = { type: 'chunked' };
        else if (cl) framing = { type: 'length', remaining: Number(cl.slice(cl.indexOf(':') + 1).trim()) };
        head = Buffer.from(kept.join('\r\n') + '\r\nConnection: close\r\n\r\n', 'latin1');
        if (f.kind !== 'truncate-body') writeHead(head);
        if (framing.type === 'length' && framing.remaining === 0) {
          onEnd();
          return;
        }
      }
      if (rest.length === 0) return;
      if (framing.type === 'chunked') feedChunked(rest);
      else if (framing.type === 'length') {
        const take = rest.subarray(0, framing.remaining);
        framing.remaining -= take.length;
        onBody(take);
        if (framing.remaining === 0) onEnd();
      } else onBody(rest);
    });
    upstream.on('end', () => {
      if (framing.type === 'close' && head !== null) onEnd();
    });
  }

  return {
    port,
    url: (rest = '') => `http://127.0.0.1:${port}${rest}`,
    get writes() {
      return writes;
    },
    async setFault(f) {
      writes = 0;
      fault = f;
      // Refused means nothing listens: stop listening on the port, and listen on it again after.
      if (f.kind === 'refuse' && listening) {
        listening = false;
        for (const s of sockets) s.destroy(); // server.close waits for every open connection
        await new Promise<void>((r) => server.close(() => r()));
      } else if (f.kind !== 'refuse' && !listening) {
        listening = true;
        await new Promise<void>((r, j) => {
          server.once('error', j);
          server.listen(port, '127.0.0.1', () => {
            server.off('error', j);
            r();
          });
        });
      }
    },
    next(what) {
      return new Promise((r) => {
        const list = waiters.get(what) ?? [];
        list.push(r);
        waiters.set(what, list);
      });
    },
    async close() {
      for (const s of sockets) s.destroy();
      if (listening) await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
