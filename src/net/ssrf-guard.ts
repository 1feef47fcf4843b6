// Address and URL rules for every URL a client hands us (frames, references): we fetch them on the
// client's behalf, so without these rules a client could make us read our own network (SSRF).
// Pure functions, no I/O: safe-fetch.ts applies them at resolve time and again at connect time.
import { isIP } from 'node:net';
import { ApiError } from '../errors.js';

/** URLs are at most 2,048 characters (docs/api/video.md, docs/api/errors.md). */
export const MAX_URL_CHARS = 2048;

interface Rule {
  readonly bytes: Uint8Array; // network address
  readonly prefixBits: number;
  readonly name: string;
}

function v4Rule(cidr: string, name: string): Rule {
  const [addr, bits] = cidr.split('/');
  const b = parseV4(addr!);
  if (b === undefined) throw new Error(`bad rule ${cidr}`);
  return { bytes: b, prefixBits: Number(bits), name };
}

function v6Rule(cidr: string, name: string): Rule {
  const [addr, bits] = cidr.split('/');
  const b = parseV6(addr!);
  if (b === undefined) throw new Error(`bad rule ${cidr}`);
  return { bytes: b, prefixBits: Number(bits), name };
}

// First match wins, so the more specific ranges come first (broadcast before reserved, Teredo
// before the IETF block that contains it). Sources: IANA IPv4/IPv6 special-purpose registries.
const V4_RULES: readonly Rule[] = [
  v4Rule('0.0.0.0/8', 'this-network'),
  v4Rule('10.0.0.0/8', 'private'),
  v4Rule('100.64.0.0/10', 'cgnat'),
  v4Rule('127.0.0.0/8', 'loopback'),
  v4Rule('169.254.0.0/16', 'link-local'),
  v4Rule('172.16.0.0/12', 'private'),
  v4Rule('192.0.0.0/24', 'ietf-protocol-assignments'),
  v4Rule('192.0.2.0/24', 'documentation'),
  v4Rule('192.88.99.0/24', '6to4-relay'),
  v4Rule('192.168.0.0/16', 'private'),
  v4Rule('198.18.0.0/15', 'benchmarking'),
  v4Rule('198.51.100.0/24', 'documentation'),
  v4Rule('203.0.113.0/24', 'documentation'),
  v4Rule('224.0.0.0/4', 'multicast'),
  v4Rule('255.255.255.255/32', 'broadcast'),
  v4Rule('240.0.0.0/4', 'reserved'),
];

// Transition and embedding prefixes are refused outright, whatever address they carry: each one
// can make the packet land on an IPv4 host we never classified (or one behind a translator).
const V6_RULES: readonly Rule[] = [
  v6Rule('::/128', 'unspecified'),
  v6Rule('::1/128', 'loopback'),
  v6Rule('::ffff:0:0/96', 'ipv4-mapped'),
  v6Rule('::/96', 'ipv4-compatible'),
  v6Rule('64:ff9b::/96', 'nat64'),
  v6Rule('64:ff9b:1::/48', 'nat64-local'),
  v6Rule('100::/64', 'discard-only'),
  v6Rule('2001::/32', 'teredo'),
  v6Rule('2001:db8::/32', 'documentation'),
  v6Rule('2001::/23', 'ietf-protocol-assignments'),
  v6Rule('2002::/16', '6to4'),
  v6Rule('3fff::/20', 'documentation'),
  v6Rule('5f00::/16', 'srv6-sid'),
  v6Rule('fc00::/7', 'private'),
  v6Rule('fe80::/10', 'link-local'),
  v6Rule('fec0::/10', 'site-local'),
  v6Rule('ff00::/8', 'multicast'),
];
// Only 2000::/3 is allocated global unicast; anything outside it is not a public host.
const V6_GLOBAL = v6Rule('2000::/3', 'global');

