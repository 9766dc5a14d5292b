-- The suppression list and the preferences of each tenant's recipients (issue 25). A recipient
-- is keyed by its channel and its channel's normal form (a lower-cased address, a URL without
-- its fragment: Accepted.RecipientKey). Every change is an event of its own stream in
-- recipient_events (a suppression entry's stream holds its addition and its removal; a
-- preference's stream each of its settings); suppressions and preferences hold their current
-- state, written in the same transaction as the event, for the probe of an accept and of an
-- attempt's start: one index probe per recipient.
CREATE TABLE recipient_events (
    position        bigserial   PRIMARY KEY,
    stream_id       uuid        NOT NULL,
    version         integer     NOT NULL,
    tenant          text        NOT NULL,
    type            text        NOT NULL,
    idempotency_key text        NOT NULL UNIQUE,
    data            jsonb       NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (stream_id, version)
);

-- One row per entry; a removed entry keeps its row (removed_at set) and suppresses nothing, and
-- the recipient may be added again as a new entry.
CREATE TABLE suppressions (
    id             uuid        PRIMARY KEY,
    tenant         text        NOT NULL,
    channel        text        NOT NULL,
    recipient      text        NOT NULL,
    source         text        NOT NULL CHECK (source IN ('provider', 'manual', 'import')),
    reason         text        NOT NULL DEFAULT '',
    evidence       jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL,
    removed_at     timestamptz,
    removed_by     text        NOT NULL DEFAULT '',
    removed_reason text        NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX suppressions_active ON suppressions (tenant, channel, recipient) WHERE removed_at IS NULL;
-- The list's pages: a tenant's entries newest first (GET /v1/suppressions, the console).
CREATE INDEX suppressions_tenant_created ON suppressions (tenant, created_at DESC, id DESC);

CREATE TABLE preferences (
    tenant     text        NOT NULL,
    channel    text        NOT NULL,
    recipient  text        NOT NULL,
    category   text        NOT NULL,
    id         uuid        NOT NULL UNIQUE,
    version    integer     NOT NULL,
    opted_out  boolean     NOT NULL,
    source     text        NOT NULL,
    actor      text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, channel, recipient, category)
);
