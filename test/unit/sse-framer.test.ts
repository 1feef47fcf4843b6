import t from 'tap';
import fc from 'fast-check';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SseFramer, forEachEvent, modelRewrite, rewriteModels } from '../../src/lanes/sse-framer.js';

const here = dirname(fileURLToPath(import.meta.url));
const fixturesDir = join(here, '..', 'fixtures');

function listFixtures(): { name: string; bytes: Buffer }[] {
  const out: { name: string; bytes: Buffer }[] = [];
  const dirs = [join(fixturesDir, 'anthropic'), join(fixturesDir, 'anthropic', 'official_fixtures'), join(fixturesDir, 'openai')];
  for (const dir of dirs) {
    for (const f of readdirSync(dir)) {
      if (!f.endsWith('.sse') && !f.endsWith('.txt')) continue;
      out.push({ name: `${dir.slice(fixturesDir.length + 1)}/${f}`, bytes: readFileSync(join(dir, f)) });
    }
  }
  return out;
}

// Independent oracle: whole-input regex scan (no chunk boundaries, so no CR ambiguity).
function referenceEvents(input: Buffer): { events: string[]; rest: string } {
  const s = input.toString('latin1');
  const events: string[] = [];
  const re = /\r\n|\r|\n/g;
  let lineStart = true;
  let pos = 0;
  let start = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s)) !== null) {
    if (m.index > pos) lineStart = false;
    if (lineStart) {
      events.push(s.slice(start, m.index + m[0].length));
      start = m.index + m[0].length;
    }
    lineStart = true;
    pos = m.index + m[0].length;
  }
  return { events, rest: s.slice(start) };
}

type Variant = 'lf' | 'crlf' | 'cr' | 'mixed';
function withLineEndings(lfBytes: Buffer, v: Variant): Buffer {
  const s = lfBytes.toString('latin1').replace(/\r\n|\r/g, '\n');
  if (v === 'lf') return Buffer.from(s, 'latin1');
  if (v === 'crlf') return Buffer.from(s.replace(/\n/g, '\r\n'), 'latin1');
  if (v === 'cr') return Buffer.from(s.replace(/\n/g, '\r'), 'latin1');
  const ends = ['\n', '\r\n', '\r'];
  let k = 0;
  return Buffer.from(
    s.replace(/\n/g, () => ends[k++ % 3]!),
    'latin1',
  );
}

function chunksAt(input: Buffer, cuts: number[]): Buffer[] {
  const sorted = [...new Set(cuts)].filter((c) => c > 0 && c < input.length).sort((a, b) => a - b);
  const out: Buffer[] = [];
  let prev = 0;
  for (const c of sorted) {
    out.push(input.subarray(prev, c));
    prev = c;
  }
  out.push(input.subarray(prev));
  return out;
}

function feedings(input: Buffer): { name: string; chunks: Buffer[] }[] {
  const oneByte: number[] = [];
  for (let i = 1; i < input.length; i++) oneByte.push(i);
  const atTerminators: number[] = [];
  for (let i = 0; i < input.length; i++) {
    if (input[i] === 0x0a || input[i] === 0x0d) atTerminators.push(i, i + 1);
  }
  return [
    { name: 'whole', chunks: [input] },
    { name: 'one byte per chunk', chunks: chunksAt(input, oneByte) },
    { name: 'split at every CR/LF', chunks: chunksAt(input, atTerminators) },
  ];
}

function run(chunks: Buffer[], maxPendingBytes = 1 << 20): { outputs: Buffer[]; events: string[]; rest: string } {
  const framer = new SseFramer(maxPendingBytes);
  const outputs: Buffer[] = [];
  const events: string[] = [];
  let rest = '';
  const collect = (b: Buffer, last: boolean): void => {
    outputs.push(b);
    forEachEvent(b, (ev, complete) => {
      if (complete) events.push(ev.toString('latin1'));
      else if (last) rest = ev.toString('latin1');
      else throw new Error('push returned an incomplete event');
    });
  };
  for (const c of chunks) {
    const got = framer.push(Buffer.from(c)); // own copy: the framer borrows chunks
    if (got !== null) collect(got, false);
  }
  const tail = framer.end();
  if (tail !== null) collect(tail, true);
  if (framer.overflowed) throw new Error('unexpected overflow');
  return { outputs, events, rest };
}

