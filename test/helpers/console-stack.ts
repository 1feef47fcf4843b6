// A gateway with its console, the Anthropic and OpenAI simulators behind the text lanes, and one
// funded account; plus the console's sign-in done over plain HTTP (the browser test does it in Chromium).
import type { Test } from 'tap';
import { request } from 'undici';
import { createAccount } from '../../src/accounts/accounts.js';
import { setLane } from '../../src/deployment/state.js';
import { createSignInLink } from '../../src/console/sessions.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { startTestGateway, type TestGateway } from './gateway.js';
import type { EngineName } from '../../src/server/engine.js';

export interface ConsoleStack {
  readonly g: TestGateway;
  readonly accountId: string;
  /** A fresh one-time sign-in URL for `accountId` (or another account). */
  link(accountId?: string): Promise<string>;
  /** A second funded account (for cross-account checks). */
  otherAccount(): Promise<string>;
}

export async function startConsoleStack(t: Test, opts: { paceMs?: number; engine?: EngineName } = {}): Promise<ConsoleStack> {
  const anthropic = await startAnthropicSimulator({ apiKey: 'sk-ant-console', tokenPaceMs: opts.paceMs ?? 0 });
  t.teardown(() => anthropic.close());
  const openai = await startOpenAISimulator({ apiKey: 'sk-openai-console', tokenPaceMs: opts.paceMs ?? 0 });
  t.teardown(() => openai.close());
  const g = await startTestGateway(t, {
    ...(opts.engine ? { server: { engine: opts.engine } } : {}),
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: 'sk-ant-console' }, openai: { baseUrl: openai.url, apiKey: 'sk-openai-console' } },
  });
  await setLane(g.db.pool, 'messages', true);
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  const funded = async (name: string) => {
    const acc = await createAccount(g.db.pool, { name, planId: 'pro' });
    await g.gw.services.ledger.topUp(acc.id, 50_000, 'console test top-up');
    await g.gw.services.ledger.grant(acc.id, 1_000);
    return acc.id;
  };
  const accountId = await funded('Console Tester');
  return {
    g,
    accountId,
    link: async (id = accountId) => `${g.url}/console/signin?token=${(await createSignInLink(g.db.pool, id, 900_000)).token}`,
    otherAccount: () => funded('Someone Else'),
  };
}

export interface HttpSession {
  readonly cookie: string;
  readonly csrf: string;
}

/** Signs in with a link over HTTP: the POST the link page's button makes. */
export async function signInHttp(base: string, link: string): Promise<HttpSession> {
  const token = new URL(link).searchParams.get('token')!;
  const r = await request(`${base}/console/signin`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: `token=${token}`,
  });
  await r.body.text();
  const set = r.headers['set-cookie'];
  const cookie = (Array.isArray(set) ? set[0]! : (set ?? '')).split(';')[0]!;
  if (r.statusCode !== 303 || cookie === '') throw new Error(`sign-in failed: ${r.statusCode}`);
  const page = await getPage(base, '/console', cookie);
  const csrf = /name="csrf" value="([^"]+)"/.exec(page.text)?.[1];
  if (!csrf) throw new Error('no CSRF token on the overview');
  return { cookie, csrf };
}

export interface PageReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

export async function getPage(base: string, path: string, cookie?: string): Promise<PageReply> {
  const r = await request(base + path, { headers: cookie ? { cookie } : {} });
  return { status: r.statusCode, headers: r.headers, text: await r.body.text() };
}

/** The one-time nonce of a fresh key-creation form, as the keys page renders it for this session. */
export async function keyFormNonce(base: string, cookie: string): Promise<string> {
  const page = await getPage(base, '/console/keys', cookie);
  const nonce = /name="nonce" value="([^"]+)"/.exec(page.text)?.[1];
  if (!nonce) throw new Error(`no key-creation nonce on the keys page (${page.status})`);
  return nonce;
}

/** Posts the key-creation form the way the page does: with the session's CSRF token and a fresh nonce. */
export async function createKeyHttp(base: string, sess: HttpSession, fields: Record<string, string>): Promise<PageReply> {
  return postForm(base, '/console/keys', { csrf: sess.csrf, nonce: await keyFormNonce(base, sess.cookie), ...fields }, sess.cookie);
}

export async function postForm(base: string, path: string, fields: Record<string, string>, cookie?: string): Promise<PageReply> {
  const r = await request(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(cookie ? { cookie } : {}) },
    body: new URLSearchParams(fields).toString(),
  });
  return { status: r.statusCode, headers: r.headers, text: await r.body.text() };
}
