-- Every outbox row with its shard, for operators and tests; the relay reads the shard tables.
-- There is one shard (see OutboxShards in adapters/postgres/outbox.go): a second needs a
-- migration that creates watermill_ledger_outbox_1 and its offsets table, and this view again.
CREATE VIEW ledger_outbox_all AS
    SELECT 0 AS shard, * FROM "watermill_ledger_outbox";
