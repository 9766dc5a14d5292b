package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// listAnswer is a list endpoint's answer as a client decodes it.
type listAnswer struct {
	Items []struct {
		ID             string     `json:"id"`
		Channel        string     `json:"channel"`
		Recipient      string     `json:"recipient"`
		State          string     `json:"state"`
		Attempts       int        `json:"attempts"`
		AcceptedAt     time.Time  `json:"accepted_at"`
		FirstAttemptAt *time.Time `json:"first_attempt_at"`
		FailureClass   string     `json:"failure_class"`
		Evidence       []struct {
			Attempt int    `json:"attempt"`
			Event   string `json:"event"`
			Class   string `json:"error_class"`
		} `json:"evidence"`
	} `json:"items"`
	NextCursor *string `json:"next_cursor"`
	View       struct {
		Name          string `json:"name"`
		Version       int    `json:"version"`
		PendingEvents int64  `json:"pending_events"`
	} `json:"view"`
}

func (l listAnswer) ids() []string {
	out := make([]string, len(l.Items))
	for i, it := range l.Items {
		out[i] = it.ID
	}
	return out
}

// project runs the projector until every view has applied the whole log.
func (b *bundle) project(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	r, err := projections.NewRunner(postgres.NewViews(b.schema.Pool), b.store, projections.All(), projections.RunnerConfig{BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	reader := postgres.NewViews(b.schema.Pool)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := r.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		positions, err := reader.Positions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		behind := false
		for _, p := range positions {
			behind = behind || p.LagEvents > 0
		}
		if !behind {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("views still behind after 20s: %+v", positions)
		}
		// The cluster's oldest running transaction (another test's) holds the log back: poll.
		time.Sleep(5 * time.Millisecond)
	}
}

// list GETs a list endpoint and decodes it.
func (b *bundle) list(t *testing.T, path, apiKey string) listAnswer {
	t.Helper()
	var l listAnswer
	b.get(t, path, apiKey).expect(t, http.StatusOK, &l)
	return l
}

// story appends a delivery's history with chosen times: accepted at `at`, then each step a
// second later, ending in the outcome kind (empty: stays queued).
func (b *bundle) story(t testing.TB, tenant, channel, recipient string, at time.Time, outcome domain.OutcomeKind) string {
	t.Helper()
	now := at.UTC().Truncate(time.Microsecond)
	// A UUIDv7 of the accept time, as the accept command makes it: the views are partitioned by it.
	id := commands.DeliveryID(uuid.NewString(), commands.Recipient{}, now)
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, NotificationID: uuid.NewString(),
		Channel: channel, Recipient: recipient, Payload: json.RawMessage(`{}`), Priority: domain.PriorityNormal,
		MaxAttempts: 1, RequestKey: "story-" + id}, now)
	if err != nil {
		t.Fatal(err)
	}
	step := func(es []domain.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, es...)
		now = now.Add(time.Second)
	}
	now = now.Add(time.Second)
	step(d.Queue(now))
	if outcome != "" {
		step(d.StartAttempt("webhook", now))
		// As the senders write it: a delivery is a 2xx without an error, anything else an error.
		o := domain.Outcome{Kind: outcome, Provider: "webhook", StatusCode: 500, Err: "boom"}
		if outcome == domain.OutcomeDelivered {
			o.StatusCode, o.Err = 200, ""
		}
		step(d.RecordOutcome(1, o, domain.DefaultRetryPolicy(), now, 0))
	}
	if err := b.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestListDeliveriesPagesStablyUnderInserts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string]bool{}
	for i := range 23 {
		want[b.accept(t, fmt.Sprintf("page-%d", i), fmt.Sprintf("https://example.com/p/%d", i)).ID] = true
	}
	b.project(t)

	seen := map[string]bool{}
	var last deliveryAccepted
	path := "/v1/deliveries?limit=5"
	for pages := 1; ; pages++ {
		r := b.get(t, path, keyAcme)
		var l listAnswer
		r.expect(t, http.StatusOK, &l)
		if l.View.Name != "status" || l.View.PendingEvents != 0 || l.View.Version == 0 {
			t.Fatalf("page %d view %+v", pages, l.View)
		}
		for _, it := range l.Items {
			if seen[it.ID] {
				t.Fatalf("page %d repeats %s", pages, it.ID)
			}
			seen[it.ID] = true
			// Newest first, strictly: (accepted_at, id) descending.
			if last.ID != "" && (it.AcceptedAt.After(last.AcceptedAt) || it.AcceptedAt.Equal(last.AcceptedAt) && it.ID > last.ID) {
				t.Fatalf("page %d: %s (%s) after %s (%s)", pages, it.ID, it.AcceptedAt, last.ID, last.AcceptedAt)
			}
			last = deliveryAccepted{ID: it.ID, AcceptedAt: it.AcceptedAt}
		}
		// Deliveries accepted between two pages must not shift the next one.
		b.accept(t, fmt.Sprintf("meanwhile-%d", pages), fmt.Sprintf("https://example.com/m/%d", pages))
		b.project(t)
		if l.NextCursor == nil {
			if strings.Contains(string(r.body), "next_cursor") {
				t.Fatalf("the last page names a next_cursor: %s", r.body)
			}
			if pages != 5 {
				t.Fatalf("%d pages of 5 for 23 deliveries", pages)
			}
			break
		}
		if len(l.Items) != 5 {
			t.Fatalf("page %d has %d items and a next cursor", pages, len(l.Items))
		}
		path = "/v1/deliveries?limit=5&cursor=" + url.QueryEscape(*l.NextCursor)
	}
	if len(seen) != len(want) {
		t.Fatalf("paging saw %d deliveries, want the %d that existed when it began", len(seen), len(want))
	}
	for id := range want {
		if !seen[id] {
			t.Fatalf("paging missed %s", id)
		}
	}
	// A fresh listing sees the ones accepted meanwhile too.
	if l := b.list(t, "/v1/deliveries?limit=500", keyAcme); len(l.Items) != 23+5 {
		t.Fatalf("full list has %d items, want %d", len(l.Items), 23+5)
	}
}

func TestListDeliveriesFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	dead := b.story(t, "acme", "webhook", "https://a.example.com/h", t0, domain.OutcomePermanent)
	delivered := b.story(t, "acme", "webhook", "https://b.example.com/h", t0.Add(time.Hour), domain.OutcomeDelivered)
	queued := b.story(t, "acme", "webhook", "https://a.example.com/h", t0.Add(2*time.Hour), "")
	b.project(t)

	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{queued, delivered, dead}},
		{"state=dead", []string{dead}},
		{"state=delivered", []string{delivered}},
		{"channel=webhook", []string{queued, delivered, dead}},
		{"recipient=" + url.QueryEscape("https://a.example.com/h"), []string{queued, dead}},
		{"since=" + t0.Add(time.Hour).Format(time.RFC3339), []string{queued, delivered}},
		{"until=" + t0.Add(time.Hour).Format(time.RFC3339), []string{dead}},
		{"since=" + t0.Add(30*time.Minute).Format(time.RFC3339) + "&until=" + t0.Add(90*time.Minute).Format(time.RFC3339), []string{delivered}},
		{"state=dead&recipient=" + url.QueryEscape("https://b.example.com/h"), []string{}},
	} {
		got := b.list(t, "/v1/deliveries?"+c.query, keyAcme).ids()
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Fatalf("?%s: got %v, want %v", c.query, got, c.want)
		}
	}
	var l listAnswer
	b.get(t, "/v1/deliveries?state=delivered", keyAcme).expect(t, http.StatusOK, &l)
	if l.Items[0].FirstAttemptAt == nil || !l.Items[0].FirstAttemptAt.Equal(t0.Add(time.Hour+2*time.Second)) {
		t.Fatalf("first_attempt_at %v, want %s", l.Items[0].FirstAttemptAt, t0.Add(time.Hour+2*time.Second))
	}
}

func TestListEndpointsRefuseBadFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ path, field string }{
		{"/v1/deliveries?state=lost", "state"},
		{"/v1/deliveries?channel=pigeon", "channel"},
		{"/v1/deliveries?since=yesterday", "since"},
		{"/v1/deliveries?until=2026-13-01T00:00:00Z", "until"},
		{"/v1/deliveries?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z", "until"},
		{"/v1/deliveries?limit=0", "limit"},
		{"/v1/deliveries?limit=501", "limit"},
		{"/v1/deliveries?limit=ten", "limit"},
		{"/v1/deliveries?cursor=not-a-cursor", "cursor"},
		{"/v1/deliveries?cursor=" + base64JSON(`{"a":1,"i":"not-a-uuid"}`), "cursor"},
		{"/v1/deliveries?stat=dead", "stat"},
		{"/v1/deliveries?state=dead&state=unknown", "state"},
		{"/v1/dlq?state=delivered", "state"},
		{"/v1/dlq?limit=-1", "limit"},
		{"/v1/stats?tenant=globex", "tenant"},
		{"/v1/deliveries/" + uuid.Must(uuid.NewV7()).String() + "?as_of=noon", "as_of"},
		{"/v1/deliveries/" + uuid.Must(uuid.NewV7()).String() + "?asof=2026-01-01T00:00:00Z", "asof"},
	} {
		b.refusing().get(t, c.path, keyAcme).expectProblem(t, http.StatusBadRequest, c.field)
	}
}

