// Operator commands for the Ink ledger: top-ups, grants, period roll-over, request history,
// reconciliation from vendor usage files, and releasing a hold an operator has looked at.
// Each returns a JSON-serialisable result; errors are one line.
import { checkLedger, LEDGER_RULES } from '../ledger/invariant.js';
import type { Catalog } from '../catalog/models.js';
import { textChargeInk } from '../catalog/pricing.js';
import type { ReconcileReport, RequestRecord, VendorUsageRecord } from '../ledger/ledger.js';
import { readUsageFile } from '../ledger/reconcile-file.js';
import { need } from './args.js';
import { UsageError, type AdminCommand } from './command.js';

type Args = Parameters<AdminCommand['run']>[0];

const optionalWhole = (a: Args, name: string, min: number, max: number): number | undefined => {
  const v = a.flags[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !/^\d{1,15}$/.test(v) || Number(v) < min || Number(v) > max) {
    throw new UsageError(`--${name} must be a whole number from ${min} to ${max}`);
  }
  return Number(v);
};

const MAX_TOPUP_USD = 1_000_000;

/**
 * "12", "12.3", "12.34" USD to Ink (100 Ink per USD), by string arithmetic: no float ever
 * touches the amount. A third decimal would be a fraction of an Ink and is refused.
 */
export function usdToInk(usd: string): number {
  const m = /^(\d{1,7})(?:\.(\d{1,2}))?$/.exec(usd);
  if (!m) {
    if (/^\d+\.\d{3,}$/.test(usd)) throw new UsageError(`--usd ${usd} is a fraction of an Ink (1 Ink = 0.01 USD); give whole cents`);
    throw new UsageError(`--usd must be an amount in USD with at most two decimals, e.g. 25 or 12.50; got ${JSON.stringify(usd)}`);
  }
  const ink = Number(m[1]) * 100 + Number((m[2] ?? '').padEnd(2, '0'));
  if (ink < 1) throw new UsageError('--usd must be at least 0.01');
  if (ink > MAX_TOPUP_USD * 100) throw new UsageError(`--usd must be at most ${MAX_TOPUP_USD}`);
  return ink;
}

/**
 * The charge for one usage record: its charge_ink when given; otherwise, for a text request, its
 * token buckets priced at the request's model (pricing.ts, rounded up once). Throws RangeError
 * when the record cannot be priced: reconcile then skips it and the hold stays open.
 */
export function chargeForRecord(catalog: Catalog): (req: RequestRecord, rec: VendorUsageRecord) => number {
  return (req, rec) => {
    if (rec.chargeInk !== undefined) return rec.chargeInk;
    const u = rec.usage;
    if (req.product !== 'messages' && req.product !== 'responses') {
      throw new RangeError(`a ${req.product} record needs charge_ink`);
    }
    if (u?.inputTokens === undefined || u.outputTokens === undefined) {
      throw new RangeError('record has neither charge_ink nor input_tokens and output_tokens; cannot price it');
    }
    const model = catalog.text(req.model);
    if (!model) throw new RangeError(`unknown text model ${JSON.stringify(req.model)}`);
    return textChargeInk(model, {
      inputTokens: u.inputTokens,
      outputTokens: u.outputTokens,
      cacheReadTokens: u.cacheReadTokens ?? 0,
      cacheWriteTokens: u.cacheWriteTokens ?? 0,
    });
  };
}

function walletSummary(accountId: string, w: { grant_ink: number; payg_ink: number; held_grant_ink: number; held_payg_ink: number; topups_completed: number }) {
  return {
    account: accountId,
    balance_ink: w.grant_ink + w.payg_ink,
    period_grant_remaining_ink: w.grant_ink,
    payg_ink: w.payg_ink,
    held_ink: w.held_grant_ink + w.held_payg_ink,
    topups_completed: w.topups_completed,
  };
}

const holdOut = (h: ReconcileReport['settled']['items'][number]) => ({
  request_id: h.requestId,
  vendor_request_id: h.vendorRequestId,
  hold_ink: h.holdInk,
  charged_ink: h.chargedInk,
  released_ink: h.releasedInk,
  expired_ink: h.expiredInk,
});

/** The report in the CLI's snake_case. */
export function reconcileReportJson(r: ReconcileReport) {
  return {
    records_read: r.recordsRead,
    settled: { count: r.settled.count, items: r.settled.items.map(holdOut) },
    released: { count: r.released.count, items: r.released.items.map(holdOut) },
    unmatched: { count: r.unmatched.count, items: r.unmatched.items.map((u) => ({ vendor_request_id: u.vendorRequestId, reason: u.reason })) },
    skipped: {
      count: r.skipped.count,
      items: r.skipped.items.map((s) => ({ vendor_request_id: s.vendorRequestId, request_id: s.requestId ?? null, reason: s.reason })),
    },
    stale_open_holds: {
      older_than: r.stale.olderThan,
      count: r.stale.count,
      truncated: r.stale.truncated,
      items: r.stale.items.map((h) => ({
        request_id: h.id,
        account: h.account_id,
        key: h.key_id,
        product: h.product,
        model: h.model,
        status: h.status,
        hold_ink: h.hold_ink,
        vendor_request_id: h.vendor_request_id,
        created_at: h.created_at,
      })),
    },
  };
}

