-- Read models built from the events table by the projector (package projections). Everything
-- here is derived from the log: any of these tables can be thrown away and rebuilt with
-- `ledger projections rebuild NAME`, which builds a shadow copy (CREATE TABLE ... LIKE the live
-- table) and renames it into place. Index names follow PostgreSQL's default naming, so a rebuilt
-- table ends with the same names as one created here.

-- One row per view (status, dlq, counters) and per rebuild in progress (status.rebuild...): the
-- log position of the last event applied to the view's table. The projector writes it in the same
-- transaction as the rows, so rows and checkpoint never disagree.
CREATE TABLE projection_checkpoints (
    name             text        PRIMARY KEY,
    -- (transaction_id, position) of the last applied event, the log's gap-safe order.
    transaction_id   xid8        NOT NULL DEFAULT '0',
    position         bigint      NOT NULL DEFAULT 0,
    -- Events applied since the view was built from position zero.
    events           bigint      NOT NULL DEFAULT 0,
    -- Version of the projection code that built the view from position zero; a binary whose
    -- projection is newer warns that the view needs a rebuild.
    version          integer     NOT NULL DEFAULT 1,
    last_recorded_at timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

INSERT INTO projection_checkpoints (name) VALUES ('status'), ('dlq'), ('counters');

-- status: one row per delivery, its latest state. Text columns hold '' rather than NULL, so the
-- projector and verify compare plain values.
CREATE TABLE status_view (
    id                    uuid        PRIMARY KEY,
    tenant                text        NOT NULL,
    notification_id       text        NOT NULL,
    channel               text        NOT NULL,
    recipient             text        NOT NULL,
    priority              text        NOT NULL,
    state                 text        NOT NULL,
    version               integer     NOT NULL,
    -- Number of the latest attempt queued or started, over every cycle.
    attempts              integer     NOT NULL,
    max_attempts          integer     NOT NULL,
    provider              text        NOT NULL,
    provider_operation_id text        NOT NULL,
    last_error_class      text        NOT NULL,
    last_error            text        NOT NULL,
    last_status_code      integer     NOT NULL,
    next_attempt_at       timestamptz,
    idempotency_key       text        NOT NULL,
    accepted_at           timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    -- When the delivery entered delivered or dead; NULL while it is not terminal.
    terminal_at           timestamptz
);

-- The list endpoint pages by (accepted_at, id) within a tenant, optionally within one state.
CREATE INDEX ON status_view (tenant, accepted_at, id);
CREATE INDEX ON status_view (tenant, state, accepted_at, id);

-- dlq: deliveries that are dead or unknown, with what an operator needs to decide on a replay
-- or a reconciliation. A delivery leaves the table when it is replayed or reconciled.
CREATE TABLE dlq_view (
    id                uuid        PRIMARY KEY,
    tenant            text        NOT NULL,
    channel           text        NOT NULL,
    recipient         text        NOT NULL,
    priority          text        NOT NULL,
    state             text        NOT NULL CHECK (state IN ('dead', 'unknown')),
    version           integer     NOT NULL,
    attempts          integer     NOT NULL,
    attempts_in_cycle integer     NOT NULL,
    max_attempts      integer     NOT NULL,
    -- Replays so far (0: the first cycle).
    cycle             integer     NOT NULL,
    failure_class     text        NOT NULL,
    exhausted         boolean     NOT NULL,
    last_error        text        NOT NULL,
    last_status_code  integer     NOT NULL,
    provider          text        NOT NULL,
    accepted_at       timestamptz NOT NULL,
    -- When the delivery entered its current state (dead or unknown).
    entered_at        timestamptz NOT NULL,
    -- The current cycle's attempt outcomes and reconciliations, oldest first.
    evidence          jsonb       NOT NULL
);

CREATE INDEX ON dlq_view (tenant, accepted_at, id);

-- counters: deliveries per tenant, channel and state (deliveries: now in the state; entered:
-- transitions into the state, ever). No CHECK (deliveries >= 0): the projector adds signed deltas
-- with INSERT ... ON CONFLICT, and PostgreSQL checks the proposed row before it finds the
-- conflict. `ledger projections verify counters` is the check.
CREATE TABLE counters_view (
    tenant     text   NOT NULL,
    channel    text   NOT NULL,
    state      text   NOT NULL,
    deliveries bigint NOT NULL,
    entered    bigint NOT NULL,
    PRIMARY KEY (tenant, channel, state)
);
