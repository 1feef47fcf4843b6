// The tallies read the relay's whole events partly from their bytes (the usual `event:` + one
// `data:` line shape, sse-plain-event.ts) and partly through the full SSE parser. Whatever the
// mix, a stream fed as the relay feeds it (whole events, grouped into chunks any way) must leave
// each tally exactly as the same bytes fed to the full parser alone: the usage, the outcome, the
// sequence numbers, the visible text and the output kept for a capped stream. Checked on the
// vendors' recorded streams and on generated ones (any Unicode, escapes, malformed UTF-8, CR line
// ends, comments, extra fields), and the byte path is shown to be the one taken for text deltas.
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import t from 'tap';
import { MessagesUsageTally } from '../../src/lanes/messages/usage-tally.js';
import { ResponsesUsageTally } from '../../src/lanes/responses/usage-tally.js';
import { forEachEvent } from '../../src/lanes/sse-framer.js';
import { messagesTallyState } from '../helpers/tally-state.js';

const fixture = (path: string): Buffer => readFileSync(new URL(`../fixtures/${path}`, import.meta.url));
const RESPONSES_FIXTURES = [
  'openai/responses_stream_completed.sse',
  'openai/responses_stream_incomplete.sse',
  'openai/prism__stream-basic-text-responses-1.sse',
  'openai/prism__stream-multi-tool-conversation-responses-reasoning-1.sse',
  'openai/prism__stream-unknown-error-responses-1.sse',
];
const MESSAGES_FIXTURES = [
  'anthropic/stream_thinking_text_tool.sse',
  'anthropic/official_fixtures/python_sdk__basic_response.txt',
  'anthropic/official_fixtures/python_sdk__tool_use_response.txt',
];

/** The stream cut into whole events as the relay's framer cuts it. */
function wholeEvents(stream: Buffer): Buffer[] {
  const out: Buffer[] = [];
  forEachEvent(stream, (event, complete) => {
    if (complete) out.push(event);
  });
  return out;
}

/** The events grouped into chunks of `sizes` events each (cycled), as bursts arrive. */
function grouped(events: Buffer[], sizes: number[]): Buffer[] {
  const chunks: Buffer[] = [];
  for (let i = 0, k = 0; i < events.length; k++) {
    const n = Math.max(1, sizes[k % sizes.length] ?? 1);
    chunks.push(Buffer.concat(events.slice(i, i + n)));
    i += n;
  }
  return chunks;
}

function responsesState(tally: ResponsesUsageTally): unknown {
  return { result: tally.result(), kept: tally.relayedOutput() };
}

function responsesBoth(chunks: Buffer[]): { viaParser: unknown; viaEvents: unknown; plain: number } {
  const parser = new ResponsesUsageTally({ keepOutput: true });
  const events = new ResponsesUsageTally({ keepOutput: true });
  for (const chunk of chunks) {
    parser.feed(chunk);
    events.feedEvents(chunk);
  }
  // The kept output is read before the end, as the capped frame reads it.
  const before = { parser: parser.relayedOutput(), events: events.relayedOutput() };
  parser.end();
  events.end();
  return {
    viaParser: { ...(responsesState(parser) as object), before: before.parser },
    viaEvents: { ...(responsesState(events) as object), before: before.events },
    plain: events.plainEvents,
  };
}

function messagesBoth(chunks: Buffer[]): { viaParser: unknown; viaEvents: unknown; plain: number } {
  const parser = new MessagesUsageTally();
  const events = new MessagesUsageTally();
  for (const chunk of chunks) {
    parser.push(chunk);
    events.pushEvents(chunk);
  }
  parser.end();
  events.end();
  return { viaParser: messagesTallyState(parser), viaEvents: messagesTallyState(events), plain: events.plainEvents };
}

const crlf = (b: Buffer): Buffer => Buffer.from(b.toString('utf8').replace(/\n/g, '\r\n'));
const count = (stream: Buffer, pattern: RegExp): number => (stream.toString('utf8').match(pattern) ?? []).length;

t.test('recorded Responses streams: the same tally event by event, in bursts, and with CR line ends', async (t) => {
  for (const name of RESPONSES_FIXTURES) {
    const stream = fixture(name);
    const events = wholeEvents(stream);
    t.ok(events.length > 3, `${name}: ${events.length} events`);
    for (const sizes of [[1], [2, 3], [events.length]]) {
      const run = responsesBoth(grouped(events, sizes));
      t.same(run.viaEvents, run.viaParser, `${name}, ${sizes.join('/')} events a chunk`);
      t.equal(run.plain, count(stream, /^event: response\.output_text\.delta$/gm), `${name}: every text delta read from its bytes`);
    }
    const carriage = responsesBoth(grouped(wholeEvents(crlf(stream)), [1]));
    t.same(carriage.viaEvents, carriage.viaParser, `${name} with CRLF`);
    t.equal(carriage.plain, 0, `${name} with CRLF: all through the parser`);
  }
});

t.test('recorded Messages streams: the same tally, the bulk skipped from its bytes', async (t) => {
  for (const name of MESSAGES_FIXTURES) {
    const stream = fixture(name);
    const events = wholeEvents(stream);
    for (const sizes of [[1], [3], [events.length]]) {
      const run = messagesBoth(grouped(events, sizes));
      t.same(run.viaEvents, run.viaParser, `${name}, ${sizes.join('/')} events a chunk`);
      t.ok(run.plain >= count(stream, /^event: content_block_delta$/gm), `${name}: ${run.plain} events passed over from their bytes`);
    }
  }
});

