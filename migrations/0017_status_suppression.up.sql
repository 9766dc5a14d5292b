-- The status view says what suppressed a delivery (the delivery.suppressed event's data: the
-- suppression list entry and its evidence, or the category opted out of), so that GET
-- /v1/deliveries/{id} and the lists explain the state. Empty for every other delivery, and for
-- every row projected before suppressions existed.
ALTER TABLE status_view ADD COLUMN suppression text NOT NULL DEFAULT '';
