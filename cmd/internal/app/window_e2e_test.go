package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// TestWindowHoldsAnAttemptUntilItOpens: on a running ledger, a notification's window that is
// closed now holds its delivery: deferred once with reason "window" and until the opening (the
// window's start, in its zone), the provider not called; a recipient's own window, open now,
// overrides it and is delivered at once. The window is in the accepted event, fixed there. A bad
// zone or time is a 400 naming the member.
func TestWindowHoldsAnAttemptUntilItOpens(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	now := time.Now().UTC()
	hhmm := func(t time.Time) string { return t.Format("15:04") }
	closed := map[string]any{"timezone": "UTC", "start": hhmm(now.Add(2 * time.Hour)), "end": hhmm(now.Add(3 * time.Hour))}
	open := map[string]any{"timezone": "UTC", "start": hhmm(now.Add(-time.Hour)), "end": hhmm(now.Add(time.Hour))}
	opens := now.Add(2 * time.Hour).Truncate(time.Minute)

	resp, body := b.do(t, "POST", "/v1/notifications", "window-1", map[string]any{
		"payload": map[string]any{"text": "hello"},
		"window":  closed,
		"recipients": []map[string]any{
			{"channel": "webhook", "recipient": b.sink.URL + "/quiet"},
			{"channel": "webhook", "recipient": b.sink.URL + "/open", "window": open},
		},
	})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	var acc acceptAnswer
	if err := json.Unmarshal(body, &acc); err != nil {
		t.Fatal(err)
	}
	quiet, awake := acc.Deliveries[0].ID, acc.Deliveries[1].ID

	b.waitState(t, awake, domain.StateDelivered, 20*time.Second)
	if n := count(b.history(t, awake), domain.EventDeferred); n != 0 {
		t.Errorf("the delivery whose window is open was deferred %d times", n)
	}

	var held domain.Deferred
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if d := eventsOfType(b.history(t, quiet), domain.EventDeferred); len(d) > 0 {
			if err := json.Unmarshal(d[0].Data, &held); err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held.Reason != domain.DeferWindow || !held.Until.Equal(opens) {
		t.Fatalf("deferral of the delivery in closed hours: %+v, want reason %q until %s; history %s",
			held, domain.DeferWindow, opens, b.historyString(t, quiet))
	}
	h := b.history(t, quiet)
	var accepted domain.Accepted
	if err := json.Unmarshal(h[0].Data, &accepted); err != nil {
		t.Fatal(err)
	}
	if accepted.Window == nil || accepted.Window.Start != closed["start"] || accepted.Window.Timezone != "UTC" {
		t.Errorf("accepted event's window %+v, want the notification's %v", accepted.Window, closed)
	}
	if n := b.sink.count(quiet); n != 0 || count(h, domain.EventAttemptStarted) != 0 {
		t.Errorf("the delivery in closed hours was attempted (%d calls): %v", n, types(h))
	}

	for _, c := range []struct {
		path   string
		body   map[string]any
		member string
	}{
		{"/v1/deliveries", map[string]any{"channel": "webhook", "recipient": b.sink.URL + "/x", "payload": map[string]any{},
			"window": map[string]any{"timezone": "Mars/Olympus", "start": "09:00", "end": "18:00"}}, "window.timezone"},
		{"/v1/notifications", map[string]any{"payload": map[string]any{}, "recipients": []map[string]any{
			{"channel": "webhook", "recipient": b.sink.URL + "/y"},
			{"channel": "webhook", "recipient": b.sink.URL + "/z", "window": map[string]any{"timezone": "UTC", "start": "25:00", "end": "06:00"}},
		}}, "recipients[1].window.start"},
		{"/v1/notifications", map[string]any{"payload": map[string]any{}, "window": map[string]any{"timezone": "UTC", "days": []string{"monday"}, "start": "09:00", "end": "17:00"},
			"recipients": []map[string]any{{"channel": "webhook", "recipient": b.sink.URL + "/w"}}}, "window.days[0]"},
	} {
		resp, body := b.refusing().do(t, "POST", c.path, "window-bad-"+c.member, c.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(resp.Header.Get("Content-Type"), "application/problem+json") ||
			!strings.Contains(string(body), `"`+c.member+`"`) {
			t.Errorf("%s with a bad %s: %d %s %s, want 400 problem+json naming it", c.path, c.member, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}
