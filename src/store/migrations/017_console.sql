-- The console (browser pages under /console): one-time sign-in links printed by the operator's CLI,
-- sessions that hold nothing but an account id, and the account's playground key. Secrets are kept
-- only as SHA-256 hashes: a leaked table signs nobody in.

-- A sign-in link: single use (used_at), short-lived (expires_at, 15 minutes when printed).
CREATE TABLE console_links (
  token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
  account_id text NOT NULL REFERENCES accounts(id),
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_links_expires ON console_links (expires_at);

-- A browser session: the cookie carries a random id, the table its hash. Signing out sets
-- revoked_at; the CSRF token of each form is derived from the session id, so it needs no column.
CREATE TABLE console_sessions (
  id_hash bytea PRIMARY KEY CHECK (length(id_hash) = 32),
  account_id text NOT NULL REFERENCES accounts(id),
  expires_at timestamptz NOT NULL,
  revoked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_sessions_account ON console_sessions (account_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- The playground calls the gateway's own /v1 routes with a real key of the account (same lanes,
-- same billing). Its raw value is derived from console_secret and the key id (HMAC), so it is never
-- stored and never sent to a browser; revoking the key in the console makes the next call mint a new one.
CREATE TABLE console_secret (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  secret bytea NOT NULL CHECK (length(secret) = 32),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE console_playground_keys (
  account_id text PRIMARY KEY REFERENCES accounts(id),
  key_id text NOT NULL REFERENCES api_keys(id),
  created_at timestamptz NOT NULL DEFAULT now()
);
