-- GENERATED from the migrations in src/store/migrations/ and the function files in
-- src/store/functions/ by src/store/schema-dump.ts: do not edit by hand. Change a table with a new
-- migration, a function by editing its file, then regenerate this file with:
--   npm run schema:dump
-- test/integration/schema-file.test.ts fails while this file and the migrations disagree.
--
-- Every table (columns in their order, then constraints), its indexes and triggers, every view and
-- function, as migrate leaves them; tables and functions sorted by name. Meant to be read:
-- databases are built by src/store/migrate.ts, never from this file. The rows the
-- migrations insert (plans, lanes, deployment) are data, not schema, and are not shown here.

-- Tables: columns in their order, then constraints; then indexes and triggers

CREATE TABLE accounts (
  id text NOT NULL,
  name text NOT NULL,
  plan_id text NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT accounts_id_check CHECK (id ~~ 'usr\_%'::text),
  CONSTRAINT accounts_name_check CHECK (length(name) >= 1 AND length(name) <= 200),
  CONSTRAINT accounts_pkey PRIMARY KEY (id),
  CONSTRAINT accounts_plan_id_fkey FOREIGN KEY (plan_id) REFERENCES plans(id)
);

CREATE TABLE api_keys (
  id text NOT NULL,
  account_id text NOT NULL,
  name text NOT NULL,
  key_hash bytea NOT NULL,
  prefix text NOT NULL,
  last4 text NOT NULL,
  ink_limit bigint,
  ink_charged bigint DEFAULT 0 NOT NULL,
  ink_reserved bigint DEFAULT 0 NOT NULL,
  expires_at timestamp with time zone,
  revoked_at timestamp with time zone,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  ink_leased bigint DEFAULT 0 NOT NULL,
  lease_pause_until timestamp with time zone,
  usage_frame text DEFAULT 'event'::text NOT NULL,
  CONSTRAINT api_keys_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id),
  CONSTRAINT api_keys_id_account UNIQUE (id, account_id),
  CONSTRAINT api_keys_id_check CHECK (id ~~ 'key\_%'::text),
  CONSTRAINT api_keys_ink_charged_check CHECK (ink_charged >= 0),
  CONSTRAINT api_keys_ink_leased_check CHECK (ink_leased >= 0),
  CONSTRAINT api_keys_ink_limit_check CHECK (ink_limit IS NULL OR ink_limit >= 0),
  CONSTRAINT api_keys_ink_reserved_check CHECK (ink_reserved >= 0),
  CONSTRAINT api_keys_key_hash_check CHECK (length(key_hash) = 32),
  CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash),
  CONSTRAINT api_keys_last4_check CHECK (length(last4) = 4),
  CONSTRAINT api_keys_name_check CHECK (length(name) >= 1 AND length(name) <= 200),
  CONSTRAINT api_keys_pkey PRIMARY KEY (id),
  CONSTRAINT api_keys_prefix_check CHECK (length(prefix) = 12),
  CONSTRAINT api_keys_usage_frame_check CHECK (usage_frame = ANY (ARRAY['event'::text, 'comment'::text, 'none'::text]))
);
CREATE INDEX api_keys_account ON api_keys USING btree (account_id);

CREATE TABLE console_form_nonces (
  nonce_hash bytea NOT NULL,
  session_hash bytea NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  used_at timestamp with time zone,
  key_id text,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT console_form_nonces_key_id_fkey FOREIGN KEY (key_id) REFERENCES api_keys(id),
  CONSTRAINT console_form_nonces_nonce_hash_check CHECK (length(nonce_hash) = 32),
  CONSTRAINT console_form_nonces_pkey PRIMARY KEY (nonce_hash),
  CONSTRAINT console_form_nonces_session_hash_fkey FOREIGN KEY (session_hash) REFERENCES console_sessions(id_hash) ON DELETE CASCADE
);
CREATE INDEX console_form_nonces_expires ON console_form_nonces USING btree (expires_at);
CREATE INDEX console_form_nonces_session ON console_form_nonces USING btree (session_hash, created_at);

CREATE TABLE console_links (
  token_hash bytea NOT NULL,
  account_id text NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  used_at timestamp with time zone,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT console_links_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id),
  CONSTRAINT console_links_pkey PRIMARY KEY (token_hash),
  CONSTRAINT console_links_token_hash_check CHECK (length(token_hash) = 32)
);
CREATE INDEX console_links_expires ON console_links USING btree (expires_at);

CREATE TABLE console_playground_keys (
  account_id text NOT NULL,
  key_id text NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT console_playground_keys_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id),
  CONSTRAINT console_playground_keys_key_id_fkey FOREIGN KEY (key_id) REFERENCES api_keys(id),
  CONSTRAINT console_playground_keys_pkey PRIMARY KEY (account_id)
);

CREATE TABLE console_secret (
  singleton boolean DEFAULT true NOT NULL,
  secret bytea NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT console_secret_pkey PRIMARY KEY (singleton),
  CONSTRAINT console_secret_secret_check CHECK (length(secret) = 32),
  CONSTRAINT console_secret_singleton_check CHECK (singleton)
);

CREATE TABLE console_sessions (
  id_hash bytea NOT NULL,
  account_id text NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  revoked_at timestamp with time zone,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT console_sessions_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id),
  CONSTRAINT console_sessions_id_hash_check CHECK (length(id_hash) = 32),
  CONSTRAINT console_sessions_pkey PRIMARY KEY (id_hash)
);
CREATE INDEX console_sessions_account ON console_sessions USING btree (account_id);
CREATE INDEX console_sessions_expires ON console_sessions USING btree (expires_at);

CREATE TABLE deployment (
  singleton boolean DEFAULT true NOT NULL,
  api_open boolean DEFAULT true NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT deployment_pkey PRIMARY KEY (singleton),
  CONSTRAINT deployment_singleton_check CHECK (singleton)
);

