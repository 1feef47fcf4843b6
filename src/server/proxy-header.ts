// PROXY protocol v2 (the binary header a balancer such as HAProxy's send-proxy-v2 writes first on
// each connection), read by the node engine when server.proxyProtocol is on. uWS parses the same
// header natively; ops/client-address.ts believes either only with server.proxyProtocol on.

/** The 12 bytes every PROXY v2 header begins with (a NUL among them: no HTTP request line holds one). */
export const SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

/** A balancer's header longer than this (addresses plus extensions) is not believed to be one. */
export const MAX_PROXY_HEADER_BYTES = 512;

export type ProxyHeader =
  /** The connection does not begin with a PROXY v2 header: its bytes are all the caller's. */
  | { readonly kind: 'none' }
  /** Too few bytes to tell yet. */
  | { readonly kind: 'incomplete' }
  /** Begins like one but is not a header we accept (bad version, over the size bound): close it. */
  | { readonly kind: 'invalid' }
  /** `length` bytes of header; `address` is the caller's, '' for LOCAL or an address family without one. */
  | { readonly kind: 'header'; readonly length: number; readonly address: string };

const NONE = { kind: 'none' } as const;
const INCOMPLETE = { kind: 'incomplete' } as const;
const INVALID = { kind: 'invalid' } as const;

function ipv6Text(header: Buffer, offset: number): string {
  // An IPv4 caller mapped into IPv6 is named as the IPv4 address, as the TCP peer would be.
  if (header.readUInt32BE(offset) === 0 && header.readUInt32BE(offset + 4) === 0 && header.readUInt32BE(offset + 8) === 0xffff)
    return `${header[offset + 12]}.${header[offset + 13]}.${header[offset + 14]}.${header[offset + 15]}`;
  const groups: string[] = [];
  for (let i = 0; i < 8; i++) groups.push(header.readUInt16BE(offset + 2 * i).toString(16));
  // The WHATWG URL parser writes an IPv6 host in its canonical (RFC 5952) form: '::' and all.
  return new URL(`http://[${groups.join(':')}]`).hostname.slice(1, -1);
}

/** Reads the PROXY v2 header `buf` may start with. */
export function parseProxyHeader(buf: Buffer): ProxyHeader {
  const n = Math.min(buf.length, SIGNATURE.length);
  if (buf.compare(SIGNATURE, 0, n, 0, n) !== 0) return NONE;
  if (buf.length < 16) return INCOMPLETE;
  const length = 16 + buf.readUInt16BE(14);
  if ((buf[12]! & 0xf0) !== 0x20 || length > MAX_PROXY_HEADER_BYTES) return INVALID;
  if (buf.length < length) return INCOMPLETE;
  const command = buf[12]! & 0x0f;
  const family = buf[13]! >> 4;
  if (command === 0x1 && family === 0x1 && length >= 16 + 12) return { kind: 'header', length, address: `${buf[16]}.${buf[17]}.${buf[18]}.${buf[19]}` };
  if (command === 0x1 && family === 0x2 && length >= 16 + 36) return { kind: 'header', length, address: ipv6Text(buf, 16) };
  // LOCAL (the balancer's own health check) or a family without an IP address: the TCP peer stands.
  return { kind: 'header', length, address: '' };
}
