import t from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { tallyResponseBody } from '../../src/lanes/responses/body-tally.js';
import { scanTextDeltaChars, ResponsesUsageTally, type ResponsesTallyResult } from '../../src/lanes/responses/usage-tally.js';

const fixtureDir = new URL('../fixtures/openai/', import.meta.url);
const load = (name: string): Buffer => readFileSync(new URL(name, fixtureDir));

type Ending = 'LF' | 'CRLF' | 'CR';
const ENDINGS: Ending[] = ['LF', 'CRLF', 'CR'];

function withEnding(buf: Buffer, ending: Ending): Buffer {
  if (ending === 'LF') return buf;
  return Buffer.from(buf.toString('utf8').replace(/\n/g, ending === 'CRLF' ? '\r\n' : '\r'), 'utf8');
}

function tallyChunks(chunks: Iterable<Uint8Array>): ResponsesTallyResult {
  const tally = new ResponsesUsageTally();
  for (const c of chunks) tally.feed(c);
  tally.end();
  return tally.result();
}

function* bytewise(buf: Buffer): Generator<Uint8Array> {
  for (let i = 0; i < buf.length; i++) yield buf.subarray(i, i + 1);
}

// Independent oracle: naive split on blank lines, JSON.parse every data line (LF fixtures only).
function oracle(buf: Buffer): { types: string[]; last: Record<string, any>; deltaChars: number; maxSeq: number } {
  const types: string[] = [];
  let last: Record<string, any> = {};
  let deltaChars = 0;
  let maxSeq = -1;
  for (const block of buf.toString('utf8').split('\n\n')) {
    const line = block.split('\n').find((l) => l.startsWith('data: '));
    if (!line) continue;
    const data = JSON.parse(line.slice(6));
    types.push(data.type);
    maxSeq = Math.max(maxSeq, data.sequence_number);
    if (data.type === 'response.output_text.delta') deltaChars += data.delta.length;
    last = data;
  }
  return { types, last, deltaChars, maxSeq };
}

interface Expect {
  outcome: ResponsesTallyResult['outcome'];
  terminalEvent: ResponsesTallyResult['terminalEvent'];
  status: string | undefined;
  usage: ResponsesTallyResult['usage'];
  responseId: string;
  model: string;
  incompleteReason: string | undefined;
  maxSequenceNumber: number;
  eventCount: number;
}

const NO_USAGE = {
  inputTokens: undefined,
  cachedTokens: undefined,
  cacheWriteTokens: undefined,
  outputTokens: undefined,
  reasoningTokens: undefined,
  totalTokens: undefined,
};

const FIXTURES: Record<string, Expect> = {
  'responses_stream_completed.sse': {
    outcome: 'complete',
    terminalEvent: 'response.completed',
    status: 'completed',
    usage: { inputTokens: 36, cachedTokens: 0, cacheWriteTokens: undefined, outputTokens: 87, reasoningTokens: 64, totalTokens: 123 },
    responseId: 'resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b',
    model: 'gpt-5-mini-2025-08-07',
    incompleteReason: undefined,
    maxSequenceNumber: 16,
    eventCount: 17,
  },
  'responses_stream_incomplete.sse': {
    outcome: 'complete',
    terminalEvent: 'response.incomplete',
    status: 'incomplete',
    usage: { inputTokens: 36, cachedTokens: 0, cacheWriteTokens: undefined, outputTokens: 16, reasoningTokens: 16, totalTokens: 52 },
    responseId: 'resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b',
    model: 'gpt-5-mini-2025-08-07',
    incompleteReason: 'max_output_tokens',
    maxSequenceNumber: 4,
    eventCount: 5,
  },
  'prism__stream-basic-text-responses-1.sse': {
    outcome: 'complete',
    terminalEvent: 'response.completed',
    status: 'completed',
    usage: { inputTokens: 10, cachedTokens: 0, cacheWriteTokens: undefined, outputTokens: 62, reasoningTokens: 0, totalTokens: 72 },
    responseId: 'resp_6859a4ad7d3c81999e9e02548c91e2a8077218073e9990d3',
    model: 'gpt-4-0613',
    incompleteReason: undefined,
    maxSequenceNumber: 67,
    eventCount: 68,
  },
  'prism__stream-multi-tool-conversation-responses-reasoning-1.sse': {
    outcome: 'complete',
    terminalEvent: 'response.completed',
    status: 'completed',
    usage: { inputTokens: 78, cachedTokens: 0, cacheWriteTokens: undefined, outputTokens: 532, reasoningTokens: 512, totalTokens: 610 },
    responseId: 'resp_6859a4ba39a8819aa8e4e70ad75e77af0a7ba57447365234',
    model: 'o3-mini-2025-01-31',
    incompleteReason: undefined,
    maxSequenceNumber: 18,
    eventCount: 19,
  },
  'prism__stream-unknown-error-responses-1.sse': {
    outcome: 'usage_unknown',
    terminalEvent: 'response.failed',
    status: 'failed',
    usage: NO_USAGE,
    responseId: 'resp_6867f1cae59481a0a6d8b23d1b93e4aa02dfa4dca8f6376f',
    model: 'gpt-4o-2024-08-06',
    incompleteReason: undefined,
    maxSequenceNumber: 3,
    eventCount: 4,
  },
};