CREATE TABLE generations (
  id text NOT NULL,
  kind text NOT NULL,
  account_id text NOT NULL,
  key_id text NOT NULL,
  request_id text NOT NULL,
  model text NOT NULL,
  state text NOT NULL,
  progress smallint,
  request json NOT NULL,
  price_set text NOT NULL,
  hold_ink bigint NOT NULL,
  charged_ink bigint,
  vendor_task_id text,
  error_code text,
  error_message text,
  media_key text,
  media_content_type text,
  media_size_bytes bigint,
  result_duration_s integer,
  result_resolution text,
  result_aspect_ratio text,
  result_seed bigint,
  result_expired boolean DEFAULT false NOT NULL,
  created_at timestamp with time zone NOT NULL,
  updated_at timestamp with time zone NOT NULL,
  completed_at timestamp with time zone,
  lease_owner text,
  lease_expires_at timestamp with time zone,
  next_poll_at timestamp with time zone NOT NULL,
  polls integer DEFAULT 0 NOT NULL,
  poll_errors integer DEFAULT 0 NOT NULL,
  persist_attempts integer DEFAULT 0 NOT NULL,
  claims integer DEFAULT 0 NOT NULL,
  result_width integer,
  result_height integer,
  trace_parent text,
  vendor_deployment text,
  CONSTRAINT generation_expiry CHECK (NOT result_expired OR state = 'succeeded'::text),
  CONSTRAINT generation_failure CHECK ((state <> ALL (ARRAY['failed'::text, 'voided'::text])) OR error_code IS NOT NULL AND COALESCE(charged_ink, 0::bigint) = 0),
  CONSTRAINT generation_lease CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
  CONSTRAINT generation_result CHECK (state <> 'succeeded'::text OR media_key IS NOT NULL AND charged_ink IS NOT NULL),
  CONSTRAINT generation_task CHECK ((state <> ALL (ARRAY['queued'::text, 'running'::text, 'succeeded'::text])) OR vendor_task_id IS NOT NULL OR kind = 'image'::text AND (state = ANY (ARRAY['queued'::text, 'running'::text]))),
  CONSTRAINT generation_terminal CHECK ((state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'voided'::text])) = (completed_at IS NOT NULL)),
  CONSTRAINT generations_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id),
  CONSTRAINT generations_check CHECK (charged_ink >= 0 AND charged_ink <= hold_ink),
  CONSTRAINT generations_claims_check CHECK (claims >= 0),
  CONSTRAINT generations_error_code_check CHECK (error_code = ANY (ARRAY['provider_failed'::text, 'timeout'::text, 'result_persistence_failed'::text, 'provider_error'::text, 'provider_unavailable'::text, 'content_policy'::text])),
  CONSTRAINT generations_error_message_check CHECK (length(error_message) <= 1000),
  CONSTRAINT generations_hold_ink_check CHECK (hold_ink >= 0),
  CONSTRAINT generations_id_check CHECK (length(id) >= 6 AND length(id) <= 69 AND id ~ '^(vgen|igen)_[A-Za-z0-9]+$'::text),
  CONSTRAINT generations_key_id_fkey FOREIGN KEY (key_id) REFERENCES api_keys(id),
  CONSTRAINT generations_kind_check CHECK (kind = ANY (ARRAY['video'::text, 'image'::text])),
  CONSTRAINT generations_lease_owner_check CHECK (length(lease_owner) <= 200),
  CONSTRAINT generations_media_content_type_check CHECK (length(media_content_type) <= 200),
  CONSTRAINT generations_media_key_check CHECK (length(media_key) >= 1 AND length(media_key) <= 256),
  CONSTRAINT generations_media_size_bytes_check CHECK (media_size_bytes >= 0),
  CONSTRAINT generations_model_check CHECK (length(model) >= 1 AND length(model) <= 200),
  CONSTRAINT generations_persist_attempts_check CHECK (persist_attempts >= 0),
  CONSTRAINT generations_pkey PRIMARY KEY (id),
  CONSTRAINT generations_poll_errors_check CHECK (poll_errors >= 0),
  CONSTRAINT generations_polls_check CHECK (polls >= 0),
  CONSTRAINT generations_price_set_check CHECK (length(price_set) >= 1 AND length(price_set) <= 40),
  CONSTRAINT generations_progress_check CHECK (progress >= 0 AND progress <= 100),
  CONSTRAINT generations_request_check CHECK (json_typeof(request) = 'object'::text),
  CONSTRAINT generations_request_id_fkey FOREIGN KEY (request_id) REFERENCES requests(id),
  CONSTRAINT generations_request_id_key UNIQUE (request_id),
  CONSTRAINT generations_result_aspect_ratio_check CHECK (length(result_aspect_ratio) <= 40),
  CONSTRAINT generations_result_duration_s_check CHECK (result_duration_s >= 0),
  CONSTRAINT generations_result_height_check CHECK (result_height > 0),
  CONSTRAINT generations_result_resolution_check CHECK (length(result_resolution) <= 40),
  CONSTRAINT generations_result_width_check CHECK (result_width > 0),
  CONSTRAINT generations_state_check CHECK (state = ANY (ARRAY['submitting'::text, 'creating'::text, 'queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'voided'::text])),
  CONSTRAINT generations_trace_parent_check CHECK (trace_parent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text),
  CONSTRAINT generations_vendor_deployment_check CHECK (char_length(vendor_deployment) >= 1 AND char_length(vendor_deployment) <= 300),
  CONSTRAINT generations_vendor_task_id_check CHECK (length(vendor_task_id) >= 1 AND length(vendor_task_id) <= 256)
);
CREATE INDEX generations_account_active ON generations USING btree (account_id) WHERE state = ANY (ARRAY['submitting'::text, 'creating'::text, 'queued'::text, 'running'::text]);
CREATE INDEX generations_account_created ON generations USING btree (account_id, created_at);
CREATE INDEX generations_account_kind_created ON generations USING btree (account_id, kind, created_at);
CREATE INDEX generations_due ON generations USING btree (next_poll_at) WHERE state = ANY (ARRAY['submitting'::text, 'creating'::text, 'queued'::text, 'running'::text]);
CREATE INDEX generations_retention ON generations USING btree (completed_at) WHERE state = 'succeeded'::text AND NOT result_expired;

CREATE TABLE idempotency_keys (
  key_id text NOT NULL,
  idem_key text NOT NULL,
  generation_id text NOT NULL,
  claimed_until timestamp with time zone NOT NULL,
  created_at timestamp with time zone NOT NULL,
  product text NOT NULL,
  refused_at timestamp with time zone,
  refusal jsonb,
  CONSTRAINT idempotency_keys_idem_key_check CHECK (length(idem_key) >= 1 AND length(idem_key) <= 128 AND idem_key ~ '^[A-Za-z0-9._:-]+$'::text),
  CONSTRAINT idempotency_keys_key_id_fkey FOREIGN KEY (key_id) REFERENCES api_keys(id),
  CONSTRAINT idempotency_keys_pkey PRIMARY KEY (key_id, product, idem_key),
  CONSTRAINT idempotency_keys_product_check CHECK (product = ANY (ARRAY['video'::text, 'images'::text])),
  CONSTRAINT idempotency_keys_refusal_check CHECK ((refused_at IS NULL) = (refusal IS NULL))
);
CREATE INDEX idempotency_keys_created ON idempotency_keys USING btree (created_at);

CREATE TABLE lanes (
  lane text NOT NULL,
  enabled boolean NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT lanes_lane_check CHECK (lane = ANY (ARRAY['messages'::text, 'responses'::text, 'video'::text, 'images'::text])),
  CONSTRAINT lanes_pkey PRIMARY KEY (lane)
);

CREATE TABLE leases (
  id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  account_id text NOT NULL,
  key_id text NOT NULL,
  instance_id text NOT NULL,
  epoch bigint NOT NULL,
  state text NOT NULL,
  grant_ink bigint NOT NULL,
  payg_ink bigint NOT NULL,
  grant_period integer NOT NULL,
  recall_at timestamp with time zone,
  drained_at timestamp with time zone,
  expires_at timestamp with time zone NOT NULL,
  created_at timestamp with time zone NOT NULL,
  closed_at timestamp with time zone,
  CONSTRAINT lease_closed CHECK ((state = 'live'::text) = (closed_at IS NULL)),
  CONSTRAINT lease_closed_empty CHECK (state = 'live'::text OR (grant_ink + payg_ink) = 0),
  CONSTRAINT lease_key_of_account FOREIGN KEY (key_id, account_id) REFERENCES api_keys(id, account_id),
  CONSTRAINT leases_grant_ink_check CHECK (grant_ink >= 0),
  CONSTRAINT leases_payg_ink_check CHECK (payg_ink >= 0),
  CONSTRAINT leases_pkey PRIMARY KEY (id),
  CONSTRAINT leases_state_check CHECK (state = ANY (ARRAY['live'::text, 'returned'::text, 'recovered'::text]))
);
CREATE INDEX leases_live_account ON leases USING btree (account_id) WHERE state = 'live'::text;
CREATE INDEX leases_live_expiry ON leases USING btree (expires_at) WHERE state = 'live'::text;
CREATE INDEX leases_live_instance ON leases USING btree (instance_id, epoch) WHERE state = 'live'::text;
CREATE INDEX leases_live_key ON leases USING btree (key_id) WHERE state = 'live'::text;

CREATE TABLE ledger_instances (
  id text NOT NULL,
  epoch bigint NOT NULL,
  started_at timestamp with time zone NOT NULL,
  heartbeat_at timestamp with time zone NOT NULL,
  CONSTRAINT ledger_instances_epoch_check CHECK (epoch >= 1),
  CONSTRAINT ledger_instances_id_check CHECK (length(id) >= 1 AND length(id) <= 200),
  CONSTRAINT ledger_instances_pkey PRIMARY KEY (id)
);

CREATE TABLE ledger_journal (
  id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  at timestamp with time zone NOT NULL,
  kind text NOT NULL,
  account_id text NOT NULL,
  key_id text,
  request_id text,
  amount_ink bigint NOT NULL,
  grant_ink bigint DEFAULT 0 NOT NULL,
  payg_ink bigint DEFAULT 0 NOT NULL,
  held_grant_ink bigint DEFAULT 0 NOT NULL,
  held_payg_ink bigint DEFAULT 0 NOT NULL,
  charged_ink bigint DEFAULT 0 NOT NULL,
  expired_ink bigint DEFAULT 0 NOT NULL,
  credited_ink bigint DEFAULT 0 NOT NULL,
  note text,
  leased_grant_ink bigint DEFAULT 0 NOT NULL,
  leased_payg_ink bigint DEFAULT 0 NOT NULL,
  lease_id bigint,
  CONSTRAINT journal_request_moves CHECK (
    CASE
        WHEN kind = ANY (ARRAY['reserve'::text, 'settle'::text, 'release'::text, 'refund'::text, 'reconcile'::text, 'late_charge'::text]) THEN request_id IS NOT NULL AND key_id IS NOT NULL
        WHEN kind = 'lease_hold'::text THEN request_id IS NOT NULL AND key_id IS NOT NULL AND lease_id IS NOT NULL
        WHEN kind = ANY (ARRAY['lease'::text, 'lease_return'::text, 'lease_flush'::text]) THEN request_id IS NULL AND key_id IS NOT NULL AND lease_id IS NOT NULL
        ELSE request_id IS NULL AND key_id IS NULL
    END),
  CONSTRAINT journal_row_balances CHECK ((grant_ink + payg_ink + leased_grant_ink + leased_payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink) = credited_ink),
  CONSTRAINT ledger_journal_amount_ink_check CHECK (amount_ink >= 0),
  CONSTRAINT ledger_journal_kind_check CHECK (kind = ANY (ARRAY['reserve'::text, 'settle'::text, 'release'::text, 'refund'::text, 'reconcile'::text, 'topup'::text, 'grant'::text, 'expire'::text, 'lease'::text, 'lease_return'::text, 'lease_flush'::text, 'lease_hold'::text, 'late_charge'::text])),
  CONSTRAINT ledger_journal_note_check CHECK (length(note) <= 500),
  CONSTRAINT ledger_journal_pkey PRIMARY KEY (id)
);
CREATE INDEX ledger_journal_account ON ledger_journal USING btree (account_id, id);
CREATE INDEX ledger_journal_lease ON ledger_journal USING btree (lease_id) WHERE lease_id IS NOT NULL;
CREATE UNIQUE INDEX ledger_journal_one_reserve ON ledger_journal USING btree (request_id) WHERE kind = ANY (ARRAY['reserve'::text, 'lease_hold'::text]);
CREATE UNIQUE INDEX ledger_journal_one_resolution ON ledger_journal USING btree (request_id) WHERE kind = ANY (ARRAY['settle'::text, 'release'::text, 'refund'::text, 'reconcile'::text, 'late_charge'::text]);
CREATE TRIGGER ledger_journal_append_only BEFORE DELETE OR UPDATE ON ledger_journal FOR EACH ROW EXECUTE FUNCTION ledger_journal_refuse_change();
CREATE TRIGGER ledger_journal_no_truncate BEFORE TRUNCATE ON ledger_journal FOR EACH STATEMENT EXECUTE FUNCTION ledger_journal_refuse_change();

CREATE TABLE media_secret (
  singleton boolean DEFAULT true NOT NULL,
  secret bytea NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT media_secret_pkey PRIMARY KEY (singleton),
  CONSTRAINT media_secret_secret_check CHECK (length(secret) = 32),
  CONSTRAINT media_secret_singleton_check CHECK (singleton)
);

CREATE TABLE model_pauses (
  model_id text NOT NULL,
  retry_after_s integer DEFAULT 300 NOT NULL,
  paused_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT model_pauses_pkey PRIMARY KEY (model_id),
  CONSTRAINT model_pauses_retry_after_s_check CHECK (retry_after_s >= 1 AND retry_after_s <= 86400)
);

CREATE TABLE plans (
  id text NOT NULL,
  label text NOT NULL,
  paid boolean NOT NULL,
  video_allowed boolean NOT NULL,
  daily_generation_cap integer NOT NULL,
  period_grant_ink bigint NOT NULL,
  period_days integer DEFAULT 30 NOT NULL,
  CONSTRAINT plans_daily_generation_cap_check CHECK (daily_generation_cap >= 0),
  CONSTRAINT plans_period_days_check CHECK (period_days >= 1 AND period_days <= 366),
  CONSTRAINT plans_period_grant_ink_check CHECK (period_grant_ink >= 0),
  CONSTRAINT plans_pkey PRIMARY KEY (id)
);

CREATE TABLE requests (
  id text NOT NULL,
  account_id text NOT NULL,
  key_id text NOT NULL,
  product text NOT NULL,
  model text NOT NULL,
  hold_state text NOT NULL,
  status text NOT NULL,
  hold_ink bigint NOT NULL,
  hold_grant_ink bigint NOT NULL,
  hold_payg_ink bigint NOT NULL,
  grant_period integer NOT NULL,
  charged_ink bigint DEFAULT 0 NOT NULL,
  charged_grant_ink bigint DEFAULT 0 NOT NULL,
  charged_payg_ink bigint DEFAULT 0 NOT NULL,
  expired_ink bigint DEFAULT 0 NOT NULL,
  usage jsonb,
  vendor_request_id text,
  reason text,
  created_at timestamp with time zone NOT NULL,
  resolved_at timestamp with time zone,
  lease_id bigint,
  leased boolean DEFAULT false NOT NULL,
  CONSTRAINT request_charge_split CHECK ((charged_grant_ink + charged_payg_ink) = charged_ink AND charged_grant_ink <= hold_grant_ink AND charged_payg_ink <= hold_payg_ink),
  CONSTRAINT request_expired CHECK (expired_ink <= (hold_grant_ink - charged_grant_ink)),
  CONSTRAINT request_hold_split CHECK ((hold_grant_ink + hold_payg_ink) = hold_ink),
  CONSTRAINT request_leased CHECK (NOT leased OR lease_id IS NOT NULL AND hold_state = 'open'::text AND status = 'running'::text),
  CONSTRAINT request_state CHECK (
    CASE
        WHEN hold_state = 'open'::text THEN (status = ANY (ARRAY['running'::text, 'usage_unknown'::text])) AND resolved_at IS NULL AND charged_ink = 0 AND expired_ink = 0
        ELSE status = hold_state AND resolved_at IS NOT NULL
    END),
  CONSTRAINT request_uncharged CHECK ((hold_state = ANY (ARRAY['open'::text, 'settled'::text])) OR charged_ink = 0),
  CONSTRAINT request_void CHECK (hold_state <> 'void'::text OR hold_ink = 0),
  CONSTRAINT requests_charged_grant_ink_check CHECK (charged_grant_ink >= 0),
  CONSTRAINT requests_charged_payg_ink_check CHECK (charged_payg_ink >= 0),
  CONSTRAINT requests_expired_ink_check CHECK (expired_ink >= 0),
  CONSTRAINT requests_hold_grant_ink_check CHECK (hold_grant_ink >= 0),
  CONSTRAINT requests_hold_ink_check CHECK (hold_ink >= 0),
  CONSTRAINT requests_hold_payg_ink_check CHECK (hold_payg_ink >= 0),
  CONSTRAINT requests_hold_state_check CHECK (hold_state = ANY (ARRAY['open'::text, 'settled'::text, 'released'::text, 'refunded'::text, 'void'::text])),
  CONSTRAINT requests_id_check CHECK (length(id) >= 5 AND length(id) <= 124 AND id ~ '^req_[A-Za-z0-9_-]+$'::text),
  CONSTRAINT requests_model_check CHECK (length(model) >= 1 AND length(model) <= 200),
  CONSTRAINT requests_pkey PRIMARY KEY (id),
  CONSTRAINT requests_product_check CHECK (product = ANY (ARRAY['messages'::text, 'responses'::text, 'video'::text, 'images'::text])),
  CONSTRAINT requests_reason_check CHECK (length(reason) <= 500),
  CONSTRAINT requests_status_check CHECK (status = ANY (ARRAY['running'::text, 'usage_unknown'::text, 'settled'::text, 'released'::text, 'refunded'::text, 'void'::text])),
  CONSTRAINT requests_usage_check CHECK (usage IS NULL OR jsonb_typeof(usage) = 'object'::text),
  CONSTRAINT requests_vendor_request_id_check CHECK (length(vendor_request_id) >= 1 AND length(vendor_request_id) <= 256)
);
CREATE INDEX requests_account_created ON requests USING btree (account_id, created_at DESC, id DESC);
CREATE INDEX requests_leased ON requests USING btree (lease_id) WHERE leased;
CREATE INDEX requests_open_created ON requests USING btree (created_at) WHERE hold_state = 'open'::text;
CREATE INDEX requests_open_unleased_account ON requests USING btree (account_id) WHERE hold_state = 'open'::text AND NOT leased;
CREATE INDEX requests_vendor_request ON requests USING btree (vendor_request_id) WHERE vendor_request_id IS NOT NULL;

CREATE TABLE schema_functions (
  name text NOT NULL,
  sha256 text NOT NULL,
  applied_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT schema_functions_pkey PRIMARY KEY (name)
);

CREATE TABLE schema_migrations (
  version integer NOT NULL,
  name text NOT NULL,
  applied_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE wallets (
  account_id text NOT NULL,
  grant_ink bigint DEFAULT 0 NOT NULL,
  payg_ink bigint DEFAULT 0 NOT NULL,
  held_grant_ink bigint DEFAULT 0 NOT NULL,
  held_payg_ink bigint DEFAULT 0 NOT NULL,
  charged_ink bigint DEFAULT 0 NOT NULL,
  expired_ink bigint DEFAULT 0 NOT NULL,
  credited_ink bigint DEFAULT 0 NOT NULL,
  topups_completed integer DEFAULT 0 NOT NULL,
  period_started_at timestamp with time zone DEFAULT now() NOT NULL,
  grant_period integer DEFAULT 0 NOT NULL,
  leased_grant_ink bigint DEFAULT 0 NOT NULL,
  leased_payg_ink bigint DEFAULT 0 NOT NULL,
  lease_pause_until timestamp with time zone,
  CONSTRAINT wallet_balances CHECK ((grant_ink + payg_ink + leased_grant_ink + leased_payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink) = credited_ink),
  CONSTRAINT wallets_account_id_fkey FOREIGN KEY (account_id) REFERENCES accounts(id),
  CONSTRAINT wallets_charged_ink_check CHECK (charged_ink >= 0),
  CONSTRAINT wallets_credited_ink_check CHECK (credited_ink >= 0),
  CONSTRAINT wallets_expired_ink_check CHECK (expired_ink >= 0),
  CONSTRAINT wallets_grant_ink_check CHECK (grant_ink >= 0),
  CONSTRAINT wallets_grant_period_check CHECK (grant_period >= 0),
  CONSTRAINT wallets_held_grant_ink_check CHECK (held_grant_ink >= 0),
  CONSTRAINT wallets_held_payg_ink_check CHECK (held_payg_ink >= 0),
  CONSTRAINT wallets_leased_grant_ink_check CHECK (leased_grant_ink >= 0),
  CONSTRAINT wallets_leased_payg_ink_check CHECK (leased_payg_ink >= 0),
  CONSTRAINT wallets_payg_ink_check CHECK (payg_ink >= 0),
  CONSTRAINT wallets_pkey PRIMARY KEY (account_id),
  CONSTRAINT wallets_topups_completed_check CHECK (topups_completed >= 0)
);

-- Functions

CREATE OR REPLACE FUNCTION ledger_flush(p_instance text, p_epoch bigint, p_now timestamp with time zone, p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS TABLE(item integer, result text)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  ours bigint[]; r record;
BEGIN
  IF n = 0 THEN RETURN; END IF;
  -- Every record's account and key are those of the lease it names (a lease's key is of its account
  -- by lease_key_of_account): the one check of a flushed request's key, as `requests` has no
  -- foreign key to api_keys. One probe of `leases` per distinct (lease, account, key) of the batch,
  -- not per record. A record that names another key or account, or no lease at all, was forged or
  -- corrupted: the whole batch is refused as an integrity violation, which stops the instance
  -- (docs/ledger.md, Fail-stop).
  SELECT d.id, d.lease_id, d.account_id, d.key_id, l.account_id AS lease_account, l.key_id AS lease_key INTO r
    FROM (SELECT min(u.id) AS id, u.lease_id, u.account_id, u.key_id
            FROM unnest(p_ids, p_leases, p_accounts, p_keys) AS u(id, lease_id, account_id, key_id)
           GROUP BY u.lease_id, u.account_id, u.key_id) d
    LEFT JOIN leases l ON l.id = d.lease_id
   WHERE l.id IS NULL OR l.account_id IS DISTINCT FROM d.account_id OR l.key_id IS DISTINCT FROM d.key_id
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'journal record % names account % and key %, its lease % is of account % and key %',
                    r.id, r.account_id, r.key_id, r.lease_id, r.lease_account, r.lease_key
      USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'request_key_of_lease', TABLE = 'requests';
  END IF;
  PERFORM 1 FROM (SELECT account_id FROM wallets WHERE account_id = ANY(p_accounts) ORDER BY account_id FOR UPDATE) x;
  PERFORM 1 FROM (SELECT id FROM api_keys WHERE id = ANY(p_keys) ORDER BY id FOR UPDATE) x;
  SELECT coalesce(array_agg(x.id), '{}') INTO ours
    FROM (SELECT id FROM leases WHERE id = ANY(p_leases) AND state = 'live' AND instance_id = p_instance AND epoch = p_epoch
           ORDER BY id FOR UPDATE) x;
  PERFORM ledger_flush_leased(p_now, ours, p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods, p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved);
  RETURN QUERY SELECT o.ord::integer, o.r
    FROM unnest(ledger_flush_late(p_now, ours, p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods, p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)) WITH ORDINALITY AS o(r, ord);
END
$function$;

CREATE OR REPLACE FUNCTION ledger_flush_late(p_now timestamp with time zone, p_ours bigint[], p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS text[]
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  out_r text[] := array_fill('ok'::text, ARRAY[n]);
  r record; x record; i integer; c bigint; cg bigint; room bigint; g bigint; asked bigint;
BEGIN
  IF n = 0 THEN RETURN out_r; END IF;
  -- The late path: records whose lease is not (or no longer) this instance's.
  FOR i IN 1..n LOOP
    CONTINUE WHEN p_leases[i] = ANY(p_ours);
    IF p_ends[i] IS NULL THEN
      UPDATE requests SET vendor_request_id = p_vendor_ids[i]
       WHERE id = p_ids[i] AND vendor_request_id IS NULL AND p_vendor_ids[i] IS NOT NULL;
      out_r[i] := 'deferred';
      CONTINUE;
    END IF;
    out_r[i] := 'late';
    SELECT hold_state, leased INTO r FROM requests WHERE id = p_ids[i] FOR UPDATE;
    IF FOUND THEN
      IF r.hold_state = 'open' AND NOT r.leased AND p_ends[i] IN ('settle', 'release') THEN
        SELECT * INTO x FROM ledger_resolve_one(p_ids[i], p_ends[i], coalesce(p_charges[i], 0), p_usage[i], p_vendor_ids[i],
                                                coalesce(p_reasons[i], 'flushed after its lease was recovered'), p_now);
      ELSE
        UPDATE requests SET vendor_request_id = coalesce(vendor_request_id, p_vendor_ids[i]) WHERE id = p_ids[i];
      END IF;
      CONTINUE;
    END IF;
    -- What the wallet still has and the key's limit still allows (a capped key may have spent the
    -- recovered Ink since; the shortfall is the operator's). Read under the rows' own locks, so this
    -- step is safe alone too (in ledger_flush they are held already). A missing row would read as
    -- no bound at all: refused as the integrity violation it is.
    SELECT w.grant_ink, w.grant_ink + w.payg_ink AS balance, k.ink_limit - (k.ink_charged + k.ink_reserved + k.ink_leased) AS key_room
      INTO x FROM wallets w, api_keys k WHERE w.account_id = p_accounts[i] AND k.id = p_keys[i]
       FOR UPDATE OF w, k;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'late journal record % names account % and key %, which do not both exist', p_ids[i], p_accounts[i], p_keys[i]
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'request_key_of_lease', TABLE = 'requests';
    END IF;
    room := least(x.balance, greatest(coalesce(x.key_room, x.balance), 0));
    IF p_ends[i] = 'settle' THEN
      -- Recovery never saw this request: the lease's Ink went back, so the charge comes from the wallet.
      asked := least(greatest(coalesce(p_charges[i], 0), 0), p_holds[i]);
      c := least(asked, room);
      cg := least(c, x.grant_ink);
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, reason,
                            created_at, resolved_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'settled', 'settled', p_holds[i], cg, p_holds[i] - cg,
              p_periods[i], c, cg, c - cg, p_usage[i], p_vendor_ids[i], 'charged after its lease was recovered',
              p_created[i], p_resolved[i], p_leases[i], false);
      UPDATE wallets SET grant_ink = grant_ink - cg, payg_ink = payg_ink - (c - cg), charged_ink = charged_ink + c
       WHERE account_id = p_accounts[i];
      UPDATE api_keys SET ink_charged = ink_charged + c WHERE id = p_keys[i];
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink, grant_ink, payg_ink, charged_ink, note)
      VALUES (p_now, 'late_charge', p_accounts[i], p_keys[i], p_ids[i], p_leases[i], c, -cg, -(c - cg), c,
              CASE WHEN c < asked THEN 'wallet or key limit short of the charge' END);
    ELSIF p_ends[i] = 'release' THEN
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, reason, created_at, resolved_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'void', 'void', 0, 0, 0,
              p_periods[i], coalesce(p_reasons[i], 'released after its lease was recovered'), p_created[i], p_resolved[i], p_leases[i], false);
    ELSE
      -- Usage unknown: keep a durable hold, as much of it as the wallet and the key's limit still allow.
      c := least(p_holds[i], room);
      g := least(c, x.grant_ink);
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, vendor_request_id, reason, created_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'open', 'usage_unknown', c, g, c - g,
              (SELECT grant_period FROM wallets WHERE account_id = p_accounts[i]), p_vendor_ids[i],
              coalesce(p_reasons[i], 'usage unknown after its lease was recovered'), p_created[i], p_leases[i], false);
      UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - (c - g), held_grant_ink = held_grant_ink + g,
                         held_payg_ink = held_payg_ink + (c - g)
       WHERE account_id = p_accounts[i];
      UPDATE api_keys SET ink_reserved = ink_reserved + c WHERE id = p_keys[i];
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink, held_grant_ink, held_payg_ink, note)
      VALUES (p_now, 'reserve', p_accounts[i], p_keys[i], p_ids[i], c, -g, -(c - g), g, c - g, 'usage unknown after its lease was recovered');
    END IF;
  END LOOP;
  RETURN out_r;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_flush_leased(p_now timestamp with time zone, p_ours bigint[], p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
BEGIN
  WITH rec AS (
    SELECT * FROM unnest(p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods,
                         p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)
             AS u(id, account_id, key_id, product, model, lease_id, hold, hold_g, period, created, vid, e, charge, usage, reason, resolved)
     WHERE u.lease_id = ANY(p_ours)
  ), amt AS (
    SELECT rec.*, least(greatest(coalesce(rec.charge, 0), 0), rec.hold) AS c FROM rec
  ), amt2 AS (
    SELECT amt.*, CASE WHEN amt.e = 'settle' THEN amt.c ELSE 0 END AS cc FROM amt
  ), amt3 AS (
    SELECT amt2.*, least(amt2.cc, amt2.hold_g) AS cg FROM amt2
  ), ins AS (
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                          grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, reason,
                          created_at, resolved_at, lease_id, leased)
    SELECT a.id, a.account_id, a.key_id, a.product, a.model,
           CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'open' END,
           CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'unknown' THEN 'usage_unknown' ELSE 'running' END,
           a.hold, a.hold_g, a.hold - a.hold_g, a.period, a.cc, a.cg, a.cc - a.cg, a.usage, a.vid, a.reason,
           a.created, CASE WHEN a.e IN ('settle', 'release') THEN a.resolved END, a.lease_id, a.e IS NULL
      FROM amt3 a
    ON CONFLICT (id) DO NOTHING
    RETURNING id, account_id, key_id, lease_id, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink, charged_grant_ink, charged_payg_ink
  ), upd AS (
    UPDATE requests q
       SET hold_state = CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'open' END,
           status = CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'usage_unknown' END,
           charged_ink = a.cc, charged_grant_ink = a.cg, charged_payg_ink = a.cc - a.cg,
           usage = coalesce(a.usage, q.usage), vendor_request_id = coalesce(a.vid, q.vendor_request_id),
           reason = coalesce(a.reason, q.reason),
           resolved_at = CASE WHEN a.e IN ('settle', 'release') THEN a.resolved END, leased = false
      FROM amt3 a
     WHERE q.id = a.id AND q.leased AND q.lease_id = a.lease_id AND a.e IS NOT NULL
    RETURNING q.id, q.account_id, q.key_id, q.lease_id, q.hold_state, q.status, q.hold_ink, q.hold_grant_ink, q.hold_payg_ink,
              q.charged_grant_ink, q.charged_payg_ink
  ), vid AS (
    UPDATE requests q SET vendor_request_id = a.vid
      FROM amt3 a
     WHERE q.id = a.id AND q.leased AND a.e IS NULL AND a.vid IS NOT NULL AND q.vendor_request_id IS DISTINCT FROM a.vid
  ), ended AS (
    -- What each changed row moves out of its lease: its charge (settled), or its whole hold (now a durable open hold).
    SELECT m.*, (m.status = 'usage_unknown') AS kept FROM (
      SELECT * FROM ins WHERE hold_state <> 'open' OR status = 'usage_unknown'
      UNION ALL SELECT * FROM upd) m
  ), per_lease AS (
    SELECT lease_id, min(account_id) AS account_id, min(key_id) AS key_id,
           sum(charged_grant_ink) AS cg, sum(charged_payg_ink) AS cp,
           sum(CASE WHEN kept THEN hold_grant_ink ELSE 0 END) AS ug, sum(CASE WHEN kept THEN hold_payg_ink ELSE 0 END) AS up
      FROM ended GROUP BY lease_id
  ), ul AS (
    UPDATE leases l SET grant_ink = l.grant_ink - (d.cg + d.ug), payg_ink = l.payg_ink - (d.cp + d.up)
      FROM per_lease d WHERE l.id = d.lease_id
  ), uw AS (
    UPDATE wallets w
       SET leased_grant_ink = w.leased_grant_ink - d.g, leased_payg_ink = w.leased_payg_ink - d.p,
           held_grant_ink = w.held_grant_ink + d.ug, held_payg_ink = w.held_payg_ink + d.up, charged_ink = w.charged_ink + d.c
      FROM (SELECT account_id, sum(cg + ug) AS g, sum(cp + up) AS p, sum(ug) AS ug, sum(up) AS up, sum(cg + cp) AS c
              FROM per_lease GROUP BY account_id) d
     WHERE w.account_id = d.account_id
  ), uk AS (
    UPDATE api_keys k
       SET ink_leased = k.ink_leased - d.moved, ink_charged = k.ink_charged + d.c, ink_reserved = k.ink_reserved + d.kept
      FROM (SELECT key_id, sum(cg + cp + ug + up) AS moved, sum(cg + cp) AS c, sum(ug + up) AS kept FROM per_lease GROUP BY key_id) d
     WHERE k.id = d.key_id
  ), jl AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, leased_grant_ink, leased_payg_ink, charged_ink)
    SELECT p_now, 'lease_flush', d.account_id, d.key_id, d.lease_id, d.cg + d.cp, -d.cg, -d.cp, d.cg + d.cp
      FROM per_lease d WHERE d.cg + d.cp > 0
  )
  INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink,
                              leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, note)
  SELECT p_now, 'lease_hold', e.account_id, e.key_id, e.id, e.lease_id, e.hold_ink,
         -e.hold_grant_ink, -e.hold_payg_ink, e.hold_grant_ink, e.hold_payg_ink, 'usage unknown'
    FROM ended e WHERE e.kept;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_heartbeat(p_instance text, p_epoch bigint, p_ttl_ms integer, p_now timestamp with time zone, p_known bigint[], p_orphan_ms integer)
 RETURNS TABLE(lease_id bigint, give_up text)
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE ledger_instances SET heartbeat_at = p_now WHERE id = p_instance AND epoch = p_epoch;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::bigint, 'stale'::text;
    RETURN;
  END IF;
  RETURN QUERY
  WITH renewed AS (
    UPDATE leases l SET expires_at = p_now + make_interval(secs => p_ttl_ms / 1000.0)
     WHERE l.id = ANY(p_known) AND l.instance_id = p_instance AND l.epoch = p_epoch AND l.state = 'live'
    RETURNING l.id, l.key_id, l.account_id, l.recall_at, l.drained_at, l.grant_period
  )
  SELECT r.id, CASE
           WHEN NOT (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now)) THEN 'key_not_live'
           WHEN r.recall_at IS NOT NULL AND r.drained_at IS NULL THEN 'recalled'
           WHEN w.grant_period <> r.grant_period THEN 'period'
         END
    FROM renewed r JOIN api_keys k ON k.id = r.key_id JOIN wallets w ON w.account_id = r.account_id
  UNION ALL
  SELECT l.id, 'orphan'::text FROM leases l
   WHERE l.instance_id = p_instance AND l.epoch = p_epoch AND l.state = 'live' AND NOT (l.id = ANY(p_known))
     AND l.created_at < p_now - make_interval(secs => p_orphan_ms / 1000.0);
