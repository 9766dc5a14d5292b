package commands

import (
	"context"
	"log/slog"

	"github.com/deliveryledger/ledger/domain"
)

// heldByWindow defers an attempt that would start outside its delivery's window to the next
// opening (EventDeferred, reason domain.DeferWindow, until the opening), before any limit or
// provider is asked: a retry due in closed hours waits too, since it starts here like any
// attempt. held says the message is dealt with (verdict is what to do with it); queued false
// says the attempt is not queued (a redelivered copy of a started attempt), which the caller
// resolves without a call.
func (h *AttemptHandler) heldByWindow(ctx context.Context, log *slog.Logger, msg WorkMessage) (verdict Verdict, held, queued bool) {
	if msg.Window == nil {
		return Ack, false, true
	}
	now := h.clock.Now()
	opens, err := msg.Window.Opening(now)
	if err != nil {
		// Checked at acceptance; only a zone this process does not know (an older time zone
		// database) gets here. Holding the delivery for ever would lose it: it goes unheld.
		log.ErrorContext(ctx, "delivery window cannot be read, attempting without it", "err", err)
		return Ack, false, true
	}
	if !opens.After(now) {
		return Ack, false, true
	}
	verdict, deferred := h.deferAttempt(ctx, log, DeferAttempt{Message: msg, Reason: domain.DeferWindow, Until: opens})
	if deferred || verdict != Ack {
		return verdict, true, true
	}
	return Ack, false, false
}
