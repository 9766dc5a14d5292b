-- The outbox is range-partitioned by created_at, so that relayed rows leave by dropping whole
-- partitions (postgres.RotateOutbox) instead of a DELETE every minute that left their dead tuples
-- behind (1.2 KB a delivery, never reclaimed under load). The primary key takes the partition key
-- (a key of a partitioned table must); watermill-sql reads and orders by its prefix
-- (transaction_id, "offset"), which stays unique by the sequence.
--
-- created_at is now the insert's own clock in UTC, clock_timestamp() AT TIME ZONE 'UTC', not
-- CURRENT_TIMESTAMP: that is the transaction's start, in the session's TimeZone, so a session
-- away from UTC would file rows hours off their partition, and a transaction that began before a
-- partition's bound could insert into it long after the bound passed. With the insert's clock,
-- once the server's clock is past a partition's upper bound no new row can enter it, which is
-- what lets the rotation prove a partition complete (adapters/postgres/outbox_rotate.go).
-- watermill-sql never writes created_at, so the default decides it.
DROP VIEW ledger_outbox_all;
ALTER TABLE "watermill_ledger_outbox" RENAME TO "watermill_ledger_outbox_unpartitioned";
ALTER INDEX "watermill_ledger_outbox_pkey" RENAME TO "watermill_ledger_outbox_unpartitioned_pkey";

CREATE TABLE "watermill_ledger_outbox" (
    "offset"         bigint      NOT NULL DEFAULT nextval('watermill_ledger_outbox_offset_seq'),
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'),
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset", "created_at")
) PARTITION BY RANGE ("created_at");
-- The offsets go on from where they were: the relay's offset row names one.
ALTER SEQUENCE watermill_ledger_outbox_offset_seq OWNED BY "watermill_ledger_outbox"."offset";

-- The first partition holds everything before now; the ledger cuts the next ones from its bound.
-- The old rows' times were in the writer's TimeZone: they all go into it, whatever they say.
DO $$
DECLARE
    t timestamp := date_trunc('second', now() AT TIME ZONE 'UTC');
    p text := 'watermill_ledger_outbox_p0_' || extract(epoch FROM t)::bigint;
BEGIN
    EXECUTE format('CREATE TABLE %I PARTITION OF "watermill_ledger_outbox" FOR VALUES FROM (MINVALUE) TO (%L)', p, t);
    INSERT INTO "watermill_ledger_outbox" ("offset", "uuid", "created_at", "payload", "metadata", "transaction_id")
        SELECT "offset", "uuid", least("created_at", t - interval '1 microsecond'), "payload", "metadata", "transaction_id"
        FROM "watermill_ledger_outbox_unpartitioned";
END
$$;
DROP TABLE "watermill_ledger_outbox_unpartitioned";

CREATE VIEW ledger_outbox_all AS
    SELECT 0 AS shard, * FROM "watermill_ledger_outbox";
