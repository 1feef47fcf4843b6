// Overview (the same figures as GET /v1/me) and API keys (create, list, revoke, edit the cap and
// the usage frame).
import { AdminError, createKeyIn, keyChangeInForce, revokeKey, setKeyLimit, updateKey, type CreatedKey } from '../accounts/accounts.js';
import { DEFAULT_USAGE_FRAME, isUsageFrame, USAGE_FRAMES, type UsageFrame } from '../accounts/usage-frame.js';
import { inkToUsd } from '../catalog/pricing.js';
import { withTx } from '../store/pool.js';
import { keyOfAccount, readAccount, readKeys, type KeyView } from './account-data.js';
import { PageError, type SignedIn } from './context.js';
import { claimFormNonce, issueFormNonce, recordNonceKey } from './form-nonces.js';
import { csrfField, esc, ink, page, redirect, sendHtml, table, time } from './html.js';

export async function overviewPage(pageCtx: SignedIn): Promise<void> {
  // This instance's unflushed request records first (read-your-writes, as GET /v1/me does): both
  // reads below show what they charged and hold.
  await pageCtx.d.services.escrow.beforeView();
  const db = pageCtx.d.services.pool;
  const [a, keys] = await Promise.all([readAccount(db, pageCtx.session.accountId), readKeys(db, pageCtx.session.accountId)]);
  if (!a) throw new PageError(404, 'This account no longer exists.');
  const periodEnds = new Date(a.periodStartedAt.getTime() + a.periodDays * 86_400_000);
  const body = `<section aria-labelledby="bal"><h2 id="bal">Balance</h2>
<dl class="figures">
<div><dt>Balance</dt><dd data-figure="balance">${ink(a.ink.balance)} Ink <span class="muted" data-figure="usd-payg-equivalent">(${esc(a.ink.usd_payg_equivalent.toFixed(2))} USD at the pay-as-you-go rate)</span></dd></div>
<div><dt>Period grant remaining</dt><dd data-figure="grant">${ink(a.ink.period_grant_remaining)} Ink</dd></div>
<div><dt>Pay-as-you-go</dt><dd data-figure="payg">${ink(a.ink.payg_balance)} Ink <span class="muted">(${esc(inkToUsd(a.ink.payg_balance).toFixed(2))} USD)</span></dd></div>
<div><dt>Reserved by running requests</dt><dd data-figure="reserved">${ink(a.reservedInk)} Ink</dd></div>
<div><dt>Charged, all time</dt><dd data-figure="charged">${ink(a.chargedInk)} Ink</dd></div>
</dl></section>
<section aria-labelledby="plan"><h2 id="plan">Plan</h2>
<p><strong>${esc(a.planLabel)}</strong> (${a.paid ? 'paid' : 'free'}): ${ink(a.periodGrantInk)} Ink granted every ${a.periodDays} days; this period ends ${time(periodEnds)}. Completed top-ups: ${a.topupsCompleted}.</p>
<p class="muted">1 Ink = 0.01 USD. These are the figures <code>GET /v1/me</code> answers with. Its <code>usd_payg_equivalent</code> is the balance's USD figure above: the whole balance, grant included, valued at the pay-as-you-go rate of 100 Ink per USD; the pay-as-you-go wallet alone is the USD beside Pay-as-you-go.</p></section>
<section aria-labelledby="spend"><h2 id="spend">Spend per key</h2>
${table(
  ['Key', 'Prefix', 'Charged', 'Reserved', 'Limit', 'State'],
  keys.map((key) => [
    esc(key.name),
    `<code>${esc(key.prefix)}…${esc(key.last4)}</code>`,
    ink(key.spend.ink_charged),
    ink(key.spend.ink_reserved),
    key.spend.ink_limit === null ? 'none' : ink(key.spend.ink_limit),
    keyState(key),
  ]),
  'Keys',
)}
</section>`;
  sendHtml(pageCtx.ctx, 200, page({ title: 'Overview', nav: 'overview', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName }, body));
}

function keyState(key: KeyView): string {
  if (key.revokedAt) return 'revoked';
  if (key.expiresAt && key.expiresAt.getTime() <= Date.now()) return 'expired';
  return 'live';
}

