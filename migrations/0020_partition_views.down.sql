-- The status and DLQ views become one plain table each again, with their rows, columns and
-- indexes under the names of the migrations that made them. A (partitioned) rebuild shadow goes.
DROP TABLE IF EXISTS status_view_rebuild, dlq_view_rebuild;
DELETE FROM projection_checkpoints WHERE name IN ('status.rebuild', 'dlq.rebuild');

CREATE TABLE status_view_plain (LIKE status_view INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION);
INSERT INTO status_view_plain SELECT * FROM status_view;
DROP TABLE status_view;
ALTER TABLE status_view_plain RENAME TO status_view;
ALTER TABLE status_view ADD PRIMARY KEY (id);
CREATE INDEX ON status_view (tenant, accepted_at, id);
CREATE INDEX ON status_view (tenant, state, accepted_at, id);
CREATE INDEX ON status_view (channel, updated_at) WHERE state IN ('accepted', 'queued');
CREATE INDEX ON status_view (check_at) WHERE check_at IS NOT NULL;
CREATE INDEX ON status_view (tenant, terminal_at) WHERE terminal_at IS NOT NULL;

CREATE TABLE dlq_view_plain (LIKE dlq_view INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION);
INSERT INTO dlq_view_plain SELECT * FROM dlq_view;
DROP TABLE dlq_view;
ALTER TABLE dlq_view_plain RENAME TO dlq_view;
ALTER TABLE dlq_view ADD PRIMARY KEY (id);
CREATE INDEX ON dlq_view (tenant, accepted_at, id);
