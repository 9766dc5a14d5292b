-- The log order's index was the events' primary key, (transaction_id, position, delivery_id):
-- unique only because a primary key is, and holding the delivery id, the partition key, only
-- because a partitioned table's unique index must (0019). Position alone is unique (a sequence),
-- and no query reads the delivery id from it: 16 bytes of each entry, four entries a delivery,
-- kept for nothing (the retention benchmark counted 210 bytes a delivery in this index). The log
-- order is now a plain index of the two columns the followers read by; the stream version's
-- unique key (delivery_id, version) is the events' key.
ALTER TABLE events DROP CONSTRAINT events_pkey;
CREATE INDEX events_log_order ON events (transaction_id, position);
