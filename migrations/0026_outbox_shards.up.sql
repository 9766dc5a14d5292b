-- Outbox shards (LEDGER_OUTBOX_SHARDS). The outbox stays one table; a row's shard is a column,
-- chosen by the writing statement itself from the delivery's hash and the count recorded here,
-- so that no two writers can disagree on it however they are configured. Each shard has its own
-- relay offset (consumer group "relay" for shard 0, "relay/<i>" for shard i, in the one offsets
-- table), read by a relay of its own through the primary key, which now leads with the shard.
CREATE TABLE outbox_config (
    id     boolean  PRIMARY KEY DEFAULT true CHECK (id),
    shards smallint NOT NULL DEFAULT 1 CHECK (shards BETWEEN 1 AND 64)
);
INSERT INTO outbox_config DEFAULT VALUES;

DROP VIEW ledger_outbox_all;
ALTER TABLE "watermill_ledger_outbox" ADD COLUMN "shard" smallint NOT NULL DEFAULT 0;
ALTER TABLE "watermill_ledger_outbox" DROP CONSTRAINT "watermill_ledger_outbox_pkey";
ALTER TABLE "watermill_ledger_outbox" ADD PRIMARY KEY ("shard", "transaction_id", "offset", "created_at");

CREATE VIEW ledger_outbox_all AS
    SELECT "shard", "offset", "uuid", "created_at", "payload", "metadata", "transaction_id"
    FROM "watermill_ledger_outbox";
