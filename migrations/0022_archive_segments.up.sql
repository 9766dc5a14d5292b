-- The archive's index in the hot store: one row per partition of the history that left (or is
-- leaving) for the archive, with the range of delivery ids it held (their accept times, [from_at,
-- to_at)) and its tenants, so that a read of an archived delivery answers 410 naming its segment
-- rather than 404, and `projections verify counters` can add what left to what stays. Written by
-- the retention pass (package retention): 'archiving' before the partition is detached,
-- 'archived' once the archive has been read back and checked and the partition dropped. A row
-- per partition, not per delivery: the table stays small however much leaves.
CREATE TABLE archive_segments (
    id          text        PRIMARY KEY,
    state       text        NOT NULL CHECK (state IN ('archiving', 'archived')),
    from_at     timestamptz,
    to_at       timestamptz NOT NULL,
    tenants     text[]      NOT NULL,
    deliveries  bigint      NOT NULL DEFAULT 0,
    events      bigint      NOT NULL DEFAULT 0,
    -- The archive's manifest, once written and checked.
    manifest    jsonb,
    -- Deliveries per (tenant, channel, state) at their end, and transitions into each state,
    -- that left with the segment: [{"tenant","channel","state","deliveries","entered"}].
    counters    jsonb       NOT NULL DEFAULT '[]'::jsonb,
    started_at  timestamptz NOT NULL DEFAULT now(),
    archived_at timestamptz
);
CREATE INDEX archive_segments_to_at ON archive_segments (to_at);
