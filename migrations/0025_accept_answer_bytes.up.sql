-- The accept's stored answer (accept_requests.response) is bytes: the accept command stores it
-- in a compact binary form (commands.EncodeAcceptAnswer: UUIDs as 16 bytes, times as Unix
-- nanoseconds; 87 bytes for a single webhook delivery, where its jsonb took 273), and still
-- reads the JSON of the answers stored before, which begin with '{' as the compact form never
-- does. Each row keeps its JSON's text, as bytes.
--
-- On the partitioned table the change reaches every partition, each rewritten under an ACCESS
-- EXCLUSIVE lock that accepts wait behind: the whole table, for as long as its copy takes.
ALTER TABLE accept_requests ALTER COLUMN response TYPE bytea USING convert_to(response::text, 'UTF8');
