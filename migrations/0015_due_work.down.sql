DROP INDEX events_notification_of_stream;
DROP TABLE due_work;
