// The caller's address, for the public routes' per-address limit. By default it is the TCP peer.
// Behind a balancer the peer is the balancer, and every public caller would share its one bucket:
//   - server.proxyProtocol: the address from the PROXY protocol v2 header the balancer sends first
//     on each connection (uWS parses it natively, the node engine in server/proxy-header.ts;
//     without this setting a header a client sends itself is never believed, so nobody can choose
//     their own bucket);
//   - server.trustedProxies: when the peer is one of these, X-Forwarded-For is read from the right
//     and the first address that is not a trusted proxy is the caller. Any other peer's
//     X-Forwarded-For is ignored.
import { BlockList, isIP } from 'node:net';

export interface ClientAddressOptions {
  readonly proxyProtocol: boolean;
  readonly trustedProxies: readonly string[];
}

/** What the resolver reads of one exchange (HttpContext has these). */
export interface AddressSource {
  readonly remoteAddress: string;
  /** The PROXY header's source address, '' when none came. */
  proxiedAddress(): string;
  header(name: string): string | undefined;
}

/** At most this many X-Forwarded-For hops are looked at (a longer header is a client's own invention). */
const MAX_HOPS = 16;

const family = (a: string): 'ipv4' | 'ipv6' => (isIP(a) === 6 ? 'ipv6' : 'ipv4');

/** Builds the trusted set; throws at start-up on an entry that is neither an address nor a CIDR block. */
export function trustedSet(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const e of entries) {
    const [addr, bits, extra] = e.split('/');
    if (extra !== undefined || addr === undefined || isIP(addr) === 0)
      throw new Error(`config: server.trustedProxies: ${JSON.stringify(e)} is not an address or CIDR block`);
    if (bits === undefined) list.addAddress(addr, family(addr));
    else {
      const n = Number(bits);
      const max = isIP(addr) === 6 ? 128 : 32;
      if (!/^\d{1,3}$/.test(bits) || n > max) throw new Error(`config: server.trustedProxies: ${JSON.stringify(e)} has a bad prefix length`);
      list.addSubnet(addr, n, family(addr));
    }
  }
  return list;
}

export function clientAddressResolver(options: ClientAddressOptions): (exchange: AddressSource) => string {
  const trusted = trustedSet(options.trustedProxies);
  const useXff = options.trustedProxies.length > 0;
  const isTrusted = (address: string): boolean => {
    const f = isIP(address);
    return f !== 0 && trusted.check(address, f === 6 ? 'ipv6' : 'ipv4');
  };
  return (exchange) => {
    let peer = exchange.remoteAddress;
    if (options.proxyProtocol) {
      const p = exchange.proxiedAddress();
      if (p !== '') peer = p;
    }
    if (!useXff || !isTrusted(peer)) return peer;
    const xff = exchange.header('x-forwarded-for');
    if (xff === undefined) return peer;
    const hops = xff.split(',', 64);
    let last = peer;
    for (let i = hops.length - 1, seen = 0; i >= 0 && seen < MAX_HOPS; i--, seen++) {
      const h = hops[i]!.trim();
      if (isIP(h) === 0) return last; // garbage left of a trusted hop: stop at what we know
      if (!isTrusted(h)) return h;
      last = h;
    }
    return last;
  };
}
