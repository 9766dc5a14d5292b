ALTER TABLE replay_job_items DROP COLUMN dead_version;
-- A cancelled job was finished by its operator: it stays finished, as done.
UPDATE replay_jobs SET state = 'done' WHERE state = 'cancelled';
ALTER TABLE replay_jobs DROP CONSTRAINT replay_jobs_state_check;
ALTER TABLE replay_jobs ADD CONSTRAINT replay_jobs_state_check CHECK (state IN ('running', 'done'));
