DROP TABLE replay_job_items; DROP TABLE replay_jobs;
