-- One-time form nonces of the console's key-creation form. Reloading the page that showed a new key
-- makes the browser post the same form again; the nonce in that form lets the server tell the
-- repeat from a new request, create nothing, and say so (the raw key is never stored, so it cannot
-- be shown twice). A nonce is random, bound to the session that was shown the form, kept only as
-- its SHA-256, and lives no longer than that session; a used one remembers the key it created.
CREATE TABLE console_form_nonces (
  nonce_hash bytea PRIMARY KEY CHECK (length(nonce_hash) = 32),
  session_hash bytea NOT NULL REFERENCES console_sessions(id_hash) ON DELETE CASCADE,
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  key_id text REFERENCES api_keys(id),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_form_nonces_session ON console_form_nonces (session_hash, created_at);
CREATE INDEX console_form_nonces_expires ON console_form_nonces (expires_at);
