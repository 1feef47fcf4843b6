// safeFetch against a real local HTTPS server (reached only through the explicit test allow-list)
// and a canary TCP listener on 127.0.0.1 that every SSRF attempt aims at: the canary must see zero
// connections, which proves the refusals happen before any socket is opened.
import t, { type Test } from 'tap';
import type { TLSSocket } from 'node:tls';
import { ApiError } from '../../src/errors.js';
import { FetchRefusal, safeFetch, type SafeFetchOptions } from '../../src/net/safe-fetch.js';
import { startCanary, startHttpsServer } from '../helpers/https-server.js';

const canary = await startCanary();
const seenSni: string[] = [];
const server = await startHttpsServer((req, res) => {
  seenSni.push((req.socket as TLSSocket).servername || '');
  const u = new URL(req.url ?? '/', 'https://x');
  switch (u.pathname) {
    case '/ok':
      res.writeHead(200, { 'content-type': 'image/png' });
      res.end(req.method === 'HEAD' ? undefined : 'hello');
      return;
    case '/echo':
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(req.headers));
      return;
    case '/big-declared':
      res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': '1000' });
      res.end(Buffer.alloc(1000));
      return;
    case '/big-chunked':
      res.writeHead(200, { 'content-type': 'video/mp4' });
      for (let i = 0; i < 20; i++) res.write(Buffer.alloc(100));
      res.end();
      return;
    case '/exact':
      res.writeHead(200, { 'content-type': 'video/mp4' });
      res.end(Buffer.alloc(100, 7));
      return;
    case '/hang':
      return; // never answers; the fetch's timer must end it
    case '/hang-body':
      res.writeHead(200, { 'content-type': 'video/mp4' });
      res.write('partial');
      return;
    case '/missing':
      res.writeHead(404).end();
      return;
    case '/redirect':
      res.writeHead(Number(u.searchParams.get('status') ?? '302'), { location: u.searchParams.get('to') ?? '/ok' }).end();
      return;
    case '/loop':
      res.writeHead(302, { location: '/loop' }).end();
      return;
    case '/cookie':
      res.writeHead(302, { location: '/echo', 'set-cookie': 'session=secret; Path=/' }).end();
      return;
    default:
      res.writeHead(500).end();
  }
});
t.teardown(async () => {
  await server.close();
  await canary.close();
});

const P = server.port;
const C = canary.port;
// 3ffe::/16 (the old 6bone) sits inside 2000::/3 and is unallocated: public to the classifier,
// and nothing answers there. It is only ever the "first answer" of the rebinding resolver below,
// which the fetcher must never dial.
const UNALLOCATED_PUBLIC = '3ffe:ffff::1';

