-- Operators' requests made under an Idempotency-Key (replays), per tenant, with the answer to
-- give again to a repeat: a replay asked twice under one key is one replay. Written in the
-- transaction that records the decision.
CREATE TABLE operator_requests (
    tenant       text        NOT NULL,
    request_key  text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, request_key)
);
