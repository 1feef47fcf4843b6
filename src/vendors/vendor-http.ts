// What the vendors' HTTP clients share (text lanes, Ark, Gemini): a bounded undici Agent, a bounded
// body reader, and Retry-After parsing.
import { Agent, type Dispatcher } from 'undici';

export interface VendorAgentOptions {
  readonly timeoutMs: number;
  readonly connectTimeoutMs?: number;
  readonly connections?: number;
}

/** Every wait bounded: connect, headers and the idle time between body chunks. */
export function vendorAgent(options: VendorAgentOptions): Agent {
  return new Agent({
    connect: { timeout: options.connectTimeoutMs ?? 5_000 },
    headersTimeout: options.timeoutMs,
    bodyTimeout: options.timeoutMs,
    connections: options.connections ?? 64,
  });
}

/** Retry-After in whole seconds, when the vendor sent a plain number. */
export function retryAfterSeconds(header: string | string[] | undefined): number | undefined {
  const v = Array.isArray(header) ? header[0] : header;
  if (v === undefined || !/^\d{1,6}$/.test(v)) return undefined;
  return Number(v);
}

/**
 * Reads a whole vendor body, bounded in size and, when `totalMs` is given, in total time: an idle
 * timeout alone lets a vendor that drips a byte just under it hold a request (and its hold) forever.
 */
export function readBounded(body: Dispatcher.ResponseData['body'], maxBytes: number, totalMs?: number): Promise<Buffer> {
  // Listeners, not `for await`: the async iterator costs a promise and a few stream wrappers per
  // chunk, and this runs for every non-streaming text answer (the request budget's profile).
  return new Promise<Buffer>((resolveB, rejectB) => {
    const parts: Buffer[] = [];
    let n = 0;
    let settled = false;
    const total = totalMs === undefined ? undefined : setTimeout(() => body.destroy(new Error(`vendor body not complete within ${totalMs} ms`)), totalMs);
    const done = (error: Error | undefined): void => {
      if (settled) return;
      settled = true;
      if (total !== undefined) clearTimeout(total);
      if (error === undefined) resolveB(parts.length === 1 ? parts[0]! : Buffer.concat(parts, n));
      else rejectB(error);
    };
    body.on('data', (chunk: Buffer) => {
      n += chunk.length;
      if (n > maxBytes) {
        done(new Error(`vendor body above ${maxBytes} bytes`));
        body.destroy();
        return;
      }
      parts.push(chunk);
    });
    body.once('end', () => done(undefined));
    body.once('error', (e: Error) => done(e));
    // Destroyed without an error (a cap crossed above, or by its owner): never a hang. The error is
    // made only then: 'close' follows every 'end', and an Error's stack trace cost every answer
    // 3.6 % of the gateway's CPU in the request budget's profile.
    body.once('close', () => {
      if (!settled) done(new Error('vendor body closed before its end'));
    });
  });
}

/**
 * A vendor's JSON answer: the body read within `maxBytes`, then parsed; an empty or non-JSON body
 * is `undefined` (the caller decides what that means for its status). Rejects only when the body
 * could not be read (the connection failed or the cap was crossed).
 */
export async function readVendorJson(body: Dispatcher.ResponseData['body'], maxBytes: number): Promise<unknown> {
  const text = (await readBounded(body, maxBytes)).toString('utf8');
  if (text === '') return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