function matches(addr: Uint8Array, rule: Rule): boolean {
  const full = rule.prefixBits >> 3;
  for (let i = 0; i < full; i++) if (addr[i] !== rule.bytes[i]) return false;
  const rest = rule.prefixBits & 7;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return (addr[full]! & mask) === (rule.bytes[full]! & mask);
}

/** Strict dotted-quad only (the form DNS and sockets hand us); undefined otherwise. */
function parseV4(address: string): Uint8Array | undefined {
  if (isIP(address) !== 4) return undefined;
  const parts = address.split('.');
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) out[i] = Number(parts[i]);
  return out;
}

/** 16 bytes of an IPv6 address without zone id; undefined when node does not call it IPv6. */
function parseV6(address: string): Uint8Array | undefined {
  if (isIP(address) !== 6 || address.includes('%')) return undefined;
  let tail: Uint8Array | undefined;
  let text = address;
  const lastColon = address.lastIndexOf(':');
  if (address.indexOf('.', lastColon) !== -1) {
    tail = parseV4(address.slice(lastColon + 1));
    if (tail === undefined) return undefined;
    text = address.slice(0, lastColon + 1) + '0:0'; // placeholder groups, overwritten below
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const back = halves.length === 2 ? (halves[1] === '' ? [] : halves[1]!.split(':')) : [];
  const groups = halves.length === 2 ? [...head, ...new Array<string>(8 - head.length - back.length).fill('0'), ...back] : head;
  if (groups.length !== 8) return undefined;
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    const g = parseInt(groups[i]!, 16);
    if (!Number.isInteger(g) || g < 0 || g > 0xffff) return undefined;
    out[2 * i] = g >> 8;
    out[2 * i + 1] = g & 0xff;
  }
  if (tail !== undefined) out.set(tail, 12);
  return out;
}

/**
 * 'public' when a socket may be opened to `address`; otherwise the name of the blocked range.
 * Accepts a bare address (IPv6 may be in brackets, as URL.hostname spells it). Anything that does
 * not parse is blocked ('unparseable'); IPv6 zone ids are blocked ('scoped'). IPv4-mapped IPv6 is
 * blocked whatever it embeds, and the name says what it embeds (e.g. 'ipv4-mapped:loopback').
 */
export function classifyAddress(address: string): 'public' | string {
  let s = address;
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const fam = isIP(s);
  if (fam === 4) {
    const b = parseV4(s)!;
    for (const r of V4_RULES) if (matches(b, r)) return r.name;
    return 'public';
  }
  if (fam === 6) {
    if (s.includes('%')) return 'scoped';
    const b = parseV6(s);
    if (b === undefined) return 'unparseable';
    for (const r of V6_RULES) {
      if (!matches(b, r)) continue;
      if (r.name === 'ipv4-mapped' || r.name === 'ipv4-compatible') {
        const inner = classifyAddress(`${b[12]}.${b[13]}.${b[14]}.${b[15]}`);
        return `${r.name}:${inner}`;
      }
      return r.name;
    }
    return matches(b, V6_GLOBAL) ? 'public' : 'reserved';
  }
  return 'unparseable';
}

/** The 4 (IPv4) or 16 (IPv6, brackets allowed, no zone id) bytes of an address; undefined when it is neither. */
export function addressBytes(address: string): Uint8Array | undefined {
  const s = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  return isIP(s) === 4 ? parseV4(s) : parseV6(s);
}

