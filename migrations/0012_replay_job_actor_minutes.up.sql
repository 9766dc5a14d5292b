-- A replay job remembers who asked for it (the request's actor, or '' for the tenant of the key),
-- and records it on each of its replays. Jobs created before this migration name no one: their
-- replays are recorded as the tenant's.
ALTER TABLE replay_jobs ADD COLUMN actor text NOT NULL DEFAULT '';

-- GET /v1/stats/minutes counts a tenant's deliveries that became delivered or dead in each minute
-- of the last hour from the status view's terminal_at. Without this index that is a scan of the
-- tenant's whole status view. It is partial: a row enters it when its delivery becomes terminal
-- (an update that is not HOT anyway, since state is indexed), so it costs one index entry per
-- terminal transition, and rows still in flight are not in it. Unnamed on purpose: a rebuild gives
-- the indexes PostgreSQL's default names back.
CREATE INDEX ON status_view (tenant, terminal_at) WHERE terminal_at IS NOT NULL;
