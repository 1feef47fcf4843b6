// Which HTTP engine serves: `auto` takes uWS exactly where a native build loads, `node` always
// serves with node:http, `uws` is a clear start-up error where no build loads. And the PROXY v2
// reader the node engine uses.
import t from 'tap';
import { chooseEngine } from '../../src/server/engine.js';
import { parseProxyHeader, SIGNATURE } from '../../src/server/proxy-header.js';
import { loadUws } from '../../src/server/uws-loader.js';

t.test('engine choice on this Node', async (t) => {
  const load = loadUws();
  t.comment(load.ok ? `uWS loads here: ${load.uws.source}` : `uWS does not load here: ${load.reason}`);
  t.equal(chooseEngine('node').name, 'node', 'node is always node');
  const auto = chooseEngine('auto');
  t.equal(auto.name, load.ok ? 'uws' : 'node', 'auto follows what loads');
  t.match(auto.reason, /^auto: /, 'and says why');
  if (load.ok) t.equal(chooseEngine('uws').name, 'uws');
  else
    t.throws(
      () => chooseEngine('uws'),
      /server\.engine is uws, but no native uWebSockets\.js build for Node/,
      'uws where none loads: a start-up error naming the Node',
    );
  if (!load.ok)
    t.match(
      auto.reason,
      new RegExp(`Node ${process.versions.node.replace(/\./g, '\\.')} \\(ABI ${process.versions.modules}`),
      'the reason names this Node and its ABI',
    );
});

const v2 = (cmd: number, fam: number, addr: number[], extra: number[] = []): Buffer =>
  Buffer.concat([SIGNATURE, Buffer.from([0x20 | cmd, fam, 0, addr.length + extra.length]), Buffer.from(addr), Buffer.from(extra)]);

t.test('PROXY v2 headers', async (t) => {
  const four = v2(1, 0x11, [203, 0, 113, 7, 10, 0, 0, 1, 0x30, 0x39, 0x1f, 0x90]);
  t.same(
    parseProxyHeader(Buffer.concat([four, Buffer.from('GET / HTTP/1.1\r\n')])),
    { kind: 'header', length: 28, address: '203.0.113.7' },
    'IPv4, the request after it untouched',
  );
  const six = v2(1, 0x21, [0x20, 0x01, 0x0d, 0xb8, ...Array(11).fill(0), 1, ...Array(16).fill(0), 0, 1, 0, 2]);
  t.same(parseProxyHeader(six), { kind: 'header', length: 52, address: '2001:db8::1' }, 'IPv6, compressed');
  const mapped = v2(1, 0x21, [...Array(10).fill(0), 0xff, 0xff, 198, 51, 100, 9, ...Array(16).fill(0), 0, 1, 0, 2]);
  t.equal((parseProxyHeader(mapped) as { address: string }).address, '198.51.100.9', 'an IPv4-mapped IPv6 caller named as IPv4');
  t.same(parseProxyHeader(v2(0, 0x00, [])), { kind: 'header', length: 16, address: '' }, 'LOCAL: the TCP peer stands');
  t.same(
    parseProxyHeader(v2(1, 0x11, [203, 0, 113, 7, 10, 0, 0, 1, 0, 1, 0, 2], [0x04, 0x00, 0x01, 0x00])),
    { kind: 'header', length: 32, address: '203.0.113.7' },
    'TLVs skipped',
  );
  t.same(parseProxyHeader(four.subarray(0, 20)), { kind: 'incomplete' }, 'part of a header: read more');
  t.same(parseProxyHeader(SIGNATURE.subarray(0, 5)), { kind: 'incomplete' }, 'part of the signature: read more');
  t.same(parseProxyHeader(Buffer.from('GET / HTTP/1.1\r\n\r\n')), { kind: 'none' }, 'a request line: no header');
  const badVersion = Buffer.from(four);
  badVersion[12] = 0x11;
  t.same(parseProxyHeader(badVersion), { kind: 'invalid' }, 'version 1 in a v2 signature: refused');
  const huge = Buffer.concat([SIGNATURE, Buffer.from([0x21, 0x11, 0x10, 0x00])]);
  t.same(parseProxyHeader(huge), { kind: 'invalid' }, 'longer than 512 bytes: refused');
});
