-- Whose stream a delivery id is, in an index: one entry per delivery (its accepted event, version
-- 1), keyed by the id and the tenant. A tenant's load of a stream (EventStore.LoadOf) asks it first,
-- so another tenant's id and an id that does not exist cost the same probe of this index and
-- nothing more; without it a foreign id also read its rows' heap page to find their tenant, and
-- answered a little later than an unknown one (the hardening issue's row 10). It costs one index
-- entry per accepted delivery. Built in the migration's transaction: on a large log, migrate in a
-- quiet moment (writes to events wait for the build).
CREATE UNIQUE INDEX events_tenant_of_stream ON events (delivery_id, tenant) WHERE version = 1;