t.test('every fixture: whole, byte by byte, split at every CR/LF, in LF/CRLF/CR: identical results', async (t) => {
  for (const [name, want] of Object.entries(FIXTURES)) {
    const lf = load(name);
    const o = oracle(lf);
    const whole = tallyChunks([lf]);
    t.equal(whole.outcome, want.outcome, `${name} outcome`);
    t.equal(whole.terminalEvent, want.terminalEvent, `${name} terminal`);
    t.equal(whole.status, want.status, `${name} status`);
    t.same(whole.usage, want.usage, `${name} usage`);
    t.equal(whole.responseId, want.responseId, `${name} id`);
    t.equal(whole.model, want.model, `${name} model`);
    t.equal(whole.incompleteReason, want.incompleteReason, `${name} incomplete reason`);
    t.equal(whole.maxSequenceNumber, want.maxSequenceNumber, `${name} max seq`);
    t.equal(whole.maxSequenceNumber, o.maxSeq, `${name} max seq matches oracle`);
    t.equal(whole.eventCount, want.eventCount, `${name} events`);
    t.equal(whole.eventCount, o.types.length, `${name} events match oracle`);
    t.equal(whole.visibleTextChars, o.deltaChars, `${name} visible chars match oracle`);
    t.equal(whole.parseError, undefined, `${name} parses cleanly`);
    t.equal(whole.sawDone, false);

    for (const ending of ENDINGS) {
      const buf = withEnding(lf, ending);
      const label = `${name} ${ending}`;
      t.same(tallyChunks([buf]), whole, `${label} whole`);
      t.same(tallyChunks(bytewise(buf)), whole, `${label} one byte per chunk`);
      let splits = 0;
      let mismatches = 0;
      for (let i = 0; i < buf.length; i++) {
        const c = buf[i];
        if (c !== 10 && c !== 13) continue;
        for (const at of [i, i + 1]) {
          splits++;
          const r = tallyChunks([buf.subarray(0, at), buf.subarray(at)]);
          if (JSON.stringify(r) !== JSON.stringify(whole)) mismatches++;
        }
      }
      t.ok(splits > 0, `${label} had split points`);
      t.equal(mismatches, 0, `${label}: ${splits} splits at CR/LF positions all identical`);
    }
  }
});

t.test('error fixture records the nested error event and the failed snapshot error', async (t) => {
  const r = tallyChunks([load('prism__stream-unknown-error-responses-1.sse')]);
  t.same(r.error, { code: 'unknown-error', message: 'Foobar', param: null, shape: 'nested' });
  t.equal(r.responseError?.code, 'rate_limit_exceeded');
  t.match(r.responseError?.message, /Request too large/);
  t.equal(r.usageUsable, false);
});

t.test('arbitrary splits (property): same result as whole', async (t) => {
  const bufs = Object.keys(FIXTURES).map((n) => withEnding(load(n), 'CRLF'));
  const wholes = bufs.map((b) => JSON.stringify(tallyChunks([b])));
  fc.assert(
    fc.property(fc.integer({ min: 0, max: bufs.length - 1 }), fc.array(fc.nat(), { maxLength: 30 }), (which, cuts) => {
      const buf = bufs[which]!;
      const points = [...new Set(cuts.map((c) => c % (buf.length + 1)))].sort((a, b) => a - b);
      const chunks: Uint8Array[] = [];
      let prev = 0;
      for (const p of points) {
        chunks.push(buf.subarray(prev, p));
        prev = p;
      }
      chunks.push(buf.subarray(prev));
      return JSON.stringify(tallyChunks(chunks)) === wholes[which];
    }),
    { numRuns: 300 },
  );
  t.pass('300 random splittings agreed');
});

