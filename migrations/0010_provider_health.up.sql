-- What each process's circuit breakers say of each provider, for GET /v1/providers: the workers
-- write it every few seconds, the API reads the recent reports. Not history: a report replaces
-- the one before it, and reports of processes gone for a day are pruned.
CREATE TABLE provider_health (
    provider   text        NOT NULL,
    instance   text        NOT NULL,
    channel    text        NOT NULL,
    state      text        NOT NULL,
    requests   bigint      NOT NULL,
    failures   bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (provider, instance)
);
