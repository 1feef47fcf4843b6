-- Idempotency-Keys: one key space per product (video, images) and no body comparison.
--
-- Why: the interface (docs/api, "Idempotency") answers a repeated submit with the same key on the
-- same API key within 24 hours with the original 202 body and `Idempotent-Replayed: true`; a new
-- intent needs a new key. It has no error for a key reused with another body (010 answered 422
-- idempotency_key_reused, a code the error table does not have), so the original 202 is
-- replayed whatever the body. The key space is per endpoint: a key first used on a video submit
-- and then on an image submit starts an image generation instead of replaying a video.
-- Deploying: stop instances older than 013 before it runs (their claims name body_hash and
-- conflict on (key_id, idem_key); a submit with an Idempotency-Key on one of them would fail).
ALTER TABLE idempotency_keys ADD COLUMN product text NOT NULL DEFAULT 'video' CHECK (product IN ('video', 'images'));
UPDATE idempotency_keys SET product = 'images' WHERE generation_id LIKE 'igen\_%';
ALTER TABLE idempotency_keys ALTER COLUMN product DROP DEFAULT;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (key_id, product, idem_key);
ALTER TABLE idempotency_keys DROP COLUMN body_hash;