t.test('truncated streams', async (t) => {
  const buf = load('responses_stream_completed.sse');
  const text = buf.toString('utf8');
  const terminalAt = text.indexOf('event: response.completed');
  t.ok(terminalAt > 0);

  // Cut at every event boundary before the terminal event: no receipt.
  let boundaries = 0;
  for (let at = text.indexOf('\n\n'); at !== -1 && at < terminalAt; at = text.indexOf('\n\n', at + 2)) {
    boundaries++;
    const r = tallyChunks([Buffer.from(text.slice(0, at + 2))]);
    t.equal(r.outcome, 'incomplete_stream', `cut after event ${boundaries}`);
    t.same(r.usage, NO_USAGE, 'no usage before the receipt');
    t.equal(r.terminalEvent, undefined);
  }
  t.equal(boundaries, 16);

  // Cut inside the terminal event, and right before its closing blank line (CR-only too).
  const dataEnd = text.lastIndexOf('\n\n');
  for (const at of [terminalAt + 30, dataEnd - 10, dataEnd, dataEnd + 1]) {
    for (const ending of ENDINGS) {
      const cut = withEnding(Buffer.from(text.slice(0, at)), ending);
      t.equal(tallyChunks([cut]).outcome, 'incomplete_stream', `cut at ${at}/${text.length} ${ending}`);
      t.equal(tallyChunks(bytewise(cut)).outcome, 'incomplete_stream', `cut at ${at} ${ending} bytewise`);
    }
  }
  // The full stream with its final blank line is complete, in every ending, even bytewise.
  for (const ending of ENDINGS) {
    t.equal(tallyChunks(bytewise(withEnding(buf, ending))).outcome, 'complete', `full ${ending}`);
  }

  // Error event then cut before response.failed: usage_unknown, not incomplete_stream.
  const err = load('prism__stream-unknown-error-responses-1.sse').toString('utf8');
  const failedAt = err.indexOf('event: response.failed');
  const r = tallyChunks([Buffer.from(err.slice(0, failedAt))]);
  t.equal(r.outcome, 'usage_unknown');
  t.equal(r.terminalEvent, undefined);
  t.equal(r.error?.code, 'unknown-error');

  // Empty stream.
  t.equal(tallyChunks([]).outcome, 'incomplete_stream');
  t.equal(tallyChunks([]).maxSequenceNumber, -1);
});

function frame(obj: Record<string, unknown>, named = true): string {
  return `${named ? `event: ${obj.type as string}\n` : ''}data: ${JSON.stringify(obj)}\n\n`;
}

const created = {
  type: 'response.created',
  sequence_number: 0,
  response: { id: 'resp_x', object: 'response', status: 'in_progress', model: 'm-1', output: [], usage: null },
};

function terminal(type: string, seq: number, extra: Record<string, unknown>): Record<string, unknown> {
  return { type, sequence_number: seq, response: { id: 'resp_x', object: 'response', model: 'm-1', output: [], ...extra } };
}

t.test('data-only frames and a trailing [DONE] are tolerated', async (t) => {
  const lf = load('responses_stream_completed.sse').toString('utf8');
  const dataOnly = lf.replace(/^event: .*\n/gm, '') + 'data: [DONE]\n\n';
  const a = tallyChunks([Buffer.from(lf)]);
  const b = tallyChunks([Buffer.from(dataOnly)]);
  t.equal(b.sawDone, true);
  t.same({ ...b, sawDone: false }, a, 'same tally as the named form');
  // [DONE] alone is no receipt.
  const r = tallyChunks([Buffer.from(frame(created) + 'data: [DONE]\n\n')]);
  t.equal(r.outcome, 'incomplete_stream');
  t.equal(r.sawDone, true);
});

