package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// ended appends a delivery's history of tenant accepted at acceptedAt whose one attempt ended
// at endedAt with outcome (empty: it stays queued).
func (b *bundle) ended(t *testing.T, tenant string, acceptedAt, endedAt time.Time, outcome domain.OutcomeKind) string {
	t.Helper()
	id := commands.DeliveryID(uuid.NewString(), commands.Recipient{}, acceptedAt) // the views are partitioned by it
	d, events, err := domain.Accept(domain.AcceptSpec{ID: id, Tenant: tenant, NotificationID: uuid.NewString(),
		Channel: "webhook", Recipient: "https://x.example.com/h", Payload: json.RawMessage(`{}`),
		Priority: domain.PriorityNormal, MaxAttempts: 1, RequestKey: "ended-" + id}, acceptedAt.UTC())
	if err != nil {
		t.Fatal(err)
	}
	step := func(es []domain.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, es...)
	}
	step(d.Queue(acceptedAt.UTC()))
	if outcome != "" {
		step(d.StartAttempt("webhook", endedAt.UTC()))
		o := domain.Outcome{Kind: outcome, Provider: "webhook", StatusCode: 500, Err: "boom"}
		if outcome == domain.OutcomeDelivered {
			o.StatusCode, o.Err = 200, ""
		}
		step(d.RecordOutcome(1, o, domain.DefaultRetryPolicy(), endedAt.UTC(), 0))
	}
	if err := b.store.Append(context.Background(), events, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

type minutesAnswer struct {
	Minutes []struct {
		Minute    time.Time `json:"minute"`
		Accepted  int64     `json:"accepted"`
		Delivered int64     `json:"delivered"`
		Dead      int64     `json:"dead"`
	} `json:"minutes"`
	View struct {
		Name string `json:"name"`
	} `json:"view"`
}

// TestStatsMinutesCountsTheTenantsLastHour: the per-minute series counts, in the minute each
// happened, the tenant's accepts and the deliveries that became delivered or dead, also those
// accepted before the hour; nothing older than the hour and nothing of another tenant.
func TestStatsMinutesCountsTheTenantsLastHour(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	ago := func(m int) time.Time { return now.Add(-time.Duration(m) * time.Minute) }
	b.ended(t, "acme", ago(5), ago(3), domain.OutcomeDelivered)
	b.ended(t, "acme", ago(5), ago(3), domain.OutcomeDelivered)
	b.ended(t, "acme", ago(90), ago(10), domain.OutcomePermanent) // accepted before the hour, died in it
	b.ended(t, "acme", ago(120), ago(100), domain.OutcomeDelivered)
	b.ended(t, "acme", ago(20), time.Time{}, "")
	for range 3 {
		b.ended(t, "globex", ago(5), ago(3), domain.OutcomePermanent)
	}
	b.project(t)

	var m minutesAnswer
	b.get(t, "/v1/stats/minutes", keyAcme).expect(t, http.StatusOK, &m)
	if len(m.Minutes) != 60 || m.View.Name != "status" {
		t.Fatalf("%d minutes, view %+v", len(m.Minutes), m.View)
	}
	last := m.Minutes[59].Minute
	if want := now.Truncate(time.Minute); !last.Equal(want) {
		t.Fatalf("last minute %s, want %s", last, want)
	}
	at := func(tm time.Time) int { return 59 - int(last.Sub(tm.Truncate(time.Minute))/time.Minute) }
	want := make([][3]int64, 60)
	want[at(ago(5))][0] += 2
	want[at(ago(3))][1] += 2
	want[at(ago(10))][2]++
	want[at(ago(20))][0]++
	for i, got := range m.Minutes {
		if !got.Minute.Equal(last.Add(time.Duration(i-59) * time.Minute)) {
			t.Fatalf("minute %d is %s", i, got.Minute)
		}
		if [3]int64{got.Accepted, got.Delivered, got.Dead} != want[i] {
			t.Errorf("minute %s: accepted %d delivered %d dead %d, want %v", got.Minute, got.Accepted, got.Delivered, got.Dead, want[i])
		}
	}

	var other minutesAnswer
	b.get(t, "/v1/stats/minutes", keyGlobex).expect(t, http.StatusOK, &other)
	var accepted, dead int64
	for _, got := range other.Minutes {
		accepted, dead = accepted+got.Accepted, dead+got.Dead
	}
	if accepted != 3 || dead != 3 {
		t.Fatalf("globex: %d accepted, %d dead, want 3 and 3", accepted, dead)
	}
}

// TestDLQFiltersByFailureClass: failure_class is filtered by the database, so every page is
// full of the class asked for and paging finds them all; an unknown class is a 400.
func TestDLQFiltersByFailureClass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().Add(-time.Hour)
	want := map[string]bool{}
	for i := range 7 {
		// The transient ones are the oldest: a browser filtering pages would see empty first pages.
		want[b.story(t, "acme", "webhook", "https://x.example.com/h", at.Add(time.Duration(i)*time.Second), domain.OutcomeTransient)] = true
	}
	for i := range 6 {
		b.story(t, "acme", "webhook", "https://x.example.com/h", at.Add(time.Minute+time.Duration(i)*time.Second), domain.OutcomePermanent)
	}
	b.story(t, "globex", "webhook", "https://x.example.com/h", at, domain.OutcomeTransient)
	b.project(t)

	got := map[string]bool{}
	path := "/v1/dlq?failure_class=transient&limit=3"
	for pages := 0; ; pages++ {
		l := b.list(t, path, keyAcme)
		if len(l.Items) != 3 && l.NextCursor != nil {
			t.Fatalf("page %d holds %d items before the last", pages, len(l.Items))
		}
		for _, it := range l.Items {
			if it.FailureClass != "transient" {
				t.Fatalf("%s: class %s", it.ID, it.FailureClass)
			}
			got[it.ID] = true
		}
		if l.NextCursor == nil {
			break
		}
		path = "/v1/dlq?failure_class=transient&limit=3&cursor=" + *l.NextCursor
	}
	if len(got) != len(want) {
		t.Fatalf("found %d transient entries, want %d", len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("%s not listed", id)
		}
	}
	r := b.refusing().get(t, "/v1/dlq?failure_class=bored", keyAcme)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"field":"failure_class"`) {
		t.Fatalf("unknown class: %d %s", r.status, r.body)
	}
}

// withReplayJobs adds the replay jobs to a test server, and returns them for the test to run.
func withReplayJobs(jobs **commands.ReplayJobs) option {
	return func(_ *httpapi.Config, deps *httpapi.Deps) {
		*jobs = commands.NewReplayJobs(deps.Requests.(commands.ReplayJobStore), deps.Replay, commands.SystemClock{}, nil)
		deps.ReplayJobs = *jobs
	}
}

// TestReplayJobDryRunAndActor: a dry run counts what a job would match and creates nothing;
// a job records on each replay the actor the request named, or the key's tenant, and a reason
// that names the job.
func TestReplayJobDryRunAndActor(t *testing.T) {
	t.Parallel()
	var jobs *commands.ReplayJobs
	b := setup(t, withReplayJobs(&jobs))
	at := time.Now().Add(-time.Hour)
	var transient []string
	for i := range 4 {
		transient = append(transient, b.story(t, "acme", "webhook", "https://x.example.com/h", at.Add(time.Duration(i)*time.Second), domain.OutcomeTransient))
	}
	permanent := b.story(t, "acme", "webhook", "https://x.example.com/h", at.Add(time.Minute), domain.OutcomePermanent)
	b.story(t, "globex", "webhook", "https://x.example.com/h", at, domain.OutcomeTransient)
	b.project(t)

	var preview struct {
		DryRun  bool `json:"dry_run"`
		Matched int  `json:"matched"`
	}
	b.post(t, "/v1/replays", "", `{"dry_run":true,"failure_class":"transient"}`).expect(t, http.StatusOK, &preview)
	if !preview.DryRun || preview.Matched != len(transient) {
		t.Fatalf("dry run %+v, want %d matched", preview, len(transient))
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	b.get(t, "/v1/replays", keyAcme).expect(t, http.StatusOK, &list)
	if len(list.Items) != 0 {
		t.Fatalf("a dry run created a job: %s", list.Items)
	}

	type jobAnswer struct {
		ID      string `json:"id"`
		Actor   string `json:"actor"`
		Matched int    `json:"matched"`
	}
	var byTenant, named jobAnswer
	b.post(t, "/v1/replays", "bulk-tenant", `{"reason":"fixed","failure_class":"transient"}`).expect(t, http.StatusAccepted, &byTenant)
	b.post(t, "/v1/replays", "bulk-named", `{"reason":"fixed too","failure_class":"permanent","actor":"ops@acme"}`).expect(t, http.StatusAccepted, &named)
	if byTenant.Actor != "tenant:acme" || byTenant.Matched != len(transient) || named.Actor != "ops@acme" || named.Matched != 1 {
		t.Fatalf("jobs %+v %+v", byTenant, named)
	}
	for range 2 {
		if _, err := jobs.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	check := func(id, actor, reason string) {
		t.Helper()
		events, err := b.store.Load(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		last := events[len(events)-1]
		var r domain.Replayed
		_ = json.Unmarshal(last.Data, &r)
		if last.Type != domain.EventReplayed || r.Actor != actor || r.Reason != reason {
			t.Fatalf("%s: last event %s %+v, want a replay by %s for %q", id, last.Type, r, actor, reason)
		}
	}
	for _, id := range transient {
		check(id, "tenant:acme", "fixed (replay job "+byTenant.ID+")")
	}
	check(permanent, "ops@acme", "fixed too (replay job "+named.ID+")")
}
