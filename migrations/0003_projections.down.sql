-- The shadows of rebuilds that were interrupted go too.
DROP TABLE IF EXISTS status_view_rebuild, dlq_view_rebuild, counters_view_rebuild;
DROP TABLE counters_view;
DROP TABLE dlq_view;
DROP TABLE status_view;
DROP TABLE projection_checkpoints;
