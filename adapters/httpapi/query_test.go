package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
)

// deliveryStatus is GET /v1/deliveries/{id} as a client decodes it.
type deliveryStatus struct {
	ID             string     `json:"id"`
	NotificationID string     `json:"notification_id"`
	Tenant         *string    `json:"tenant"`
	Channel        string     `json:"channel"`
	Recipient      string     `json:"recipient"`
	State          string     `json:"state"`
	Priority       string     `json:"priority"`
	Attempts       int        `json:"attempts"`
	MaxAttempts    int        `json:"max_attempts"`
	AcceptedAt     time.Time  `json:"accepted_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	Version        int        `json:"version"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	LastError      *struct {
		Class      string `json:"class"`
		Message    string `json:"message"`
		StatusCode int    `json:"status_code"`
	} `json:"last_error"`
	IdempotencyKey string `json:"idempotency_key"`
}

// eventList is GET /v1/deliveries/{id}/events as a client decodes it.
type eventList struct {
	Events []struct {
		Version    int             `json:"version"`
		Type       string          `json:"type"`
		State      string          `json:"state"`
		RecordedAt time.Time       `json:"recorded_at"`
		Data       json.RawMessage `json:"data"`
	} `json:"events"`
}

// accept accepts one delivery as acme and returns the answer.
func (b *bundle) accept(t *testing.T, idemKey, recipient string) deliveryAccepted {
	t.Helper()
	var got deliveryAccepted
	b.post(t, "/v1/deliveries", idemKey, deliveryBody(recipient)).expect(t, http.StatusAccepted, &got)
	return got
}

func TestDeliveryStatusRightAfterAccept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acc := b.accept(t, "status-1", "https://example.com/s")

	var st deliveryStatus
	b.get(t, "/v1/deliveries/"+acc.ID, keyAcme).expect(t, http.StatusOK, &st)
	if st.ID != acc.ID || st.NotificationID != acc.NotificationID || st.Channel != "webhook" ||
		st.Recipient != "https://example.com/s" || st.State != "accepted" || st.Version != 1 {
		t.Fatalf("status %+v after accepting %+v", st, acc)
	}
	if st.Priority != "normal" || st.MaxAttempts != serverMaxAttempts || st.Attempts != 0 || st.IdempotencyKey != "status-1" {
		t.Fatalf("status %+v: want priority normal, the server's max attempts, 0 attempts, the request key", st)
	}
	if !st.AcceptedAt.Equal(acc.AcceptedAt) || !st.UpdatedAt.Equal(acc.AcceptedAt) {
		t.Fatalf("accepted_at %s, updated_at %s; the accept answered %s", st.AcceptedAt, st.UpdatedAt, acc.AcceptedAt)
	}
	if st.Tenant != nil || st.NextAttemptAt != nil || st.LastError != nil {
		t.Fatalf("status %s shows a tenant, a next attempt or a last error", st.ID)
	}
}

func TestDeliveryEventsRightAfterAccept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acc := b.accept(t, "events-1", "https://example.com/e")

	var list eventList
	b.get(t, "/v1/deliveries/"+acc.ID+"/events", keyAcme).expect(t, http.StatusOK, &list)
	if len(list.Events) != 1 {
		t.Fatalf("%d events, want 1", len(list.Events))
	}
	e := list.Events[0]
	if e.Version != 1 || e.Type != string(domain.EventAccepted) || e.State != "accepted" || !e.RecordedAt.Equal(acc.AcceptedAt) {
		t.Fatalf("event %+v", e)
	}
	var data domain.Accepted
	if err := json.Unmarshal(e.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data.NotificationID != acc.NotificationID || data.Recipient != "https://example.com/e" || data.RequestKey != "events-1" {
		t.Fatalf("event data %s", e.Data)
	}
}