export const ledgerCommands: Record<string, AdminCommand> = {
  topup: {
    usage: 'topup --account A --usd X [--note T]',
    summary: 'credit pay-as-you-go Ink: X USD = X*100 Ink (whole cents); counts one completed top-up',
    run: async (a, ctx) => {
      const account = need(a, 'account');
      const ink = usdToInk(need(a, 'usd'));
      await ctx.ledger.topUp(account, ink, typeof a.flags.note === 'string' ? a.flags.note : 'admin top-up');
      const w = await ctx.ledger.walletView(account);
      return { credited_ink: ink, ...walletSummary(account, w!) };
    },
  },
  grant: {
    usage: 'grant --account A --ink N',
    summary: "add N Ink to the current period's grant (spent first; lapses at the next roll-over)",
    run: async (a, ctx) => {
      const account = need(a, 'account');
      const ink = optionalWhole(a, 'ink', 1, 1_000_000_000);
      if (ink === undefined) throw new UsageError('--ink is required');
      await ctx.ledger.grant(account, ink);
      const w = await ctx.ledger.walletView(account);
      return { granted_ink: ink, ...walletSummary(account, w!) };
    },
  },
  'roll-period': {
    usage: 'roll-period --account A',
    summary: "start a new period: the unspent grant lapses, the plan's period grant is credited",
    run: async (a, ctx) => {
      const account = need(a, 'account');
      const r = await ctx.ledger.rollPeriod(account);
      const w = await ctx.ledger.walletView(account);
      return { expired_ink: r.expiredInk, period_grant_ink: r.grantInk, ...walletSummary(account, w!) };
    },
  },
  requests: {
    usage: 'requests --account A [--limit N]',
    summary: "list an account's requests, newest first: hold, split, charge, usage, status",
    run: async (a, ctx) => {
      const account = need(a, 'account');
      const limit = optionalWhole(a, 'limit', 1, 1000) ?? 50;
      return (await ctx.ledger.listRequests(account, { limit })).map((r) => ({
        id: r.id,
        created_at: r.created_at,
        product: r.product,
        model: r.model,
        status: r.status,
        hold_ink: r.hold_ink,
        hold_grant_ink: r.hold_grant_ink,
        hold_payg_ink: r.hold_payg_ink,
        charged_ink: r.charged_ink,
        expired_ink: r.expired_ink,
        usage: r.usage,
        key: r.key_id,
        vendor_request_id: r.vendor_request_id,
        reason: r.reason,
        resolved_at: r.resolved_at,
      }));
    },
  },
  reconcile: {
    usage: 'reconcile --file records.jsonl [--older-than-s S]',
    summary: 'settle or release open holds from vendor usage records (JSON lines); list holds older than S s (default 86400) with no record',
    run: async (a, ctx) => {
      const records = await readUsageFile(need(a, 'file'));
      const olderThanS = optionalWhole(a, 'older-than-s', 0, 366 * 86400) ?? 86400;
      const report = await ctx.ledger.reconcile(records, { olderThanMs: olderThanS * 1000, chargeFor: chargeForRecord(ctx.catalog()) });
      return reconcileReportJson(report);
    },
  },
  'ledger check': {
    usage: 'ledger check',
    summary: 'check every ledger rule (conservation, holds, leases, caps, journal) over the whole database; exit 1 on a violation',
    run: async (_a, ctx) => {
      const violations = await checkLedger(ctx.pool);
      return { ok: violations.length === 0, rules: LEDGER_RULES.length, violations };
    },
    failure: (r) => {
      const v = (r as { violations: { rule: string; count: number }[] }).violations;
      return v.length === 0 ? undefined : `ledger check: ${v.length} rule(s) broken: ${v.map((x) => `${x.rule} (${x.count})`).join('; ')}`;
    },
  },
  release: {
    usage: 'release --request R [--reason T]',
    summary: 'release an open hold in full (e.g. a stale hold the vendor confirms never ran); charges nothing',
    run: async (a, ctx) => {
      const id = need(a, 'request');
      const reason = typeof a.flags.reason === 'string' ? a.flags.reason : 'released by operator';
      const r = await ctx.ledger.release(id, reason);
      if (!r.resolved) {
        const why = {
          unknown_request: 'no such request',
          already_resolved: 'the hold is already resolved',
          in_lease: "the request is still running in a gateway instance (its hold is in that instance's Ink lease)",
        };
        throw new Error(`${id}: ${why[r.reason]}`);
      }
      return { request: id, released_ink: r.releasedInk, expired_ink: r.expiredInk };
    },
  },
};
