// How a /v1/responses call ends when it does not simply complete: the service's own visible-output
// cap (the synthetic `response.incomplete` carries what was relayed), and a vendor `failed`
// response that reports its usage (settled on it, streamed or not, like the stream's response.failed).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { ResponsesUsageTally } from '../../src/lanes/responses/usage-tally.js';
import type { OpenAISimulator } from '../../simulators/openai/simulator.js';
import { writtenRequest } from '../helpers/gateway.js';
import { me, rawResponsesStream, responsesCharge, startResponsesHarness } from '../helpers/responses-harness.js';

const setup = startResponsesHarness;
const rawStream = rawResponsesStream;

const usageFrame = (comments: string[]) => JSON.parse(comments.at(-1)!.slice('service.usage '.length));
const chargeOf = (u: any): number => responsesCharge(u);

const CAP = 40;
const FULL_TEXT_OF_100 = 'long reply [[sim:tokens=100]]';

t.test('capped stream: finalResponse().output_text is the text relayed before the cap', async (t) => {
  const { g, k, client, invariant } = await setup(t, { gateway: { responses: { visibleOutputCapChars: CAP } } });
  for (const directives of ['[[sim:pace=2]]', '[[sim:chunk=7]]']) {
    const before = await me(g, k.key);
    const rs = client.responses.stream({ model: 'astra', input: `${FULL_TEXT_OF_100} ${directives}`, max_output_tokens: 1000 });
    let relayed = '';
    rs.on('response.output_text.delta', (e) => (relayed += e.delta));
    const final = await rs.finalResponse();
    t.equal(final.status, 'incomplete', `${directives}: the service stopped it`);
    t.equal(final.incomplete_details?.reason, 'max_output_tokens');
    t.ok(relayed.length > 0 && relayed.length <= CAP, `${directives}: some text was relayed, no more than the cap (${relayed.length})`);
    t.ok('This is a simulated reply from the vendor. '.repeat(10).startsWith(relayed), 'a prefix of the vendor text');
    t.equal(final.output_text, relayed, `${directives}: the final response carries exactly the relayed text`);
    const msg = final.output.find((i) => i.type === 'message');
    t.equal(msg?.type === 'message' && msg.status, 'incomplete', 'the open message item is incomplete');
    t.equal(final.usage ?? null, null, 'no token counts: the vendor receipt never came');
    t.equal(final.model, 'text-6-astra');
    t.match(final.id, /^resp_/);
    t.type(final.created_at, 'number', "the first snapshot's fields are kept");
    const after = await me(g, k.key);
    t.equal(after.key.ink_reserved, 0, 'settled');
    t.ok(after.key.ink_charged > before.key.ink_charged);
  }
  await invariant();
});

/** A vendor in front of the simulator that sends each whole answer in one write (a burst). */
async function burstingVendor(t: Test, sim: OpenAISimulator): Promise<string> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', async () => {
      const up = await request(sim.url + '/responses', {
        method: 'POST',
        headers: { authorization: req.headers.authorization!, 'content-type': 'application/json' },
        body: Buffer.concat(parts),
      });
      const whole = Buffer.from(await up.body.arrayBuffer());
      res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type']), 'content-length': String(whole.length) });
      res.end(whole);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

t.test('capped in the first chunk (the vendor sends everything at once): the events before the crossing one are relayed', async (t) => {
  const { g, k, client, invariant } = await setup(t, { gateway: { responses: { visibleOutputCapChars: CAP } }, vendorUrl: (sim) => burstingVendor(t, sim) });
  const rs = client.responses.stream({ model: 'astra', input: FULL_TEXT_OF_100, max_output_tokens: 1000 });
  let relayed = '';
  let created = 0;
  rs.on('response.created', () => created++);
  rs.on('response.output_text.delta', (e) => (relayed += e.delta));
  const final = await rs.finalResponse();
  t.equal(created, 1, 'response.created reached the client (it shares the chunk that crossed the cap)');
  t.equal(final.status, 'incomplete');
  t.ok(relayed.length > 0 && relayed.length <= CAP, `text up to the cap was relayed (${relayed.length})`);
  t.ok(CAP - relayed.length < 10, 'up to the delta that crossed, not a whole chunk short');
  t.equal(final.output_text, relayed, 'the final response carries exactly the relayed text');
  t.equal((await me(g, k.key)).key.ink_reserved, 0, 'settled');
  await invariant();
});

