-- Back to one plain outbox table of watermill-sql's layout, rows and offsets kept.
DROP VIEW ledger_outbox_all;
ALTER TABLE "watermill_ledger_outbox" RENAME TO "watermill_ledger_outbox_partitioned";
ALTER INDEX "watermill_ledger_outbox_pkey" RENAME TO "watermill_ledger_outbox_partitioned_pkey";

CREATE TABLE "watermill_ledger_outbox" (
    "offset"         bigint      NOT NULL DEFAULT nextval('watermill_ledger_outbox_offset_seq'),
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
ALTER SEQUENCE watermill_ledger_outbox_offset_seq OWNED BY "watermill_ledger_outbox"."offset";
INSERT INTO "watermill_ledger_outbox" ("offset", "uuid", "created_at", "payload", "metadata", "transaction_id")
    SELECT "offset", "uuid", "created_at", "payload", "metadata", "transaction_id"
    FROM "watermill_ledger_outbox_partitioned";
DROP TABLE "watermill_ledger_outbox_partitioned";

CREATE VIEW ledger_outbox_all AS
    SELECT 0 AS shard, * FROM "watermill_ledger_outbox";
