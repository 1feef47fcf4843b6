import t from 'tap';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MessagesUsageTally, tallyMessageBody } from '../../src/lanes/messages/usage-tally.js';
import { forEachEvent } from '../../src/lanes/sse-framer.js';
import { messagesTallyState } from '../helpers/tally-state.js';

const here = dirname(fileURLToPath(import.meta.url));
const dir = join(here, '..', 'fixtures', 'anthropic');
const read = (p: string): Buffer => readFileSync(join(dir, p));

const FIXTURES = [
  'stream_thinking_text_tool.sse',
  'official_fixtures/python_sdk__basic_response.txt',
  'official_fixtures/python_sdk__message_delta_fields_response.txt',
  'official_fixtures/python_sdk__tool_use_response.txt',
  'official_fixtures/ts_sdk__fable-fallback__stream-a-refusal.sse',
];

function tallyOf(chunks: Buffer[]): MessagesUsageTally {
  const tally = new MessagesUsageTally();
  for (const c of chunks) tally.push(c);
  tally.end();
  return tally;
}

function variants(lf: Buffer): Record<string, Buffer> {
  const s = lf.toString('utf8');
  return { lf, crlf: Buffer.from(s.replace(/\n/g, '\r\n')), cr: Buffer.from(s.replace(/\n/g, '\r')) };
}

function feedings(input: Buffer): Record<string, Buffer[]> {
  const bytes: Buffer[] = [];
  for (let i = 0; i < input.length; i++) bytes.push(input.subarray(i, i + 1));
  const split: Buffer[] = [];
  let prev = 0;
  for (let i = 0; i < input.length; i++) {
    if (input[i] === 0x0a || input[i] === 0x0d) {
      if (i > prev) split.push(input.subarray(prev, i));
      split.push(input.subarray(i, i + 1));
      prev = i + 1;
    }
  }
  if (prev < input.length) split.push(input.subarray(prev));
  return { whole: [input], 'one byte': bytes, 'split at CR/LF': split };
}

const terminated = (b: Buffer): Buffer => (b.toString().endsWith('\n\n') ? b : Buffer.concat([b, Buffer.from(b.toString().endsWith('\n') ? '\n' : '\n\n')]));

t.test('every fixture gives identical results whole, byte by byte and split at CR/LF', async (t) => {
  for (const f of FIXTURES) {
    for (const [vName, input] of Object.entries(variants(read(f)))) {
      const ref = messagesTallyState(tallyOf([input]));
      for (const [fName, chunks] of Object.entries(feedings(input))) {
        t.same(messagesTallyState(tallyOf(chunks)), ref, `${f} ${vName} ${fName}`);
      }
    }
  }
});

t.test('stream_thinking_text_tool.sse', async (t) => {
  const tally = tallyOf([read('stream_thinking_text_tool.sse')]);
  t.same(tally.usage(), { inputTokens: 472, outputTokens: 219, cacheReadTokens: 2048, cacheWriteTokens: 1024 });
  t.equal(tally.outcome(), 'complete');
  t.equal(tally.stopReason, 'tool_use');
  t.equal(tally.vendorMessageId, 'msg_01XFDUDYJgAACzvnptvVoYEL');
  t.equal(tally.vendorModel, 'claude-sonnet-4-5-20250929');
  t.same(tally.state, { messageStart: true, messageDelta: true, messageStop: true, error: false });
  t.equal(tally.errorEvent, undefined);
});

t.test('basic_response: cache buckets never reported stay undefined, not zero', async (t) => {
  const raw = read('official_fixtures/python_sdk__basic_response.txt');
  const tally = tallyOf([terminated(raw)]);
  t.same(tally.usage(), { inputTokens: 11, outputTokens: 6 });
  t.equal(tally.cacheReadTokens, undefined);
  t.equal(tally.cacheWriteTokens, undefined);
  t.equal(tally.outcome(), 'complete');
  t.equal(tally.stopReason, 'end_turn');
  // The captured file ends without the blank line after message_stop: that event is incomplete,
  // the SDK would not dispatch it either, so the stream has a receipt but no terminal event.
  const unterminated = tallyOf([raw]);
  t.equal(unterminated.state.messageStop, false);
  t.equal(unterminated.outcome(), 'incomplete_stream');
});

