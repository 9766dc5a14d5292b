-- The tables that grow with deliveries become range-partitioned by time (docs/design.md, "Time
-- partitions"): events by delivery_id (a UUIDv7, its first 48 bits the accept time in Unix ms),
-- notification_payloads by the accept time it now carries, accept_requests by created_at. Each is
-- renamed, its partitioned successor created with the same columns and one first partition
-- <table>_p0_<T> holding everything before T (MINVALUE), the rows copied and the old table
-- dropped; the ledger's partition maintenance (EnsurePartitions) continues from T. T is the
-- migration's now() in whole seconds, or later when a row already names a later time (a clock
-- ahead of the database's), so that every row has its partition. A unique index of a partitioned
-- table must hold the partition key: each constraint below says how it is kept across partitions.
-- The copy rewrites the three tables in the migration's transaction: on a large log, migrate in a
-- quiet moment (writes wait for it).

-- The accept time of a delivery id: what its first 48 bits say, in Unix milliseconds. The export
-- joins a fanned-out notification's payload by it (EventStore.ExportLog).
CREATE FUNCTION ledger_delivery_time(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_timestamp(('x' || lpad(left(replace(id::text, '-', ''), 12), 16, '0'))::bit(64)::bigint / 1000.0);

ALTER TABLE events RENAME TO events_unpartitioned;
ALTER TABLE events_unpartitioned DROP CONSTRAINT events_pkey, DROP CONSTRAINT events_stream_version_key,
    DROP CONSTRAINT events_idempotency_key_key;
DROP INDEX events_tenant_of_stream, events_notification_of_stream, events_provider_operation;
-- The position sequence outlives the old table: positions go on from where they were.
ALTER SEQUENCE events_position_seq OWNED BY NONE;

CREATE TABLE events (
    position        bigint      NOT NULL DEFAULT nextval('events_position_seq'),
    transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
    delivery_id     uuid        NOT NULL,
    tenant          text        NOT NULL,
    version         integer     NOT NULL CONSTRAINT events_version_check CHECK (version > 0),
    type            text        NOT NULL,
    idempotency_key text        NOT NULL,
    data            jsonb       NOT NULL,
    metadata        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at     timestamptz NOT NULL,
    -- The log order that every follower reads. With delivery_id it is a key of each partition,
    -- and unique across them since (transaction_id, position) alone is: position comes from one
    -- sequence. A follower's read of the order is a Merge Append of one index scan per partition.
    CONSTRAINT events_pkey PRIMARY KEY (transaction_id, position, delivery_id),
    -- Optimistic concurrency: one event per stream version. A stream lives in one partition.
    CONSTRAINT events_stream_version_key UNIQUE (delivery_id, version),
    -- Idempotency: one event per operation. Every event key begins with its own delivery's id
    -- (domain's Key helpers, held by TestEveryEventKeyNamesItsDelivery), so the pair is unique
    -- where the key alone was, and a key's events sit in one partition.
    CONSTRAINT events_idempotency_key_key UNIQUE (idempotency_key, delivery_id)
) PARTITION BY RANGE (delivery_id);
ALTER SEQUENCE events_position_seq OWNED BY events.position;
CREATE UNIQUE INDEX events_tenant_of_stream ON events (delivery_id, tenant) WHERE version = 1;
CREATE INDEX events_notification_of_stream ON events (tenant, (data->>'notification_id')) WHERE version = 1;
CREATE INDEX events_provider_operation ON events ((data->>'provider'), (data->>'provider_operation_id'))
    WHERE type = 'delivery.provider_accepted';

ALTER TABLE notification_payloads RENAME TO notification_payloads_unpartitioned;
ALTER TABLE notification_payloads_unpartitioned DROP CONSTRAINT notification_payloads_pkey;
-- accepted_at is the accept time of the notification's deliveries (the milliseconds of their
-- ids): the payload sits in their partition and leaves with them. A notification id recurs when
-- its tenant reuses a request key after the stored answer left: the pair keeps them apart.
CREATE TABLE notification_payloads (
    notification_id text        NOT NULL,
    accepted_at     timestamptz NOT NULL,
    tenant          text        NOT NULL,
    sha256          bytea       NOT NULL,
    payload         jsonb       NOT NULL,
    CONSTRAINT notification_payloads_pkey PRIMARY KEY (notification_id, accepted_at)
) PARTITION BY RANGE (accepted_at);

ALTER TABLE accept_requests RENAME TO accept_requests_unpartitioned;
ALTER TABLE accept_requests_unpartitioned DROP CONSTRAINT accept_requests_pkey;
-- The primary key must hold created_at, so it no longer makes (tenant, request_key) unique, in
-- a partition or across them: the accept's writes refuse a key that any row holds, under the
-- key's advisory lock (adapters/postgres, acceptRequestsAbsent). The key stays its index's lead.
CREATE TABLE accept_requests (
    tenant       text        NOT NULL,
    request_key  text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT accept_requests_pkey PRIMARY KEY (tenant, request_key, created_at)
) PARTITION BY RANGE (created_at);

DO $$
DECLARE
    t timestamptz := date_trunc('second', now());
    ms bigint;
    hex text;
BEGIN
    t := greatest(t,
        (SELECT date_trunc('second', max(ledger_delivery_time(delivery_id))) + interval '1 second'
         FROM events_unpartitioned WHERE substr(delivery_id::text, 15, 1) = '7'),
        (SELECT date_trunc('second', max(created_at)) + interval '1 second' FROM accept_requests_unpartitioned));
    ms := (extract(epoch FROM t) * 1000)::bigint;
    hex := lpad(to_hex(ms), 12, '0');
    EXECUTE format('CREATE TABLE %I PARTITION OF events FOR VALUES FROM (MINVALUE) TO (%L)',
        'events_p0_' || ms / 1000, substr(hex, 1, 8) || '-' || substr(hex, 9, 4) || '-0000-0000-000000000000');
    EXECUTE format('CREATE TABLE %I PARTITION OF notification_payloads FOR VALUES FROM (MINVALUE) TO (%L)',
        'notification_payloads_p0_' || ms / 1000, t);
    EXECUTE format('CREATE TABLE %I PARTITION OF accept_requests FOR VALUES FROM (MINVALUE) TO (%L)',
        'accept_requests_p0_' || ms / 1000, t);
END $$;

INSERT INTO events (position, transaction_id, delivery_id, tenant, version, type, idempotency_key, data, metadata, recorded_at)
SELECT position, transaction_id, delivery_id, tenant, version, type, idempotency_key, data, metadata, recorded_at
FROM events_unpartitioned;
-- A payload's accept time is its deliveries': the accepted events that keep it apart name it.
INSERT INTO notification_payloads (notification_id, accepted_at, tenant, sha256, payload)
SELECT p.notification_id,
       coalesce((SELECT min(ledger_delivery_time(e.delivery_id)) FROM events e
                 WHERE e.version = 1 AND e.tenant = p.tenant AND e.data->>'notification_id' = p.notification_id
                   AND e.data ? 'payload_sha256'), 'epoch'),
       p.tenant, p.sha256, p.payload
FROM notification_payloads_unpartitioned p;
INSERT INTO accept_requests (tenant, request_key, request_hash, response, created_at)
SELECT tenant, request_key, request_hash, response, created_at FROM accept_requests_unpartitioned;

DROP TABLE events_unpartitioned, notification_payloads_unpartitioned, accept_requests_unpartitioned;
