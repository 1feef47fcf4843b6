-- The request id's CHECK without a bounded repetition.
--
-- Why: PostgreSQL's regex engine expands `{1,120}` into a large automaton, and every INSERT and
-- every UPDATE of a request row evaluates its CHECKs (a settle is an UPDATE). perf under the
-- bench's saturation load put 15% of all Postgres CPU in pg_regexec for this one check; the same
-- rule written as an unbounded class plus a length test costs about 1/25th (20,000 evaluations:
-- 843 ms vs 32 ms on the 2-core VM). Same accepted set: 'req_' then 1 to 120 of [A-Za-z0-9_-].
ALTER TABLE requests DROP CONSTRAINT requests_id_check;
ALTER TABLE requests ADD CONSTRAINT requests_id_check
  CHECK (length(id) BETWEEN 5 AND 124 AND id ~ '^req_[A-Za-z0-9_-]+$');