t.test('capped stream read as events (responses.create stream:true) and on the wire', async (t) => {
  const { g, k, client, invariant } = await setup(t, { gateway: { responses: { visibleOutputCapChars: CAP } } });
  const s = await client.responses.create({ model: 'astra', input: `${FULL_TEXT_OF_100} [[sim:pace=2]]`, max_output_tokens: 1000, stream: true });
  let relayed = '';
  let last: any;
  for await (const ev of s) {
    if (ev.type === 'response.output_text.delta') relayed += ev.delta;
    last = ev;
  }
  t.equal(last.type, 'response.incomplete');
  const text = last.response.output
    .flatMap((i: any) => (i.type === 'message' ? i.content : []))
    .map((p: any) => p.text)
    .join('');
  t.ok(relayed.length > 0);
  t.equal(text, relayed, 'the terminal snapshot carries the relayed text');
  t.equal(last.response.usage, null);

  // On the wire: the charge is the hold, said once in the usage comment after the terminal event.
  const raw = await rawStream(g, k.key, { input: `${FULL_TEXT_OF_100} [[sim:pace=2]]`, max_output_tokens: 1000 });
  const terminal = JSON.parse(raw.events.at(-1)!.data);
  t.equal(raw.events.at(-1)!.event, 'response.incomplete');
  const wireText = raw.events
    .filter((e) => e.event === 'response.output_text.delta')
    .map((e) => JSON.parse(e.data).delta)
    .join('');
  t.equal(terminal.response.output[0].content[0].text, wireText);
  t.equal(terminal.response.output[0].content[0].type, 'output_text');
  t.same(terminal.response.output[0].content[0].annotations, []);
  const seqs = raw.events.map((e) => JSON.parse(e.data).sequence_number as number);
  t.ok(
    seqs.every((n, i) => i === 0 || n > seqs[i - 1]!),
    'sequence numbers still increase',
  );
  const frame = usageFrame(raw.comments);
  const rec = await writtenRequest(g, frame.request_id);
  t.equal(rec?.hold_state, 'settled');
  t.equal(rec?.charged_ink, rec?.hold_ink, 'the charge equals the hold');
  t.equal(frame.ink_charged, rec?.hold_ink);
  await invariant();
});

t.test('capped stream with a finished reasoning item before the message', async (t) => {
  const { client, invariant } = await setup(t, { gateway: { responses: { visibleOutputCapChars: CAP } } });
  const rs = client.responses.stream({
    model: 'astra',
    input: `${FULL_TEXT_OF_100} [[sim:pace=2]]`,
    max_output_tokens: 1000,
    reasoning: { effort: 'low', summary: 'auto' },
  });
  let relayed = '';
  rs.on('response.output_text.delta', (e) => (relayed += e.delta));
  const final = await rs.finalResponse();
  t.equal(final.status, 'incomplete');
  t.same(
    final.output.map((i) => i.type),
    ['reasoning', 'message'],
    'the item that had output_item.done, then the open message',
  );
  const reasoning = final.output[0] as any;
  t.ok(reasoning.summary[0].text.length > 0, 'the finished item as the vendor sent it (summary)');
  t.match(reasoning.encrypted_content, /^gAAAA/, 'with its encrypted content, usable as input next turn');
  t.equal(final.output_text, relayed);
  t.ok(relayed.length > 0);
  await invariant();
});

