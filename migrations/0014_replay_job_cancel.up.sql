-- A replay job can be cancelled (POST /v1/replays/{id}/cancel): its runner stops at its next
-- page; finished_at says when it was cancelled.
ALTER TABLE replay_jobs DROP CONSTRAINT replay_jobs_state_check;
ALTER TABLE replay_jobs ADD CONSTRAINT replay_jobs_state_check CHECK (state IN ('running', 'done', 'cancelled'));

-- Each item remembers the version at which the DLQ view showed it dead (or unknown) when the job
-- selected it: the job replays that death, and only if no one replayed it since (another job
-- with the same filters, an operator), so that overlapping jobs replay a delivery once. NULL for
-- items selected before this migration: they are replayed as they are when their turn comes.
ALTER TABLE replay_job_items ADD COLUMN dead_version integer;
