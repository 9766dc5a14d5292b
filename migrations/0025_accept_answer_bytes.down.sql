-- Back to jsonb. The answers stored as JSON go back as they were; one in the compact form (a
-- row that does not begin with '{') has no JSON to go back to, and deleting it would let a
-- repeat of its request within the idempotency window be accepted a second time, as a
-- notification of its own. So the migration refuses while such a row is held: those rows leave
-- with their partitions once out of the window (retention), or an operator deletes them, knowing
-- what a repeat of those requests then gets.
DO $$
DECLARE
    compact bigint;
BEGIN
    SELECT count(*) INTO compact FROM accept_requests WHERE substring(response FOR 1) <> '{'::bytea;
    IF compact > 0 THEN
        RAISE EXCEPTION 'accept_requests holds % answers in the compact form, which jsonb cannot hold', compact
            USING HINT = 'Wait until retention drops their partitions, or delete them (a repeat of such a request is then accepted anew).';
    END IF;
END $$;
ALTER TABLE accept_requests ALTER COLUMN response TYPE jsonb USING convert_from(response, 'UTF8')::jsonb;
