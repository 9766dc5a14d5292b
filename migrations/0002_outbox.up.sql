-- The watermill-sql outbox (topic "ledger_outbox"), in the layout of watermill-sql v3's
-- DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter. Created here because the publisher
-- cannot initialise its schema inside the transaction that appends events.
CREATE TABLE "watermill_ledger_outbox" (
    "offset"         bigserial,
    "uuid"           varchar(36) NOT NULL,
    "created_at"     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload"        json        DEFAULT NULL,
    "metadata"       json        DEFAULT NULL,
    "transaction_id" xid8        NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);

CREATE TABLE "watermill_offsets_ledger_outbox" (
    consumer_group                varchar(255) NOT NULL,
    offset_acked                  bigint,
    last_processed_transaction_id xid8         NOT NULL,
    PRIMARY KEY (consumer_group)
);
