-- Deployment switches, plans, accounts, wallets and API keys.
-- Amounts are whole Ink in BIGINT. Balances are kept beside the journal (002) in the same transaction.

CREATE TABLE deployment (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  api_open boolean NOT NULL DEFAULT true,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO deployment DEFAULT VALUES;

-- A text lane opens after vendor certification: closed until an operator enables it.
-- Video and images are live wherever the API is open (when their vendor is configured).
CREATE TABLE lanes (
  lane text PRIMARY KEY CHECK (lane IN ('messages', 'responses', 'video', 'images')),
  enabled boolean NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO lanes (lane, enabled) VALUES ('messages', false), ('responses', false), ('video', true), ('images', true);

CREATE TABLE model_pauses (
  model_id text PRIMARY KEY,
  retry_after_s integer NOT NULL DEFAULT 300 CHECK (retry_after_s BETWEEN 1 AND 86400),
  paused_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE plans (
  id text PRIMARY KEY,
  label text NOT NULL,
  paid boolean NOT NULL,
  video_allowed boolean NOT NULL,
  daily_generation_cap integer NOT NULL CHECK (daily_generation_cap >= 0),
  period_grant_ink bigint NOT NULL CHECK (period_grant_ink >= 0),
  period_days integer NOT NULL DEFAULT 30 CHECK (period_days BETWEEN 1 AND 366)
);
INSERT INTO plans (id, label, paid, video_allowed, daily_generation_cap, period_grant_ink) VALUES
  ('free', 'Free', false, false, 0, 0),
  ('starter', 'Starter', true, true, 20, 1000),
  ('pro', 'Pro', true, true, 100, 5000);

CREATE TABLE accounts (
  id text PRIMARY KEY CHECK (id LIKE 'usr\_%'),
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  plan_id text NOT NULL REFERENCES plans(id),
  created_at timestamptz NOT NULL DEFAULT now()
);

-- One wallet per account. The CHECK is the ledger's invariant, enforced on every write:
-- what is spendable + what is held + what was charged + what lapsed = everything ever credited.
CREATE TABLE wallets (
  account_id text PRIMARY KEY REFERENCES accounts(id),
  grant_ink bigint NOT NULL DEFAULT 0 CHECK (grant_ink >= 0),
  payg_ink bigint NOT NULL DEFAULT 0 CHECK (payg_ink >= 0),
  held_grant_ink bigint NOT NULL DEFAULT 0 CHECK (held_grant_ink >= 0),
  held_payg_ink bigint NOT NULL DEFAULT 0 CHECK (held_payg_ink >= 0),
  charged_ink bigint NOT NULL DEFAULT 0 CHECK (charged_ink >= 0),
  expired_ink bigint NOT NULL DEFAULT 0 CHECK (expired_ink >= 0),
  credited_ink bigint NOT NULL DEFAULT 0 CHECK (credited_ink >= 0),
  topups_completed integer NOT NULL DEFAULT 0 CHECK (topups_completed >= 0),
  period_started_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT wallet_balances CHECK (
    grant_ink + payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink = credited_ink)
);

-- Keys are stored only as SHA-256 hash, 12-character display prefix and last four.
CREATE TABLE api_keys (
  id text PRIMARY KEY CHECK (id LIKE 'key\_%'),
  account_id text NOT NULL REFERENCES accounts(id),
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  key_hash bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
  prefix text NOT NULL CHECK (length(prefix) = 12),
  last4 text NOT NULL CHECK (length(last4) = 4),
  ink_limit bigint CHECK (ink_limit IS NULL OR ink_limit >= 0),
  ink_charged bigint NOT NULL DEFAULT 0 CHECK (ink_charged >= 0),
  ink_reserved bigint NOT NULL DEFAULT 0 CHECK (ink_reserved >= 0),
  expires_at timestamptz,
  revoked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_account ON api_keys (account_id);
