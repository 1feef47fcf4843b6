// Load and soak, the CI variant of test/soak.ts: about 50 s of mixed traffic (Messages
// and Responses, streamed and not, video and image submits and polls) at 60 requests/s against a
// gateway in its own process, on a PRIVATE PostgreSQL and a PRIVATE redis-server, while Redis and
// Postgres are paused (SIGSTOP ... SIGCONT, 3 s) in turn every 10 s. Goals: no 5xx but a pause's
// 503 (rate_limiter_unavailable / provider_unavailable), a 2xx within 5 s of every SIGCONT, no
// vendor call without a hold, no hold left open but usage_unknown ones, a flat V8 heap floor (no leak), a bounded RSS, flat descriptors,
// the ledger invariant. The full run is `test/soak.ts --minutes 10 --pauses`.
import t from 'tap';
import { formatSoak, runSoak, vendorCallsMatch } from '../helpers/soak-run.js';
import { startSoakStack } from '../helpers/soak-stack.js';

const DURATION_MS = 50_000;
const RATE_PER_S = 60;
t.setTimeout(180_000); // ~10 s set-up, 50 s of traffic, up to ~60 s of bounded drain, teardown

t.test('mixed traffic with Redis and Postgres paused in turn: only 503s in pauses, recovery, invariant', async (t) => {
  const stack = await startSoakStack({ keys: 120, log: (m) => t.comment(m) });
  t.teardown(() => stack.stop());
  for (const l of stack.describe()) t.comment(`uses: ${l}`);
  const r = await runSoak(stack, {
    durationMs: DURATION_MS,
    ratePerS: RATE_PER_S,
    pauses: { everyMs: 10_000, pauseMs: 3_000 },
    sampleEveryMs: 1_000,
    log: (m) => t.comment(m),
  });
  for (const l of formatSoak(r)) t.comment(l);

  t.ok(r.achievedPerS >= RATE_PER_S * 0.9, `offered ${r.achievedPerS} req/s`);
  t.equal(r.skipped, 0, 'never more than the in-flight cap waiting');
  t.ok(r.pauses.filter((p) => p.target === 'redis').length >= 2 && r.pauses.filter((p) => p.target === 'postgres').length >= 2, `${r.pauses.length} pauses`);
  for (const p of r.pauses) {
    t.ok(p.n503 > 0, `${p.target} at ${p.atS} s: ${p.n503} x 503 ${JSON.stringify(p.codes503)}`);
    t.ok(p.firstOkAfterMs !== null && p.firstOkAfterMs <= 5_000, `${p.target} at ${p.atS} s: first 2xx ${p.firstOkAfterMs} ms after SIGCONT`);
  }
  const fiveXx = Object.entries(r.statusCounts).filter(([s]) => s !== '503' && (s.startsWith('5') || s === 'wire error'));
  t.same(fiveXx, [], 'no 5xx but 503, no wire error');
  t.ok(r.heapFloorMb.flat, `V8 heap floor flat (no leak): ${r.heapFloorMb.secondQuarter.toFixed(1)} -> ${r.heapFloorMb.lastQuarter.toFixed(1)} MB`);
  t.ok(r.rssMb.flat, `RSS bounded: ${r.rssMb.secondQuarterMedian.toFixed(1)} -> ${r.rssMb.lastQuarterMedian.toFixed(1)} MB`);
  t.ok(
    r.ownFds.flat,
    `fds (client and pooled sockets excluded) flat: ${r.ownFds.secondQuarterMedian} -> ${r.ownFds.lastQuarterMedian}, ${r.finalOwnFds} after the run`,
  );
  const vendor: Record<string, number> = {
    messages: r.vendorCalls.anthropic!,
    responses: r.vendorCalls.openai!,
    video: r.vendorCalls.ark!,
    images: r.vendorCalls.gemini!,
  };
  for (const h of r.holds) {
    const calls = vendor[h.product]!;
    t.ok(
      vendorCallsMatch(h, calls, true),
      `${h.product}: ${calls} vendor calls for ${h.holds} holds (${h.abandoned} abandoned reserves released, ${h.unstarted} refunded before a task or call was on record)`,
    );
  }
  t.same(r.invariantViolations, [], 'ledger invariant holds');
  t.same(r.failures, [], 'every goal of the soak met');
});
