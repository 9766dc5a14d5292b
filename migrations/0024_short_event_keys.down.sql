-- Keys stored from their "/" on get their delivery's id back (the form before 0024).
UPDATE events SET idempotency_key = delivery_id::text || idempotency_key
WHERE left(idempotency_key, 1) = '/';