END
$function$;

CREATE OR REPLACE FUNCTION ledger_instance_start(p_instance text, p_now timestamp with time zone, p_grace_ms integer)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
  e bigint;
BEGIN
  INSERT INTO ledger_instances AS i (id, epoch, started_at, heartbeat_at) VALUES (p_instance, 1, p_now, p_now)
  ON CONFLICT (id) DO UPDATE SET epoch = i.epoch + 1, started_at = p_now, heartbeat_at = p_now
  RETURNING epoch INTO e;
  RETURN e;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_journal_refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION 'ledger_journal is append-only: % refused', TG_OP USING ERRCODE = 'restrict_violation';
END $function$;

CREATE OR REPLACE FUNCTION ledger_lease_recover(p_lease bigint, p_now timestamp with time zone, p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
  l record;
  w record;
  hg bigint; hp bigint; n integer; ex bigint := 0; bg bigint;
BEGIN
  SELECT account_id, key_id INTO l FROM leases WHERE id = p_lease;
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT grant_period INTO w FROM wallets WHERE account_id = l.account_id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = l.key_id FOR UPDATE;
  SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
  IF l.state <> 'live' THEN RETURN NULL; END IF;
  WITH moved AS (
    UPDATE requests SET leased = false, status = 'usage_unknown', reason = coalesce(reason, p_reason)
     WHERE lease_id = p_lease AND leased
    RETURNING id, hold_ink, hold_grant_ink, hold_payg_ink
  ), j AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink,
                                leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, note)
    SELECT p_now, 'lease_hold', l.account_id, l.key_id, m.id, p_lease, m.hold_ink,
           -m.hold_grant_ink, -m.hold_payg_ink, m.hold_grant_ink, m.hold_payg_ink, p_reason
      FROM moved m
  )
  SELECT coalesce(sum(hold_grant_ink), 0), coalesce(sum(hold_payg_ink), 0), count(*) INTO hg, hp, n FROM moved;
  IF hg > l.grant_ink OR hp > l.payg_ink THEN
    RAISE EXCEPTION 'ledger_lease_recover: lease % holds % + % but its open holds need % + %', p_lease, l.grant_ink, l.payg_ink, hg, hp;
  END IF;
  bg := l.grant_ink - hg;
  IF l.grant_period <> w.grant_period THEN ex := bg; bg := 0; END IF;
  UPDATE wallets SET grant_ink = grant_ink + bg, payg_ink = payg_ink + (l.payg_ink - hp), expired_ink = expired_ink + ex,
                     held_grant_ink = held_grant_ink + hg, held_payg_ink = held_payg_ink + hp,
                     leased_grant_ink = leased_grant_ink - l.grant_ink, leased_payg_ink = leased_payg_ink - l.payg_ink
   WHERE account_id = l.account_id;
  UPDATE api_keys SET ink_leased = ink_leased - (l.grant_ink + l.payg_ink), ink_reserved = ink_reserved + hg + hp
   WHERE id = l.key_id;
  UPDATE leases SET grant_ink = 0, payg_ink = 0, state = 'recovered', closed_at = p_now, drained_at = coalesce(drained_at, p_now)
   WHERE id = p_lease;
  IF l.grant_ink + l.payg_ink - hg - hp > 0 THEN
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, expired_ink,
                                leased_grant_ink, leased_payg_ink, note)
    VALUES (p_now, 'lease_return', l.account_id, l.key_id, p_lease, l.grant_ink + l.payg_ink - hg - hp, bg, l.payg_ink - hp, ex,
            -(l.grant_ink - hg), -(l.payg_ink - hp), 'lease recovered');
  END IF;
  RETURN n;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_lease_return(p_lease bigint, p_instance text, p_epoch bigint, p_grant bigint, p_payg bigint, p_close boolean, p_drain boolean, p_now timestamp with time zone)
 RETURNS TABLE(result text, expired_ink bigint, left_grant_ink bigint, left_payg_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  l record;
  w record;
  ex bigint := 0; back bigint;
BEGIN
  expired_ink := 0;
  SELECT account_id, key_id INTO l FROM leases WHERE id = p_lease;
  IF NOT FOUND THEN result := 'lease_gone'; RETURN NEXT; RETURN; END IF;
  SELECT grant_period INTO w FROM wallets WHERE account_id = l.account_id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = l.key_id FOR UPDATE;
  SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
  left_grant_ink := l.grant_ink; left_payg_ink := l.payg_ink;
  IF l.state <> 'live' OR l.instance_id <> p_instance OR l.epoch <> p_epoch THEN
    result := 'lease_gone'; RETURN NEXT; RETURN;
  END IF;
  IF p_grant < 0 OR p_payg < 0 OR p_grant > l.grant_ink OR p_payg > l.payg_ink
     OR (p_close AND EXISTS (SELECT 1 FROM requests WHERE lease_id = p_lease AND leased)) THEN
    result := 'mismatch'; RETURN NEXT; RETURN;
  END IF;
  -- Closing returns everything the lease holds: with nothing in flight and every record written
  -- that is the owner's spare, plus what a refill whose answer was lost (a timeout) added.
  IF p_close THEN p_grant := l.grant_ink; p_payg := l.payg_ink; END IF;
  IF l.grant_period <> w.grant_period THEN ex := p_grant; END IF;
  back := p_grant - ex;
  UPDATE wallets SET grant_ink = grant_ink + back, payg_ink = payg_ink + p_payg, expired_ink = expired_ink + ex,
                     leased_grant_ink = leased_grant_ink - p_grant, leased_payg_ink = leased_payg_ink - p_payg
   WHERE account_id = l.account_id;
  UPDATE api_keys SET ink_leased = ink_leased - (p_grant + p_payg) WHERE id = l.key_id;
  UPDATE leases SET grant_ink = grant_ink - p_grant, payg_ink = payg_ink - p_payg,
                    state = CASE WHEN p_close THEN 'returned' ELSE state END,
                    closed_at = CASE WHEN p_close THEN p_now ELSE NULL END,
                    drained_at = CASE WHEN p_drain OR p_close THEN coalesce(drained_at, p_now) ELSE drained_at END
   WHERE id = p_lease;
  IF p_grant + p_payg > 0 THEN
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, expired_ink,
                                leased_grant_ink, leased_payg_ink, note)
    VALUES (p_now, 'lease_return', l.account_id, l.key_id, p_lease, p_grant + p_payg, back, p_payg, ex, -p_grant, -p_payg,
            CASE WHEN p_close THEN 'lease closed' ELSE 'spare returned' END);
  END IF;
  result := 'ok'; expired_ink := ex; left_grant_ink := l.grant_ink - p_grant; left_payg_ink := l.payg_ink - p_payg;
  RETURN NEXT;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_lease_take(p_lease bigint, p_account text, p_key text, p_instance text, p_epoch bigint, p_min bigint, p_want bigint, p_floor bigint, p_wallet_permille integer, p_key_permille integer, p_ttl_ms integer, p_now timestamp with time zone)
 RETURNS TABLE(result text, lease_id bigint, take_grant_ink bigint, take_payg_ink bigint, grant_period integer, available_ink bigint, key_room_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  v record;
  l record;
  unleased bigint; room bigint; size bigint; g bigint; p bigint; lid bigint;
BEGIN
  take_grant_ink := 0; take_payg_ink := 0; lease_id := p_lease; grant_period := NULL; available_ink := NULL; key_room_ink := NULL;
  SELECT w.grant_ink, w.payg_ink, w.grant_period, k.ink_limit, k.ink_charged + k.ink_reserved + k.ink_leased AS used,
         k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now) AS live,
         coalesce(w.lease_pause_until > p_now, false) OR coalesce(k.lease_pause_until > p_now, false) AS paused INTO v
    FROM wallets w JOIN api_keys k ON k.account_id = w.account_id
   WHERE w.account_id = p_account AND k.id = p_key
     FOR UPDATE OF w, k;
  IF NOT FOUND THEN result := 'unknown_key'; RETURN NEXT; RETURN; END IF;
  IF NOT v.live THEN result := 'key_not_live'; RETURN NEXT; RETURN; END IF;
  IF NOT EXISTS (SELECT 1 FROM ledger_instances WHERE id = p_instance AND epoch = p_epoch) THEN
    result := 'stale_instance'; RETURN NEXT; RETURN;
  END IF;
  IF p_lease IS NOT NULL THEN
    SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
    IF NOT FOUND OR l.state <> 'live' OR l.instance_id <> p_instance OR l.epoch <> p_epoch OR l.recall_at IS NOT NULL
       OR l.grant_period <> v.grant_period OR l.key_id <> p_key THEN
      result := 'lease_gone'; RETURN NEXT; RETURN;
    END IF;
  END IF;
  unleased := v.grant_ink + v.payg_ink;
  IF v.paused THEN result := 'edge'; available_ink := unleased; RETURN NEXT; RETURN; END IF;
  room := CASE WHEN v.ink_limit IS NULL THEN NULL ELSE greatest(v.ink_limit - v.used, 0) END;
  available_ink := unleased; key_room_ink := room;
  size := least(p_want, (unleased * p_wallet_permille) / 1000, unleased - p_floor);
  IF room IS NOT NULL THEN size := least(size, (room * p_key_permille) / 1000); END IF;
  IF size < greatest(p_min, 1) THEN result := 'edge'; RETURN NEXT; RETURN; END IF;
  g := least(v.grant_ink, size);
  p := size - g;
  IF p_lease IS NULL THEN
    INSERT INTO leases (account_id, key_id, instance_id, epoch, state, grant_ink, payg_ink, grant_period, expires_at, created_at)
    VALUES (p_account, p_key, p_instance, p_epoch, 'live', g, p, v.grant_period, p_now + make_interval(secs => p_ttl_ms / 1000.0), p_now)
    RETURNING id INTO lid;
  ELSE
    lid := p_lease;
    UPDATE leases SET grant_ink = grant_ink + g, payg_ink = payg_ink + p,
                      expires_at = p_now + make_interval(secs => p_ttl_ms / 1000.0)
     WHERE id = lid;
  END IF;
  UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - p,
                     leased_grant_ink = leased_grant_ink + g, leased_payg_ink = leased_payg_ink + p
   WHERE account_id = p_account;
  UPDATE api_keys SET ink_leased = ink_leased + size WHERE id = p_key;
  INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, leased_grant_ink, leased_payg_ink)
  VALUES (p_now, 'lease', p_account, p_key, lid, size, -g, -p, g, p);
  result := 'ok'; lease_id := lid; take_grant_ink := g; take_payg_ink := p; grant_period := v.grant_period;
  RETURN NEXT;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_recall(p_account text, p_key text, p_now timestamp with time zone, p_until timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  n integer;
BEGIN
  UPDATE wallets SET lease_pause_until = greatest(lease_pause_until, p_until) WHERE account_id = p_account;
  UPDATE api_keys SET lease_pause_until = greatest(lease_pause_until, p_until) WHERE id = p_key;
  UPDATE leases SET recall_at = p_now
   WHERE state = 'live' AND drained_at IS NULL AND recall_at IS NULL AND (account_id = p_account OR key_id = p_key);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_reserve(p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_holds bigint[], p_now timestamp with time zone, p_lock_timeout_ms integer)
 RETURNS TABLE(item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  w_ids text[]; w_grant bigint[]; w_payg bigint[]; w_period integer[]; w_tg bigint[]; w_tp bigint[];
  k_ids text[]; k_acc text[]; k_limit bigint[]; k_used bigint[]; k_take bigint[]; k_live boolean[];
  taken text[];
  o_result text[] := '{}'; o_g bigint[] := '{}'; o_p bigint[] := '{}'; o_avail bigint[] := '{}'; o_room bigint[] := '{}';
  s_i integer[] := '{}'; s_g bigint[] := '{}'; s_p bigint[] := '{}'; s_period integer[] := '{}';
  i integer; wj integer; kj integer; h bigint; g bigint; p bigint; lim bigint;
BEGIN
  IF n = 0 THEN RETURN; END IF;
  -- A batch waits less for a wedged row than the session default, so that after it fails the
  -- items can be retried one by one and the healthy ones still answer within the usual budget.
  IF p_lock_timeout_ms IS NOT NULL THEN PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true); END IF;
  SELECT array_agg(x.account_id), array_agg(x.grant_ink), array_agg(x.payg_ink), array_agg(x.grant_period)
    INTO w_ids, w_grant, w_payg, w_period
    FROM (SELECT account_id, grant_ink, payg_ink, grant_period FROM wallets
           WHERE account_id = ANY(p_accounts) ORDER BY account_id FOR UPDATE) x;
  SELECT array_agg(x.id), array_agg(x.account_id), array_agg(x.ink_limit), array_agg(x.ink_charged + x.ink_reserved + x.ink_leased),
         array_agg(x.revoked_at IS NULL AND (x.expires_at IS NULL OR x.expires_at > p_now))
    INTO k_ids, k_acc, k_limit, k_used, k_live
    FROM (SELECT id, account_id, ink_limit, ink_charged, ink_reserved, ink_leased, revoked_at, expires_at FROM api_keys
           WHERE id = ANY(p_keys) ORDER BY id FOR UPDATE) x;
  SELECT coalesce(array_agg(id), '{}') INTO taken FROM requests WHERE id = ANY(p_ids);
  w_ids := coalesce(w_ids, '{}'); k_ids := coalesce(k_ids, '{}');
  w_tg := array_fill(0::bigint, ARRAY[greatest(cardinality(w_ids), 1)]);
  w_tp := w_tg;
  k_take := array_fill(0::bigint, ARRAY[greatest(cardinality(k_ids), 1)]);

  FOR i IN 1..n LOOP
    h := p_holds[i];
    kj := array_position(k_ids, p_keys[i]);
    wj := array_position(w_ids, p_accounts[i]);
    g := 0; p := 0;
    IF h IS NULL OR h < 0 THEN
      o_result := o_result || 'invalid'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF p_ids[i] = ANY(taken) THEN
      o_result := o_result || 'duplicate'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF kj IS NULL OR k_acc[kj] <> p_accounts[i] THEN
      o_result := o_result || 'unknown_key'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF NOT k_live[kj] THEN
      o_result := o_result || 'key_not_live'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF k_limit[kj] IS NOT NULL AND k_used[kj] + h > k_limit[kj] THEN
      lim := k_limit[kj];
      o_result := o_result || 'key_limit'::text;
      o_avail := o_avail || NULL::bigint;
      o_room := o_room || greatest(lim - k_used[kj], 0);
    ELSIF wj IS NULL OR w_grant[wj] + w_payg[wj] < h THEN
      o_result := o_result || 'insufficient'::text;
      o_avail := o_avail || (CASE WHEN wj IS NULL THEN 0 ELSE w_grant[wj] + w_payg[wj] END);
      o_room := o_room || NULL::bigint;
    ELSE
      -- Grant first, then pay-as-you-go; the hold remembers the split.
      g := least(w_grant[wj], h);
      p := h - g;
      w_grant[wj] := w_grant[wj] - g;
      w_payg[wj] := w_payg[wj] - p;
      w_tg[wj] := w_tg[wj] + g;
      w_tp[wj] := w_tp[wj] + p;
      k_used[kj] := k_used[kj] + h;
      k_take[kj] := k_take[kj] + h;
      taken := taken || p_ids[i];
      s_i := s_i || i; s_g := s_g || g; s_p := s_p || p; s_period := s_period || w_period[wj];
      o_result := o_result || 'ok'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    END IF;
    o_g := o_g || g; o_p := o_p || p;
  END LOOP;

  IF cardinality(s_i) > 0 THEN
    -- One statement for the four writes (the rows are locked above, and this statement's snapshot
    -- is taken after those locks were granted, so it sees exactly what was checked).
    WITH uw AS (
      UPDATE wallets w
         SET grant_ink = w.grant_ink - d.g, payg_ink = w.payg_ink - d.p,
             held_grant_ink = w.held_grant_ink + d.g, held_payg_ink = w.held_payg_ink + d.p
        FROM unnest(w_ids, w_tg, w_tp) AS d(account_id, g, p)
       WHERE w.account_id = d.account_id AND d.g + d.p > 0
    ), uk AS (
      UPDATE api_keys k SET ink_reserved = k.ink_reserved + d.t
        FROM unnest(k_ids, k_take) AS d(id, t)
       WHERE k.id = d.id AND d.t > 0
    ), ir AS (
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
                            hold_ink, hold_grant_ink, hold_payg_ink, grant_period, created_at)
      SELECT p_ids[s.i], p_accounts[s.i], p_keys[s.i], p_products[s.i], p_models[s.i], 'open', 'running',
             p_holds[s.i], s.g, s.p, s.period, p_now
        FROM unnest(s_i, s_g, s_p, s_period) AS s(i, g, p, period)
    )
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink,
                                grant_ink, payg_ink, held_grant_ink, held_payg_ink)
    SELECT p_now, 'reserve', p_accounts[s.i], p_keys[s.i], p_ids[s.i], p_holds[s.i], -s.g, -s.p, s.g, s.p
      FROM unnest(s_i, s_g, s_p) AS s(i, g, p);
  END IF;

  RETURN QUERY SELECT o.ord::integer, o.r, o.g, o.p, o.a, o.k
    FROM unnest(o_result, o_g, o_p, o_avail, o_room) WITH ORDINALITY AS o(r, g, p, a, k, ord);
