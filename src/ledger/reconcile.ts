// Reconciliation by vendor request id: each open hold a vendor's usage record names is settled
// (charge = min(chargeFor(request, record), hold)) or, at a charge of 0, released; open holds
// older than a cut-off that no record named are listed for an operator, never charged.
//
// Money rules kept here, and where they are asserted:
// - before any move: a record names one open hold outside a lease (a vendor id on two open holds
//   is skipped, a hold already resolved or already matched in this run is unmatched), and its
//   charge is whole Ink (wholeInk, move-input.ts; a bad one is skipped, nothing moves);
// - the move itself is a durable resolution (`runResolve`, resolve.ts): its kind and amount are
//   asserted before the statement and charged = min(charge, hold), charged + released + expired =
//   hold before COMMIT; a broken figure rolls back, stops the instance and ends the run;
// - bounds: at most MAX_RECONCILE_RECORDS records per run, RECONCILE_CHUNK per statement, and the
//   report keeps at most `listLimit` entries per list (counts are complete).
import { storeError } from '../store/pool.js';
import { isLedgerAssertion } from './assertion.js';
import type { ReconciledHold, ReconcileOptions, ReconcileReport, ReportList, RequestRecord, VendorUsageRecord } from './ledger-types.js';
import { usageJson, wholeInk } from './move-input.js';
import type { MoveContext } from './move-statement.js';
import { resolveResult, runResolve, type ResolveItem, type ResolveRow } from './resolve.js';
import * as SQL from './statements.js';
import type { EventLog } from '../util/log.js';

const MAX_RECONCILE_RECORDS = 1_000_000;
const RECONCILE_CHUNK = 500;
const STALE_SCAN_LIMIT = 10_000;

type Push = <T>(list: ReportList<T>, item: T) => void;

interface Run {
  readonly m: MoveContext;
  readonly opts: ReconcileOptions;
  readonly report: ReconcileReport;
  readonly push: Push;
  readonly log: EventLog;
}

/**
 * Settles or releases each open hold a record names (by vendor request id): charge =
 * min(chargeFor(req, record), hold); 0 releases. Lists open holds older than `olderThanMs` that
 * no record named; those are never charged.
 */
export async function reconcile(
  context: MoveContext,
  now: Date,
  log: Run['log'],
  records: Iterable<VendorUsageRecord> | AsyncIterable<VendorUsageRecord>,
  opts: ReconcileOptions,
): Promise<ReconcileReport> {
  if (!Number.isSafeInteger(opts.olderThanMs) || opts.olderThanMs < 0) throw new RangeError('ledger: olderThanMs must be a whole number >= 0');
  const listLimit = opts.listLimit ?? 1000;
  const cutoff = new Date(now.getTime() - opts.olderThanMs);
  const push: Push = (list, item) => {
    list.count++;
    if (list.items.length < listLimit) list.items.push(item);
  };
  const report: ReconcileReport = {
    recordsRead: 0,
    settled: { count: 0, items: [] },
    released: { count: 0, items: [] },
    unmatched: { count: 0, items: [] },
    skipped: { count: 0, items: [] },
    stale: { count: 0, items: [], olderThan: cutoff.toISOString(), truncated: false },
  };
  const run: Run = { m: context, opts, report, push, log };
  const named = new Set<string>();
  let chunk: VendorUsageRecord[] = [];
  for await (const rec of records as AsyncIterable<VendorUsageRecord>) {
    if (++report.recordsRead > MAX_RECONCILE_RECORDS) throw new RangeError(`ledger: more than ${MAX_RECONCILE_RECORDS} records in one reconcile run`);
    if (typeof rec?.vendorRequestId !== 'string' || rec.vendorRequestId.length === 0 || rec.vendorRequestId.length > 256) {
      push(report.skipped, { vendorRequestId: String(rec?.vendorRequestId), reason: 'vendor request id must be 1 to 256 characters' });
      continue;
    }
    named.add(rec.vendorRequestId);
    chunk.push(rec);
    if (chunk.length >= RECONCILE_CHUNK) {
      await reconcileChunk(run, chunk);
      chunk = [];
    }
  }
  if (chunk.length > 0) await reconcileChunk(run, chunk);

  const stale = (await context.pool.query<RequestRecord>(SQL.STALE_OPEN_HOLDS, [cutoff, STALE_SCAN_LIMIT])).rows;
  report.stale.truncated = stale.length === STALE_SCAN_LIMIT;
  for (const r of stale) if (r.vendor_request_id === null || !named.has(r.vendor_request_id)) push(report.stale, r);
  return report;
}