export async function keysPage(pageCtx: SignedIn, created?: CreatedKey, problem?: string): Promise<void> {
  const [keys, nonce] = await Promise.all([
    readKeys(pageCtx.d.services.pool, pageCtx.session.accountId),
    issueFormNonce(pageCtx.d.services.pool, pageCtx.session.id),
  ]);
  const csrf = csrfField(pageCtx.session.csrf);
  const shown = created
    ? `<section class="created" aria-labelledby="newkey"><h2 id="newkey">Your new key</h2>
<p>Copy it now: it is shown this once and cannot be shown again.</p>
<p><input id="raw-key" class="raw-key" readonly value="${esc(created.key)}" aria-label="New API key" size="50"> <button type="button" class="copy" data-copy="raw-key">Copy</button></p></section>`
    : '';
  const rows = keys.map((key) => [
    esc(key.name) + (key.playground ? ' <span class="muted">(used by the playground)</span>' : ''),
    `<code>${esc(key.prefix)}…${esc(key.last4)}</code>`,
    ink(key.spend.ink_charged),
    `<form method="post" action="/console/keys/${esc(key.id)}/limit" class="inline">${csrf}<label>Limit <input name="ink_limit" inputmode="numeric" size="8" value="${key.spend.ink_limit ?? ''}" placeholder="none" aria-label="Lifetime Ink limit of ${esc(key.name)}"></label> <button type="submit" aria-label="Save the limit of ${esc(key.name)}">Save</button></form>`,
    key.revokedAt ? esc(key.usageFrame) : frameForm(key, csrf),
    time(key.expiresAt),
    keyState(key),
    key.revokedAt
      ? ''
      : `<form method="post" action="/console/keys/${esc(key.id)}/revoke" class="inline">${csrf}<button type="submit" class="danger" aria-label="Revoke ${esc(key.name)}">Revoke</button></form>`,
  ]);
  const body = `${problem ? `<p role="alert" class="problem">${esc(problem)}</p>` : ''}${shown}
<section aria-labelledby="create"><h2 id="create">Create a key</h2>
<form method="post" action="/console/keys" class="stack">${csrf}<input type="hidden" name="nonce" value="${esc(nonce)}">
<label>Name <input name="name" required maxlength="200"></label>
<label>Lifetime Ink limit (optional) <input name="ink_limit" inputmode="numeric" pattern="[0-9]*"></label>
<label>Expires (optional) <input name="expires" type="date"></label>
<label>Usage frame ${frameSelect(DEFAULT_USAGE_FRAME)}</label>
<button type="submit">Create key</button></form>
<p class="muted">A key needs a paid plan or at least one completed top-up.</p></section>
<section aria-labelledby="list"><h2 id="list">Keys</h2>
${table(['Name', 'Key', 'Charged', 'Lifetime limit', 'Usage frame', 'Expires', 'State', ''], rows, 'Keys')}
${FRAME_HELP}</section>`;
  sendHtml(
    pageCtx.ctx,
    created ? 201 : problem ? 400 : 200,
    page({ title: 'API keys', nav: 'keys', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName, scripts: ['console.js'] }, body),
  );
}

/** What each usage frame is for, said once under the keys table. */
const FRAME_HELP = `<p class="muted">Usage frame: how a streamed text reply tells its charge at the end. <strong>event</strong>: a <code>service.usage</code> event (the default); <strong>comment</strong>: the same figures as an SSE comment line, for clients that refuse events they do not know (the Vercel AI SDK, opencode); <strong>none</strong>: no frame (the charge is in the console and <code>GET /v1/me</code>). A request's <code>X-Service-Usage-Frame</code> header overrides it.</p>`;

function frameSelect(selected: UsageFrame, label?: string): string {
  const options = USAGE_FRAMES.map((f) => `<option value="${f}"${f === selected ? ' selected' : ''}>${f}</option>`).join('');
  return `<select name="usage_frame"${label ? ` aria-label="${label}"` : ''}>${options}</select>`;
}

/** A live key's usage frame, editable in place like its limit. */
function frameForm(key: KeyView, csrf: string): string {
  return `<form method="post" action="/console/keys/${esc(key.id)}/usage-frame" class="inline">${csrf}${frameSelect(key.usageFrame, `Usage frame of ${esc(key.name)}`)} <button type="submit" aria-label="Save the usage frame of ${esc(key.name)}">Save</button></form>`;
}

/** One of the usage frames (`ifEmpty` when none is sent); anything else is the person's mistake (a hand-made post). */
function frameField(value: string | null, ifEmpty?: UsageFrame): UsageFrame {
  const s = (value ?? '').trim();
  if (s === '' && ifEmpty !== undefined) return ifEmpty;
  if (!isUsageFrame(s)) throw new AdminError(`The usage frame must be one of ${USAGE_FRAMES.join(', ')}.`);
  return s;
}

/** Whole Ink or empty (none); anything else is the person's mistake. */
function limitField(value: string | null): number | null {
  const s = (value ?? '').trim();
  if (s === '' || s === 'none') return null;
  if (!/^\d{1,15}$/.test(s)) throw new AdminError('The limit must be a whole number of Ink, or empty for none.');
  return Number(s);
}

export async function createKeyAction(pageCtx: SignedIn): Promise<void> {
  const nonce = pageCtx.form.get('nonce') ?? '';
  try {
    const input = keyFields(pageCtx);
    const pool = pageCtx.d.services.pool;
    // The nonce is claimed in the key's own transaction: a refused key (free plan) leaves it unused.
    const outcome = await withTx(pool, async (client) => {
      const claim = await claimFormNonce(client, pageCtx.session.id, nonce);
      if (claim.state !== 'claimed') return claim;
      const created = await createKeyIn(client, { accountId: pageCtx.session.accountId, ...input });
      await recordNonceKey(client, nonce, created.id);
      return { state: 'created' as const, created };
    });
    if (outcome.state === 'unknown')
      throw new PageError(
        403,
        'This form is no longer valid (it belongs to another session, expired, or was replaced by newer ones). Open the keys page again and create the key from there.',
      );
    if (outcome.state === 'used') return alreadyCreatedPage(pageCtx, outcome.keyId);
    // Answered with the page itself (not a redirect): the raw key exists only in this one answer.
    await keysPage(pageCtx, outcome.created);
  } catch (e) {
    if (e instanceof AdminError) return keysPage(pageCtx, undefined, sentence(e.message));
    throw e;
  }
}

