-- The append-only log of every delivery state transition.
CREATE TABLE events (
    -- Global position: allocated at insert, so it is NOT commit order. Readers that follow the
    -- log order by (transaction_id, position) below pg_snapshot_xmin (see adapters/postgres).
    position        bigserial PRIMARY KEY,
    transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
    delivery_id     uuid        NOT NULL,
    tenant          text        NOT NULL,
    version         integer     NOT NULL CHECK (version > 0),
    type            text        NOT NULL,
    idempotency_key text        NOT NULL,
    data            jsonb       NOT NULL,
    metadata        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at     timestamptz NOT NULL,
    -- Optimistic concurrency: one event per stream version.
    CONSTRAINT events_stream_version_key UNIQUE (delivery_id, version),
    -- Idempotency: one event per operation.
    CONSTRAINT events_idempotency_key_key UNIQUE (idempotency_key)
);

CREATE INDEX events_log_order_idx ON events (transaction_id, position);

-- One row per accepted request: the caller's Idempotency-Key, scoped per tenant, and the answer
-- to give again to an identical repeat.
CREATE TABLE accept_requests (
    tenant       text        NOT NULL,
    request_key  text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, request_key)
);