t.test('the kept output: escapes, split surrogates, data-only frames, and the chunk that passed the cap', async (t) => {
  const ev = (type: string, body: Record<string, unknown>, named = true) => `${named ? `event: ${type}\n` : ''}data: ${JSON.stringify({ type, ...body })}\n\n`;
  const delta = (seq: number, d: string, named = true) =>
    ev('response.output_text.delta', { sequence_number: seq, item_id: 'msg_1', output_index: 1, content_index: 0, delta: d, logprobs: [] }, named);
  const tally = new ResponsesUsageTally({ keepOutput: true });
  const chunks = [
    ev('response.created', {
      sequence_number: 0,
      response: { id: 'resp_1', object: 'response', created_at: 1, status: 'in_progress', model: 'm', output: [], usage: null },
    }) +
      ev('response.output_item.added', {
        sequence_number: 1,
        output_index: 0,
        item: { id: 'fc_1', type: 'function_call', status: 'in_progress', arguments: '', call_id: 'c', name: 'f' },
      }) +
      ev('response.output_item.done', {
        sequence_number: 2,
        output_index: 0,
        item: { id: 'fc_1', type: 'function_call', status: 'completed', arguments: '{"a":1}', call_id: 'c', name: 'f' },
      }) +
      ev('response.output_item.added', {
        sequence_number: 3,
        output_index: 1,
        item: { id: 'msg_1', type: 'message', status: 'in_progress', content: [], role: 'assistant' },
      }) +
      ev('response.content_part.added', {
        sequence_number: 4,
        item_id: 'msg_1',
        output_index: 1,
        content_index: 0,
        part: { type: 'output_text', annotations: [], text: '' },
      }),
    delta(5, 'line\n"quoted" é ') + delta(6, '\ud83d'),
    delta(7, '\ude00 end', false),
  ];
  let expected = '';
  for (const c of chunks) {
    tally.markOutput();
    tally.feed(c);
  }
  expected = 'line\n"quoted" é 😀 end';
  // Many small deltas (compaction runs), then a chunk that is not relayed: it must not count.
  for (let i = 0; i < 1500; i++) {
    tally.markOutput();
    tally.feed(delta(8 + i, `${i % 10}`, i % 2 === 0));
    expected += `${i % 10}`;
  }
  tally.markOutput();
  tally.feed(
    delta(9000, 'NOT RELAYED') +
      ev('response.output_item.done', {
        sequence_number: 9001,
        output_index: 1,
        item: { id: 'msg_1', type: 'message', status: 'completed', content: [], role: 'assistant' },
      }),
  );
  tally.rewindOutput();
  tally.markOutput();
  tally.feed(delta(9002, 'after the cap'));
  const kept = tally.relayedOutput()!;
  t.equal(kept.snapshot?.created_at, 1);
  t.equal(kept.output.length, 2);
  t.equal(kept.output[0]!.arguments, '{"a":1}', 'a finished item as sent');
  const msg = kept.output[1] as any;
  t.equal(msg.status, 'incomplete', 'the done event of the dropped chunk was taken back');
  t.equal(msg.content[0].text, expected, 'exactly the relayed deltas, decoded');
  t.same(msg.content[0].annotations, []);

  // Two message items open at once (deltas interleaved): each delta goes where its indexes say.
  const two = new ResponsesUsageTally({ keepOutput: true });
  const open = (oi: number) =>
    ev('response.output_item.added', {
      sequence_number: 0,
      output_index: oi,
      item: { id: `msg_${oi}`, type: 'message', status: 'in_progress', content: [], role: 'assistant' },
    }) +
    ev('response.content_part.added', {
      sequence_number: 0,
      item_id: `msg_${oi}`,
      output_index: oi,
      content_index: 0,
      part: { type: 'output_text', annotations: [], text: '' },
    });
  const to = (oi: number, d: string) =>
    ev('response.output_text.delta', { sequence_number: 0, item_id: `msg_${oi}`, output_index: oi, content_index: 0, delta: d });
  two.feed(
    chunks[0]!.slice(0, chunks[0]!.indexOf('event: response.output_item.added')) + open(0) + to(0, 'a') + open(1) + to(1, 'x') + to(0, 'b') + to(1, 'y'),
  );
  t.same(
    two.relayedOutput()!.output.map((i: any) => i.content[0].text),
    ['ab', 'xy'],
  );

  // A terminal event ends keeping (the stream has its receipt; nothing to build).
  const done = new ResponsesUsageTally({ keepOutput: true });
  done.feed(chunks[0]! + ev('response.completed', { sequence_number: 5, response: { id: 'resp_1', status: 'completed', output: [], usage: null } }));
  t.equal(done.relayedOutput(), undefined);
  t.equal(new ResponsesUsageTally().relayedOutput(), undefined, 'nothing kept unless asked');
});

/**
 * A vendor in front of the simulator that turns its completed answers into `failed` ones that
 * still report usage (the simulator's own `failed` mode reports none). Streams get the vendor's
 * `error` event then `response.failed`, as the recorded first-party stream does.
 */
