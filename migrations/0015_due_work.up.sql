-- Every due time of a delivery lives here, not only in a broker's delay queue: a scheduled
-- send's send_at, a retry's next attempt, a deferral's until. The write that records the event
-- writes its row in the same transaction (one row per delivery: its latest due time, tied to the
-- version of the event that set it). The due pass (commands.DuePass) takes rows that fell due
-- with FOR UPDATE SKIP LOCKED, so several processes share it, appends what they call for with
-- the outbox in the same transaction, and deletes the row; a row whose version is not the
-- delivery's any more is stale (the delivery moved on) and is only deleted.
CREATE TABLE due_work (
    delivery_id uuid        PRIMARY KEY,
    tenant      text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('send', 'retry', 'defer')),
    due_at      timestamptz NOT NULL,
    version     integer     NOT NULL
);
CREATE INDEX due_work_due_at ON due_work (due_at);

-- A notification's deliveries, for its cancel (POST /v1/notifications/{id}/cancel): one entry
-- per accepted delivery, like events_tenant_of_stream, and exact where the status view may lag.
CREATE INDEX events_notification_of_stream ON events (tenant, (data->>'notification_id')) WHERE version = 1;