/** A text delta event as the vendor writes it, its delta text any string (JSON-escaped). */
const deltaEvent = (seq: number, text: string, extra: string): string =>
  `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":${seq},"item_id":"msg_1","output_index":0,"content_index":0,"delta":${JSON.stringify(text)}${extra}}\n\n`;

const RESPONSES_OPENING = [
  `event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"m","output":[]}}\n\n`,
  `event: response.output_item.added\ndata: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}\n\n`,
  `event: response.content_part.added\ndata: {"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}\n\n`,
];
const completed = (seq: number): string =>
  `event: response.completed\ndata: {"type":"response.completed","sequence_number":${seq},"response":{"id":"resp_1","status":"completed","model":"m","output":[],"usage":{"input_tokens":3,"output_tokens":${seq},"total_tokens":${seq + 3}}}}\n\n`;

/** Odd shapes a vendor may send between deltas: each must reach the parser and read the same. */
const ODD_EVENTS = [
  ': keep-alive\n\n',
  'id: 7\nevent: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":50,"output_index":0,"content_index":0,"delta":"id first"}\n\n',
  'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",\ndata: "sequence_number":51,"output_index":0,"content_index":0,"delta":"two lines"}\n\n',
  'data: {"type":"response.output_text.delta","sequence_number":52,"output_index":0,"content_index":0,"delta":"data only"}\n\n',
  'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":53,"delta":"a","delta":"b"}\n\n',
  'event: response.output_text.delta\ndata: not json\n\n',
  'event: response.output_text.delta\r\ndata: {"type":"response.output_text.delta","sequence_number":54,"output_index":0,"content_index":0,"delta":"crlf"}\r\n\r\n',
  'event:response.output_text.delta\ndata:{"type":"response.output_text.delta","sequence_number":55,"output_index":0,"content_index":0,"delta":"no spaces"}\n\n',
  'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":56}\n\n',
  // CR-only line ends: the parser holds the last CR until the next byte shows it ends the event.
  'event: response.output_text.delta\rdata: {"type":"response.output_text.delta","sequence_number":57,"output_index":0,"content_index":0,"delta":"cr only"}\r\r',
];

/** Bytes a decoder must replace, set inside a delta's text. */
const MALFORMED_UTF8 = [
  Buffer.from([0xff]),
  Buffer.from([0xc0, 0xaf]),
  Buffer.from([0xe0, 0x80, 0x80]),
  Buffer.from([0xed, 0xa0, 0x80]),
  Buffer.from([0xf4, 0x90, 0x80, 0x80]),
  Buffer.from([0xe2, 0x82]),
];

const deltaPiece = fc.oneof(
  fc.record({
    kind: fc.constant('text' as const),
    text: fc.string({ unit: 'grapheme', maxLength: 12 }),
    extra: fc.constantFrom('', ',"logprobs":[]', ',"obfuscation":"x\\"y"'),
  }),
  fc.record({ kind: fc.constant('odd' as const), at: fc.nat(ODD_EVENTS.length - 1) }),
  fc.record({ kind: fc.constant('malformed' as const), at: fc.nat(MALFORMED_UTF8.length - 1) }),
);

t.test('generated Responses streams (property): the byte path and the parser agree', async (t) => {
  fc.assert(
    fc.property(
      fc.array(deltaPiece, { maxLength: 30 }),
      fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 5 }),
      fc.boolean(),
      (pieces, sizes, ends) => {
        const parts: Buffer[] = RESPONSES_OPENING.map((e) => Buffer.from(e));
        let seq = 3;
        for (const piece of pieces) {
          if (piece.kind === 'text') parts.push(Buffer.from(deltaEvent(seq++, piece.text, piece.extra)));
          else if (piece.kind === 'odd') parts.push(Buffer.from(ODD_EVENTS[piece.at]!));
          else {
            const [head, tail] = deltaEvent(seq++, 'ab', '').split('ab');
            parts.push(Buffer.concat([Buffer.from(head!), MALFORMED_UTF8[piece.at]!, Buffer.from(tail!)]));
          }
        }
        if (ends) parts.push(Buffer.from(completed(seq)));
        const run = responsesBoth(grouped(wholeEvents(Buffer.concat(parts)), sizes));
        t.same(run.viaEvents, run.viaParser);
        return true;
      },
    ),
    { numRuns: 300 },
  );
});

const MESSAGES_EVENTS = [
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}\n\n',
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n',
  'event: ping\ndata: {"type": "ping"}\n\n',
  'event: content_block_delta\nevent: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}\n\n',
  'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cr"}}\r\n\r\n',
  'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":4}}\n\n',
  'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}\n\n',
  'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
  'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n',
  ': comment\n\n',
  'event: message_delta\rdata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":11}}\r\r',
  'event: message_stop\ndata: {"type":"message_stop"}\n\n',
];

t.test('generated Messages streams (property): the byte path and the parser agree', async (t) => {
  fc.assert(
    fc.property(
      fc.array(fc.nat(MESSAGES_EVENTS.length - 1), { maxLength: 30 }),
      fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 5 }),
      (picks, sizes) => {
        const stream = Buffer.from(picks.map((i) => MESSAGES_EVENTS[i]).join(''));
        const run = messagesBoth(grouped(wholeEvents(stream), sizes));
        t.same(run.viaEvents, run.viaParser);
        return true;
      },
    ),
    { numRuns: 300 },
  );
});
