-- The status view learns when a delivery's first attempt started. Rows projected before this
-- migration have no value yet (NULL): `ledger projections rebuild status` fills them from history
-- while the live view keeps serving, and `ledger projections verify status` lists the rows that
-- still differ from a fresh fold until then.
ALTER TABLE status_view ADD COLUMN first_attempt_at timestamptz;
