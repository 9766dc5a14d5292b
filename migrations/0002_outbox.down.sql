DROP TABLE "watermill_offsets_ledger_outbox";
DROP TABLE "watermill_ledger_outbox";
