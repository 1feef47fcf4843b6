import t, { type Test } from 'tap';
import fc from 'fast-check';
import { BlockList } from 'node:net';
import { ApiError } from '../../src/errors.js';
import { classifyAddress, hostProblem, parseClientUrl } from '../../src/net/ssrf-guard.js';

t.test('classifyAddress: blocked IPv4 ranges, edges included', async (t) => {
  const cases: Array<[string, string]> = [
    ['0.0.0.0', 'this-network'],
    ['0.255.255.255', 'this-network'],
    ['10.0.0.0', 'private'],
    ['10.255.255.255', 'private'],
    ['100.64.0.0', 'cgnat'],
    ['100.127.255.255', 'cgnat'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.0.0.8', 'ietf-protocol-assignments'],
    ['192.0.2.1', 'documentation'],
    ['198.51.100.7', 'documentation'],
    ['203.0.113.255', 'documentation'],
    ['192.88.99.1', '6to4-relay'],
    ['192.168.0.1', 'private'],
    ['192.168.255.255', 'private'],
    ['198.18.0.0', 'benchmarking'],
    ['198.19.255.255', 'benchmarking'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.255', 'multicast'],
    ['240.0.0.1', 'reserved'],
    ['255.255.255.254', 'reserved'],
    ['255.255.255.255', 'broadcast'],
  ];
  for (const [ip, name] of cases) t.equal(classifyAddress(ip), name, ip);
});

t.test('classifyAddress: public IPv4 just outside each range', async (t) => {
  for (const ip of [
    '1.1.1.1',
    '8.8.8.8',
    '9.255.255.255',
    '11.0.0.0',
    '100.63.255.255',
    '100.128.0.0',
    '126.255.255.255',
    '128.0.0.0',
    '169.253.255.255',
    '172.15.255.255',
    '172.32.0.0',
    '192.0.1.255',
    '192.0.3.0',
    '192.167.255.255',
    '192.169.0.0',
    '198.17.255.255',
    '198.20.0.0',
    '223.255.255.255',
    '93.184.215.14',
  ]) {
    t.equal(classifyAddress(ip), 'public', ip);
  }
});

t.test('classifyAddress: IPv6 ranges, embeddings and transition prefixes', async (t) => {
  const cases: Array<[string, string]> = [
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['[::1]', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['::ffff:127.0.0.1', 'ipv4-mapped:loopback'],
    ['::ffff:7f00:1', 'ipv4-mapped:loopback'],
    ['::ffff:10.1.2.3', 'ipv4-mapped:private'],
    ['::ffff:169.254.169.254', 'ipv4-mapped:link-local'],
    // Mapped addresses are refused even when they embed a public address: we never dial them.
    ['::ffff:8.8.8.8', 'ipv4-mapped:public'],
    ['::127.0.0.1', 'ipv4-compatible:loopback'],
    ['::8.8.8.8', 'ipv4-compatible:public'],
    ['64:ff9b::7f00:1', 'nat64'],
    ['64:ff9b::8.8.8.8', 'nat64'],
    ['64:ff9b:1::1', 'nat64-local'],
    ['100::1', 'discard-only'],
    ['2001::1', 'teredo'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
    ['2001:db8::1', 'documentation'],
    ['3fff::1', 'documentation'],
    ['2001:2::1', 'ietf-protocol-assignments'],
    ['2002:7f00:1::1', '6to4'],
    ['2002:c0a8:101::', '6to4'],
    ['fc00::1', 'private'],
    ['fd12:3456:789a::1', 'private'],
    ['fe80::1', 'link-local'],
    ['febf::1', 'link-local'],
    ['fec0::1', 'site-local'],
    ['ff02::1', 'multicast'],
    ['ff0e::1', 'multicast'],
    ['fe80::1%eth0', 'scoped'],
    ['4000::1', 'reserved'],
    ['1::', 'reserved'],
    ['e000::1', 'reserved'],
  ];
  for (const [ip, name] of cases) t.equal(classifyAddress(ip), name, ip);
  for (const ip of ['2606:4700:4700::1111', '2a00:1450:4001:80b::200e', '2001:4860:4860::8888', '2400:cb00::1']) {
    t.equal(classifyAddress(ip), 'public', ip);
  }
});

t.test('classifyAddress: anything node cannot parse is blocked', async (t) => {
  for (const s of [
    '',
    'localhost',
    '127.1',
    '2130706433',
    '0x7f.0.0.1',
    '0177.0.0.1',
    '01.2.3.4',
    '1.2.3.4.5',
    '256.1.1.1',
    '::ffff:999.0.0.1',
    '1:2:3:4:5:6:7:8:9',
    ':::',
    'example.com',
    ' 8.8.8.8',
    '8.8.8.8 ',
  ]) {
    t.equal(classifyAddress(s), 'unparseable', JSON.stringify(s));
  }
});

t.test('classifyAddress agrees with an independent net.BlockList oracle on random addresses', async (t) => {
  const bl = new BlockList();
  for (const [a, p] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.0.0.0', 24],
    ['192.0.2.0', 24],
    ['192.88.99.0', 24],
    ['192.168.0.0', 16],
    ['198.18.0.0', 15],
    ['198.51.100.0', 24],
    ['203.0.113.0', 24],
    ['224.0.0.0', 4],
    ['240.0.0.0', 4],
  ] as const) {
    bl.addSubnet(a, p, 'ipv4');
  }
  fc.assert(
    fc.property(fc.ipV4(), (ip) => (classifyAddress(ip) === 'public') === !bl.check(ip, 'ipv4')),
    { numRuns: 20_000 },
  );
  // IPv6: public only inside 2000::/3 and outside the special blocks there.
  const bl6 = new BlockList();
  for (const [a, p] of [
    ['2001::', 23],
    ['2001:db8::', 32],
    ['2002::', 16],
    ['3fff::', 20],
  ] as const)
    bl6.addSubnet(a, p, 'ipv6');
  const global = new BlockList();
  global.addSubnet('2000::', 3, 'ipv6');
  fc.assert(
    fc.property(fc.ipV6(), (ip) => (classifyAddress(ip) === 'public') === (global.check(ip, 'ipv6') && !bl6.check(ip, 'ipv6'))),
    { numRuns: 20_000 },
  );
  t.pass('oracles agree');
});

function refused(t: Test, raw: string, code: string, reason: RegExp, param = 'first_frame_url'): void {
  try {
    parseClientUrl(raw, param);
    t.fail(`accepted ${raw}`);
  } catch (e) {
    t.ok(e instanceof ApiError, raw);
    const err = e as ApiError;
    t.equal(err.code, code, `${raw}: code`);
    t.equal(err.param, param, `${raw}: param`);
    t.match(err.message, reason, `${raw}: reason`);
  }
}

t.test('parseClientUrl: scheme, credentials, length', async (t) => {
  refused(t, 'http://example.com/a.png', 'invalid_url', /https/);
  refused(t, 'ftp://example.com/a.png', 'invalid_url', /https/);
  refused(t, 'file:///etc/passwd', 'invalid_url', /https/);
  refused(t, 'data:image/png;base64,AAAA', 'invalid_url', /https/);
  refused(t, 'not a url', 'invalid_url', /not a valid URL/);
  refused(t, 'https://user:pw@example.com/a.png', 'invalid_url', /credentials/);
  refused(t, 'https://user@example.com/a.png', 'invalid_url', /credentials/);
  refused(t, 'https://:pw@example.com/a.png', 'invalid_url', /credentials/);
  refused(t, 'https://@example.com/a.png', 'invalid_url', /credentials/);
  const long = 'https://example.com/' + 'a'.repeat(2049 - 'https://example.com/'.length);
  t.equal(long.length, 2049);
  refused(t, long, 'too_long', /2048/);
  const atLimit = 'https://example.com/' + 'a'.repeat(2048 - 'https://example.com/'.length);
  t.equal(parseClientUrl(atLimit).href, atLimit, 'exactly 2,048 characters is accepted');
});

t.test('parseClientUrl: IP literals in every spelling are classified after normalisation', async (t) => {
  for (const raw of [
    'https://127.0.0.1/',
    'https://2130706433/',
    'https://0x7f000001/',
    'https://0x7f.1/',
    'https://0177.0.0.1/',
    'https://127.1/',
    'https://127.0.0.1./',
    'https://0x7F.0.0.1/',
    'https://%31%32%37.0.0.1/',
    'https://１２７.0.0.1/',
    'https://[::1]/',
    'https://[::ffff:127.0.0.1]/',
    'https://[0:0:0:0:0:ffff:7f00:1]/',
    'https://[::127.0.0.1]/',
  ]) {
    refused(t, raw, 'invalid_url', /blocked address \((ipv4-mapped:|ipv4-compatible:)?loopback\)/);
  }
  refused(t, 'https://0/', 'invalid_url', /this-network/);
  refused(t, 'https://0.0.0.0/', 'invalid_url', /this-network/);
  refused(t, 'https://[::]/', 'invalid_url', /unspecified/);
  refused(t, 'https://169.254.169.254/latest/meta-data/', 'invalid_url', /link-local/);
  refused(t, 'https://0xa9fea9fe/', 'invalid_url', /link-local/);
  refused(t, 'https://10.1/', 'invalid_url', /private/);
  refused(t, 'https://3232235777/', 'invalid_url', /private/); // 192.168.1.1
  refused(t, 'https://100.100.100.200/', 'invalid_url', /cgnat/);
  refused(t, 'https://[fd00:ec2::254]/', 'invalid_url', /private/);
  refused(t, 'https://[fe80::1]/', 'invalid_url', /link-local/);
  refused(t, 'https://[64:ff9b::a9fe:a9fe]/', 'invalid_url', /nat64/);
  refused(t, 'https://[2002:a9fe:a9fe::]/', 'invalid_url', /6to4/);
  refused(t, 'https://[2001::1]/', 'invalid_url', /teredo/);
  refused(t, 'https://[fec0::1]/', 'invalid_url', /site-local/);
  refused(t, 'https://[100::1]/', 'invalid_url', /discard-only/);
  refused(t, 'https://[ff02::1]/', 'invalid_url', /multicast/);
  refused(t, 'https://255.255.255.255/', 'invalid_url', /broadcast/);
  refused(t, 'https://198.18.0.1/', 'invalid_url', /benchmarking/);
  refused(t, 'https://1.2.3.999/', 'invalid_url', /not a valid URL/);
  // A public literal is a public host.
  t.equal(parseClientUrl('https://8.8.8.8/x.png').hostname, '8.8.8.8');
  t.equal(parseClientUrl('https://134744072/x.png').hostname, '8.8.8.8');
});

t.test('parseClientUrl: local and single-label names', async (t) => {
  for (const raw of [
    'https://localhost/',
    'https://LOCALHOST/',
    'https://localhost./',
    'https://a.localhost/',
    'https://x.y.localhost./',
    'https://printer.local/',
    'https://metadata.google.internal/',
    'https://router.home.arpa/',
    'https://box.localdomain/',
    'https://media.test/',
    'https://foo.invalid/',
    'https://abc.onion/',
  ]) {
    refused(t, raw, 'invalid_url', /local or special-use/);
  }
  for (const raw of ['https://intranet/', 'https://metadata/', 'https://com./']) refused(t, raw, 'invalid_url', /fully qualified/);
  refused(t, 'https://example.com../', 'invalid_url', /not valid/);
});

t.test('parseClientUrl: ordinary URLs pass, any port, fragments kept for the caller', async (t) => {
  t.equal(parseClientUrl('https://cdn.example.com/a/b.png?x=1').href, 'https://cdn.example.com/a/b.png?x=1');
  t.equal(parseClientUrl('https://CDN.Example.COM./a.png').hostname, 'cdn.example.com.');
  t.equal(parseClientUrl('https://cdn.example.com:8443/a.png').port, '8443');
  t.equal(parseClientUrl('https://[2606:4700:4700::1111]/a.png').hostname, '[2606:4700:4700::1111]');
  t.equal(parseClientUrl('https://xn--bcher-kva.de/a.png').hostname, 'xn--bcher-kva.de');
  t.equal(parseClientUrl('https://bücher.de/a.png').hostname, 'xn--bcher-kva.de');
  t.equal(parseClientUrl('https://example.com/a.png').protocol, 'https:');
  t.throws(() => parseClientUrl(42 as unknown as string, 'first_frame_url'), { code: 'invalid_type', param: 'first_frame_url' });
});

t.test('hostProblem: empty host', async (t) => {
  t.match(hostProblem(''), /no host/);
  t.equal(hostProblem('example.org'), undefined);
});
