-- Back to one plain table each, as after migration 0018. A notification id with payloads of
-- several accept times (a request key reused after its answer left) cannot keep them all under
-- the old key (notification_id): those payloads go back into their accepted events, as going
-- below 0007 puts every payload back, so no history is lost.
UPDATE events e
SET data = (e.data - 'payload_sha256') || jsonb_build_object('payload', p.payload)
FROM notification_payloads p
WHERE e.version = 1 AND e.data ? 'payload_sha256'
  AND p.notification_id = e.data->>'notification_id' AND p.accepted_at = ledger_delivery_time(e.delivery_id)
  AND p.notification_id IN (SELECT notification_id FROM notification_payloads GROUP BY notification_id HAVING count(*) > 1);
DELETE FROM notification_payloads
WHERE notification_id IN (SELECT notification_id FROM notification_payloads GROUP BY notification_id HAVING count(*) > 1);

ALTER TABLE events RENAME TO events_partitioned;
ALTER TABLE events_partitioned DROP CONSTRAINT events_pkey, DROP CONSTRAINT events_stream_version_key,
    DROP CONSTRAINT events_idempotency_key_key;
DROP INDEX events_tenant_of_stream, events_notification_of_stream, events_provider_operation;
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
    CONSTRAINT events_pkey PRIMARY KEY (transaction_id, position),
    CONSTRAINT events_stream_version_key UNIQUE (delivery_id, version),
    CONSTRAINT events_idempotency_key_key UNIQUE (idempotency_key)
);
ALTER SEQUENCE events_position_seq OWNED BY events.position;
INSERT INTO events (position, transaction_id, delivery_id, tenant, version, type, idempotency_key, data, metadata, recorded_at)
SELECT position, transaction_id, delivery_id, tenant, version, type, idempotency_key, data, metadata, recorded_at
FROM events_partitioned;
CREATE UNIQUE INDEX events_tenant_of_stream ON events (delivery_id, tenant) WHERE version = 1;
CREATE INDEX events_notification_of_stream ON events (tenant, (data->>'notification_id')) WHERE version = 1;
CREATE INDEX events_provider_operation ON events ((data->>'provider'), (data->>'provider_operation_id'))
    WHERE type = 'delivery.provider_accepted';

ALTER TABLE notification_payloads RENAME TO notification_payloads_partitioned;
ALTER TABLE notification_payloads_partitioned DROP CONSTRAINT notification_payloads_pkey;
CREATE TABLE notification_payloads (
    notification_id text  PRIMARY KEY,
    tenant          text  NOT NULL,
    sha256          bytea NOT NULL,
    payload         jsonb NOT NULL
);
INSERT INTO notification_payloads (notification_id, tenant, sha256, payload)
SELECT notification_id, tenant, sha256, payload FROM notification_payloads_partitioned;

ALTER TABLE accept_requests RENAME TO accept_requests_partitioned;
ALTER TABLE accept_requests_partitioned DROP CONSTRAINT accept_requests_pkey;
-- A key recorded in two partitions cannot be: the accept's writes refuse it. Were it so, the
-- latest answer stays.
CREATE TABLE accept_requests (
    tenant       text        NOT NULL,
    request_key  text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, request_key)
);
INSERT INTO accept_requests (tenant, request_key, request_hash, response, created_at)
SELECT DISTINCT ON (tenant, request_key) tenant, request_key, request_hash, response, created_at
FROM accept_requests_partitioned ORDER BY tenant, request_key, created_at DESC;

DROP TABLE events_partitioned, notification_payloads_partitioned, accept_requests_partitioned;
DROP FUNCTION ledger_delivery_time(uuid);