END
$function$;

CREATE OR REPLACE FUNCTION ledger_reserve_one(p_id text, p_account text, p_key text, p_product text, p_model text, p_hold bigint, p_now timestamp with time zone)
 RETURNS TABLE(item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  v record;
  g bigint;
BEGIN
  item := 1; take_grant_ink := 0; take_payg_ink := 0; available_ink := NULL; key_room_ink := NULL;
  IF p_hold IS NULL OR p_hold < 0 THEN
    result := 'invalid'; RETURN NEXT; RETURN;
  END IF;
  SELECT w.grant_ink, w.payg_ink, w.grant_period, k.ink_limit, k.ink_charged + k.ink_reserved + k.ink_leased AS used,
         k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now) AS live INTO v
    FROM wallets w JOIN api_keys k ON k.account_id = w.account_id
   WHERE w.account_id = p_account AND k.id = p_key
     FOR UPDATE OF w, k;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE id = p_key AND account_id = p_account) THEN
      result := 'insufficient'; available_ink := 0; -- no wallet
    ELSE
      result := 'unknown_key';
    END IF;
    RETURN NEXT; RETURN;
  END IF;
  IF NOT v.live THEN
    result := 'key_not_live'; RETURN NEXT; RETURN;
  END IF;
  IF v.ink_limit IS NOT NULL AND v.used + p_hold > v.ink_limit THEN
    result := 'key_limit'; key_room_ink := greatest(v.ink_limit - v.used, 0); RETURN NEXT; RETURN;
  END IF;
  IF v.grant_ink + v.payg_ink < p_hold THEN
    result := 'insufficient'; available_ink := v.grant_ink + v.payg_ink; RETURN NEXT; RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM requests WHERE id = p_id) THEN
    result := 'duplicate'; RETURN NEXT; RETURN;
  END IF;
  g := least(v.grant_ink, p_hold);
  WITH uw AS (
    UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - (p_hold - g),
                       held_grant_ink = held_grant_ink + g, held_payg_ink = held_payg_ink + (p_hold - g)
     WHERE account_id = p_account
  ), uk AS (
    UPDATE api_keys SET ink_reserved = ink_reserved + p_hold WHERE id = p_key
  ), ir AS (
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
                          hold_ink, hold_grant_ink, hold_payg_ink, grant_period, created_at)
    VALUES (p_id, p_account, p_key, p_product, p_model, 'open', 'running', p_hold, g, p_hold - g, v.grant_period, p_now)
  )
  INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink, held_grant_ink, held_payg_ink)
  VALUES (p_now, 'reserve', p_account, p_key, p_id, p_hold, -g, -(p_hold - g), g, p_hold - g);
  result := 'ok'; take_grant_ink := g; take_payg_ink := p_hold - g;
  RETURN NEXT;
