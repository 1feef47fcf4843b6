// The tallies' text: whole events decoded alone read as a streaming decoder reads them, and a
// UTF-8 sequence split by bytes of any cut is kept for the piece that finishes it, whole or not.
import t from 'tap';
import { TallyText } from '../../src/lanes/tally-text.js';

const EVENT = Buffer.from('event: x\ndata: {"t":"é😀 ok"}\n\n', 'utf8');

t.test('whole events alone read as the streaming decoder reads them', async (t) => {
  const text = new TallyText();
  t.equal(text.ofWhole(EVENT) + text.ofWhole(EVENT), new TextDecoder().decode(Buffer.concat([EVENT, EVENT])));
  t.equal(text.rest(), '', 'nothing held');
  t.equal(text.ofWhole(Buffer.from([0xff, 0x41])), '\ufffdA', 'malformed bytes replaced as TextDecoder replaces them');
});

t.test('a sequence cut by arbitrary bytes is finished by the next piece, whole or not', async (t) => {
  const emoji = Buffer.from('😀', 'utf8');
  const text = new TallyText();
  t.equal(text.of(emoji.subarray(0, 2)), '', 'half a sequence is held');
  t.equal(text.ofWhole(Buffer.concat([emoji.subarray(2), EVENT])), '😀' + EVENT.toString('utf8'));
  t.equal(text.of(emoji.subarray(0, 1)), '');
  t.equal(text.rest(), '\ufffd', 'a sequence left unfinished at the end reads as one replacement');
});
