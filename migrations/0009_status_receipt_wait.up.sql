-- The status view learns when to ask a provider about a delivery (an SMS the provider accepted
-- and no receipt decided yet, or an unknown outcome) and when to stop waiting for a receipt.
-- Rows projected before this migration have NULL in both, which is right for every delivery
-- recorded before providers could accept without delivering.
ALTER TABLE status_view ADD COLUMN check_at timestamptz, ADD COLUMN give_up_at timestamptz;
-- The reconciler's question: which deliveries are due a look? A small partial index.
CREATE INDEX ON status_view (check_at) WHERE check_at IS NOT NULL;
-- A receipt names the provider's message, not the delivery: find the attempt it accepted.
CREATE INDEX events_provider_operation ON events ((data->>'provider'), (data->>'provider_operation_id'))
    WHERE type = 'delivery.provider_accepted';
