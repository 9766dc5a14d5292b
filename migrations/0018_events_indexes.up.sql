-- The events' primary key becomes their log order, (transaction_id, position), and the separate
-- log order index goes: every write of an event paid for a btree on position that no query of the
-- ledger reads (a position alone is never looked up: readers follow the log by the pair, see
-- EventStore.ReadLog), next to the (transaction_id, position) index that every follower reads.
-- The pair stays unique (so a follower's "after this row" never matches two rows), position stays
-- unique by its sequence, and an event costs one index entry fewer. Each remaining index on events
-- and what needs it: docs/design.md, "Indexes on events"; adapters/postgres/indexes_test.go holds
-- the list. Built in the migration's transaction: on a large log, migrate in a quiet moment
-- (writes to events wait for the build).
ALTER TABLE events DROP CONSTRAINT events_pkey;
DROP INDEX events_log_order_idx;
CREATE UNIQUE INDEX events_pkey ON events (transaction_id, position);
ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY USING INDEX events_pkey;
