-- A submit refused after it claimed its Idempotency-Key (402, 429, a vendor's 502...) records its
-- answer on the claim, and the duplicates that were waiting for it get that same status and error
-- instead of each trying again (docs/api/video.md, Idempotency). A refusal binds nothing: the claim
-- lapses at `refused_at`, so a submit sent after it is admitted anew; only a submit that saw the key
-- held (it lost the claim, or waited) replays it. A new claim of the key clears both columns.
ALTER TABLE idempotency_keys ADD COLUMN refused_at timestamptz, ADD COLUMN refusal jsonb;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_refusal_check CHECK ((refused_at IS NULL) = (refusal IS NULL));
