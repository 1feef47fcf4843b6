-- The ledger functions plan each of their statements once per session (a generic plan).
--
-- Why: PL/pgSQL prepares every statement and, by default, re-plans it with the call's actual
-- parameters for the first five calls and again whenever that custom plan looks cheaper than the
-- generic one, which for the batch statements (arrays of ids, `= ANY(...)`, `unnest(...)`) it
-- keeps doing. Planning was about 3% of Postgres CPU under the saturation bench. The plans do not
-- depend on the values: every statement reaches its rows by primary key (and 004 rules out
-- sequential scans), so one generic plan is also the right plan. Measured with bench/pg-steps.ts
-- on the 2-core VM, two alternated runs each: Postgres CPU per item in batches of 10 went from
-- 223-233 to 147-203 µs (reserve) and 187-190 to 137-163 µs (settle); batches of 30, 117 to
-- 93-98 µs and 96-113 to 90-99 µs.
ALTER FUNCTION ledger_reserve_any_key(text[], text[], text[], text[], text[], bigint[], timestamptz, integer) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ledger_reserve(text[], text[], text[], text[], text[], bigint[], timestamptz, integer) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ledger_reserve_one(text, text, text, text, text, bigint, timestamptz) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ledger_resolve(text[], text[], bigint[], jsonb[], text[], text[], timestamptz, integer) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION ledger_resolve_one(text, text, bigint, jsonb, text, text, timestamptz) SET plan_cache_mode = force_generic_plan;
