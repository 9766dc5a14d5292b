-- Payload expiry (retention.payloads): a notification's payload body leaves after its period and
-- only its SHA-256 (sha256, as before) and its size stay, so the history still proves what was
-- sent. The expiry pass (postgres.RetentionStore.ExpirePayloads) sets payload to NULL, size to
-- the bytes of its JSON and expired_at, in batches, for notifications whose deliveries are all
-- terminal. The partial index finds the bodies still held, oldest first, without walking the
-- expired rows again.
ALTER TABLE notification_payloads ALTER COLUMN payload DROP NOT NULL,
    ADD COLUMN size integer,
    ADD COLUMN expired_at timestamptz;
CREATE INDEX notification_payloads_held ON notification_payloads (accepted_at) WHERE payload IS NOT NULL;

-- The least delivery id of an accept time (the inverse of ledger_delivery_time, to the
-- millisecond): a notification's deliveries all carry its accept's millisecond.
CREATE FUNCTION ledger_delivery_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid;