/** The one open hold each record names, with its charge: the moves of one statement. */
async function matchChunk(run: Run, chunk: VendorUsageRecord[]): Promise<{ items: ResolveItem[]; meta: Array<{ vid: string; req: RequestRecord }> }> {
  const { report, push } = run;
  const vids = [...new Set(chunk.map((r) => r.vendorRequestId))];
  const rows = (await run.m.pool.query<RequestRecord>(SQL.REQUESTS_BY_VENDOR_ID, [vids])).rows;
  const byVid = new Map<string, RequestRecord[]>();
  for (const r of rows) {
    const l = byVid.get(r.vendor_request_id!);
    if (l) l.push(r);
    else byVid.set(r.vendor_request_id!, [r]);
  }
  const items: ResolveItem[] = [];
  const meta: Array<{ vid: string; req: RequestRecord }> = [];
  const inChunk = new Set<string>();
  for (const rec of chunk) {
    const vid = rec.vendorRequestId;
    const open = (byVid.get(vid) ?? []).filter((r) => r.hold_state === 'open');
    if (!byVid.has(vid)) push(report.unmatched, { vendorRequestId: vid, reason: 'no_request' });
    else if (open.length === 0 || (open.length === 1 && inChunk.has(open[0]!.id))) push(report.unmatched, { vendorRequestId: vid, reason: 'already_resolved' });
    else if (open.length > 1) push(report.skipped, { vendorRequestId: vid, reason: `${open.length} open requests carry this vendor request id` });
    else {
      const req = open[0]!;
      let charge: number;
      let usage: string | null;
      try {
        charge = wholeInk('charge', run.opts.chargeFor(req, rec));
        usage = usageJson(rec.usage);
      } catch (e) {
        push(report.skipped, { vendorRequestId: vid, requestId: req.id, reason: (e as Error).message });
        continue;
      }
      inChunk.add(req.id);
      items.push({ id: req.id, kind: 'reconcile', chargeInk: charge, usage, vendorRequestId: null, reason: 'reconcile' });
      meta.push({ vid, req });
    }
  }
  return { items, meta };
}

async function reconcileChunk(run: Run, chunk: VendorUsageRecord[]): Promise<void> {
  const { report, push } = run;
  const { items, meta } = await matchChunk(run, chunk);
  if (items.length === 0) return;
  let out: Array<ResolveRow | Error>;
  try {
    out = await runResolve(run.m, items);
  } catch (e) {
    storeError(e);
  }
  for (let i = 0; i < items.length; i++) {
    const row = out[i]!;
    const { vid, req } = meta[i]!;
    if (isLedgerAssertion(row)) throw row; // rolled back and with the fail-stop: the run ends here
    if (row instanceof Error) {
      push(report.skipped, { vendorRequestId: vid, requestId: req.id, reason: row.message.split('\n')[0]! });
      continue;
    }
    const res = resolveResult(items[i]!, row, run.log);
    if (!res.resolved) {
      push(report.unmatched, { vendorRequestId: vid, reason: 'already_resolved' });
      continue;
    }
    const entry: ReconciledHold = {
      requestId: req.id,
      vendorRequestId: vid,
      holdInk: req.hold_ink,
      chargedInk: res.chargedInk,
      releasedInk: res.releasedInk,
      expiredInk: res.expiredInk,
    };
    push(res.chargedInk > 0 ? report.settled : report.released, entry);
  }
}
