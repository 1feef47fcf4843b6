// The caller's address behind a balancer, seen through the public routes' per-address limit on a
// real gateway: PROXY protocol v2 when enabled (ignored when not, so a client cannot pick its own
// bucket), X-Forwarded-For only from a trusted proxy, the TCP peer otherwise.
import { connect } from 'node:net';
import t from 'tap';
import { clientAddressResolver } from '../../src/ops/client-address.js';
import { startTestGateway } from '../helpers/gateway.js';
import { eachEngine } from '../helpers/engines.js';

const PER_MINUTE = 2;

/** A PROXY protocol v2 header (TCP over IPv4) naming `src` as the client. */
function proxyV2(src: string): Buffer {
  const sig = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
  const addr = Buffer.from([...src.split('.').map(Number), 10, 0, 0, 1, 0x30, 0x39, 0x1f, 0x90]);
  return Buffer.concat([sig, Buffer.from([0x21, 0x11, 0x00, addr.length]), addr]);
}

/** One GET /v1/models on a fresh connection, optionally behind a PROXY header and with headers; the status. */
function get(url: string, opts: { proxyFrom?: string; headers?: Record<string, string> } = {}): Promise<number> {
  const u = new URL(url);
  return new Promise((resolveS, reject) => {
    const s = connect(Number(u.port), u.hostname, () => {
      const extra = Object.entries(opts.headers ?? {})
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      const req = Buffer.from(`GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${extra}\r\n`);
      s.write(opts.proxyFrom ? Buffer.concat([proxyV2(opts.proxyFrom), req]) : req);
    });
    let out = '';
    s.setTimeout(10_000, () => s.destroy(new Error('no answer')));
    s.on('data', (d: Buffer) => (out += d.toString('latin1')));
    s.on('error', reject);
    s.on('close', () => resolveS(Number(/^HTTP\/1\.1 (\d{3})/.exec(out)?.[1] ?? 0)));
  });
}

const limits = { publicRequestsPerMinute: PER_MINUTE };

eachEngine('PROXY protocol v2 on: each client its own bucket', async (t, engine) => {
  const g = await startTestGateway(t, { limits, server: { engine, proxyProtocol: true } });
  t.same(
    [await get(g.url, { proxyFrom: '10.1.0.1' }), await get(g.url, { proxyFrom: '10.1.0.1' }), await get(g.url, { proxyFrom: '10.1.0.1' })],
    [200, 200, 429],
  );
  t.equal(await get(g.url, { proxyFrom: '10.1.0.2' }), 200, 'another client behind the same balancer is not limited by the first');
  // A connection without a header (the balancer's own check, say) counts against its TCP peer.
  t.same([await get(g.url), await get(g.url), await get(g.url)], [200, 200, 429], "no header: the peer's bucket");
});

eachEngine('PROXY protocol off (the default): a header a client sends itself cannot pick its bucket', async (t, engine) => {
  const g = await startTestGateway(t, { limits, server: { engine } });
  if (engine === 'uws') {
    // uWS reads and drops such a header: the peer's one bucket still counts.
    t.same(
      [await get(g.url, { proxyFrom: '10.2.0.1' }), await get(g.url, { proxyFrom: '10.2.0.2' }), await get(g.url, { proxyFrom: '10.2.0.3' })],
      [200, 200, 429],
      'one bucket: the peer',
    );
  } else {
    // node:http takes the header for a malformed request line: 400, nothing served.
    t.same([await get(g.url, { proxyFrom: '10.2.0.1' }), await get(g.url, { proxyFrom: '10.2.0.2' })], [400, 400], 'refused, nothing served');
    t.same([await get(g.url), await get(g.url), await get(g.url)], [200, 200, 429], 'one bucket: the peer (the refusals spent none of it)');
  }
});

eachEngine('X-Forwarded-For is believed from a trusted proxy only', async (t, engine) => {
  const trusted = await startTestGateway(t, { limits, server: { engine, trustedProxies: ['127.0.0.1'] } });
  const xff = (a: string) => ({ headers: { 'X-Forwarded-For': a } });
  t.same([await get(trusted.url, xff('203.0.113.1')), await get(trusted.url, xff('203.0.113.1')), await get(trusted.url, xff('203.0.113.1'))], [200, 200, 429]);
  t.equal(await get(trusted.url, xff('203.0.113.2')), 200, 'a second client through the trusted proxy');
  const untrusted = await startTestGateway(t, { limits, server: { engine, trustedProxies: ['10.9.9.9'] } });
  t.same(
    [await get(untrusted.url, xff('198.51.100.1')), await get(untrusted.url, xff('198.51.100.2')), await get(untrusted.url, xff('198.51.100.3'))],
    [200, 200, 429],
    "an untrusted peer's header is ignored",
  );
});

t.test('the resolver: right to left past trusted hops, garbage and bad settings', async (t) => {
  const r = clientAddressResolver({ proxyProtocol: false, trustedProxies: ['10.0.0.0/8', '::1'] });
  const src = (remoteAddress: string, xff?: string) => ({
    remoteAddress,
    proxiedAddress: () => '',
    header: (n: string) => (n === 'x-forwarded-for' ? xff : undefined),
  });
  t.equal(r(src('10.0.0.5', '1.2.3.4, 10.0.0.9')), '1.2.3.4', 'the first untrusted hop from the right');
  t.equal(r(src('10.0.0.5', 'evil, 5.6.7.8')), '5.6.7.8', 'what a client put on the left is not read');
  t.equal(r(src('10.0.0.5', 'not-an-ip')), '10.0.0.5', 'garbage: the last known hop');
  t.equal(r(src('10.0.0.5')), '10.0.0.5', 'no header: the proxy itself');
  t.equal(r(src('192.0.2.7', '1.2.3.4')), '192.0.2.7', 'an untrusted peer');
  t.equal(r(src('::1', '2001:db8::1')), '2001:db8::1', 'IPv6');
  t.throws(() => clientAddressResolver({ proxyProtocol: false, trustedProxies: ['10.0.0.0/33'] }), /bad prefix length/);
  t.throws(() => clientAddressResolver({ proxyProtocol: false, trustedProxies: ['balancer.local'] }), /not an address/);
});
