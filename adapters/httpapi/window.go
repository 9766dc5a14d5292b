package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

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

// windowRequest is the window member as a request writes it, decoded strictly on its own: the
// standard decoder names an unknown member by its name alone, as if it stood at the top of the
// body, so one inside a window is named here under window.
type windowRequest struct{ domain.Window }

// UnmarshalJSON decodes a window, refusing unknown members.
func (w *windowRequest) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(&w.Window)
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typ) && typ.Field != "":
		return invalid("window."+typ.Field, "must be %s, not %s", jsonKind(typ.Type), typ.Value)
	}
	if quoted, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(quoted); uerr == nil {
			return invalid("window", "unknown member %q", name)
		}
	}
	return err
}

// get is the window, nil when the request gave none.
func (w *windowRequest) get() *domain.Window {
	if w == nil {
		return nil
	}
	return &w.Window
}
