// Sign-in by one-time link, and sign-out. The link opens a page with a button rather than signing
// in on GET: a mail scanner or link preview that fetches the address does not use up the link,
// and the session cookie (SameSite=Strict) is then set by a same-site form post.
import { esc, page, redirect, sendHtml } from './html.js';
import type { PageCtx, SignedIn } from './context.js';
import { PageError } from './context.js';
import { endSession, redeemSignInLink, sessionCookie } from './sessions.js';

export async function signInPage(pageCtx: PageCtx): Promise<void> {
  const token = pageCtx.query.get('token');
  if (pageCtx.session && token === null) return redirect(pageCtx.ctx, '/console');
  const body =
    token === null
      ? `<p>Sign-in is by one-time link. Ask the operator of this gateway to run:</p>
<pre><code>inkgate console link --account usr_…</code></pre>
<p>and open the address it prints within 15 minutes. A link works once.</p>`
      : `<p>Continue to sign in to the inkgate console in this browser.</p>
<form method="post" action="/console/signin"><input type="hidden" name="token" value="${esc(token)}"><button type="submit" autofocus>Sign in</button></form>`;
  sendHtml(pageCtx.ctx, 200, page({ title: 'Sign in' }, body));
}

export async function signInAction(pageCtx: PageCtx): Promise<void> {
  const cfg = pageCtx.d.services.config.console;
  const s = await redeemSignInLink(pageCtx.d.services.pool, pageCtx.form.get('token') ?? '', cfg.sessionTtlMs);
  if (!s) throw new PageError(403, 'This sign-in link is not valid: it was already used, it expired, or it was mistyped. Ask for a new one.');
  redirect(pageCtx.ctx, '/console', [['Set-Cookie', sessionCookie(s.sessionId, Math.floor(cfg.sessionTtlMs / 1000), secure(pageCtx))]]);
}

export async function signOutAction(pageCtx: SignedIn): Promise<void> {
  await endSession(pageCtx.d.services.pool, pageCtx.session.id);
  redirect(pageCtx.ctx, '/console/signin?signed_out=1', [['Set-Cookie', sessionCookie('', 0, secure(pageCtx))]]);
}

/** Secure cookies when the console is reached over https (its configured URL, or a TLS-terminating proxy). */
function secure(pageCtx: PageCtx): boolean {
  const url = pageCtx.d.services.config.console.url ?? pageCtx.d.services.config.server.publicUrl;
  return url?.startsWith('https:') || pageCtx.ctx.header('x-forwarded-proto') === 'https';
}
