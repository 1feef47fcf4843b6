// The key cache's id is the stored key hash's bytes, one latin1 character per byte, whichever way
// this Node computes it: a key remembered by one path must be found (and forgotten) by the other.
import fc from 'fast-check';
import t from 'tap';
import { generateKey, hashKey, keyDigest } from '../../src/accounts/api-key.js';

t.test('keyDigest is hashKey in latin1, for real keys and any string', async (t) => {
  for (let i = 0; i < 20; i++) {
    const raw = generateKey().raw;
    t.equal(keyDigest(raw), hashKey(raw).toString('latin1'));
    t.equal(Buffer.from(keyDigest(raw), 'latin1').equals(hashKey(raw)), true, 'and back to the stored hash');
  }
  fc.assert(fc.property(fc.string({ unit: 'grapheme' }), (s) => keyDigest(s) === hashKey(s).toString('latin1')));
});