END
$function$;

CREATE OR REPLACE FUNCTION ledger_resolve(p_ids text[], p_kinds text[], p_charges bigint[], p_usage jsonb[], p_vendor_ids text[], p_reasons text[], p_now timestamp with time zone, p_lock_timeout_ms integer)
 RETURNS TABLE(item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  q_ids text[]; q_acc text[]; q_key text[]; q_hold bigint[]; q_hg bigint[]; q_hp bigint[]; q_period integer[]; q_open boolean[];
  open_acc text[]; open_key text[];
  w_ids text[]; w_period integer[];
  s_i integer[] := '{}'; s_j integer[] := '{}'; s_state text[] := '{}';
  s_c bigint[] := '{}'; s_cg bigint[] := '{}'; s_cp bigint[] := '{}'; s_bg bigint[] := '{}'; s_bp bigint[] := '{}'; s_ex bigint[] := '{}';
  o_result text[] := '{}'; o_c bigint[] := '{}'; o_rel bigint[] := '{}'; o_ex bigint[] := '{}'; o_hold bigint[] := '{}';
  i integer; j integer; wj integer; c bigint; cg bigint; cp bigint; bg bigint; bp bigint; ex bigint; st text; cnt integer;
BEGIN
  IF n = 0 THEN RETURN; END IF;
  -- A batch waits less for a wedged row than the session default, so that after it fails the
  -- items can be retried one by one and the healthy ones still answer within the usual budget.
  IF p_lock_timeout_ms IS NOT NULL THEN PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true); END IF;
  SELECT array_agg(x.id), array_agg(x.account_id), array_agg(x.key_id), array_agg(x.hold_ink),
         array_agg(x.hold_grant_ink), array_agg(x.hold_payg_ink), array_agg(x.grant_period), array_agg(x.hold_state = 'open'),
         array_agg(x.account_id) FILTER (WHERE x.hold_state = 'open'), array_agg(x.key_id) FILTER (WHERE x.hold_state = 'open')
    INTO q_ids, q_acc, q_key, q_hold, q_hg, q_hp, q_period, q_open, open_acc, open_key
    FROM (SELECT id, account_id, key_id, hold_ink, hold_grant_ink, hold_payg_ink, grant_period, hold_state
            FROM requests WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE) x;
  q_ids := coalesce(q_ids, '{}');
  SELECT array_agg(x.account_id), array_agg(x.grant_period) INTO w_ids, w_period
    FROM (SELECT account_id, grant_period FROM wallets WHERE account_id = ANY(open_acc) ORDER BY account_id FOR UPDATE) x;
  w_ids := coalesce(w_ids, '{}');
  SELECT count(*) INTO cnt FROM (SELECT id FROM api_keys WHERE id = ANY(open_key) ORDER BY id FOR UPDATE) x;

  FOR i IN 1..n LOOP
    j := array_position(q_ids, p_ids[i]);
    IF j IS NULL THEN
      o_result := o_result || 'unknown_request'::text;
      o_c := o_c || NULL::bigint; o_rel := o_rel || NULL::bigint; o_ex := o_ex || NULL::bigint; o_hold := o_hold || NULL::bigint;
    ELSIF NOT q_open[j] THEN
      o_result := o_result || 'already_resolved'::text;
      o_c := o_c || NULL::bigint; o_rel := o_rel || NULL::bigint; o_ex := o_ex || NULL::bigint; o_hold := o_hold || q_hold[j];
    ELSE
      q_open[j] := false; -- a second resolver of the same hold in this batch loses
      IF p_kinds[i] IN ('settle', 'reconcile') THEN
        c := least(greatest(coalesce(p_charges[i], 0), 0), q_hold[j]);
      ELSE
        c := 0;
      END IF;
      cg := least(c, q_hg[j]);
      cp := c - cg;
      bg := q_hg[j] - cg;
      bp := q_hp[j] - cp;
      wj := array_position(w_ids, q_acc[j]);
      IF wj IS NOT NULL AND w_period[wj] <> q_period[j] THEN
        ex := bg; bg := 0;
      ELSE
        ex := 0;
      END IF;
      st := CASE p_kinds[i]
              WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'refund' THEN 'refunded'
              ELSE CASE WHEN c > 0 THEN 'settled' ELSE 'released' END END;
      s_i := s_i || i; s_j := s_j || j; s_state := s_state || st;
      s_c := s_c || c; s_cg := s_cg || cg; s_cp := s_cp || cp; s_bg := s_bg || bg; s_bp := s_bp || bp; s_ex := s_ex || ex;
      o_result := o_result || 'ok'::text;
      o_c := o_c || c; o_rel := o_rel || (bg + bp); o_ex := o_ex || ex; o_hold := o_hold || q_hold[j];
    END IF;
  END LOOP;

  IF cardinality(s_i) > 0 THEN
    -- One statement for the four writes (every row was locked above); the count checks that each
    -- hold found open when it was locked was the one resolved.
    WITH uq AS (
      UPDATE requests r
         SET hold_state = s.st, status = s.st, charged_ink = s.c, charged_grant_ink = s.cg, charged_payg_ink = s.cp,
             expired_ink = s.ex, resolved_at = p_now,
             usage = coalesce(p_usage[s.i], r.usage),
             vendor_request_id = coalesce(p_vendor_ids[s.i], r.vendor_request_id),
             reason = coalesce(p_reasons[s.i], r.reason)
        FROM unnest(s_i, s_state, s_c, s_cg, s_cp, s_ex) AS s(i, st, c, cg, cp, ex)
       WHERE r.id = p_ids[s.i] AND r.hold_state = 'open'
      RETURNING 1
    ), uw AS (
      UPDATE wallets w
         SET grant_ink = w.grant_ink + d.bg, payg_ink = w.payg_ink + d.bp,
             held_grant_ink = w.held_grant_ink - d.hg, held_payg_ink = w.held_payg_ink - d.hp,
             charged_ink = w.charged_ink + d.c, expired_ink = w.expired_ink + d.ex
        FROM (SELECT q_acc[s.j] AS account_id, sum(s.bg) AS bg, sum(s.bp) AS bp, sum(q_hg[s.j]) AS hg, sum(q_hp[s.j]) AS hp,
                     sum(s.c) AS c, sum(s.ex) AS ex
                FROM unnest(s_j, s_c, s_bg, s_bp, s_ex) AS s(j, c, bg, bp, ex) GROUP BY 1) d
       WHERE w.account_id = d.account_id
    ), uk AS (
      UPDATE api_keys k SET ink_reserved = k.ink_reserved - d.h, ink_charged = k.ink_charged + d.c
        FROM (SELECT q_key[s.j] AS id, sum(q_hold[s.j]) AS h, sum(s.c) AS c
                FROM unnest(s_j, s_c) AS s(j, c) GROUP BY 1) d
       WHERE k.id = d.id
    ), ij AS (
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink,
                                  held_grant_ink, held_payg_ink, charged_ink, expired_ink, note)
      SELECT p_now, p_kinds[s.i], q_acc[s.j], q_key[s.j], p_ids[s.i], s.c, s.bg, s.bp, -q_hg[s.j], -q_hp[s.j], s.c, s.ex,
             p_reasons[s.i]
        FROM unnest(s_i, s_j, s_c, s_bg, s_bp, s_ex) AS s(i, j, c, bg, bp, ex)
    )
    SELECT count(*) INTO cnt FROM uq;
    IF cnt <> cardinality(s_i) THEN
      RAISE EXCEPTION 'ledger_resolve: % holds to resolve, % were open', cardinality(s_i), cnt;
    END IF;
  END IF;

  RETURN QUERY SELECT o.ord::integer, o.r, o.c, o.rel, o.ex, o.h
    FROM unnest(o_result, o_c, o_rel, o_ex, o_hold) WITH ORDINALITY AS o(r, c, rel, ex, h, ord);
