-- Image generations (kind = 'image') on the generations table of 010.
--
-- Image rows use the same states, with one difference: Gemini answers the generation in the call
-- itself (no task to poll), so an image row is `queued` (accepted, waiting for a worker) or
-- `running` (the vendor call is, or may be, in flight) with no vendor_task_id yet; the vendor's
-- responseId is recorded as vendor_task_id when the result is stored.
--   submitting -> queued (submit done) -> running (a worker calls the vendor) -> succeeded | failed
--   running -> queued (vendor unavailable: retried later, until the job timeout)
-- A safety refusal fails the row with error_code `content_policy` (hold refunded in full).

ALTER TABLE generations DROP CONSTRAINT generation_task;
ALTER TABLE generations ADD CONSTRAINT generation_task
  CHECK (state NOT IN ('queued', 'running', 'succeeded') OR vendor_task_id IS NOT NULL
         OR (kind = 'image' AND state IN ('queued', 'running')));

ALTER TABLE generations DROP CONSTRAINT generations_error_code_check;
ALTER TABLE generations ADD CONSTRAINT generations_error_code_check
  CHECK (error_code IN ('provider_failed', 'timeout', 'result_persistence_failed', 'provider_error', 'provider_unavailable', 'content_policy'));

-- Pixel size of a stored image result (NULL for video, and for an image whose header we could not read).
ALTER TABLE generations ADD COLUMN result_width integer CHECK (result_width > 0);
ALTER TABLE generations ADD COLUMN result_height integer CHECK (result_height > 0);

-- Admission counts per kind (images have their own concurrency and daily count).
CREATE INDEX generations_account_kind_created ON generations (account_id, kind, created_at);
