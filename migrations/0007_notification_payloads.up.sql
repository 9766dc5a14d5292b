-- A notification's payload, stored once. The accepted events of its deliveries leave the payload
-- out of their data and carry its payload_sha256 instead; the event store puts the payload back
-- when it loads a stream. A notification fanned out to many recipients then keeps its payload
-- once in the log, not once per recipient. Rows are written with the accept and never changed,
-- like the events they complete. The id is text, as the events' data spells it.
CREATE TABLE notification_payloads (
    notification_id text  PRIMARY KEY,
    tenant          text  NOT NULL,
    sha256          bytea NOT NULL,
    payload         jsonb NOT NULL
);
