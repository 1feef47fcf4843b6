// The PROXY protocol v2 header the HTTP front (http-front.ts) writes first on each loopback
// connection to uWS, naming the real caller. uWS strips such a header from the start of any
// connection; ops/client-address.ts believes it only from loopback and only with the front on.
import { isIPv4, isIPv6 } from 'node:net';
import { addressBytes } from '../net/ssrf-guard.js';

/** The 12 bytes every PROXY v2 header begins with (a NUL among them: no JSON body holds one). */
export const SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
/** Version 2, command LOCAL: no address (uWS keeps the TCP peer). */
const LOCAL = Buffer.concat([SIGNATURE, Buffer.from([0x20, 0x00, 0x00, 0x00])]);

export interface Endpoints {
  readonly remoteAddress?: string | undefined;
  readonly remotePort?: number | undefined;
  readonly localAddress?: string | undefined;
  readonly localPort?: number | undefined;
}

/** `::ffff:1.2.3.4` (a dual-stack listener's IPv4 caller) as `1.2.3.4`; other text unchanged. */
const unmapped = (a: string): string => (a.startsWith('::ffff:') && isIPv4(a.slice(7)) ? a.slice(7) : a);

/** The 16 bytes of an IPv6 address (an IPv4 one is mapped into ::ffff:0:0/96; a zone index, naming a local interface, is dropped). */
const ipv6Bytes = (a: string): Uint8Array => addressBytes(isIPv4(a) ? `::ffff:${a}` : a.split('%')[0]!) ?? new Uint8Array(16);

/** The header for one accepted socket; LOCAL when its addresses are gone (it closed meanwhile). */
export function proxyV2Header(s: Endpoints): Buffer {
  if (s.remoteAddress === undefined || s.localAddress === undefined || s.remotePort === undefined || s.localPort === undefined) return LOCAL;
  const src = unmapped(s.remoteAddress);
  const dst = unmapped(s.localAddress);
  if (!isIPv4(src) && !isIPv6(src)) return LOCAL;
  // The caller's family decides (a dual-stack listener may see an IPv4 caller on an IPv6 address).
  const four = isIPv4(src);
  const len = four ? 12 : 36;
  const out = Buffer.allocUnsafe(16 + len);
  SIGNATURE.copy(out, 0);
  out[12] = 0x21; // version 2, PROXY
  out[13] = four ? 0x11 : 0x21; // TCP over IPv4 / IPv6
  out.writeUInt16BE(len, 14);
  if (four) {
    out.set(addressBytes(src)!, 16);
    out.set(addressBytes(isIPv4(dst) ? dst : '0.0.0.0')!, 20);
  } else {
    out.set(ipv6Bytes(src), 16);
    out.set(ipv6Bytes(dst), 32);
  }
  out.writeUInt16BE(s.remotePort, 16 + len - 4);
  out.writeUInt16BE(s.localPort, 16 + len - 2);
  return out;
}

/** A balancer's header longer than this (addresses plus extensions) is not believed to be one. */
const MAX_HEADER_BYTES = 512;

/**
 * With server.proxyProtocol on the front: the length of the complete PROXY v2 header `buf` starts
 * with (its bytes are passed on to uWS as they came), 0 when it starts with none, -1 when more
 * bytes are needed to tell.
 */
export function leadingProxyHeader(buf: Buffer): number {
  const n = Math.min(buf.length, SIGNATURE.length);
  if (buf.compare(SIGNATURE, 0, n, 0, n) !== 0) return 0;
  if (buf.length < 16) return -1;
  const len = 16 + buf.readUInt16BE(14);
  if ((buf[12]! & 0xf0) !== 0x20 || len > MAX_HEADER_BYTES) return 0;
  return buf.length < len ? -1 : len;
}
