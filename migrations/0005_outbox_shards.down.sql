DROP VIEW ledger_outbox_all;
DROP TABLE "watermill_offsets_ledger_outbox_3";
DROP TABLE "watermill_offsets_ledger_outbox_2";
DROP TABLE "watermill_offsets_ledger_outbox_1";
DROP TABLE "watermill_ledger_outbox_3";
DROP TABLE "watermill_ledger_outbox_2";
DROP TABLE "watermill_ledger_outbox_1";