t.test('flat error event without a terminal: usage_unknown', async (t) => {
  const s = frame(created) + frame({ type: 'error', code: 'server_error', message: 'boom', param: null, sequence_number: 1 });
  const r = tallyChunks([Buffer.from(s)]);
  t.equal(r.outcome, 'usage_unknown');
  t.same(r.error, { code: 'server_error', message: 'boom', param: null, shape: 'flat' });
  t.equal(r.maxSequenceNumber, 1);
  t.equal(r.responseId, 'resp_x');
});

t.test('terminal without usable usage: usage_unknown, partial buckets kept as reported', async (t) => {
  const nullUsage = tallyChunks([Buffer.from(frame(created) + frame(terminal('response.completed', 1, { status: 'completed', usage: null })))]);
  t.equal(nullUsage.outcome, 'usage_unknown');
  t.same(nullUsage.usage, NO_USAGE);

  const noField = tallyChunks([Buffer.from(frame(created) + frame(terminal('response.completed', 1, { status: 'completed' })))]);
  t.equal(noField.outcome, 'usage_unknown');

  const partial = tallyChunks([Buffer.from(frame(created) + frame(terminal('response.completed', 1, { status: 'completed', usage: { input_tokens: 12 } })))]);
  t.equal(partial.outcome, 'usage_unknown');
  t.equal(partial.usage.inputTokens, 12);
  t.equal(partial.usage.outputTokens, undefined, 'missing output_tokens is not 0');
  t.equal(partial.usage.cachedTokens, undefined, 'missing details are not 0');

  const bad = tallyChunks([
    Buffer.from(frame(created) + frame(terminal('response.completed', 1, { status: 'completed', usage: { input_tokens: -1, output_tokens: 1.5 } }))),
  ]);
  t.equal(bad.outcome, 'usage_unknown');
  t.equal(bad.usage.inputTokens, undefined);
  t.equal(bad.usage.outputTokens, undefined);
});

t.test('usage without details, with cache_write_tokens, and a failed terminal that has usage', async (t) => {
  const bare = tallyChunks([
    Buffer.from(frame(created) + frame(terminal('response.completed', 1, { status: 'completed', usage: { input_tokens: 5, output_tokens: 7 } }))),
  ]);
  t.equal(bare.outcome, 'complete');
  t.same(bare.usage, { ...NO_USAGE, inputTokens: 5, outputTokens: 7 });

  const cw = tallyChunks([
    Buffer.from(
      frame(created) +
        frame(
          terminal('response.completed', 1, {
            status: 'completed',
            usage: {
              input_tokens: 2000,
              input_tokens_details: { cached_tokens: 1024, cache_write_tokens: 512 },
              output_tokens: 9,
              output_tokens_details: { reasoning_tokens: 0 },
              total_tokens: 2009,
            },
          }),
        ),
    ),
  ]);
  t.same(cw.usage, { inputTokens: 2000, cachedTokens: 1024, cacheWriteTokens: 512, outputTokens: 9, reasoningTokens: 0, totalTokens: 2009 });

  const failedWithUsage = tallyChunks([
    Buffer.from(
      frame(created) +
        frame({ type: 'error', sequence_number: 1, error: { code: 'server_error', message: 'x', param: null } }) +
        frame(
          terminal('response.failed', 2, { status: 'failed', error: { code: 'server_error', message: 'x' }, usage: { input_tokens: 3, output_tokens: 0 } }),
        ),
    ),
  ]);
  t.equal(failedWithUsage.outcome, 'complete', 'a failed response that reports usage is billable');
  t.equal(failedWithUsage.terminalEvent, 'response.failed');
  t.same(failedWithUsage.responseError, { code: 'server_error', message: 'x' });
});

t.test('only the first terminal event counts', async (t) => {
  const s =
    frame(created) +
    frame(terminal('response.completed', 1, { status: 'completed', usage: { input_tokens: 5, output_tokens: 7 } })) +
    frame(terminal('response.completed', 2, { status: 'completed', usage: { input_tokens: 500, output_tokens: 700 } })) +
    frame({ type: 'error', code: 'x', message: 'late', param: null, sequence_number: 3 });
  const r = tallyChunks([Buffer.from(s)]);
  t.equal(r.usage.inputTokens, 5);
  t.equal(r.error, undefined);
  t.equal(r.maxSequenceNumber, 3, 'sequence numbers still tracked');
  t.equal(r.outcome, 'complete');
});

