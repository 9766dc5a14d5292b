package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
)

// TestDeliveryRoutesLogTheirDeliveryID: the log line of a failed request to a delivery's route
// names the delivery as every line about one does (delivery_id), whatever the route under
// /v1/deliveries/{id}; an {id} of another route (a replay job) is not a delivery.
func TestDeliveryRoutesLogTheirDeliveryID(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	var got []any
	for _, pattern := range []string{"GET /v1/deliveries/{id}", "GET /v1/deliveries/{id}/events",
		"POST /v1/deliveries/{id}/replay", "GET /v1/replays/{id}", "GET /v1/deliveries"} {
		mux.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) { got = deliveryAttr(r) })
	}
	for path, want := range map[string][]any{
		"GET /v1/deliveries/d-1":         {"delivery_id", "d-1"},
		"GET /v1/deliveries/d-2/events":  {"delivery_id", "d-2"},
		"POST /v1/deliveries/d-3/replay": {"delivery_id", "d-3"},
		"GET /v1/replays/job-1":          nil,
		"GET /v1/deliveries":             nil,
	} {
		method, target, _ := strings.Cut(path, " ")
		got = []any{"not called"}
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, target, nil))
		if !slices.Equal(got, want) {
			t.Errorf("%s: log attributes %v, want %v", path, got, want)
		}
	}
}

// TestContendedIsServiceUnavailableWithRetryAfter (issue 23, row 2): a command that lost every
// race for its delivery is a 503 that tells the caller when to try again (providers do), not a
// 500; so is a receipt ahead of its acceptance. Neither names the cause's detail.
func TestContendedIsServiceUnavailableWithRetryAfter(t *testing.T) {
	t.Parallel()
	s := &server{logger: slog.New(slog.DiscardHandler)}
	for _, err := range []error{
		fmt.Errorf("record receipt for d-1: %w: %w after 8 tries", commands.ErrContended, commands.ErrVersionConflict),
		&requestError{kind: errNotYet, detail: "the call is being recorded"},
	} {
		rec := httptest.NewRecorder()
		s.writeProblem(rec, httptest.NewRequest("POST", "/v1/receipts/twilio", nil), err)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || strings.Contains(rec.Body.String(), "d-1") {
			t.Errorf("%v: %d, Retry-After %q, %s; want 503 with Retry-After: 1, naming no delivery", err, rec.Code,
				rec.Header().Get("Retry-After"), rec.Body)
		}
	}
}
