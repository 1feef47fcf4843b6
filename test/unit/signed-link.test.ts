import t from 'tap';
import fc from 'fast-check';
import { createHmac } from 'node:crypto';
import { MEDIA_LINK_TTL_S, signedMediaLink, signMediaPath, verifyMediaLink } from '../../src/media/signed-link.js';

const secret = Buffer.from('0123456789abcdef0123456789abcdef');
const NOW = 1_760_000_000;

function parts(link: string): { path: string; exp: string; sig: string; n: string } {
  const [path, query] = link.split('?') as [string, string];
  const q = new URLSearchParams(query);
  return { path, exp: q.get('exp')!, sig: q.get('sig')!, n: q.get('n') ?? '' };
}

t.test('the link format is the documented HMAC, with a fresh nonce per link', async (t) => {
  const link = signMediaPath(secret, '/media/video/gen_1.mp4', NOW + 900);
  const { n, sig } = parts(link);
  t.match(n, /^[A-Za-z0-9_-]{8}$/, 'a nonce: 6 random bytes, base64url');
  const want = createHmac('sha256', secret)
    .update(`/media/video/gen_1.mp4\n${NOW + 900}\n${n}`)
    .digest('base64url');
  t.equal(link, `/media/video/gen_1.mp4?exp=${NOW + 900}&n=${n}&sig=${want}`);
  t.equal(sig.length, 43);
  // Two links for the same path and expiry (two reads in the same second) differ.
  const links = new Set(Array.from({ length: 100 }, () => signMediaPath(secret, '/media/video/gen_1.mp4', NOW + 900)));
  t.equal(links.size, 100);
  // The form without a nonce (links made before it): HMAC over path and exp only, still accepted.
  const legacy = signMediaPath(secret, '/media/video/gen_1.mp4', NOW + 900, '');
  const wantLegacy = createHmac('sha256', secret)
    .update(`/media/video/gen_1.mp4\n${NOW + 900}`)
    .digest('base64url');
  t.equal(legacy, `/media/video/gen_1.mp4?exp=${NOW + 900}&sig=${wantLegacy}`);
  t.equal(verifyMediaLink(secret, '/media/video/gen_1.mp4', NOW + 900, wantLegacy, NOW), 'ok');
  // The nonce is signed: another one, or none, breaks the signature.
  t.equal(verifyMediaLink(secret, '/media/video/gen_1.mp4', NOW + 900, sig, NOW, n), 'ok');
  t.equal(verifyMediaLink(secret, '/media/video/gen_1.mp4', NOW + 900, sig, NOW), 'bad_signature', 'nonce dropped');
  t.equal(verifyMediaLink(secret, '/media/video/gen_1.mp4', NOW + 900, sig, NOW, n.slice(1) + 'A'), 'bad_signature', 'nonce changed');
  t.equal(verifyMediaLink(secret, '/media/video/gen_1.mp4', NOW + 900, sig, NOW, 'a/b'), 'bad_signature', 'nonce outside its form');
});

t.test('round trip, and the 15-minute window with an injected clock', async (t) => {
  t.equal(MEDIA_LINK_TTL_S, 900);
  const full = signedMediaLink(secret, 'https://media.example.com/', 'video/gen_1.mp4', NOW * 1000, MEDIA_LINK_TTL_S).url;
  t.ok(full.startsWith('https://media.example.com/media/video/gen_1.mp4?exp='));
  const { path, exp, sig, n } = parts(new URL(full).pathname + new URL(full).search);
  t.equal(Number(exp), NOW + 900);
  const capped = signedMediaLink(secret, 'https://media.example.com', 'video/gen_1.mp4', NOW * 1000, MEDIA_LINK_TTL_S, (NOW + 60) * 1000);
  t.equal(capped.expiresAtS, NOW + 60, 'never past the given end (the retention)');
  t.match(capped.url, new RegExp(`exp=${NOW + 60}&`));
  t.equal(verifyMediaLink(secret, path, exp, sig, NOW, n), 'ok');
  t.equal(verifyMediaLink(secret, path, Number(exp), sig, NOW, n), 'ok', 'exp as a number');
  t.equal(verifyMediaLink(secret, path, exp, sig, NOW + 899, n), 'ok', 'last valid second');
  t.equal(verifyMediaLink(secret, path, exp, sig, NOW + 900, n), 'expired', 'at exp');
  t.equal(verifyMediaLink(secret, path, exp, sig, NOW + 86_400, n), 'expired');
});

