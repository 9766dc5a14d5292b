DROP INDEX status_view_tenant_terminal_at_idx;
ALTER TABLE replay_jobs DROP COLUMN actor;
