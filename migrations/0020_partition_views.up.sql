-- The status and DLQ views are range-partitioned by delivery id (a UUIDv7: its first 48 bits are
-- the accept time), so that a delivery's row sits in the partition of its accept time, next to
-- its events, and leaves with them when the retention pass drops a whole partition. Their id is
-- the delivery id, so their primary keys already hold the key. The counters view is per tenant,
-- small and whole-life: it stays one table.
--
-- Each view is copied into a partitioned table with the same columns (LIKE: every column the
-- migrations gave it, in order, with its defaults and CHECK constraints), whose one first
-- partition <view>_p0_<T> holds everything before T; EnsurePartitions cuts the partitions from T
-- on. T is the second after both this migration's time and the accept time of the view's latest
-- delivery: a delivery accepted earlier in this second, or by a host whose clock runs ahead of
-- the database's, must find its partition. The indexes are made again, unnamed, on the parent,
-- so that they keep PostgreSQL's default names, which a rebuild gives back.
--
-- A shadow left by an interrupted rebuild is plain: it goes, with its checkpoint.
DROP TABLE IF EXISTS status_view_rebuild, dlq_view_rebuild;
DELETE FROM projection_checkpoints WHERE name IN ('status.rebuild', 'dlq.rebuild');

DO $$
DECLARE
    v      text;
    top_ms bigint; -- the latest delivery id's time, Unix ms (version 7 ids only)
    t      bigint; -- T, Unix seconds
    hex    text;
    n      bigint;
BEGIN
    FOREACH v IN ARRAY ARRAY['status_view', 'dlq_view'] LOOP
        EXECUTE format($q$SELECT ('x' || lpad(substr(replace(max(id::text), '-', ''), 1, 12), 16, '0'))::bit(64)::bigint
            FROM %I WHERE substr(id::text, 15, 1) = '7'$q$, v) INTO top_ms;
        t := greatest((extract(epoch FROM now()) * 1000)::bigint, coalesce(top_ms, 0)) / 1000 + 1;
        hex := lpad(to_hex(t * 1000), 12, '0');
        -- Only ids made before delivery ids carried their accept time (version 5 names, before
        -- version 7) can lie above T: say so rather than fail on a row without a partition.
        EXECUTE format('SELECT count(*) FROM %I WHERE id >= %L::uuid', v,
            substr(hex, 1, 8) || '-' || substr(hex, 9, 4) || '-0000-0000-000000000000') INTO n;
        IF n > 0 THEN
            RAISE EXCEPTION '% holds % rows whose delivery id is not a time-ordered (version 7) UUID of a past time: they fit no time partition', v, n;
        END IF;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (id)',
            v || '_partitioned', v);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (MINVALUE) TO (%L)',
            v || '_p0_' || t, v || '_partitioned',
            substr(hex, 1, 8) || '-' || substr(hex, 9, 4) || '-0000-0000-000000000000');
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', v || '_partitioned', v);
        EXECUTE format('DROP TABLE %I', v);
        EXECUTE format('ALTER TABLE %I RENAME TO %I', v || '_partitioned', v);
    END LOOP;
END $$;

-- The indexes of migrations 0003, 0006, 0009 and 0012, by the same definitions and names.
ALTER TABLE status_view ADD PRIMARY KEY (id);
CREATE INDEX ON status_view (tenant, accepted_at, id);
CREATE INDEX ON status_view (tenant, state, accepted_at, id);
CREATE INDEX ON status_view (channel, updated_at) WHERE state IN ('accepted', 'queued');
CREATE INDEX ON status_view (check_at) WHERE check_at IS NOT NULL;
CREATE INDEX ON status_view (tenant, terminal_at) WHERE terminal_at IS NOT NULL;

ALTER TABLE dlq_view ADD PRIMARY KEY (id);
CREATE INDEX ON dlq_view (tenant, accepted_at, id);