async function failingWithUsage(t: Test, sim: OpenAISimulator): Promise<string> {
  const error = { code: 'server_error', message: 'The model failed partway (shim).' };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      void (async () => {
        const up = await request(sim.origin + req.url!, {
          method: 'POST',
          headers: { authorization: req.headers.authorization!, 'content-type': 'application/json' },
          body: Buffer.concat(parts),
        });
        const text = await up.body.text();
        const ct = String(up.headers['content-type']);
        let out = text;
        if (up.statusCode === 200 && ct.startsWith('application/json')) {
          const j = JSON.parse(text);
          out = JSON.stringify({ ...j, status: 'failed', error, incomplete_details: null });
        } else if (up.statusCode === 200) {
          out = text
            .split('\n\n')
            .map((block) => {
              if (!block.startsWith('event: response.completed\n')) return block;
              const d = JSON.parse(block.slice(block.indexOf('data: ') + 6));
              const failed = { ...d, type: 'response.failed', sequence_number: d.sequence_number + 1, response: { ...d.response, status: 'failed', error } };
              const errEv = { type: 'error', sequence_number: d.sequence_number, error: { ...error, param: null } };
              return `event: error\ndata: ${JSON.stringify(errEv)}\n\nevent: response.failed\ndata: ${JSON.stringify(failed)}`;
            })
            .join('\n\n');
        }
        res.writeHead(up.statusCode, { 'content-type': ct, 'x-request-id': String(up.headers['x-request-id'] ?? '') });
        res.end(out);
      })().catch((e: Error) => res.destroy(e));
    });
  });
  server.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

t.test('a failed response that reports usage settles on it, streamed or not', async (t) => {
  const { g, k, client, invariant } = await setup(t, { vendorUrl: (sim) => failingWithUsage(t, sim) });

  const r = await g.call('POST', '/v1/responses', { key: k.key, body: { model: 'astra', input: 'fail after some work', max_output_tokens: 1000 } });
  t.equal(r.status, 200, "the vendor's failed response is passed on");
  t.equal(r.json.status, 'failed');
  t.equal(r.json.error.code, 'server_error');
  t.equal(r.json.model, 'text-6-astra');
  const expected = chargeOf(r.json.usage);
  t.ok(expected > 0);
  t.equal(Number(r.headers['x-service-ink-charged']), expected, 'charged what the vendor reported');
  const requestId = String(r.headers['x-service-request-id']);
  const rec = await writtenRequest(g, requestId);
  t.equal(rec?.hold_state, 'settled', 'the hold is settled, not kept');
  t.equal(rec?.charged_ink, expected);
  t.equal(rec?.usage?.output_tokens, r.json.usage.output_tokens, 'the reported usage is on the record');
  let m = await me(g, k.key);
  t.equal(m.key.ink_reserved, 0);
  t.equal(m.key.ink_charged, expected);

  // The same failure on the stream: response.failed passed on, the vendor's error folded away, the
  // usage comment with the same charge.
  const raw = await rawStream(g, k.key, { input: 'fail after some work', max_output_tokens: 1000 });
  t.equal(raw.events.at(-1)!.event, 'response.failed');
  t.equal(raw.events.filter((e) => e.event === 'error').length, 0);
  const frame = usageFrame(raw.comments);
  t.equal(frame.ink_charged, chargeOf(JSON.parse(raw.events.at(-1)!.data).response.usage));
  t.equal(frame.ink_charged, expected, 'streamed and non-streamed settle alike');
  t.equal((await writtenRequest(g, frame.request_id))?.hold_state, 'settled');

  // The official SDK gets the failed response object (no exception), with usage.
  const viaSdk = await client.responses.create({ model: 'astra', input: 'fail after some work', max_output_tokens: 1000 });
  t.equal(viaSdk.status, 'failed');
  t.equal(viaSdk.error?.code, 'server_error');
  t.equal(viaSdk.usage?.output_tokens, r.json.usage.output_tokens);
  m = await me(g, k.key);
  t.equal(m.key.ink_reserved, 0);
  t.equal(m.key.ink_charged, expected * 3);
  await invariant();
});

t.test('a failed response without usage still keeps the hold (non-streaming)', async (t) => {
  const { g, k, invariant } = await setup(t);
  const r = await g.call('POST', '/v1/responses', { key: k.key, body: { model: 'astra', input: 'x [[sim:failed]]', max_output_tokens: 1000 } });
  t.equal(r.status, 502);
  t.equal(r.json.error.code, 'provider_error');
  const rec = await writtenRequest(g, r.json.error.request_id);
  t.equal(rec?.hold_state, 'open', 'no receipt: the hold stays until reconciled');
  t.equal(rec?.charged_ink, 0);
  t.ok((await me(g, k.key)).key.ink_reserved > 0);
  await invariant();
});
