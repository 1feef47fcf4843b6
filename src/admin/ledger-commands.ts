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

const optionalWhole = (args: Args, name: string, min: number, max: number): number | undefined => {
  const v = args.flags[name];
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

function walletSummary(
  accountId: string,
  wallet: { grant_ink: number; payg_ink: number; held_grant_ink: number; held_payg_ink: number; topups_completed: number },
) {
  return {
    account: accountId,
    balance_ink: wallet.grant_ink + wallet.payg_ink,
    period_grant_remaining_ink: wallet.grant_ink,
    payg_ink: wallet.payg_ink,
    held_ink: wallet.held_grant_ink + wallet.held_payg_ink,
    topups_completed: wallet.topups_completed,
  };
}

const holdOut = (hold: ReconcileReport['settled']['items'][number]) => ({
  request_id: hold.requestId,
  vendor_request_id: hold.vendorRequestId,
  hold_ink: hold.holdInk,
  charged_ink: hold.chargedInk,
  released_ink: hold.releasedInk,
  expired_ink: hold.expiredInk,
});

/** The report in the CLI's snake_case. */
export function reconcileReportJson(report: ReconcileReport) {
  return {
    records_read: report.recordsRead,
    settled: { count: report.settled.count, items: report.settled.items.map(holdOut) },
    released: { count: report.released.count, items: report.released.items.map(holdOut) },
    unmatched: { count: report.unmatched.count, items: report.unmatched.items.map((u) => ({ vendor_request_id: u.vendorRequestId, reason: u.reason })) },
    skipped: {
      count: report.skipped.count,
      items: report.skipped.items.map((s) => ({ vendor_request_id: s.vendorRequestId, request_id: s.requestId ?? null, reason: s.reason })),
    },
    stale_open_holds: {
      older_than: report.stale.olderThan,
      count: report.stale.count,
      truncated: report.stale.truncated,
      items: report.stale.items.map((hold) => ({
        request_id: hold.id,
        account: hold.account_id,
        key: hold.key_id,
        product: hold.product,
        model: hold.model,
        status: hold.status,
        hold_ink: hold.hold_ink,
        vendor_request_id: hold.vendor_request_id,
        created_at: hold.created_at,
      })),
    },
  };
}

export const ledgerCommands: Record<string, AdminCommand> = {
  topup: {
    usage: 'topup --account A --usd X [--note T]',
    summary: 'credit pay-as-you-go Ink: X USD = X*100 Ink (whole cents); counts one completed top-up',
    run: async (args, ctx) => {
      const account = need(args, 'account');
      const ink = usdToInk(need(args, 'usd'));
      await ctx.ledger.topUp(account, ink, typeof args.flags.note === 'string' ? args.flags.note : 'admin top-up');
      const w = await ctx.ledger.walletView(account);
      return { credited_ink: ink, ...walletSummary(account, w!) };
    },
  },
  grant: {
    usage: 'grant --account A --ink N',
    summary: "add N Ink to the current period's grant (spent first; lapses at the next roll-over)",
    run: async (args, ctx) => {
      const account = need(args, 'account');
      const ink = optionalWhole(args, 'ink', 1, 1_000_000_000);
      if (ink === undefined) throw new UsageError('--ink is required');
      await ctx.ledger.grant(account, ink);
      const w = await ctx.ledger.walletView(account);
      return { granted_ink: ink, ...walletSummary(account, w!) };
    },
  },
  'roll-period': {
    usage: 'roll-period --account A',
    summary: "start a new period: the unspent grant lapses, the plan's period grant is credited",
    run: async (args, ctx) => {
      const account = need(args, 'account');
      const r = await ctx.ledger.rollPeriod(account);
      const w = await ctx.ledger.walletView(account);
      return { expired_ink: r.expiredInk, period_grant_ink: r.grantInk, ...walletSummary(account, w!) };
    },
  },
  requests: {
    usage: 'requests --account A [--limit N]',
    summary: "list an account's requests, newest first: hold, split, charge, usage, status",
    run: async (args, ctx) => {
      const account = need(args, 'account');
      const limit = optionalWhole(args, 'limit', 1, 1000) ?? 50;
      return (await ctx.ledger.listRequests(account, { limit })).map((request) => ({
        id: request.id,
        created_at: request.created_at,
        product: request.product,
        model: request.model,
        status: request.status,
        hold_ink: request.hold_ink,
        hold_grant_ink: request.hold_grant_ink,
        hold_payg_ink: request.hold_payg_ink,
        charged_ink: request.charged_ink,
        expired_ink: request.expired_ink,
        usage: request.usage,
        key: request.key_id,
        vendor_request_id: request.vendor_request_id,
        reason: request.reason,
        resolved_at: request.resolved_at,
      }));
    },
  },
  reconcile: {
    usage: 'reconcile --file records.jsonl [--older-than-s S]',
    summary: 'settle or release open holds from vendor usage records (JSON lines); list holds older than S s (default 86400) with no record',
    run: async (args, ctx) => {
      const records = await readUsageFile(need(args, 'file'));
      const olderThanS = optionalWhole(args, 'older-than-s', 0, 366 * 86400) ?? 86400;
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
    failure: (result) => {
      const v = (result as { violations: { rule: string; count: number }[] }).violations;
      return v.length === 0 ? undefined : `ledger check: ${v.length} rule(s) broken: ${v.map((x) => `${x.rule} (${x.count})`).join('; ')}`;
    },
  },
  release: {
    usage: 'release --request R [--reason T]',
    summary: 'release an open hold in full (e.g. a stale hold the vendor confirms never ran); charges nothing',
    run: async (args, ctx) => {
      const id = need(args, 'request');
      const reason = typeof args.flags.reason === 'string' ? args.flags.reason : 'released by operator';
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
