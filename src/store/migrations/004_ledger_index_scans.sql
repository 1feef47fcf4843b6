-- The ledger functions always reach wallets and keys through their indexes.
--
-- Why: a busy account's wallet and key rows are updated on every move, thousands of times a
-- second, and every update leaves a dead row version behind until vacuum or page pruning clears
-- it. The planner sees tables of one page and a handful of rows and picks sequential scans, which
-- then read every dead version and compare its text id (`= ANY(...)`): under the bench's one hot
-- account, perf showed Postgres spending its time in memcmp / texteq / ExecEvalScalarArrayOp /
-- HeapTupleSatisfiesVisibility. An index scan goes to the live version's chain directly.
ALTER FUNCTION ledger_reserve_any_key(text[], text[], text[], text[], text[], bigint[], timestamptz, integer) SET enable_seqscan = off;
ALTER FUNCTION ledger_reserve(text[], text[], text[], text[], text[], bigint[], timestamptz, integer) SET enable_seqscan = off;
ALTER FUNCTION ledger_reserve_one(text, text, text, text, text, bigint, timestamptz) SET enable_seqscan = off;
ALTER FUNCTION ledger_resolve(text[], text[], bigint[], jsonb[], text[], text[], timestamptz, integer) SET enable_seqscan = off;
ALTER FUNCTION ledger_resolve_one(text, text, bigint, jsonb, text, text, timestamptz) SET enable_seqscan = off;