const fixtures = listFixtures();
t.ok(fixtures.length >= 10, `found ${fixtures.length} fixtures`);

for (const fx of fixtures) {
  t.test(fx.name, async (t) => {
    for (const v of ['lf', 'crlf', 'cr', 'mixed'] as const) {
      const input = withLineEndings(fx.bytes, v);
      const ref = referenceEvents(input);
      t.ok(ref.events.length >= 3, `${v}: reference found events`);
      for (const f of feedings(input)) {
        const got = run(f.chunks);
        t.ok(Buffer.concat(got.outputs).equals(input), `${v}/${f.name}: output bytes equal input`);
        t.same(got.events, ref.events, `${v}/${f.name}: same events as the reference`);
        t.equal(got.rest, ref.rest, `${v}/${f.name}: same trailing remainder`);
      }
    }
  });
}

t.test('random chunkings agree with the reference (property)', async (t) => {
  const inputs = fixtures.slice(0, 6).flatMap((fx) => (['lf', 'crlf', 'cr', 'mixed'] as const).map((v) => withLineEndings(fx.bytes, v)));
  fc.assert(
    fc.property(fc.integer({ min: 0, max: inputs.length - 1 }), fc.array(fc.nat(), { maxLength: 40 }), (k, cutSeeds) => {
      const input = inputs[k]!;
      const cuts = cutSeeds.map((c) => c % input.length);
      const got = run(chunksAt(input, cuts));
      const ref = referenceEvents(input);
      return Buffer.concat(got.outputs).equals(input) && JSON.stringify(got.events) === JSON.stringify(ref.events) && got.rest === ref.rest;
    }),
    { numRuns: 300 },
  );
  t.pass('property held');
});

t.test('a CR at the end of a chunk is held until the next byte decides', async (t) => {
  const f = new SseFramer(1024);
  t.equal(f.push(Buffer.from('data: a\r\n\r')), null, 'blank line ending in CR is held');
  t.equal(f.push(Buffer.from('\n'))?.toString(), 'data: a\r\n\r\n', 'the LF belongs to the held event');
  t.equal(f.push(Buffer.from('data: b\r\r')), null);
  t.equal(f.push(Buffer.from('data: c'))?.toString(), 'data: b\r\r', 'a non-LF byte releases the CR-ended event');
  t.equal(f.pendingBytes, 7);
  t.equal(f.push(Buffer.from('\r')), null);
  t.equal(f.push(Buffer.from('\r')), null, 'CR CR at chunk ends: held');
  t.equal(f.end()?.toString(), 'data: c\r\r', 'end() releases the held event');
  t.equal(f.end(), null, 'nothing left');
});

t.test('a CR ending a non-empty line at a chunk end does not end an event', async (t) => {
  const f = new SseFramer(1024);
  t.equal(f.push(Buffer.from('data: a\r')), null);
  t.equal(f.push(Buffer.from('\n')), null, 'CRLF ends only the line');
  t.equal(f.push(Buffer.from('\r\n'))?.toString(), 'data: a\r\n\r\n');
});

t.test('zero-copy when the chunk alone holds the boundary', async (t) => {
  const f = new SseFramer(1024);
  const chunk = Buffer.from('event: ping\ndata: {}\n\nevent: x\ndata: partial');
  const out = f.push(chunk)!;
  t.equal(out.buffer, chunk.buffer, 'same memory');
  t.equal(out.byteOffset, chunk.byteOffset);
  t.equal(out.toString(), 'event: ping\ndata: {}\n\n');
  t.equal(f.pendingBytes, 'event: x\ndata: partial'.length);
  const next = Buffer.from('\n\nevent: y\n');
  t.equal(f.push(next)?.toString(), 'event: x\ndata: partial\n\n', 'pending + prefix joined');
  t.equal(f.end()?.toString(), 'event: y\n');
});

t.test('many tiny pieces accumulate without losing bytes', async (t) => {
  const f = new SseFramer(1 << 16);
  const big = 'data: ' + 'x'.repeat(5000) + '\n\n';
  const outs: Buffer[] = [];
  for (let i = 0; i < big.length; i += 7) {
    const got = f.push(Buffer.from(big.slice(i, i + 7)));
    if (got) outs.push(got);
  }
  t.equal(Buffer.concat(outs).toString(), big);
  t.equal(f.end(), null);
});

