-- Back to one outbox shard. Run it with the ledger stopped and the outbox relayed: rows of a
-- shard above 0 join shard 0, whose relay offset does not know them, and would be relayed again.
DROP VIEW ledger_outbox_all;
ALTER TABLE "watermill_ledger_outbox" DROP CONSTRAINT "watermill_ledger_outbox_pkey";
ALTER TABLE "watermill_ledger_outbox" ADD PRIMARY KEY ("transaction_id", "offset", "created_at");
ALTER TABLE "watermill_ledger_outbox" DROP COLUMN "shard";
DELETE FROM "watermill_offsets_ledger_outbox" WHERE consumer_group LIKE '%/%';
DROP TABLE outbox_config;

CREATE VIEW ledger_outbox_all AS
    SELECT 0 AS shard, * FROM "watermill_ledger_outbox";
