-- An event's idempotency key begins with its delivery's id (domain.KeyAttemptStarted and the
-- rest: "<id>/attempt/1/started"), and the events' unique key held the delivery id beside it:
-- the id was kept twice in every row and every entry of the key's index, 36 of a key's ~50 bytes.
-- The store now keeps the key from its "/" on and puts the id back as it reads (adapters/postgres,
-- keyStored and keyLoaded). Every stored key must take that form, or a key recorded before this
-- migration and its repeat after it would both pass the unique index. A key already short (one
-- written by a ledger that ran this change before its migration was numbered) is left alone. The
-- key is not a partition key, so each row is updated in its partition; the index is dropped
-- first so that the update does not maintain it.
--
-- Short keys have few distinct values ("/accepted", "/queued/1", ...): an index that leads with
-- the key puts each new entry at the end of its value's run, in the middle of the index, where
-- pages split in halves and stay a third empty (350 bytes a delivery in the retention benchmark).
-- Led by the delivery id, a UUIDv7 of the accept time, entries arrive in order at the right edge,
-- as the log order's and the stream version's do. The probes ask by both columns.
ALTER TABLE events DROP CONSTRAINT events_idempotency_key_key;
UPDATE events SET idempotency_key = substr(idempotency_key, 37)
WHERE left(idempotency_key, 37) = delivery_id::text || '/';
ALTER TABLE events ADD CONSTRAINT events_idempotency_key_key UNIQUE (delivery_id, idempotency_key);
