// Traces of the asynchronous generations: the submit's server span is kept on the generation row
// (a traceparent), and the job spans that poll and finish the row, on whichever instance claims
// it, link to it. A real OTLP/HTTP receiver, the video (Ark) and image (Gemini) simulators, the
// job runner driven by tick() with the simulators' clock.
import t, { type Test } from 'tap';
import { startOtlpReceiver, SPAN_KIND, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { rowOf, runToEnd, startVideoHarness } from './video-harness.js';
import { runToEnd as runImageToEnd, startImageHarness } from './image-harness.js';

/** Each job span (poll, run, finish) links to the submit; a finish hangs under the job span that finished it. */
function checkJobSpans(t: Test, rx: OtlpReceiver, submit: ReceivedSpan, generationId: string, workName: string): void {
  const mine = rx.spans().filter((s) => s.attrs['inkgate.generation.id'] === generationId);
  const work = mine.filter((s) => s.name === workName);
  const finish = mine.filter((s) => s.name === 'inkgate.generation.finish');
  t.ok(work.length >= 1, `${work.length} ${workName} span(s)`);
  t.equal(finish.length, 1, 'one finish span');
  for (const s of [...work, ...finish]) {
    t.same(s.links, [{ traceId: submit.traceId, spanId: submit.spanId }], `${s.name} links to the submit`);
    t.not(s.traceId, submit.traceId, `${s.name} is not in the submit's trace (a job is its own trace, linked)`);
    t.equal(s.kind, SPAN_KIND.internal);
  }
  const parent = work.find((w) => w.spanId === finish[0]!.parentSpanId);
  t.ok(parent, 'the finish is a child of the job span that finished the generation');
  t.equal(parent?.traceId, finish[0]!.traceId);
}

t.test('a video generation: its poll and finish spans link to the submit', async (t) => {
  const rx = await startOtlpReceiver(t);
  const h = await startVideoHarness(t, { config: { tracing: { endpoint: rx.url } } });
  const flush = () => h.services.tracing!.forceFlush();
  const { key } = await h.funded(5_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'a heron on one leg, tracing check', duration: 5 });
  t.equal(r.status, 202);
  const id = r.json.id as string;
  const requestId = String(r.headers['x-request-id']);
  const row = await rowOf(h, id);
  const submit = await rx.until(flush, (spans) => spans.find((s) => s.kind === SPAN_KIND.server && s.attrs['inkgate.request_id'] === requestId));
  t.equal(submit.name, 'POST /v1/video/generations');
  t.equal(row.trace_parent, `00-${submit.traceId}-${submit.spanId}-01`, 'the row keeps the submit span');

  const done = await runToEnd(h, key, id);
  t.equal(done.status, 'succeeded');
  await rx.until(flush, (spans) => spans.find((s) => s.name === 'inkgate.generation.finish' && s.attrs['inkgate.generation.id'] === id));
  checkJobSpans(t, rx, submit, id, 'inkgate.generation.poll');
  t.notOk(
    rx.bodies.some((b) => b.includes('a heron on one leg')),
    'the prompt appears in no exported payload',
  );
});

t.test('an image generation: its run and finish spans link to the submit; an untraced submit has no job spans', async (t) => {
  const rx = await startOtlpReceiver(t);
  const h = await startImageHarness(t, { config: { tracing: { endpoint: rx.url } } });
  const flush = () => h.services.tracing!.forceFlush();
  const { key } = await h.funded(5_000);
  const r = await h.submit(key, { model: 'image-1', prompt: 'a paper boat, tracing check' });
  t.equal(r.status, 202);
  const id = r.json.id as string;
  const requestId = String(r.headers['x-request-id']);
  const submit = await rx.until(flush, (spans) => spans.find((s) => s.kind === SPAN_KIND.server && s.attrs['inkgate.request_id'] === requestId));
  const done = await runImageToEnd(h, key, id);
  t.equal(done.status, 'succeeded');
  await rx.until(flush, (spans) => spans.find((s) => s.name === 'inkgate.generation.finish' && s.attrs['inkgate.generation.id'] === id));
  checkJobSpans(t, rx, submit, id, 'inkgate.generation.run');

  // A submit whose caller did not sample: no traceparent kept, and its job records nothing.
  const unsampled = await h.submit(key, { model: 'image-1', prompt: 'a kite' }, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00' });
  t.equal(unsampled.status, 202);
  const quietId = unsampled.json.id as string;
  t.equal((await rowOf(h, quietId)).trace_parent, null, 'no traceparent on the row');
  t.equal((await runImageToEnd(h, key, quietId)).status, 'succeeded');
  // A traced request after it: once its span is exported, every span the job could have made is too.
  const later = await h.tg.call('GET', '/v1/me', { key });
  await rx.until(flush, (spans) => spans.find((s) => s.attrs['inkgate.request_id'] === String(later.headers['x-request-id'])));
  t.notOk(
    rx.spans().some((s) => s.attrs['inkgate.generation.id'] === quietId),
    'no job span for a generation whose submit was not traced',
  );
});
