-- Put every payload back into the accepted events that reference it before dropping the table,
-- so that going down loses no history.
UPDATE events e
SET data = (e.data - 'payload_sha256') || jsonb_build_object('payload', p.payload)
FROM notification_payloads p
WHERE e.type = 'delivery.accepted' AND e.data ? 'payload_sha256'
  AND p.notification_id = e.data->>'notification_id';

DROP TABLE notification_payloads;