/** The form's fields, or the person's mistake as an AdminError. */
function keyFields(pageCtx: SignedIn): { name: string; inkLimit: number | null; expiresAt: Date | null; usageFrame: UsageFrame } {
  const name = (pageCtx.form.get('name') ?? '').trim();
  if (name.length < 1 || name.length > 200) throw new AdminError('A key needs a name of 1 to 200 characters.');
  const inkLimit = limitField(pageCtx.form.get('ink_limit'));
  const exp = (pageCtx.form.get('expires') ?? '').trim();
  let expiresAt: Date | null = null;
  if (exp !== '') {
    expiresAt = /^\d{4}-\d{2}-\d{2}$/.test(exp) ? new Date(`${exp}T23:59:59Z`) : new Date(NaN);
    if (Number.isNaN(expiresAt.getTime()) || expiresAt.getTime() <= Date.now()) throw new AdminError('The expiry must be a day in the future.');
  }
  return { name, inkLimit, expiresAt, usageFrame: frameField(pageCtx.form.get('usage_frame'), DEFAULT_USAGE_FRAME) };
}

/**
 * The same form posted again (a reload of the page that showed the key, a double click): nothing is
 * created, and the raw key cannot be shown again since it was never stored.
 */
async function alreadyCreatedPage(pageCtx: SignedIn, keyId: string | null): Promise<void> {
  const keys = await readKeys(pageCtx.d.services.pool, pageCtx.session.accountId);
  const k = keys.find((x) => x.id === keyId);
  const which = k ? `The key <strong>${esc(k.name)}</strong> (<code>${esc(k.prefix)}…${esc(k.last4)}</code>)` : 'The key';
  const body = `<p role="alert" class="problem">${which} was already created by this form; nothing new was created.</p>
<p>A key is shown only once, in the answer to the form that created it, and cannot be shown again. If you did not copy it, revoke it and create a new one.</p>
<p><a href="/console/keys">Back to your keys</a></p>`;
  sendHtml(pageCtx.ctx, 409, page({ title: 'Key already created', nav: 'keys', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName }, body));
}

const sentence = (m: string): string => m.charAt(0).toUpperCase() + m.slice(1) + (m.endsWith('.') ? '' : '.');

async function ownKey(pageCtx: SignedIn): Promise<string> {
  const id = pageCtx.params[0]!;
  // Another account's key id answers exactly like an unknown one.
  if (!(await keyOfAccount(pageCtx.d.services.pool, pageCtx.session.accountId, id))) throw new PageError(404, 'There is no such key on this account.');
  return id;
}

/**
 * The page that follows a key's change is shown once every instance has the change in force, as
 * with the CLI. Past the bound the change is saved all the same, and the page shows it: an
 * instance still holding from the key's lease stops when that lease expires.
 */
async function inForce(pageCtx: SignedIn, keyId: string): Promise<void> {
  await keyChangeInForce(pageCtx.d.services.pool, keyId, pageCtx.d.services.config.ledger.lease).catch((error: unknown) => {
    if (!(error instanceof AdminError)) throw error;
  });
}

export async function revokeKeyAction(pageCtx: SignedIn): Promise<void> {
  const id = await ownKey(pageCtx);
  await revokeKey(pageCtx.d.services.pool, id);
  await inForce(pageCtx, id);
  redirect(pageCtx.ctx, '/console/keys');
}

export async function limitKeyAction(pageCtx: SignedIn): Promise<void> {
  const id = await ownKey(pageCtx);
  let limit: number | null;
  try {
    limit = limitField(pageCtx.form.get('ink_limit'));
  } catch (e) {
    return keysPage(pageCtx, undefined, (e as Error).message);
  }
  await setKeyLimit(pageCtx.d.services.pool, id, limit);
  await inForce(pageCtx, id);
  redirect(pageCtx.ctx, '/console/keys');
}

export async function usageFrameKeyAction(pageCtx: SignedIn): Promise<void> {
  const id = await ownKey(pageCtx);
  let usageFrame: UsageFrame;
  try {
    // No default here: the form always sends its choice.
    usageFrame = frameField(pageCtx.form.get('usage_frame'));
  } catch (e) {
    return keysPage(pageCtx, undefined, (e as Error).message);
  }
  await updateKey(pageCtx.d.services.pool, id, { usageFrame });
  await inForce(pageCtx, id);
  redirect(pageCtx.ctx, '/console/keys');
}
