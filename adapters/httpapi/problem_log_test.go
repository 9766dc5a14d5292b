package httpapi

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
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
