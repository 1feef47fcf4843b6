// `npm run bench:drift`, for real but tiny: the seeded ledger keeps every ledger rule (the full
// invariant finds nothing), the drift gauge, run through its public API in each case, leads and
// finds no drift, no stale hold and no expired lease, and the bench drops its schema at the end.
// Checks the bench's bookkeeping, not how fast the check is.
import t from 'tap';
import { formatDriftBench, runDriftBench } from '../../bench/drift.js';
import { createPool } from '../../src/store/pool.js';
import { loadConfig } from '../../src/config/config.js';
import { testDatabaseUrl } from '../helpers/env.js';

const small = { url: testDatabaseUrl, accounts: 12, requests: 300, repeat: 2, few: 3, check: true, keep: false, log: () => undefined };

t.test('a small seeded ledger: consistent, no drift found in any case, the schema dropped', async (t) => {
  const r = await runDriftBench({ ...small, openPerAccount: 2 });
  t.equal(r.invariantViolations, 0, 'the full ledger invariant holds over the seeded schema');
  t.equal(r.openHolds, 24);
  t.same(
    r.cases.map((c) => [c.name, c.touched]),
    [
      ['first run', 12],
      ['all touched', 12],
      ['few touched', 3],
      ['none touched', 0],
    ],
  );
  for (const c of r.cases) {
    t.same(c.failures, [], `${c.name}: leader, nothing found, nothing logged`);
    t.equal(c.wallMs.length, 2, `${c.name}: one figure per round`);
  }
  t.equal(r.queryTimeoutMs, loadConfig().db.queryTimeoutMs, "the gauge's pool keeps the configured query timeout");
  t.match(formatDriftBench(r), /\| few touched \| 3 \| \d+ \/ \d+ \| \d+ \/ \d+ \| 0 of 2 \|/);
  const pool = createPool({ ...loadConfig().db, url: testDatabaseUrl });
  t.teardown(() => pool.end());
  const left = await pool.query('SELECT 1 FROM information_schema.schemata WHERE schema_name = $1', [r.schema]);
  t.equal(left.rowCount, 0, 'the bench schema is dropped');
});
