-- Asynchronous generations (video now, images later), their Idempotency-Key claims, and the media
-- signing secret every instance shares.
--
-- Internal states of a generation (the API shows submitting/creating as `queued`; `voided` is never shown):
--   submitting  committed with its hold, vendor not called yet        -> creating | voided
--   creating    the vendor create call is (or may be) in flight         -> queued | voided | failed
--   queued      the vendor task exists (vendor_task_id set), not started -> running | succeeded | failed
--   running     the vendor reports it rendering                          -> succeeded | failed
--   succeeded   result stored, hold settled                              (terminal; result_expired later)
--   failed      hold refunded in full                                    (terminal)
--   voided      refused at submit (vendor 4xx/5xx): hold released, never accepted (terminal, hidden)
-- Every move is one conditional UPDATE on (id, state[, lease_owner]); a move that resolves the hold
-- runs in the same transaction as the ledger's settle/refund/release, so money and state agree.
-- All times are written by the application's clock (tests inject one), never by now().

CREATE TABLE generations (
  id text PRIMARY KEY CHECK (id ~ '^(vgen|igen)_[A-Za-z0-9]{1,64}$'),
  kind text NOT NULL CHECK (kind IN ('video', 'image')),
  account_id text NOT NULL REFERENCES accounts(id),
  key_id text NOT NULL REFERENCES api_keys(id),
  -- The ledger hold (one per generation).
  request_id text NOT NULL UNIQUE REFERENCES requests(id),
  model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
  state text NOT NULL CHECK (state IN ('submitting', 'creating', 'queued', 'running', 'succeeded', 'failed', 'voided')),
  progress smallint CHECK (progress BETWEEN 0 AND 100),
  -- The normalised request as accepted (defaults filled, lists in order, metadata inside). json,
  -- not jsonb: the text is kept as written, so `metadata` keys come back in the client's order and
  -- an idempotent replay is byte-for-byte the original 202 body.
  request json NOT NULL CHECK (json_typeof(request) = 'object'),
  price_set text NOT NULL CHECK (length(price_set) BETWEEN 1 AND 40),
  hold_ink bigint NOT NULL CHECK (hold_ink >= 0),
  charged_ink bigint CHECK (charged_ink >= 0 AND charged_ink <= hold_ink),
  vendor_task_id text CHECK (length(vendor_task_id) BETWEEN 1 AND 256),
  error_code text CHECK (error_code IN ('provider_failed', 'timeout', 'result_persistence_failed', 'provider_error', 'provider_unavailable')),
  error_message text CHECK (length(error_message) <= 1000),
  media_key text CHECK (length(media_key) BETWEEN 1 AND 256),
  media_content_type text CHECK (length(media_content_type) <= 200),
  media_size_bytes bigint CHECK (media_size_bytes >= 0),
  result_duration_s integer CHECK (result_duration_s >= 0),
  result_resolution text CHECK (length(result_resolution) <= 40),
  result_aspect_ratio text CHECK (length(result_aspect_ratio) <= 40),
  result_seed bigint,
  result_expired boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  completed_at timestamptz,
  -- Crash recovery: a row is worked on only under a live lease; a lapsed lease is anyone's to take.
  lease_owner text CHECK (length(lease_owner) <= 200),
  lease_expires_at timestamptz,
  next_poll_at timestamptz NOT NULL,
  polls integer NOT NULL DEFAULT 0 CHECK (polls >= 0),
  poll_errors integer NOT NULL DEFAULT 0 CHECK (poll_errors >= 0),
  persist_attempts integer NOT NULL DEFAULT 0 CHECK (persist_attempts >= 0),
  claims integer NOT NULL DEFAULT 0 CHECK (claims >= 0),
  CONSTRAINT generation_terminal CHECK ((state IN ('succeeded', 'failed', 'voided')) = (completed_at IS NOT NULL)),
  CONSTRAINT generation_task CHECK (state NOT IN ('queued', 'running', 'succeeded') OR vendor_task_id IS NOT NULL),
  CONSTRAINT generation_result CHECK (state <> 'succeeded' OR (media_key IS NOT NULL AND charged_ink IS NOT NULL)),
  CONSTRAINT generation_failure CHECK (state NOT IN ('failed', 'voided') OR (error_code IS NOT NULL AND coalesce(charged_ink, 0) = 0)),
  CONSTRAINT generation_expiry CHECK (NOT result_expired OR state = 'succeeded'),
  CONSTRAINT generation_lease CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

-- The claim query: due rows of the active states, oldest due first.
CREATE INDEX generations_due ON generations (next_poll_at)
  WHERE state IN ('submitting', 'creating', 'queued', 'running');
-- Admission: active generations per account (concurrency) and today's count (daily cap).
CREATE INDEX generations_account_active ON generations (account_id)
  WHERE state IN ('submitting', 'creating', 'queued', 'running');
CREATE INDEX generations_account_created ON generations (account_id, created_at);
-- Retention sweep.
CREATE INDEX generations_retention ON generations (completed_at)
  WHERE state = 'succeeded' AND NOT result_expired;

-- Idempotency-Key claims: one per (API key, Idempotency-Key) within 24 hours. A claim names the
-- generation id it will create; it binds only an accepted (202) submit: a submit that ends in an
-- error deletes its claim, so the key may be used again. `claimed_until` bounds how long an
-- unfinished claim (its submit still validating references or admitting) blocks duplicates.
CREATE TABLE idempotency_keys (
  key_id text NOT NULL REFERENCES api_keys(id),
  idem_key text NOT NULL CHECK (idem_key ~ '^[A-Za-z0-9._:-]{1,128}$'),
  body_hash bytea NOT NULL CHECK (length(body_hash) = 32),
  generation_id text NOT NULL,
  claimed_until timestamptz NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (key_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- The HMAC secret for signed media links. Generated by the first instance that starts (32 bytes
-- from node:crypto) and inserted with ON CONFLICT DO NOTHING, then read back by everyone.
CREATE TABLE media_secret (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  secret bytea NOT NULL CHECK (length(secret) = 32),
  created_at timestamptz NOT NULL DEFAULT now()
);
