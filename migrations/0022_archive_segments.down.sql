DROP TABLE archive_segments;
