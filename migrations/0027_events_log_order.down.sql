DROP INDEX events_log_order;
ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (transaction_id, position, delivery_id);