func base64JSON(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestReadEndpointsAreTenantScoped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().Add(-time.Hour)
	acmeDead := b.story(t, "acme", "webhook", "https://x.example.com/h", at, domain.OutcomePermanent)
	acmeOK := b.story(t, "acme", "webhook", "https://x.example.com/h", at, domain.OutcomeDelivered)
	globexDead := b.story(t, "globex", "webhook", "https://x.example.com/h", at, domain.OutcomeUnknown)
	b.project(t)

	if got := b.list(t, "/v1/deliveries", keyGlobex).ids(); len(got) != 1 || got[0] != globexDead {
		t.Fatalf("globex lists %v, want only %s", got, globexDead)
	}
	if got := b.list(t, "/v1/dlq", keyGlobex).ids(); len(got) != 1 || got[0] != globexDead {
		t.Fatalf("globex's dlq %v, want only %s", got, globexDead)
	}
	if got := b.list(t, "/v1/dlq", keyAcme).ids(); len(got) != 1 || got[0] != acmeDead {
		t.Fatalf("acme's dlq %v, want only %s", got, acmeDead)
	}
	if got := b.list(t, "/v1/deliveries?recipient="+url.QueryEscape("https://x.example.com/h"), keyAcme).ids(); len(got) != 2 {
		t.Fatalf("acme lists %v, want its 2", got)
	}
	var st struct {
		Deliveries int64            `json:"deliveries"`
		States     map[string]int64 `json:"states"`
	}
	b.get(t, "/v1/stats", keyGlobex).expect(t, http.StatusOK, &st)
	if st.Deliveries != 1 || st.States["unknown"] != 1 || st.States["dead"] != 0 {
		t.Fatalf("globex stats %+v", st)
	}
	// A cursor made from another tenant's delivery only pages through the caller's own.
	l := b.list(t, "/v1/deliveries?limit=1", keyAcme)
	if l.NextCursor == nil {
		t.Fatal("acme's first page of 1 has no next cursor")
	}
	if got := b.list(t, "/v1/deliveries?cursor="+url.QueryEscape(*l.NextCursor), keyGlobex).ids(); len(got) > 1 || len(got) == 1 && got[0] != globexDead {
		t.Fatalf("globex paging with acme's cursor got %v", got)
	}
	// As-of on another tenant's delivery is not found, like the plain status.
	for _, id := range []string{acmeDead, acmeOK} {
		b.get(t, "/v1/deliveries/"+id+"?as_of="+time.Now().UTC().Format(time.RFC3339), keyGlobex).expectProblem(t, http.StatusNotFound, "")
	}
}

func TestDLQListsDeadAndUnknownWithEvidence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().Add(-time.Hour)
	dead := b.story(t, "acme", "webhook", "https://x.example.com/h", at, domain.OutcomePermanent)
	unknown := b.story(t, "acme", "webhook", "https://x.example.com/h", at.Add(time.Minute), domain.OutcomeUnknown)
	b.story(t, "acme", "webhook", "https://x.example.com/h", at.Add(2*time.Minute), domain.OutcomeDelivered)
	b.project(t)

	l := b.list(t, "/v1/dlq", keyAcme)
	if got := l.ids(); len(got) != 2 || got[0] != unknown || got[1] != dead {
		t.Fatalf("dlq %v, want [%s %s]", got, unknown, dead)
	}
	if l.View.Name != "dlq" {
		t.Fatalf("view %+v", l.View)
	}
	for _, it := range l.Items {
		if len(it.Evidence) != 1 || it.Evidence[0].Attempt != 1 || it.Evidence[0].Class != it.FailureClass {
			t.Fatalf("%s: evidence %+v, failure class %s", it.ID, it.Evidence, it.FailureClass)
		}
	}
	if got := b.list(t, "/v1/dlq?state=dead", keyAcme).ids(); len(got) != 1 || got[0] != dead {
		t.Fatalf("dlq?state=dead %v", got)
	}
}

func TestListsSayHowFarBehindTheViewIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.accept(t, "lag-1", "https://example.com/lag")
	b.project(t)
	b.accept(t, "lag-2", "https://example.com/lag")

	behind := b.list(t, "/v1/deliveries", keyAcme)
	if len(behind.Items) != 1 || behind.View.PendingEvents != 1 {
		t.Fatalf("before projecting: %d items, view %+v; want 1 item and 1 pending event", len(behind.Items), behind.View)
	}
	b.project(t)
	caught := b.list(t, "/v1/deliveries", keyAcme)
	if len(caught.Items) != 2 || caught.View.PendingEvents != 0 {
		t.Fatalf("after projecting: %d items, view %+v", len(caught.Items), caught.View)
	}
}

// TestAnswersRevealNothingOfOtherTenants: another tenant's accepts, projected or not, change
// nothing in acme's list and stats answers (no global log position, no global lag).
func TestAnswersRevealNothingOfOtherTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.accept(t, "quiet-1", "https://example.com/quiet")
	b.project(t)
	paths := []string{"/v1/deliveries", "/v1/dlq", "/v1/stats"}
	before := map[string]string{}
	for _, p := range paths {
		before[p] = string(b.get(t, p, keyAcme).body)
	}
	for i := range 3 {
		b.do(t, req{method: http.MethodPost, path: "/v1/deliveries", apiKey: keyGlobex, idemKey: fmt.Sprintf("noisy-%d", i),
			contentType: "application/json", body: deliveryBody("https://example.com/noisy")}).expect(t, http.StatusAccepted, nil)
	}
	for round := range 2 { // once with globex's events pending, once projected
		for _, p := range paths {
			if got := string(b.get(t, p, keyAcme).body); got != before[p] {
				t.Fatalf("round %d: %s changed with another tenant's accepts:\nbefore %s\nafter  %s", round, p, before[p], got)
			}
		}
		b.project(t)
	}
}

func TestDeliveryStatusAsOf(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Accepted at t0, queued at t0+1s, started at t0+2s, dead at t0+3s.
	id := b.story(t, "acme", "webhook", "https://x.example.com/h", t0, domain.OutcomePermanent)
	for _, c := range []struct {
		asOf  time.Time
		state string
		ver   int
	}{
		{t0, "accepted", 1},
		{t0.Add(500 * time.Millisecond), "accepted", 1},
		{t0.Add(time.Second), "queued", 2},
		{t0.Add(2500 * time.Millisecond), "processing", 3},
		{t0.Add(time.Hour), "dead", 4},
	} {
		var st deliveryStatus
		b.get(t, "/v1/deliveries/"+id+"?as_of="+url.QueryEscape(c.asOf.Format(time.RFC3339Nano)), keyAcme).expect(t, http.StatusOK, &st)
		if st.State != c.state || st.Version != c.ver {
			t.Fatalf("as of %s: %s v%d, want %s v%d", c.asOf, st.State, st.Version, c.state, c.ver)
		}
	}
	b.get(t, "/v1/deliveries/"+id+"?as_of="+t0.Add(-time.Microsecond).Format(time.RFC3339Nano), keyAcme).expectProblem(t, http.StatusNotFound, "")
	var now deliveryStatus
	b.get(t, "/v1/deliveries/"+id, keyAcme).expect(t, http.StatusOK, &now)
	if now.State != "dead" {
		t.Fatalf("without as_of: %s", now.State)
	}
}

// TestOneDeliveryOneShape: the single GET and a list item of the same delivery are the same
// document, every field included (provider, first attempt, terminal time...).
func TestOneDeliveryOneShape(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.story(t, "acme", "webhook", "https://example.com/shape", time.Now().Add(-time.Hour), domain.OutcomePermanent)
	b.project(t)

	var single map[string]any
	b.get(t, "/v1/deliveries/"+id, keyAcme).expect(t, http.StatusOK, &single)
	var l struct {
		Items []map[string]any `json:"items"`
	}
	b.get(t, "/v1/deliveries?state=dead", keyAcme).expect(t, http.StatusOK, &l)
	if len(l.Items) != 1 {
		t.Fatalf("list has %d items, want the one dead delivery", len(l.Items))
	}
	for _, key := range []string{"provider", "first_attempt_at", "terminal_at", "last_error"} {
		if _, ok := single[key]; !ok {
			t.Errorf("the single GET lacks %q: %v", key, single)
		}
	}
	if !reflect.DeepEqual(single, l.Items[0]) {
		t.Fatalf("two shapes of one delivery:\nsingle %v\nlist   %v", single, l.Items[0])
	}
}