t.test('text deltas after the terminal event move the sequence number, not the visible text', async (t) => {
  const delta = (seq: number, text: string) => ({ type: 'response.output_text.delta', sequence_number: seq, output_index: 0, content_index: 0, delta: text });
  const s =
    frame(created) +
    frame(delta(1, 'abc')) +
    frame(terminal('response.completed', 2, { status: 'completed', usage: { input_tokens: 5, output_tokens: 7 } })) +
    frame(delta(3, 'late text'));
  for (const how of ['feed', 'feedEvents'] as const) {
    const tally = new ResponsesUsageTally({ keepOutput: true });
    // feedEvents takes whole events, as the relay hands them: here the whole stream in one chunk.
    tally[how](Buffer.from(s));
    tally.end();
    const r = tally.result();
    t.equal(r.visibleTextChars, 3, `${how}: only the text before the receipt`);
    t.equal(r.maxSequenceNumber, 3, `${how}: the late delta's sequence number`);
    t.equal(r.eventCount, 4, `${how}: every event counted`);
  }
});

t.test('multi-byte UTF-8 deltas split across chunks are counted in UTF-16 units', async (t) => {
  const deltas = ['héllo ', '🙂', ' 日本語', 'ü'];
  let s = frame(created);
  let seq = 1;
  for (const d of deltas) {
    s += frame({ type: 'response.output_text.delta', sequence_number: seq++, item_id: 'msg', output_index: 0, content_index: 0, delta: d });
  }
  s += frame(terminal('response.completed', seq, { status: 'completed', usage: { input_tokens: 1, output_tokens: 4 } }));
  const buf = Buffer.from(s, 'utf8');
  const want = deltas.join('').length;
  t.equal(tallyChunks([buf]).visibleTextChars, want);
  t.equal(tallyChunks(bytewise(buf)).visibleTextChars, want);
  t.equal(want, 13, 'emoji counts as two UTF-16 units');
  // visibleTextChars grows while the stream runs (the lane reads it mid-stream).
  const tally = new ResponsesUsageTally();
  tally.feed(Buffer.from(frame(created) + frame({ type: 'response.output_text.delta', sequence_number: 1, delta: 'abc' })));
  t.equal(tally.visibleTextChars, 3);
  t.equal(tally.outcome(), 'incomplete_stream');
});

t.test('oversized event stops the tally; non-JSON data is noted and skipped', async (t) => {
  const tally = new ResponsesUsageTally({ maxEventChars: 1024 });
  tally.feed(Buffer.from(frame(created)));
  // The limit is on what the parser must hold across feeds (an event that does not end).
  const big = Buffer.from(`event: response.output_text.delta\ndata: {"delta":"${'x'.repeat(5000)}"}\n\n`);
  for (let i = 0; i < big.length; i += 256) tally.feed(big.subarray(i, i + 256));
  tally.feed(Buffer.from(frame(terminal('response.completed', 2, { status: 'completed', usage: { input_tokens: 1, output_tokens: 1 } }))));
  tally.end();
  t.equal(tally.stoppedEarly, true);
  t.match(tally.parseError, /larger than 1024/);
  t.equal(tally.outcome(), 'incomplete_stream');

  const r = tallyChunks([
    Buffer.from(
      frame(created) +
        'event: response.output_text.delta\ndata: {not json\n\n' +
        frame(terminal('response.completed', 2, { status: 'completed', usage: { input_tokens: 1, output_tokens: 1 } })),
    ),
  ]);
  t.match(r.parseError, /not JSON/);
  t.equal(r.outcome, 'complete', 'a later receipt still counts');
});

t.test('SSE comments, ids and unknown events are ignored', async (t) => {
  const s =
    ': keepalive\n\n' +
    frame(created) +
    'id: 7\nevent: response.something_new\ndata: {"type":"response.something_new","sequence_number":1,"blob":"\\"sequence_number\\":999"}\n\n' +
    frame(terminal('response.completed', 2, { status: 'completed', usage: { input_tokens: 1, output_tokens: 2 } })) +
    ': service.usage {"ink_charged":1}\n\n';
  const r = tallyChunks([Buffer.from(s)]);
  t.equal(r.outcome, 'complete');
  t.equal(r.maxSequenceNumber, 2, 'escaped key inside a string is not read as a sequence number');
  t.equal(r.eventCount, 3);
});

