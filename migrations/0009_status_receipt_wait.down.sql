DROP INDEX IF EXISTS events_provider_operation;
ALTER TABLE status_view DROP COLUMN check_at, DROP COLUMN give_up_at;
UPDATE projection_checkpoints SET version = 2 WHERE name = 'status' AND version > 2;
DROP TABLE IF EXISTS status_view_rebuild;
