// A generated video played in a real browser: a generation runs to the end against the Ark
// simulator, and a <video> element in the system Chromium (playwright-core) is pointed at its
// signed link. The player must load it through range requests the media host answers 206, decode
// a frame of the simulator's MP4 (H.264, 64x64, one second), and seek. On both engines, from the
// filesystem store and from an S3-protocol server.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import root, { type Test } from 'tap';
import type { EngineName } from '../../src/server/engine.js';
import { eachEngine } from '../helpers/engines.js';
import { startS3 } from '../helpers/s3-server.js';
import { runToEnd, startVideoHarness } from '../integration/video-harness.js';

const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-quic',
  '--disable-sync',
];

let ctx: BrowserContext | undefined;
/** One browser for every case, closed when the file ends. */
async function browser(t: Test): Promise<BrowserContext | undefined> {
  if (!existsSync(CHROMIUM)) {
    t.fail(`Chromium is not installed at ${CHROMIUM}: install it with: sudo apt-get update && sudo apt-get install -y chromium (.ci/run does this on CI)`);
    return undefined;
  }
  if (ctx === undefined) {
    const profile = mkdtempSync(join(tmpdir(), 'inkgate-chromium-'));
    const c = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, timeout: 60_000 });
    ctx = c;
    c.setDefaultTimeout(30_000);
    root.teardown(async () => {
      await c.close();
      rmSync(profile, { recursive: true, force: true });
    });
  }
  return ctx;
}

interface Seen {
  status: number;
  range: string | undefined;
}

async function playsThroughRanges(t: Test, engine: EngineName, store: 'fs' | 's3'): Promise<void> {
  const c = await browser(t);
  if (!c) return;
  let media;
  if (store === 's3') {
    const s3 = await startS3(t);
    await s3.createBucket('videos');
    media = s3.store('videos');
  }
  const h = await startVideoHarness(t, { config: { server: { engine } }, ...(media !== undefined ? { media } : {}) });
  const { key } = await h.funded(5_000);
  const submitted = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'a red fox in snow', duration: 5 });
  t.equal(submitted.status, 202);
  const done = await runToEnd(h, key, submitted.json.id);
  t.equal(done.status, 'succeeded');
  const url: string = done.video.url;

  const page = await c.newPage();
  t.teardown(() => page.close());
  const seen: Seen[] = [];
  page.on('response', (r) => {
    if (r.url().includes('/media/')) seen.push({ status: r.status(), range: r.request().headers().range });
  });
  await page.setContent(`<video id="v" muted preload="auto" src="${url}"></video>`);
  const loaded = await page.waitForFunction(() => {
    const v = document.getElementById('v') as HTMLVideoElement;
    if (v.error) return { error: v.error.code };
    return v.readyState >= 2 ? { width: v.videoWidth, height: v.videoHeight, duration: v.duration } : false;
  });
  const info = (await loaded.jsonValue()) as { error?: number; width?: number; height?: number; duration?: number };
  t.notOk(info.error, `no media error (${JSON.stringify(info)})`);
  t.ok((info.width ?? 0) > 0 && (info.height ?? 0) > 0, `a frame was decoded: ${info.width}x${info.height}`);
  t.ok((info.duration ?? 0) > 0, `a duration: ${info.duration} s`);
  const seeked = await page.evaluate(
    () =>
      new Promise<number>((resolve) => {
        const v = document.getElementById('v') as HTMLVideoElement;
        v.addEventListener('seeked', () => resolve(v.currentTime), { once: true });
        v.currentTime = v.duration / 2;
      }),
  );
  t.ok(seeked > 0, `seeked to ${seeked} s`);
  t.ok(seen.length > 0, `the player fetched the link ${seen.length} time(s)`);
  t.ok(
    seen.every((s) => s.range !== undefined && /^bytes=\d+-\d*$/.test(s.range)),
    `every fetch was a range request: ${JSON.stringify(seen)}`,
  );
  t.ok(
    seen.every((s) => s.status === 206),
    'every range answered 206',
  );
}

for (const store of ['fs', 's3'] as const) {
  eachEngine(`a <video> plays a generated result through range requests, ${store} store`, (t, engine) => playsThroughRanges(t, engine, store), {
    timeout: 120_000,
  });
}
