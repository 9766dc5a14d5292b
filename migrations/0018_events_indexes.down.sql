ALTER TABLE events DROP CONSTRAINT events_pkey;
CREATE UNIQUE INDEX events_pkey ON events (position);
ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY USING INDEX events_pkey;
CREATE INDEX events_log_order_idx ON events (transaction_id, position);
