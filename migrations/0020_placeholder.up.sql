-- placeholder for h/views, h/outbox
SELECT 1;