const table: Record<string, string[]> = {
  'media.test': ['127.0.0.1'],
  'other.example.com': ['127.0.0.1'],
  'evil.example.com': ['127.0.0.1'],
  'mixed.example.com': [UNALLOCATED_PUBLIC, '10.0.0.1'],
  'empty.example.com': [],
};
const blockedAnswers: Record<string, string> = {
  '::1': 'loopback',
  '::ffff:127.0.0.1': 'ipv4-mapped:loopback',
  '::ffff:8.8.8.8': 'ipv4-mapped:public',
  '::127.0.0.1': 'ipv4-compatible:loopback',
  '64:ff9b::7f00:1': 'nat64',
  '64:ff9b:1::1': 'nat64-local',
  '169.254.169.254': 'link-local',
  '10.0.0.1': 'private',
  '172.16.0.1': 'private',
  '192.168.1.1': 'private',
  '100.64.0.1': 'cgnat',
  '0.0.0.0': 'this-network',
  '::': 'unspecified',
  'fe80::1': 'link-local',
  'fd00::1': 'private',
  '2002:7f00:1::': '6to4',
  '2001::1': 'teredo',
  'fec0::1': 'site-local',
  '100::1': 'discard-only',
  '224.0.0.1': 'multicast',
  'ff02::1': 'multicast',
  '255.255.255.255': 'broadcast',
  '240.0.0.1': 'reserved',
  '198.18.0.1': 'benchmarking',
  '192.0.2.1': 'documentation',
  'fe80::1%lo': 'scoped',
  'not-an-ip': 'unparseable',
  '127.1': 'unparseable',
};
const resolverCalls: string[] = [];
const resolver = async (host: string): Promise<string[]> => {
  resolverCalls.push(host);
  if (host.endsWith('.blocked.example.com')) return [Buffer.from(host.split('.')[0]!, 'hex').toString()];
  const a = table[host];
  if (a === undefined) throw Object.assign(new Error(`ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
  return a;
};
const blockedName = (answer: string): string => `${Buffer.from(answer).toString('hex')}.blocked.example.com`;

const base: SafeFetchOptions = { maxBytes: 100, timeoutMs: 5000, maxRedirects: 3, resolver, ca: server.ca, param: 'first_frame_url' };
const allow = new Set([`media.test:${P}`]);
const good = (path: string): URL => new URL(`https://media.test:${P}${path}`);

async function refusal(t: Test, p: Promise<unknown>, reason: RegExp, label: string): Promise<ApiError | undefined> {
  try {
    await p;
    t.fail(`${label}: fetched`);
    return undefined;
  } catch (e) {
    if (!(e instanceof ApiError)) {
      t.fail(`${label}: not an ApiError: ${String(e)}`);
      return undefined;
    }
    t.equal(e.code, 'invalid_url', `${label}: code`);
    t.equal(e.param, 'first_frame_url', `${label}: param`);
    // What was learnt on the network is in `detail` (for the log) only; the client's message is one for all.
    const why = e instanceof FetchRefusal ? e.detail : e.message;
    t.match(why, reason, `${label}: ${why}`);
    if (e instanceof FetchRefusal)
      t.equal(e.message, '`first_frame_url` could not be fetched: it must be a public https URL that answers with the file.', `${label}: one message`);
    return e;
  }
}

t.test('a good fetch through the allow-list: SNI is the host name, certificate verified, bare headers', async (t) => {
  const before = seenSni.length;
  const r = await safeFetch(good('/ok'), { ...base, allowList: allow, accept: 'image/*' });
  t.equal(r.status, 200);
  t.equal(r.contentType, 'image/png');
  t.equal(r.bytes?.toString(), 'hello');
  t.equal(r.sizeBytes, 5);
  t.equal(r.finalUrl, `https://media.test:${P}/ok`);
  t.equal(seenSni[before], 'media.test');
  const echo = await safeFetch(good('/echo#frag'), { ...base, maxBytes: 10_000, allowList: allow, accept: 'image/*' });
  const h = JSON.parse(echo.bytes!.toString()) as Record<string, string>;
  t.equal(h.accept, 'image/*');
  t.equal(h['user-agent'], 'inkgate-media-fetch/1');
  t.notOk('authorization' in h, 'no auth header');
  t.notOk('cookie' in h, 'no cookie');
  t.equal(server.requests.at(-1)?.url, '/echo', 'the fragment is not sent');
});

t.test('the system resolver reaches localhost when (and only when) it is allow-listed', async (t) => {
  const { resolver: _r, ...noResolver } = base;
  const r = await safeFetch(new URL(`https://localhost:${P}/ok`), { ...noResolver, allowList: new Set([`localhost:${P}`]) });
  t.equal(r.bytes?.toString(), 'hello');
  await refusal(t, safeFetch(new URL(`https://localhost:${C}/ok`), noResolver), /local or special-use/, 'localhost without allow-list');
  await refusal(
    t,
    safeFetch(new URL(`https://localhost:${P}/ok`), { ...noResolver, allowList: new Set([`localhost:${P + 1}`]) }),
    /local or special-use/,
    'allow-list is per port',
  );
});

t.test('an allow-listed IP literal is dialled directly and checked against the certificate IP', async (t) => {
  const r = await safeFetch(new URL(`https://127.0.0.1:${P}/ok`), { ...base, allowList: new Set([`127.0.0.1:${P}`]) });
  t.equal(r.bytes?.toString(), 'hello');
});

t.test('HEAD reports the declared size', async (t) => {
  const r = await safeFetch(good('/big-declared'), { ...base, maxBytes: 5000, method: 'HEAD', allowList: allow });
  t.equal(r.sizeBytes, 1000);
  t.equal(r.bytes, undefined);
  t.equal(server.requests.at(-1)?.method, 'HEAD');
});

t.test('normal certificate verification stays on under the allow-list', async (t) => {
  const { ca: _ca, ...noCa } = base;
  await refusal(t, safeFetch(good('/ok'), { ...noCa, allowList: allow }), /TLS verification failed/, 'self-signed, no ca');
  const other = new URL(`https://other.example.com:${P}/ok`);
  await refusal(
    t,
    safeFetch(other, { ...base, allowList: new Set([`other.example.com:${P}`]) }),
    /TLS verification failed \(ERR_TLS_CERT_ALTNAME_INVALID\)/,
    'name not in the certificate',
  );
});

t.test('SSRF: IP literals in every spelling, aimed at the canary', async (t) => {
  for (const host of [
    '127.0.0.1',
    '2130706433',
    '0x7f000001',
    '0x7f.1',
    '0177.0.0.1',
    '127.1',
    '127.0.0.1.',
    '[::1]',
    '[::ffff:127.0.0.1]',
    '[::ffff:7f00:1]',
    '[::127.0.0.1]',
    '[64:ff9b::7f00:1]',
    '[2002:7f00:1::]',
    '0',
    '[::]',
    '169.254.169.254',
    '0xa9fea9fe',
    '10.1',
    '[fe80::1]',
  ]) {
    const url = new URL(`https://${host}:${C}/x`);
    await refusal(t, safeFetch(url, base), /the host is a blocked address/, host);
  }
});

t.test('SSRF: special-use and single-label names, aimed at the canary', async (t) => {
  for (const host of ['localhost', 'localhost.', 'LocalHost', 'a.localhost', 'printer.local', 'metadata.google.internal', 'intranet', 'media.test']) {
    await refusal(t, safeFetch(new URL(`https://${host}:${C}/x`), base), /local or special-use|fully qualified/, host);
  }
});

t.test('SSRF: names resolving to every blocked range, aimed at the canary', async (t) => {
  for (const [answer, range] of Object.entries(blockedAnswers)) {
    const url = new URL(`https://${blockedName(answer)}:${C}/x`);
    const esc = range.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    await refusal(t, safeFetch(url, base), new RegExp(`resolves to a blocked address \\(${esc}\\)`), `${answer} -> ${range}`);
  }
});

t.test('SSRF: one public and one private answer is refused', async (t) => {
  await refusal(t, safeFetch(new URL(`https://mixed.example.com:${C}/x`), base), /blocked address \(private\)/, 'mixed');
});

t.test('SSRF: DNS rebinding (public at check time, loopback at connect time) is refused at connect time', async (t) => {
  let calls = 0;
  const rebinding = async (): Promise<string[]> => (++calls === 1 ? [UNALLOCATED_PUBLIC] : ['127.0.0.1']);
  await refusal(t, safeFetch(new URL(`https://rebind.example.com:${C}/x`), { ...base, resolver: rebinding }), /blocked address \(loopback\)/, 'rebinding');
  t.equal(calls, 2, 'resolved once to vet, once more inside the connect');
});

t.test('redirects: each hop is re-validated', async (t) => {
  const hop = (to: string, status = 302): URL => good(`/redirect?status=${status}&to=${encodeURIComponent(to)}`);
  const opts = { ...base, allowList: allow };
  await refusal(t, safeFetch(hop(`http://media.test:${P}/ok`), opts), /a redirect was refused: only https/, 'to http');
  await refusal(t, safeFetch(hop(`https://evil.example.com:${C}/x`), opts), /blocked address \(loopback\)/, 'to a name resolving to loopback');
  await refusal(t, safeFetch(hop(`https://127.0.0.1:${C}/x`, 307), opts), /a redirect was refused: the host is a blocked address \(loopback\)/, 'to a literal');
  await refusal(t, safeFetch(hop(`https://localhost:${C}/x`, 308), opts), /a redirect was refused: the host is a local/, 'to localhost');
  await refusal(t, safeFetch(hop(`https://u:p@media.test:${P}/ok`), opts), /a redirect was refused: the URL must not carry credentials/, 'to credentials');
  await refusal(t, safeFetch(hop('file:///etc/passwd'), opts), /only https/, 'to file:');
  await refusal(t, safeFetch(good('/redirect?to='), opts), /without a Location/, 'no location');

  const before = server.requests.length;
  await refusal(t, safeFetch(good('/loop'), opts), /too many redirects \(more than 3\)/, 'loop');
  t.equal(server.requests.length - before, 4, 'the first request plus 3 redirects, then stop');

  const ok = await safeFetch(hop('/ok', 303), opts);
  t.equal(ok.bytes?.toString(), 'hello', 'a relative redirect inside the allow-list is followed');
  t.equal(ok.finalUrl, `https://media.test:${P}/ok`);
  await refusal(t, safeFetch(hop('/ok'), { ...opts, maxRedirects: 0 }), /too many redirects \(more than 0\)/, 'maxRedirects 0');
});

t.test('no cookies survive a redirect', async (t) => {
  const r = await safeFetch(good('/cookie'), { ...base, maxBytes: 10_000, allowList: allow });
  const h = JSON.parse(r.bytes!.toString()) as Record<string, string>;
  t.notOk('cookie' in h);
});

t.test('bounded body', async (t) => {
  const opts = { ...base, allowList: allow };
  await refusal(t, safeFetch(good('/big-declared'), opts), /larger than 100 bytes/, 'declared length');
  await refusal(t, safeFetch(good('/big-chunked'), opts), /larger than 100 bytes/, 'chunked body');
  const r = await safeFetch(good('/exact'), opts);
  t.equal(r.sizeBytes, 100, 'exactly maxBytes is fine');
});

t.test('bounded time', async (t) => {
  const opts = { ...base, allowList: allow, timeoutMs: 300 };
  for (const path of ['/hang', '/hang-body']) {
    const start = performance.now();
    await refusal(t, safeFetch(good(path), opts), /no complete answer within 300 ms/, path);
    const took = performance.now() - start;
    // Time is the behaviour: the fetch gives up at its timeout, not before and not never (the
    // server hangs for good). The upper bound is ten times the timeout, for a loaded machine.
    t.ok(took >= 290 && took < 3000, `${path}: gave up after ${Math.round(took)} ms`);
  }
  const hangingResolver = (): Promise<string[]> => new Promise(() => undefined);
  await refusal(
    t,
    safeFetch(new URL(`https://slow-dns.example.com:${C}/x`), { ...base, timeoutMs: 200, resolver: hangingResolver }),
    /no complete answer within 200 ms/,
    'hanging resolver',
  );
});

t.test('other failures', async (t) => {
  const opts = { ...base, allowList: allow };
  await refusal(t, safeFetch(good('/missing'), opts), /answered 404/, '404');
  await refusal(t, safeFetch(new URL(`https://empty.example.com:${C}/x`), base), /does not resolve/, 'no addresses');
  await refusal(t, safeFetch(new URL(`https://nxdomain.example.com:${C}/x`), base), /does not resolve/, 'nxdomain');
  const long = new URL(`https://media.test:${P}/` + 'a'.repeat(2100));
  await t.rejects(safeFetch(long, opts), { code: 'too_long', param: 'first_frame_url' });
  await t.rejects(safeFetch(good('/ok'), { ...opts, maxRedirects: 99 }), RangeError);
});

t.test('the canary saw no connection during any SSRF attempt', async (t) => {
  t.equal(canary.connections(), 0);
  t.ok(resolverCalls.length > 0, 'the resolver was consulted');
});
