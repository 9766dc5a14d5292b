package httpapi

import (
	"errors"

	"github.com/deliveryledger/ledger/domain"
)

// checkWindow checks a request's window member (prefix locates it in the body: "" or
// "recipients[2]."), so a bad zone, day or time is a 400 naming it ("window.timezone",
// "recipients[2].window.start") rather than the aggregate's refusal.
func checkWindow(prefix string, w *domain.Window) error {
	if w == nil {
		return nil
	}
	err := w.Validate()
	var bad *domain.WindowError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &bad):
		return invalid(prefix+"window."+bad.Member, "%s", bad.Reason)
	}
	return invalid(prefix+"window", "%v", err)
}
