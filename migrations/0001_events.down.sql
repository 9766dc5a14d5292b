DROP TABLE accept_requests;
DROP TABLE events;
