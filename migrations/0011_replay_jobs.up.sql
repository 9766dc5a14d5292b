-- Operators' bulk replays (POST /v1/replays): a job per (tenant, Idempotency-Key), and the
-- deliveries its filters selected in the DLQ view when it was created. A runner leases a running
-- job (lease_until), works through its pending items in pages, and records each page's outcomes
-- with the job's counts in one transaction; another runner takes a job over when its lease runs
-- out. Each delivery's replay is itself keyed by the job (operator_requests), so a page replayed
-- again after a crash replays nothing twice.
CREATE TABLE replay_jobs (
    id              uuid        PRIMARY KEY,
    tenant          text        NOT NULL,
    request_key     text        NOT NULL,
    request_hash    bytea       NOT NULL,
    reason          text        NOT NULL,
    include_unknown boolean     NOT NULL,
    filters         jsonb       NOT NULL,
    state           text        NOT NULL CHECK (state IN ('running', 'done')),
    matched         integer     NOT NULL,
    replayed        integer     NOT NULL DEFAULT 0,
    skipped         integer     NOT NULL DEFAULT 0,
    skips           jsonb       NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    lease_until     timestamptz,
    UNIQUE (tenant, request_key)
);
CREATE INDEX ON replay_jobs (tenant, created_at DESC);
CREATE INDEX ON replay_jobs (created_at) WHERE state = 'running';

CREATE TABLE replay_job_items (
    job_id      uuid    NOT NULL REFERENCES replay_jobs ON DELETE CASCADE,
    delivery_id uuid    NOT NULL,
    done        boolean NOT NULL DEFAULT false,
    -- NULL while pending; '' replayed; otherwise why it was skipped.
    outcome     text,
    PRIMARY KEY (job_id, delivery_id)
);
CREATE INDEX ON replay_job_items (job_id, delivery_id) WHERE NOT done;
