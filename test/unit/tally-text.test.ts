// The tallies' text: whole events decoded alone read as a streaming decoder reads them, a UTF-8
// sequence split by bytes of any cut is kept for the piece that finishes it, whole or not, and
// the CR the parser may still be holding is known whichever way it was fed.
import t from 'tap';
import { TallyText } from '../../src/lanes/tally-text.js';

const EVENT = Buffer.from('event: x\ndata: {"t":"é😀 ok"}\n\n', 'utf8');

/** A TallyText whose sink collects what it is fed; `take()` returns what came since the last take. */
function collecting(): { text: TallyText; take: () => string } {
  let fed = '';
  const text = new TallyText({ feed: (s) => void (fed += s) });
  return {
    text,
    take: () => {
      const out = fed;
      fed = '';
      return out;
    },
  };
}

t.test('whole events alone read as the streaming decoder reads them', async (t) => {
  const { text, take } = collecting();
  text.feedWhole(EVENT);
  text.feedWhole(EVENT);
  t.equal(take(), new TextDecoder().decode(Buffer.concat([EVENT, EVENT])));
  text.feedRest();
  t.equal(take(), '', 'nothing held');
  text.feedWhole(Buffer.from([0xff, 0x41]));
  t.equal(take(), '\ufffdA', 'malformed bytes replaced as TextDecoder replaces them');
});

t.test('a sequence cut by arbitrary bytes is finished by the next piece, whole or not', async (t) => {
  const emoji = Buffer.from('😀', 'utf8');
  const { text, take } = collecting();
  text.feedBytes(emoji.subarray(0, 2));
  t.equal(take(), '', 'half a sequence is held');
  text.feedWhole(Buffer.concat([emoji.subarray(2), EVENT]));
  t.equal(take(), '😀' + EVENT.toString('utf8'));
  text.feedBytes(emoji.subarray(0, 1));
  t.equal(take(), '');
  text.feedRest();
  t.equal(take(), '\ufffd', 'a sequence left unfinished at the end reads as one replacement');
});

t.test('a CR last fed is known until something else is fed', async (t) => {
  const { text } = collecting();
  t.equal(text.heldCr, false);
  text.feedWhole(Buffer.from('data: a\r'));
  t.equal(text.heldCr, true, 'from whole events');
  text.feedBytes(Buffer.from(''));
  t.equal(text.heldCr, true, 'nothing fed changes nothing');
  text.feedBytes(Buffer.from('\n\r'));
  t.equal(text.heldCr, true, 'from bytes');
  text.feed('\n');
  t.equal(text.heldCr, false, 'from text');
});
