DROP INDEX events_tenant_of_stream;
