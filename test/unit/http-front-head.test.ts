// The HTTP front's two small parsers: how it sorts a first request's head, and the PROXY v2 header
// it writes (read back by a real uWS app, IPv4 and IPv6) or passes on from a balancer.
import { connect } from 'node:net';
import t from 'tap';
import { leadingProxyHeader, proxyV2Header } from '../../src/server/proxy-header.js';
import { MAX_HEAD_BYTES, MAX_HEADER_FIELDS, sortHead } from '../../src/server/request-head.js';
import { loadUws, type UsListenSocket } from '../../src/server/uws.js';

const head = (s: string) => Buffer.from(s, 'latin1');
const fields = (n: number) => Array.from({ length: n }, (_, i) => `X-F${i}: v\r\n`).join('');

t.test('sortHead', async (t) => {
  t.equal(sortHead(head('GET / HTTP/1.1\r\nHost: x\r\n\r\n')), 'uws');
  t.equal(sortHead(head('GET / HTTP/1.1\r\nhOsT: x\r\n\r\nGET / HTTP/1.0\r\n\r\n')), 'uws', 'any case; only the first request counts');
  t.equal(sortHead(head(`GET / HTTP/1.1\r\nHost: x\r\n${fields(MAX_HEADER_FIELDS - 1)}\r\n`)), 'uws', 'at the limit');
  t.equal(sortHead(head(`GET / HTTP/1.1\r\nHost: x\r\n${fields(MAX_HEADER_FIELDS)}\r\n`)), 'node', 'one above');
  t.equal(sortHead(head('GET / HTTP/1.0\r\nHost: x\r\n\r\n')), 'node', 'HTTP/1.0');
  t.equal(sortHead(head('GET / HTTP/1.1\r\nX-Host: x\r\n\r\n')), 'node', 'no Host (X-Host is not one)');
  t.equal(sortHead(head('GET  / HTTP/1.1\r\nHost: x\r\n\r\n')), 'node', 'a request line uWS would not parse');
  t.equal(sortHead(head('GET / HTTP/1.1\r\nHost: x\r\n')), 'incomplete');
  t.equal(sortHead(head('GET / HTTP/1.1\r')), 'incomplete');
  t.equal(sortHead(head(`GET / HTTP/1.1\r\nHost: x\r\nX: ${'a'.repeat(MAX_HEAD_BYTES)}`)), 'node', 'no end within the bound');
});

t.test('sortHead: heads uWS cannot parse go to node, which answers them', async (t) => {
  const odd: Record<string, string> = {
    'absolute-form target': 'GET http://x/v1/models HTTP/1.1\r\nHost: x\r\n\r\n',
    'asterisk-form target': 'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n',
    'a tab in the target': 'GET /v1/models\tx HTTP/1.1\r\nHost: x\r\n\r\n',
    'a space in a field name': 'GET / HTTP/1.1\r\nHost: x\r\nX Y: z\r\n\r\n',
    'a space before the colon': 'GET / HTTP/1.1\r\nHost : x\r\n\r\n',
    'obs-fold': 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n',
    'a line without a colon': 'GET / HTTP/1.1\r\nHost: x\r\nJunk\r\n\r\n',
    'an empty field name': 'GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n',
    'a bare LF in a field': 'GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n',
    'a bare CR in a field': 'GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n',
    'a bare LF after the request line': 'GET / HTTP/1.1\nHost: x\r\n\r\n',
    'a head of bare LFs (HTTP/1.0)': 'GET /v1/models HTTP/1.0\n\n',
    'a head of bare LFs (HTTP/1.1)': 'GET /v1/models HTTP/1.1\nHost: x\n\n',
  };
  for (const [name, h] of Object.entries(odd)) t.equal(sortHead(head(h)), 'node', name);
  t.equal(sortHead(head('GET /v1/models?a=1&b=%20 HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-Tab:\tv\r\n\r\n')), 'uws', 'what uWS parses still goes to it');
  t.equal(sortHead(head('GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r')), 'incomplete', 'a CR at the end of what came is not bare yet');
});

t.test('leadingProxyHeader', async (t) => {
  const h = proxyV2Header({ remoteAddress: '203.0.113.9', remotePort: 4000, localAddress: '10.0.0.1', localPort: 8080 });
  t.equal(h.length, 28);
  t.equal(leadingProxyHeader(Buffer.concat([h, head('GET / HTTP/1.1\r\n')])), 28);
  t.equal(leadingProxyHeader(h.subarray(0, 10)), -1, 'a prefix of the signature: more needed');
  t.equal(leadingProxyHeader(h.subarray(0, 20)), -1, 'the addresses not all there');
  t.equal(leadingProxyHeader(head('GET / HTTP/1.1\r\n')), 0);
  const huge = Buffer.from(h);
  huge.writeUInt16BE(4000, 14);
  t.equal(leadingProxyHeader(huge), 0, 'a header claiming kilobytes is not believed');
});

t.test('proxyV2Header, read back by uWS', async (t) => {
  const uws = loadUws(false);
  const app = uws.App();
  app.any('/*', (res) => void res.end(Buffer.from(res.getProxiedRemoteAddressAsText()).toString()));
  const sock = await new Promise<UsListenSocket>((r, j) => app.listen('127.0.0.1', 0, (s: UsListenSocket | false) => (s ? r(s) : j(new Error('listen')))));
  t.teardown(() => uws.us_listen_socket_close(sock));
  const port = uws.us_socket_local_port(sock);
  const seen = (header: Buffer) =>
    new Promise<string>((r, j) => {
      const s = connect(port, '127.0.0.1', () => s.write(Buffer.concat([header, head('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')])));
      let out = '';
      s.on('data', (d: Buffer) => (out += d.toString('latin1')));
      s.on('error', j);
      s.on('close', () => r(out.slice(out.indexOf('\r\n\r\n') + 4)));
    });
  const at = (remoteAddress: string, localAddress: string) => proxyV2Header({ remoteAddress, remotePort: 4000, localAddress, localPort: 8080 });
  t.equal(await seen(at('203.0.113.9', '10.0.0.1')), '203.0.113.9');
  t.equal(await seen(at('::ffff:203.0.113.9', '::ffff:10.0.0.1')), '203.0.113.9', "a dual-stack listener's IPv4 caller");
  t.equal(await seen(at('2001:db8::7', '2001:db8::1')), '2001:0db8:0000:0000:0000:0000:0000:0007', 'IPv6 (uWS writes every group in full)');
  t.equal(await seen(at('2001:db8::10.1.2.3', '::1')), '2001:0db8:0000:0000:0000:0000:0a01:0203', 'IPv6 ending in IPv4 notation');
  t.equal(await seen(at('203.0.113.9', '2001:db8::1')), '203.0.113.9', 'an IPv4 caller on an IPv6 listener address');
  t.equal(await seen(proxyV2Header({})), '', 'LOCAL: no address named');
});