END
$function$;

CREATE OR REPLACE FUNCTION ledger_resolve_one(p_id text, p_kind text, p_charge bigint, p_usage jsonb, p_vendor_id text, p_reason text, p_now timestamp with time zone)
 RETURNS TABLE(item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  v record;
  c bigint; cg bigint; cp bigint; bg bigint; bp bigint; ex bigint; st text; cnt integer;
BEGIN
  item := 1;
  SELECT q.account_id, q.key_id, q.hold_ink, q.hold_grant_ink AS hg, q.hold_payg_ink AS hp, q.hold_state,
         q.grant_period <> w.grant_period AS lapsed INTO v
    FROM requests q JOIN wallets w ON w.account_id = q.account_id JOIN api_keys k ON k.id = q.key_id
   WHERE q.id = p_id
     FOR UPDATE OF q, w, k;
  IF NOT FOUND THEN
    result := 'unknown_request'; RETURN NEXT; RETURN;
  END IF;
  held_total_ink := v.hold_ink;
  IF v.hold_state <> 'open' THEN
    result := 'already_resolved'; RETURN NEXT; RETURN;
  END IF;
  IF p_kind IN ('settle', 'reconcile') THEN c := least(greatest(coalesce(p_charge, 0), 0), v.hold_ink); ELSE c := 0; END IF;
  cg := least(c, v.hg);
  cp := c - cg;
  bg := v.hg - cg;
  bp := v.hp - cp;
  IF v.lapsed THEN ex := bg; bg := 0; ELSE ex := 0; END IF;
  st := CASE p_kind WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'refund' THEN 'refunded'
                    ELSE CASE WHEN c > 0 THEN 'settled' ELSE 'released' END END;
  WITH uq AS (
    UPDATE requests
       SET hold_state = st, status = st, charged_ink = c, charged_grant_ink = cg, charged_payg_ink = cp,
           expired_ink = ex, resolved_at = p_now,
           usage = coalesce(p_usage, usage),
           vendor_request_id = coalesce(p_vendor_id, vendor_request_id),
           reason = coalesce(p_reason, reason)
     WHERE id = p_id AND hold_state = 'open'
    RETURNING id
  ), uw AS (
    UPDATE wallets
       SET grant_ink = grant_ink + bg, payg_ink = payg_ink + bp,
           held_grant_ink = held_grant_ink - v.hg, held_payg_ink = held_payg_ink - v.hp,
           charged_ink = charged_ink + c, expired_ink = expired_ink + ex
     WHERE account_id = v.account_id AND EXISTS (SELECT 1 FROM uq)
  ), uk AS (
    UPDATE api_keys SET ink_reserved = ink_reserved - v.hold_ink, ink_charged = ink_charged + c
     WHERE id = v.key_id AND EXISTS (SELECT 1 FROM uq)
  ), ij AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink,
                                held_grant_ink, held_payg_ink, charged_ink, expired_ink, note)
    SELECT p_now, p_kind, v.account_id, v.key_id, uq.id, c, bg, bp, -v.hg, -v.hp, c, ex, p_reason FROM uq
  )
  SELECT count(*) INTO cnt FROM uq;
  IF cnt <> 1 THEN
    RAISE EXCEPTION 'ledger_resolve_one: % was locked open but not resolved', p_id;
  END IF;
  result := 'ok'; charged_total_ink := c; released_total_ink := bg + bp; expired_total_ink := ex;
  RETURN NEXT;
END
$function$;