t.test('overflow: an incomplete event beyond the cap', async (t) => {
  const f = new SseFramer(16);
  t.equal(f.push(Buffer.from('data: 0123456789')), null);
  t.equal(f.overflowed, false, '16 bytes is at the cap, not over');
  t.equal(f.push(Buffer.from('a')), null);
  t.equal(f.overflowed, true);
  t.equal(f.push(Buffer.from('\n\n')), null, 'null after overflow');
  t.equal(f.end(), null);

  const g = new SseFramer(8);
  const out = g.push(Buffer.from('data: 1\n\ndata: 0123456789'));
  t.equal(out?.toString(), 'data: 1\n\n', 'complete events before the overflow are still returned');
  t.equal(g.overflowed, true);
  t.equal(g.push(Buffer.from('\n\n')), null);
  t.throws(() => new SseFramer(0), RangeError);
});

t.test('rewriteModels: the vendor id, dated or not, becomes the product id in every model field', async (t) => {
  const sse = readFileSync(join(fixturesDir, 'anthropic', 'stream_thinking_text_tool.sse'));
  const events: Buffer[] = [];
  forEachEvent(sse, (ev) => events.push(ev));
  const start = events[0]!;
  for (const vendorId of ['claude-sonnet-4-5-20250929', 'claude-sonnet-4-5']) {
    // The recorded stream answers with the dated name whether the configured id is dated or not.
    const rewritten = rewriteModels(start, modelRewrite(vendorId, 'assistant-sonnet-5'));
    t.not(rewritten, start);
    t.equal(rewritten.toString(), start.toString().replace('"model":"claude-sonnet-4-5-20250929"', '"model":"assistant-sonnet-5"'), vendorId);
    t.equal(JSON.parse(rewritten.toString().split('\n')[1]!.slice(6)).message.model, 'assistant-sonnet-5');
  }
  const rw = modelRewrite('gpt-6', 'text-6-astra');
  t.equal(rewriteModels(events[1]!, rw), events[1], 'the same buffer when there is no model field');
  t.equal(
    rewriteModels(Buffer.from('{"response":{"model":"gpt-6-2026-09-01","x":1},"r":{"model":"gpt-6"},"o":{"model":"other"}}'), rw).toString(),
    '{"response":{"model":"text-6-astra","x":1},"r":{"model":"text-6-astra"},"o":{"model":"other"}}',
    'every occurrence, dated or exact; another model is left alone',
  );
  const escaped = Buffer.from('{"text":"say \\"model\\":\\"gpt-6\\""}');
  t.equal(rewriteModels(escaped, rw), escaped, 'text inside a JSON string is never touched');
  const unterminated = Buffer.from('{"model":"gpt-6-' + 'x'.repeat(300));
  t.equal(rewriteModels(unterminated, rw), unterminated, 'no closing quote within the bound: left alone');
  const escapeInValue = Buffer.from('{"model":"gpt-6\\u0041"}');
  t.equal(rewriteModels(escapeInValue, rw), escapeInValue, 'a value with an escape: left alone');
  t.equal(
    rewriteModels(Buffer.from('{"model":"gpt-6\\u0041","a":{"model":"gpt-6"}}'), rw).toString(),
    '{"model":"gpt-6\\u0041","a":{"model":"text-6-astra"}}',
    'the next one is still rewritten',
  );
  // Spaced JSON (Python's json.dumps default) is matched too; other keys with the id are not.
  t.equal(
    rewriteModels(Buffer.from('{"type": "response.created", "response": {"id": "gpt-6", "model": "gpt-6-2026", "m":{"model" :\t"gpt-6"}}}'), rw).toString(),
    '{"type": "response.created", "response": {"id": "gpt-6", "model": "text-6-astra", "m":{"model" :\t"text-6-astra"}}}',
  );
  const spacedEscaped = Buffer.from('{"text":"say \\"model\\": \\"gpt-6\\""}');
  t.equal(rewriteModels(spacedEscaped, rw), spacedEscaped, 'spaced text inside a JSON string is never touched either');
  const otherKey = Buffer.from('{"mymodel":"gpt-6","model_id":"gpt-6"}');
  t.equal(rewriteModels(otherKey, rw), otherKey, 'only the key "model"');
});
