// The console in a real browser: Playwright (playwright-core) driving the system Chromium (Debian's
// `chromium` package). Sign in with a link, create a key and use it with the official SDK, see the
// call in usage with its charge, export CSV, revoke the key and see 401, run a streaming playground
// call, sign out. Screenshots of each page go to test-results/ for review. A missing Chromium is a
// failure that says how to install it, never a silent skip.
import Anthropic from '@anthropic-ai/sdk';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import type { Test } from 'tap';
import { PROJECT_ROOT } from '../../src/config/config.js';
import { startConsoleStack } from '../helpers/console-stack.js';
import { eachEngine } from '../helpers/engines.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = join(PROJECT_ROOT, 'test-results');
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

async function openBrowser(t: Test): Promise<BrowserContext | undefined> {
  if (!existsSync(CHROMIUM)) {
    t.fail(
      `Chromium is not installed at ${CHROMIUM}: the console's browser tests need it. Install it with: sudo apt-get update && sudo apt-get install -y chromium (.ci/run does this on CI)`,
    );
    return undefined;
  }
  const profile = mkdtempSync(join(tmpdir(), 'inkgate-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, acceptDownloads: true, timeout: 60_000 });
  t.teardown(async () => {
    await ctx.close();
    rmSync(profile, { recursive: true, force: true });
  });
  ctx.setDefaultTimeout(30_000);
  return ctx;
}

/**
 * Fails the test on a script dialog (an escaping failure) or a CSP violation (a page breaking its
 * own policy). While `resending.on` (a reload of a posted page) the browser's "resend the form?"
 * prompt, if it shows one, is accepted instead.
 */
function watch(t: Test, page: Page, resending: { on: boolean }): void {
  page.on('dialog', (d) => {
    if (resending.on && (d.type() === 'beforeunload' || d.type() === 'confirm')) return void d.accept();
    t.fail(`a script dialog opened: ${d.message()}`);
    void d.dismiss();
  });
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) t.fail(`CSP violation: ${m.text()}`);
  });
  page.on('pageerror', (e) => t.fail(`script error: ${e.message}`));
}