t.test('non-streaming bodies', async (t) => {
  const done = tallyResponseBody(load('response_completed.json'));
  t.equal(done.outcome, 'complete');
  t.same(done.usage, { inputTokens: 36, cachedTokens: 0, cacheWriteTokens: undefined, outputTokens: 87, reasoningTokens: 64, totalTokens: 123 });
  t.equal(done.status, 'completed');
  t.equal(done.responseId, 'resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b');
  t.equal(done.visibleTextChars, 'Paris is the capital of France.'.length);

  const inc = tallyResponseBody(load('response_incomplete.json').toString('utf8'));
  t.equal(inc.outcome, 'complete');
  t.equal(inc.status, 'incomplete');
  t.equal(inc.incompleteReason, 'max_output_tokens');
  t.equal(inc.usage.outputTokens, 16);
  t.equal(inc.visibleTextChars, 0);

  const parsed = JSON.parse(load('response_completed.json').toString('utf8'));
  t.same(tallyResponseBody(parsed), done, 'already-parsed value gives the same tally');

  parsed.usage = null;
  const noUsage = tallyResponseBody(parsed);
  t.equal(noUsage.outcome, 'usage_unknown');
  t.same(noUsage.usage, NO_USAGE);

  const notJson = tallyResponseBody('<html>bad gateway</html>');
  t.equal(notJson.outcome, 'usage_unknown');
  t.match(notJson.parseError, /not JSON/);
  t.equal(tallyResponseBody('[1,2]').parseError, 'body is not a JSON object');
});

// Escapes every non-ASCII character and some ASCII ones as \uXXXX, as ensure_ascii JSON encoders
// (Python's json.dumps) write them.
const asciiJson = (v: string): string =>
  '"' +
  Array.from({ length: v.length }, (_, i) => v.charCodeAt(i))
    .map((u) => (u > 0x7e || u === 0x2f ? '\\u' + u.toString(16).padStart(4, '0') : JSON.stringify(String.fromCharCode(u)).slice(1, -1)))
    .join('') +
  '"';

t.test('scanTextDeltaChars counts what JSON.parse would count', async (t) => {
  fc.assert(
    fc.property(fc.string({ unit: 'binary', maxLength: 60 }), fc.boolean(), fc.boolean(), (delta, ascii, deltaFirst) => {
      const lit = ascii ? asciiJson(delta) : JSON.stringify(delta);
      const rest = '"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0';
      const data = deltaFirst ? `{"delta":${lit},${rest},"sequence_number":7}` : `{${rest},"delta":${lit},"logprobs":[],"sequence_number":7}`;
      const parsed = JSON.parse(data) as { delta: string };
      return parsed.delta === delta && scanTextDeltaChars(data) === delta.length;
    }),
    { numRuns: 3000 },
  );
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"a\\u00e9\\n\\"b"}'), 5, 'escapes are one unit each');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"\\ud83d\\ude00"}'), 2, 'an escaped surrogate pair is two units');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":""}'), 0);
  // Anything unusual is left to JSON.parse.
  t.equal(scanTextDeltaChars('{"delta":"abc"}'), -1, 'no type: not known to be a text delta');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta": "abc"}'), -1, 'space after the colon');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"abc"'), 0 + 3, 'the string itself is complete');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"abc'), -1, 'unterminated string');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"a\\x"}'), -1, 'bad escape');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"\\u12g4"}'), -1, 'bad \\u escape');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"a\tb"}'), -1, 'raw control character');
  t.equal(scanTextDeltaChars('{"type":"response.output_text.delta","delta":"a","x":{"delta":"bb"}}'), -1, 'two delta keys');
});

t.test('text deltas the scan leaves alone are still counted by parsing', async (t) => {
  const s =
    frame(created) +
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":1,"delta": "spaced"}\n\n' +
    frame(terminal('response.completed', 2, { status: 'completed', usage: { input_tokens: 1, output_tokens: 1 } }));
  const r = tallyChunks([Buffer.from(s)]);
  t.equal(r.visibleTextChars, 6);
  t.equal(r.maxSequenceNumber, 2);
  t.equal(r.outcome, 'complete');
});