// TestDeliveryStatusFollowsTheStream appends the events a relay and a worker would (queued,
// attempt started, retry scheduled) and checks that status and audit fold them.
func TestDeliveryStatusFollowsTheStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	acc := b.accept(t, "progress-1", "https://example.com/p")

	events, err := b.store.Load(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var more []domain.Event
	for _, step := range []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return d.Queue(now) },
		func() ([]domain.Event, error) { return d.StartAttempt("webhook", now) },
		func() ([]domain.Event, error) {
			return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeTransient, Provider: "webhook",
				StatusCode: 503, Err: "service unavailable"}, domain.DefaultRetryPolicy(), now, 0.5)
		},
	} {
		es, err := step()
		if err != nil {
			t.Fatal(err)
		}
		more = append(more, es...)
	}
	if err := b.store.Append(ctx, more, nil); err != nil {
		t.Fatal(err)
	}

	var st deliveryStatus
	b.get(t, "/v1/deliveries/"+acc.ID, keyAcme).expect(t, http.StatusOK, &st)
	if st.State != "retrying" || st.Version != 4 || st.Attempts != 1 || st.NextAttemptAt == nil || !st.NextAttemptAt.After(now) {
		t.Fatalf("status %+v: want retrying, version 4, 1 attempt, a next attempt after %s", st, now)
	}
	if st.LastError == nil || st.LastError.Class != "transient" || st.LastError.StatusCode != 503 || st.LastError.Message != "service unavailable" {
		t.Fatalf("last error %+v", st.LastError)
	}

	var list eventList
	b.get(t, "/v1/deliveries/"+acc.ID+"/events", keyAcme).expect(t, http.StatusOK, &list)
	wantStates := []string{"accepted", "queued", "processing", "retrying"}
	if len(list.Events) != len(wantStates) {
		t.Fatalf("%d events, want %d", len(list.Events), len(wantStates))
	}
	for i, e := range list.Events {
		if e.Version != i+1 || e.State != wantStates[i] {
			t.Fatalf("event %d: version %d state %s, want version %d state %s", i, e.Version, e.State, i+1, wantStates[i])
		}
	}
}

func TestDeliveryNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acc := b.accept(t, "private-1", "https://example.com/private")

	// Another tenant's delivery is not found, with exactly the answer of an id never used.
	unknown := b.get(t, "/v1/deliveries/"+uuid.Must(uuid.NewV7()).String(), keyAcme)
	unknown.expectProblem(t, http.StatusNotFound, "")
	for _, path := range []string{"/v1/deliveries/" + acc.ID, "/v1/deliveries/" + acc.ID + "/events"} {
		r := b.get(t, path, keyGlobex)
		r.expectProblem(t, http.StatusNotFound, "")
		if !bytes.Equal(r.body, unknown.body) {
			t.Fatalf("%s for another tenant answered %s; an unknown id gets %s", path, r.body, unknown.body)
		}
	}
	for _, path := range []string{
		"/v1/deliveries/" + uuid.Must(uuid.NewV7()).String() + "/events",
		"/v1/deliveries/not-a-uuid",
		"/v1/deliveries/not-a-uuid/events",
		"/v1/deliveries/%27%3B--",
	} {
		b.refusing().get(t, path, keyAcme).expectProblem(t, http.StatusNotFound, "")
	}
	// The owner still sees it.
	b.get(t, "/v1/deliveries/"+acc.ID, keyAcme).expect(t, http.StatusOK, nil)
}

func TestRequestLookup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var acc notificationAccepted
	b.post(t, "/v1/notifications", "lookup-1", notificationBody("https://a.example.com/l", "https://b.example.com/l")).
		expect(t, http.StatusAccepted, &acc)

	var got notificationAccepted
	b.get(t, "/v1/requests/lookup-1", keyAcme).expect(t, http.StatusOK, &got)
	if got.ID != acc.ID || len(got.Deliveries) != 2 || got.Deliveries[1].ID != acc.Deliveries[1].ID || !got.AcceptedAt.Equal(acc.AcceptedAt) {
		t.Fatalf("lookup answered %+v, the accept answered %+v", got, acc)
	}
	b.get(t, "/v1/requests/lookup-1", keyGlobex).expectProblem(t, http.StatusNotFound, "")
	b.get(t, "/v1/requests/never-used", keyAcme).expectProblem(t, http.StatusNotFound, "")
}
