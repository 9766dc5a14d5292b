-- Keys stored from their "/" on get their delivery's id back (the form before 0024), and the
-- unique key leads with the key again.
ALTER TABLE events DROP CONSTRAINT events_idempotency_key_key;
UPDATE events SET idempotency_key = delivery_id::text || idempotency_key
WHERE left(idempotency_key, 1) = '/';
ALTER TABLE events ADD CONSTRAINT events_idempotency_key_key UNIQUE (idempotency_key, delivery_id);