t.test('message_delta repeating input and cache fields: the latest value of each wins', async (t) => {
  const tally = tallyOf([terminated(read('official_fixtures/python_sdk__message_delta_fields_response.txt'))]);
  t.same(tally.usage(), { inputTokens: 40, outputTokens: 8, cacheReadTokens: 7, cacheWriteTokens: 12 });
  t.equal(tally.outcome(), 'complete');
});

t.test('tool_use and refusal fixtures', async (t) => {
  const tool = tallyOf([terminated(read('official_fixtures/python_sdk__tool_use_response.txt'))]);
  t.same(tool.usage(), { inputTokens: 377, outputTokens: 65, cacheReadTokens: 0, cacheWriteTokens: 0 });
  t.equal(tool.stopReason, 'tool_use');
  t.equal(tool.outcome(), 'complete');
  const refusal = tallyOf([read('official_fixtures/ts_sdk__fable-fallback__stream-a-refusal.sse')]);
  t.same(refusal.usage(), { inputTokens: 28, outputTokens: 106, cacheReadTokens: 0, cacheWriteTokens: 0 });
  t.equal(refusal.stopReason, 'refusal');
  t.equal(refusal.vendorModel, 'claude-fable-5');
  t.equal(refusal.outcome(), 'complete');
});

t.test('truncated streams: outcome at every byte prefix', async (t) => {
  const full = read('stream_thinking_text_tool.sse');
  const events: string[] = [];
  const ends: number[] = [];
  let at = 0;
  forEachEvent(full, (ev) => {
    at += ev.length;
    events.push(/^event: (\S+)/.exec(ev.toString())![1]!);
    ends.push(at);
  });
  const deltaIdx = events.indexOf('message_delta');
  const stopIdx = events.indexOf('message_stop');
  t.ok(deltaIdx > 0 && stopIdx === deltaIdx + 1);
  let checked = 0;
  for (let n = 0; n <= full.length; n++) {
    const completeEvents = ends.filter((e) => e <= n).length;
    const expected = completeEvents > stopIdx ? 'complete' : completeEvents > deltaIdx ? 'incomplete_stream' : 'usage_unknown';
    const got = tallyOf([full.subarray(0, n)]).outcome();
    if (got !== expected) {
      t.fail(`prefix ${n}: ${got} != ${expected}`);
      return;
    }
    checked++;
  }
  t.equal(checked, full.length + 1, 'every prefix gave the expected outcome');
  const cutBeforeDelta = tallyOf([full.subarray(0, ends[deltaIdx - 1])]);
  t.same(cutBeforeDelta.usage(), { inputTokens: 472, outputTokens: 2, cacheReadTokens: 2048, cacheWriteTokens: 1024 }, 'placeholder output kept as seen');
  t.equal(cutBeforeDelta.hasUsageReceipt, false, 'but it is not a receipt');
  t.equal(cutBeforeDelta.outcome(), 'usage_unknown');
  t.equal(tallyOf([]).outcome(), 'usage_unknown', 'nothing at all');
});

const START =
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":null,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n';
const DELTA_TEXT = 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n';
const ERROR = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n';
const MSG_DELTA =
  'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":3}}\n\n';
const STOP = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';