eachEngine('the console end to end in Chromium', async (t, engine) => {
  const shot = (page: Page, name: string) => page.screenshot({ path: join(SHOTS, `console-${engine}-${name}.png`), fullPage: true });
  mkdirSync(SHOTS, { recursive: true });
  const ctx = await openBrowser(t);
  if (!ctx) return;
  const s = await startConsoleStack(t, { paceMs: 30, engine });
  const base = s.g.url;
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  const resending = { on: false };
  watch(t, page, resending);

  // Sign in with a link.
  const link = await s.link();
  await page.goto(link);
  await shot(page, 'signin');
  // By keyboard: the button has the focus (autofocus, which the browser applies once the page is
  // parsed: waited for, as Enter pressed before it goes nowhere), Enter presses it.
  await page.waitForFunction(() => document.activeElement?.tagName === 'BUTTON', undefined, { timeout: 30_000 });
  await page.keyboard.press('Enter');
  await page.waitForURL(`${base}/console`);
  t.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'Overview');
  const cookies = await ctx.cookies(`${base}/console`);
  const c = cookies.find((x) => x.name === 'inkgate_console');
  t.ok(c?.httpOnly, 'HttpOnly session cookie');
  t.equal(c?.sameSite, 'Strict');
  t.equal(await page.evaluate(() => document.cookie), '', 'no script can read the session');
  await shot(page, 'overview');

  // The link is used up.
  const again = await ctx.newPage();
  await again.goto(link);
  await again.getByRole('button', { name: 'Sign in' }).click();
  t.match(await again.locator('[role=alert]').textContent(), /already used|expired/);
  await again.close();

  // Create a key (with script in its name) and use it with the official SDK.
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByLabel('Name').fill('<img src=x onerror=alert(1)> sdk');
  await page.getByLabel('Lifetime Ink limit (optional)').fill('20000');
  await page.getByRole('button', { name: 'Create key' }).click();
  const raw = await page.locator('#raw-key').inputValue();
  t.match(raw, /^svc_[A-Za-z0-9_-]{43}$/, 'the raw key is shown once');
  await page.getByRole('button', { name: 'Copy' }).click();
  await shot(page, 'key-created');
  t.equal(await page.locator('td', { hasText: '<img src=x onerror=alert(1)> sdk' }).count(), 1, 'the name shows as text');

  // Reloading the answer re-posts the form: it is told the key exists, and no second key is made.
  const keyCount = async () => (await s.g.db.pool.query('SELECT count(*)::int AS n FROM api_keys WHERE account_id = $1', [s.accountId])).rows[0].n as number;
  const keysBefore = await keyCount();
  resending.on = true;
  const reloaded = await page.reload();
  resending.on = false;
  t.equal(reloaded?.request().method(), 'POST', 'the reload re-sent the form');
  t.equal(reloaded?.status(), 409);
  t.equal(await page.getByRole('heading', { level: 1 }).textContent(), 'Key already created');
  t.notOk((await page.content()).includes(raw), 'the reload does not show the raw key again');
  await shot(page, 'key-reloaded');
  await page.getByRole('link', { name: 'Back to your keys' }).click();
  await page.waitForURL(`${base}/console/keys`);
  t.equal(await page.locator('td', { hasText: '<img src=x onerror=alert(1)> sdk' }).count(), 1, 'the key list has exactly one such key');
  t.equal(await keyCount(), keysBefore, 'and the database no new one');
  const client = new Anthropic({ baseURL: base, authToken: raw, apiKey: null, maxRetries: 0 });
  const { response } = await client.messages
    .create({ model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'Hello from the SDK' }] })
    .withResponse();
  const rid = response.headers.get('x-service-request-id')!;
  const charged = Number(response.headers.get('x-service-ink-charged'));
  await page.goto(`${base}/console/keys`);
  t.notOk((await page.content()).includes(raw), 'on the next visit the raw key is gone');

  // The key's usage frame, chosen in its row's menu and saved: its next stream ends with the comment.
  const frameMenu = page.getByLabel('Usage frame of <img src=x onerror=alert(1)> sdk', { exact: true });
  t.equal(await frameMenu.inputValue(), 'event', 'a new key starts at event');
  await frameMenu.selectOption('comment');
  await page.getByRole('button', { name: 'Save the usage frame of <img src=x onerror=alert(1)> sdk' }).click();
  await page.waitForURL(`${base}/console/keys`);
  t.equal(
    await page.getByLabel('Usage frame of <img src=x onerror=alert(1)> sdk', { exact: true }).inputValue(),
    'comment',
    'the page shows the saved setting',
  );
  const framed = await client.messages
    .create({ model: 'sonnet', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'Hello again' }] })
    .asResponse();
  t.match(await framed.text(), /\n: service\.usage \{[^\n]+\}\n\n$/, "the key's next stream carries the usage comment");

  // The call appears in usage with its charge; CSV export has it.
  await page.getByRole('link', { name: 'Usage' }).click();
  const row = page.locator('tr', { hasText: rid });
  t.equal(await row.count(), 1, 'the request is listed under the id the SDK saw');
  t.equal(Number((await row.locator('td').nth(8).textContent())!.replace(/,/g, '')), charged, 'with the charge the SDK saw');
  await shot(page, 'usage');
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Export CSV' }).click()]);
  const csv = readFileSync((await download.path())!, 'utf8');
  t.match(csv, new RegExp(`^${rid},.*,${charged},settled,`, 'm'), 'the CSV has the request and its charge');

  // Revoke the key: the SDK gets 401.
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.getByRole('button', { name: 'Revoke <img src=x onerror=alert(1)> sdk' }).click();
  await page.waitForURL(`${base}/console/keys`);
  const err = await client.messages.create({ model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'again' }] }).catch((e: unknown) => e);
  t.ok(err instanceof Anthropic.AuthenticationError, 'a revoked key gets 401');
  await shot(page, 'keys');

  // A streaming playground call: text arrives before the charge, then the charge and the request id.
  await page.getByRole('link', { name: 'Playground' }).click();
  await page.getByLabel('Model').selectOption('messages:assistant-sonnet-5');
  await page.getByLabel('Prompt').fill('Tell me a short story about ink.');
  await page.getByLabel('Max tokens').fill('200');
  await page.getByRole('button', { name: 'Send' }).click();
  await page.waitForFunction(
    () => (document.getElementById('reply')?.textContent ?? '').length > 0 && document.getElementById('charged')?.textContent === '…',
    undefined,
    { polling: 'raf' },
  );
  t.pass('the reply shows before the stream ended (streamed)');
  await page.waitForFunction(() => /Ink$/.test(document.getElementById('charged')?.textContent ?? ''));
  const pgRid = (await page.locator('#request-id').textContent())!;
  t.match(pgRid, /^req_[0-9a-f]{32}$/);
  const pgCharged = Number((await page.locator('#charged').textContent())!.replace(/[^0-9]/g, ''));
  await s.g.gw.services.escrow.beforeView();
  t.equal(Number((await s.g.gw.services.ledger.getRequest(pgRid))!.charged_ink), pgCharged, 'the charge shown is the ledger charge');
  t.notMatch(await page.content(), /svc_[A-Za-z0-9_-]{43}/, 'no key in the playground page');
  await shot(page, 'playground');

  // The Responses protocol: its deltas and its `: service.usage` comment.
  await page.getByLabel('Model').selectOption('responses:text-6-astra');
  await page.getByLabel('Prompt').fill('Say hello in Responses.');
  await page.getByRole('button', { name: 'Send' }).click();
  await page.waitForFunction(
    (prev) =>
      /^req_/.test(document.getElementById('request-id')?.textContent ?? '') &&
      document.getElementById('request-id')?.textContent !== prev &&
      /Ink$/.test(document.getElementById('charged')?.textContent ?? ''),
    pgRid,
  );
  const rRid = (await page.locator('#request-id').textContent())!;
  t.ok((await page.locator('#reply').textContent())!.length > 0, 'the Responses reply is shown');
  await s.g.gw.services.escrow.beforeView();
  const rRec = await s.g.gw.services.ledger.getRequest(rRid);
  t.equal(rRec!.product, 'responses');
  t.equal(`${rRec!.charged_ink} Ink`, (await page.locator('#charged').textContent())!.replace(/,/g, ''), 'its charge as the ledger has it');

  await page.getByRole('link', { name: 'Billing' }).click();
  await shot(page, 'billing');
  await page.getByRole('link', { name: 'Reference' }).click();
  await shot(page, 'reference');
  await page.getByRole('link', { name: 'Messages', exact: true }).click();
  await shot(page, 'reference-messages');

  // Sign out; the old session cookie no longer opens anything.
  const before = (await ctx.cookies(`${base}/console`)).find((x) => x.name === 'inkgate_console')!;
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(/\/console\/signin/);
  await ctx.addCookies([before]);
  await page.goto(`${base}/console/keys`);
  t.match(page.url(), /\/console\/signin$/, 'a signed-out session cookie is refused');
  await assertLedgerInvariant(t, s.g.db.pool);
});
