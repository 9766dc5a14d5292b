-- An event's idempotency key begins with its delivery's id (domain.KeyAttemptStarted and the
-- rest: "<id>/attempt/1/started"), and the events' unique key is (idempotency_key, delivery_id):
-- the id was kept twice in every row and every entry of the key's index, 36 of a key's ~50 bytes.
-- The store now keeps the key from its "/" on and puts the id back as it reads (adapters/postgres,
-- keyStored and keyLoaded). Every stored key must take that form, or a key recorded before this
-- migration and its repeat after it would both pass the unique index. A key already short (one
-- written by a ledger that ran this change before its migration was numbered) is left alone. The
-- key is not a partition key, so each row is updated in its partition.
UPDATE events SET idempotency_key = substr(idempotency_key, 37)
WHERE left(idempotency_key, 37) = delivery_id::text || '/';