t.test('mid-stream error events', async (t) => {
  const before = tallyOf([Buffer.from(START + DELTA_TEXT + ERROR)]);
  t.equal(before.outcome(), 'usage_unknown');
  t.same(before.errorEvent, { type: 'overloaded_error', message: 'Overloaded' });
  t.equal(before.state.error, true);
  t.same(before.usage(), { inputTokens: 10, outputTokens: 1, cacheReadTokens: 0 }, 'null cache write is not reported');
  const after = tallyOf([Buffer.from(START + DELTA_TEXT + MSG_DELTA + ERROR)]);
  t.equal(after.outcome(), 'incomplete_stream');
  t.equal(after.stopReason, 'max_tokens');
  t.same(after.usage(), { inputTokens: 10, outputTokens: 3, cacheReadTokens: 0 });
  const unparsable = tallyOf([Buffer.from(START + 'event: error\ndata: upstream blew up\n\n')]);
  t.same(unparsable.errorEvent, { type: undefined, message: undefined });
  t.equal(unparsable.outcome(), 'usage_unknown');
  const afterStop = tallyOf([Buffer.from(START + MSG_DELTA + STOP + ERROR)]);
  t.equal(afterStop.outcome(), 'complete', 'events after message_stop are ignored');
  t.equal(afterStop.errorEvent, undefined);
});

t.test('malformed or non-integer usage is not a receipt', async (t) => {
  const nullOut = 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":null}}\n\n';
  const strOut = 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":"7"}}\n\n';
  const fracOut = 'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7.5}}\n\n';
  for (const d of [nullOut, strOut, fracOut]) {
    const tally = tallyOf([Buffer.from(START + d + STOP)]);
    t.equal(tally.outcome(), 'usage_unknown');
    t.equal(tally.outputTokens, 1, 'placeholder from message_start remains');
  }
  const broken = tallyOf([Buffer.from(START + 'event: message_delta\ndata: {"type":"message_del\n\n' + STOP)]);
  t.equal(broken.malformedEvents, 1);
  t.equal(broken.outcome(), 'usage_unknown');
  const unnamed = tallyOf([Buffer.from(START.replace('event: message_start\n', '') + MSG_DELTA.replace('event: message_delta\n', '') + STOP)]);
  t.equal(unnamed.outcome(), 'complete', 'events without an event: line fall back to data.type');
  t.equal(unnamed.outputTokens, 3);
});

t.test('the parser buffer cap stops the tally', async (t) => {
  const tally = new MessagesUsageTally(64);
  tally.push(Buffer.from('data: ' + 'x'.repeat(200)));
  tally.push(Buffer.from(START + MSG_DELTA + STOP));
  tally.end();
  t.equal(tally.overflowed, true);
  t.equal(tally.outcome(), 'usage_unknown');
});

t.test('multi-byte UTF-8 split across chunks', async (t) => {
  const s = Buffer.from(START.replace('"id":"msg_1"', '"id":"msg_€😀"') + MSG_DELTA + STOP);
  const bytes: Buffer[] = [];
  for (let i = 0; i < s.length; i++) bytes.push(s.subarray(i, i + 1));
  t.equal(tallyOf(bytes).vendorMessageId, 'msg_€😀');
});

t.test('tallyMessageBody', async (t) => {
  const body = JSON.parse(read('message_nonstreaming.json').toString());
  const r = tallyMessageBody(body);
  t.same(r.usage, { inputTokens: 472, outputTokens: 219, cacheReadTokens: 2048, cacheWriteTokens: 1024 });
  t.equal(r.hasUsageReceipt, true);
  t.equal(r.stopReason, 'tool_use');
  t.equal(r.vendorMessageId, 'msg_01XFDUDYJgAACzvnptvVoYEL');
  t.equal(r.vendorModel, 'claude-sonnet-4-5-20250929');
  const partial = tallyMessageBody({ id: 'msg_x', usage: { input_tokens: 5, output_tokens: 2, cache_creation_input_tokens: null } });
  t.same(partial.usage, { inputTokens: 5, outputTokens: 2 });
  const none = tallyMessageBody({ id: 'msg_y' });
  t.same(none.usage, {});
  t.equal(none.hasUsageReceipt, false);
  t.equal(tallyMessageBody(null).hasUsageReceipt, false);
});
