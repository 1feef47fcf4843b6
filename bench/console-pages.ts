// Page weight and time to first paint of the console, measured in the system Chromium against a
// running gateway (for example `npm run demo`, which prints a sign-in link):
//   npm run bench:console -- 'http://127.0.0.1:8080/console/signin?token=...'
// Prints, per page, the bytes transferred (HTML + CSS + JS, uncompressed as served) and the
// first-contentful-paint the browser reports. A measurement, not a test: nothing is asserted.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const PAGES = ['/console', '/console/keys', '/console/usage', '/console/billing', '/console/playground', '/console/reference', '/console/reference/messages'];

async function main(): Promise<void> {
  const link = process.argv[2];
  if (!link?.includes('/console/signin?token=')) throw new Error('usage: bench:console <sign-in link>');
  const base = new URL(link).origin;
  const profile = mkdtempSync(join(tmpdir(), 'inkgate-bench-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  try {
    const page = ctx.pages()[0] ?? (await ctx.newPage());
    await page.goto(link);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${base}/console`);
    console.log('page                          bytes  requests  first-contentful-paint');
    const cdp = await ctx.newCDPSession(page);
    // A cold load each time: the browser cache would hide the CSS and JS after the first page.
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
    for (const p of PAGES) {
      await page.goto(base + p, { waitUntil: 'load' });
      const m = await page.evaluate(
        () =>
          new Promise<{ bytes: number; requests: number; fcp: number }>((done) => {
            // The paint entry is queued after the frame that painted: wait for it.
            requestAnimationFrame(() =>
              setTimeout(() => {
                const nav = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming;
                const res = performance.getEntriesByType('resource') as PerformanceResourceTiming[];
                const fcp = performance.getEntriesByType('paint').find((e) => e.name === 'first-contentful-paint')?.startTime ?? -1;
                done({ bytes: nav.decodedBodySize + res.reduce((a, r) => a + r.decodedBodySize, 0), requests: 1 + res.length, fcp });
              }, 50),
            );
          }),
      );
      console.log(`${p.padEnd(28)} ${String(m.bytes).padStart(7)}  ${String(m.requests).padStart(8)}  ${m.fcp.toFixed(0)} ms`);
    }
  } finally {
    await ctx.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error((e as Error).message);
  process.exit(1);
});
