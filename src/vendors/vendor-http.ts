// What the job vendors' HTTP clients (Ark, Gemini) share: a bounded undici Agent and Retry-After.
import { Agent } from 'undici';

export interface VendorAgentOptions {
  readonly timeoutMs: number;
  readonly connectTimeoutMs?: number;
  readonly connections?: number;
}

/** Every wait bounded: connect, headers and the idle time between body chunks. */
export function vendorAgent(o: VendorAgentOptions): Agent {
  return new Agent({
    connect: { timeout: o.connectTimeoutMs ?? 5_000 },
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    connections: o.connections ?? 64,
  });
}

/** Retry-After in whole seconds, when the vendor sent a plain number. */
export function retryAfterSeconds(h: string | string[] | undefined): number | undefined {
  const v = Array.isArray(h) ? h[0] : h;
  if (v === undefined || !/^\d{1,6}$/.test(v)) return undefined;
  return Number(v);
}
