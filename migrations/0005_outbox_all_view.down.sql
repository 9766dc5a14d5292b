DROP VIEW ledger_outbox_all;
