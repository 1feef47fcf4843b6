// Billing: the account's journal in plain words (top-ups, grants, period roll-overs, charges), each
// entry with the balance after it, counted back from the wallet so the last figure is the ledger's.
import { readJournal, type JournalView } from './account-data.js';
import type { SignedIn } from './context.js';
import { esc, ink, page, sendHtml, table, time } from './html.js';

const PAGE_ROWS = 100;

/** What a journal kind means to the account holder. */
const WORDS: Readonly<Record<string, string>> = {
  topup: 'Top-up (pay-as-you-go Ink bought)',
  grant: "Period grant (the plan's Ink for a new period)",
  expire: 'Period roll-over (unused grant Ink expired)',
  reserve: 'Hold for a request',
  lease_hold: 'Hold for a request',
  settle: 'Charge for a request',
  late_charge: 'Late charge for a request (usage arrived after the hold ended)',
  release: 'Hold returned (request not run)',
  refund: 'Refund',
  reconcile: 'Charge settled by reconciliation',
  lease: 'Ink set aside for fast holds (on one gateway instance)',
  lease_return: 'Set-aside Ink returned to the wallet',
  // Requests served from set-aside Ink are charged in batches: one entry for several requests.
  lease_flush: 'Requests charged from set-aside Ink',
};

function moved(entry: JournalView): string {
  const parts: string[] = [];
  if (entry.creditedInk) parts.push(`+${ink(entry.creditedInk)} added`);
  if (entry.chargedInk) parts.push(`−${ink(entry.chargedInk)} charged`);
  if (entry.expiredInk) parts.push(`−${ink(entry.expiredInk)} expired`);
  return parts.join(', ') || '<span class="muted">moved within the wallet</span>';
}

export async function billingPage(pageCtx: SignedIn): Promise<void> {
  await pageCtx.d.services.escrow.beforeView();
  const beforeRaw = pageCtx.query.get('before') ?? '';
  const before = /^\d{1,18}$/.test(beforeRaw) ? Number(beforeRaw) : undefined;
  const showHolds = pageCtx.query.get('holds') === '1';
  const { rows, balanceInk } = await readJournal(pageCtx.d.services.pool, pageCtx.session.accountId, before, PAGE_ROWS);
  const visible = showHolds ? rows : rows.filter((j) => j.creditedInk || j.chargedInk || j.expiredInk);
  const out = visible.map((entry) => [
    time(entry.at),
    esc(WORDS[entry.kind] ?? entry.kind),
    entry.requestId ? `<a href="/console/requests/${esc(entry.requestId)}"><code>${esc(entry.requestId)}</code></a>` : esc(entry.note ?? ''),
    moved(entry),
    `<span data-balance>${ink(entry.balanceAfterInk)}</span>`,
  ]);
  const older =
    rows.length === PAGE_ROWS
      ? `<p><a href="/console/billing?before=${rows[rows.length - 1]!.id}${showHolds ? '&amp;holds=1' : ''}">Older entries</a></p>`
      : '';
  const body = `<p>Unspent Ink now (available and reserved): <strong data-figure="unspent">${ink(balanceInk)} Ink</strong>.</p>
<p>${showHolds ? '<a href="/console/billing">Hide holds and internal moves</a>' : '<a href="/console/billing?holds=1">Show holds and internal moves too</a>'}</p>
${table(['Time (UTC)', 'Entry', 'Request or note', 'Ink', 'Unspent after'], out, 'Journal entries')}${older}`;
  sendHtml(pageCtx.ctx, 200, page({ title: 'Billing', nav: 'billing', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName }, body));
}
