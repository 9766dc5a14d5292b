DROP TABLE preferences;
DROP TABLE suppressions;
DROP TABLE recipient_events;
