-- The deliveries waiting for a worker (accepted or queued), by channel and age: a small partial
-- index that answers "age of the oldest waiting delivery" for /metrics without scanning the view.
-- Unnamed on purpose: a rebuild gives the indexes PostgreSQL's default names back.
CREATE INDEX ON status_view (channel, updated_at) WHERE state IN ('accepted', 'queued');
