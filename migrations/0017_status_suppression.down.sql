ALTER TABLE status_view DROP COLUMN suppression;
