DROP FUNCTION ledger_delivery_floor(timestamptz);
DROP INDEX notification_payloads_held;
-- An expired body cannot come back: those rows keep an empty object.
UPDATE notification_payloads SET payload = '{}'::jsonb WHERE payload IS NULL;
ALTER TABLE notification_payloads DROP COLUMN expired_at, DROP COLUMN size,
    ALTER COLUMN payload SET NOT NULL;
