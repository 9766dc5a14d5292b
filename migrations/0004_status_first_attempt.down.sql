ALTER TABLE status_view DROP COLUMN first_attempt_at;
-- A view rebuilt by the newer code is plain version 1 again once the column is gone.
UPDATE projection_checkpoints SET version = 1 WHERE name = 'status';
DROP TABLE IF EXISTS status_view_rebuild;
