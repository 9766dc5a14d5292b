-- Three more outbox shards beside "ledger_outbox" (shard 0). watermill's forwarder publishes one
-- message at a time and waits for each broker confirm, so one outbox topic caps the relay at
-- roughly a thousand messages a second; a delivery's messages go to the shard of its id, and the
-- relay runs one forwarder per shard. Same layout as migration 0002.

CREATE TABLE "watermill_ledger_outbox_1" (
    "offset"         bigserial,
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);

CREATE TABLE "watermill_offsets_ledger_outbox_1" (
    consumer_group                varchar(255) NOT NULL,
    offset_acked                  bigint,
    last_processed_transaction_id xid8         NOT NULL,
    PRIMARY KEY (consumer_group)
);

CREATE TABLE "watermill_ledger_outbox_2" (
    "offset"         bigserial,
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);

CREATE TABLE "watermill_offsets_ledger_outbox_2" (
    consumer_group                varchar(255) NOT NULL,
    offset_acked                  bigint,
    last_processed_transaction_id xid8         NOT NULL,
    PRIMARY KEY (consumer_group)
);

CREATE TABLE "watermill_ledger_outbox_3" (
    "offset"         bigserial,
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);

CREATE TABLE "watermill_offsets_ledger_outbox_3" (
    consumer_group                varchar(255) NOT NULL,
    offset_acked                  bigint,
    last_processed_transaction_id xid8         NOT NULL,
    PRIMARY KEY (consumer_group)
);

-- Every shard's rows, for operators and tests; the relay reads the shard tables.
CREATE VIEW ledger_outbox_all AS
    SELECT 0 AS shard, * FROM "watermill_ledger_outbox"
    UNION ALL SELECT 1, * FROM "watermill_ledger_outbox_1"
    UNION ALL SELECT 2, * FROM "watermill_ledger_outbox_2"
    UNION ALL SELECT 3, * FROM "watermill_ledger_outbox_3";