/** True when both strings are the same IP address (any IPv6 spelling, brackets allowed). */
export function sameAddress(left: string, right: string): boolean {
  const x = addressBytes(left);
  const y = addressBytes(right);
  if (x === undefined || y === undefined || x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

// Names that never lead to a public host: RFC 6761/6762 special-use, RFC 8375, and the cloud
// "internal" zones (metadata.google.internal). DNS would usually catch them too; this says why early.
const BLOCKED_SUFFIXES = ['.localhost', '.local', '.localdomain', '.internal', '.home.arpa', '.onion', '.test', '.invalid', '.example'];
const BLOCKED_NAMES = new Set(['localhost', 'localdomain', 'home.arpa', 'onion', 'test', 'invalid', 'example']);

/** `invalid_url` naming the field and the reason. */
export const invalidUrlError = (param: string, reason: string): ApiError => new ApiError('invalid_url', { param, message: `\`${param}\`: ${reason}` });

/**
 * The host rule for one URL: undefined when acceptable, otherwise the reason. IP literals are
 * classified after WHATWG normalisation (so 2130706433, 0x7f.1, 0177.0.0.1 and 127.1 are all seen
 * as 127.0.0.1); names must have at least two labels and not be special-use.
 */
export function hostProblem(hostname: string): string | undefined {
  if (hostname === '') return 'the URL has no host';
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  if (isIP(bare) !== 0) {
    const c = classifyAddress(bare);
    return c === 'public' ? undefined : `the host is a blocked address (${c})`;
  }
  // URL.hostname keeps a trailing dot ('localhost.'), which DNS treats as the same name.
  const name = hostname.endsWith('.') ? hostname.slice(0, -1) : hostname;
  if (name === '' || name.endsWith('.')) return 'the host name is not valid';
  if (BLOCKED_NAMES.has(name) || BLOCKED_SUFFIXES.some((s) => name.endsWith(s))) return 'the host is a local or special-use name';
  // Single-label names go through resolver search domains and reach intranet hosts.
  if (!name.includes('.')) return 'the host must be a fully qualified domain name';
  return undefined;
}

/**
 * Why an already-parsed URL (a client URL or a redirect hop) must not be fetched, or undefined:
 * length, https, no credentials, host rule. `hostRuleExempt` skips only the host rule (the test
 * allow-list); never the length, scheme or credential rules.
 */
export function urlProblem(url: URL, hostRuleExempt = false): string | undefined {
  if (url.href.length > MAX_URL_CHARS) return `the URL is longer than ${MAX_URL_CHARS} characters`;
  if (url.protocol !== 'https:') return 'only https URLs are accepted';
  if (url.username !== '' || url.password !== '') return 'the URL must not carry credentials';
  return hostRuleExempt ? undefined : hostProblem(url.hostname);
}

/** urlProblem as an ApiError: `too_long` for length (docs/api/errors.md), `invalid_url` otherwise. */
export function checkFetchUrl(url: URL, param: string, hostRuleExempt = false): void {
  if (url.href.length > MAX_URL_CHARS) throw new ApiError('too_long', { param, message: `\`${param}\` is longer than ${MAX_URL_CHARS} characters.` });
  const p = urlProblem(url, hostRuleExempt);
  if (p !== undefined) throw invalidUrlError(param, p);
}

/**
 * Parses a URL from a request body. Too long → `too_long` (docs/api/errors.md: a URL above 2,048 characters);
 * otherwise any failure → `invalid_url` with `param`. Any port is accepted: protection is by
 * address (every address we connect to is public), and TLS is required on every port.
 */
export function parseClientUrl(raw: string, param = 'url'): URL {
  if (typeof raw !== 'string') throw new ApiError('invalid_type', { param, message: `\`${param}\` must be a string.` });
  if (raw.length > MAX_URL_CHARS) throw new ApiError('too_long', { param, message: `\`${param}\` is longer than ${MAX_URL_CHARS} characters.` });
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalidUrlError(param, 'not a valid URL');
  }
  // Credentials spelled with an empty user ("https://:@host") leave no username, but the raw text
  // still shows an authority '@': refuse it too so logs never carry an ambiguous authority.
  const authority = raw.slice(raw.indexOf('//') + 2).split(/[/\\?#]/, 1)[0] ?? '';
  if (authority.includes('@')) throw invalidUrlError(param, 'the URL must not carry credentials');
  checkFetchUrl(url, param);
  return url;
}
