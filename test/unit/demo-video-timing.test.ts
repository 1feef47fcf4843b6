// The demo's video is ready when docs/simulators.md says: the Ark simulator's configured timing
// under `npm run demo`, walked through the gateway's own poll schedule (the default jobs
// settings and the back-off function the video worker uses), against the figures the page gives.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { pollDelayMs } from '../../src/generations/finish.js';
import { DEMO_VIDEO_TIMING } from '../../simulators/demo.js';

const doc = readFileSync(new URL('../../docs/simulators.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');

/** When the gateway's looks at a task fall (ms after submit), until one finds it done. */
function looksUntilDone(renderMs: number, pollIntervalMs: number, maxPollIntervalMs: number): number[] {
  const looks = [pollIntervalMs]; // the submit schedules the first look
  for (let polls = 0; looks[looks.length - 1]! < renderMs && looks.length < 100; polls++) {
    looks.push(looks[looks.length - 1]! + pollDelayMs(polls, pollIntervalMs, maxPollIntervalMs));
  }
  return looks;
}

t.test('the demo video: simulator timing, poll schedule and docs agree', async (t) => {
  const { jobs } = loadConfig({});
  const m = /The demo runs it at (\d+) s queued and (\d+) s in all/.exec(doc);
  t.ok(m, 'the page gives the demo timing');
  t.equal(Number(m?.[1]) * 1000, DEMO_VIDEO_TIMING.queueMs, 'queued as documented');
  t.equal(Number(m?.[2]) * 1000, DEMO_VIDEO_TIMING.renderMs, 'rendered as documented');

  const looks = looksUntilDone(DEMO_VIDEO_TIMING.renderMs, jobs.pollIntervalMs, jobs.maxPollIntervalMs);
  const readyMs = looks[looks.length - 1]!;
  const ready = /a video is ready about (\d+) s after its submit/.exec(doc);
  t.ok(ready, 'the page says when a demo video is ready');
  t.equal(Number(ready?.[1]) * 1000, readyMs, `the look that finds it done comes ${readyMs} ms after the submit (looks at ${looks.join(', ')} ms)`);
  // The render ends on a look, not just after one: no look is wasted waiting for the next doubling.
  t.equal(readyMs, DEMO_VIDEO_TIMING.renderMs, 'the render ends exactly at a look');
  const third = /A render of \d+ s would wait for the third look, at (\d+) s/.exec(doc);
  t.equal(
    Number(third?.[1]) * 1000,
    looksUntilDone(DEMO_VIDEO_TIMING.renderMs + 1, jobs.pollIntervalMs, jobs.maxPollIntervalMs).at(-1),
    'and the page says what a longer render costs',
  );
});