t.test('tampering with path, exp or sig, or another secret, is a bad signature (even when expired)', async (t) => {
  const { path, exp, sig, n } = parts(signMediaPath(secret, '/media/a.mp4', NOW + 900));
  t.equal(verifyMediaLink(secret, '/media/b.mp4', exp, sig, NOW, n), 'bad_signature', 'path');
  t.equal(verifyMediaLink(secret, '/media/a.mp4/', exp, sig, NOW, n), 'bad_signature', 'trailing slash');
  t.equal(verifyMediaLink(secret, path, String(NOW + 901), sig, NOW, n), 'bad_signature', 'exp extended');
  t.equal(verifyMediaLink(secret, path, '0' + exp, sig, NOW, n), 'bad_signature', 'exp respelled');
  t.equal(verifyMediaLink(secret, path, exp + ' ', sig, NOW, n), 'bad_signature', 'exp with junk');
  t.equal(verifyMediaLink(secret, path, exp, sig.slice(0, -1) + (sig.endsWith('A') ? 'B' : 'A'), NOW, n), 'bad_signature', 'one char');
  t.equal(verifyMediaLink(secret, path, exp, sig + '=', NOW, n), 'bad_signature', 'padded');
  t.equal(verifyMediaLink(secret, path, exp, sig.slice(1), NOW, n), 'bad_signature', 'short');
  t.equal(verifyMediaLink(secret, path, exp, '', NOW, n), 'bad_signature', 'empty');
  t.equal(verifyMediaLink(secret, path, exp, 'x'.repeat(10_000), NOW, n), 'bad_signature', 'huge');
  t.equal(verifyMediaLink(secret, path, exp, sig.replace(/./, 'ŵ'), NOW, n), 'bad_signature', 'non-ASCII');
  t.equal(verifyMediaLink(Buffer.from('another secret'), path, exp, sig, NOW, n), 'bad_signature', 'secret');
  t.equal(verifyMediaLink(secret, path, exp, 'A'.repeat(43), NOW + 10_000, n), 'bad_signature', 'forged and expired says nothing about expiry');
});

t.test('property: any single change to path or exp breaks the signature', async (t) => {
  fc.assert(
    fc.property(
      fc.stringMatching(/^\/media\/[a-z0-9_/.-]{1,40}$/),
      fc.integer({ min: NOW + 1, max: NOW + 10_000 }),
      fc.stringMatching(/^\/media\/[a-z0-9_/.-]{1,40}$/),
      fc.integer({ min: 0, max: 2 ** 40 }),
      (path, exp, otherPath, otherExp) => {
        const p = parts(signMediaPath(secret, path, exp));
        if (verifyMediaLink(secret, p.path, p.exp, p.sig, NOW, p.n) !== 'ok') return false;
        if (otherPath !== path && verifyMediaLink(secret, otherPath, p.exp, p.sig, NOW, p.n) !== 'bad_signature') return false;
        if (otherExp !== exp && verifyMediaLink(secret, p.path, otherExp, p.sig, NOW, p.n) !== 'bad_signature') return false;
        return true;
      },
    ),
    { numRuns: 2000 },
  );
  t.pass();
});

t.test('signing refuses paths and expiries it could not represent', async (t) => {
  t.throws(() => signMediaPath(secret, 'media/a', NOW), /bad path/);
  t.throws(() => signMediaPath(secret, '/media/a?x=1', NOW), /bad path/);
  t.throws(() => signMediaPath(secret, '/media/a\nb', NOW), /bad path/);
  t.throws(() => signMediaPath(secret, '/media/a', 1.5), /bad expiry/);
  t.throws(() => signMediaPath(secret, '/media/a', -1), /bad expiry/);
});
