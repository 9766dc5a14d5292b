package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/domain"
)

type replayJobAnswer struct {
	ID       string         `json:"id"`
	State    string         `json:"state"`
	Matched  int            `json:"matched"`
	Replayed int            `json:"replayed"`
	Skipped  int            `json:"skipped"`
	Skips    map[string]int `json:"skips"`
}

// TestReplayJobThroughTheAPI: the dead deliveries of one path are replayed by a job the API
// creates: 202 with the count matched, the same key answers the same job, another body under
// it is 422, the job runs to done in the background and each delivery is delivered after one
// replay; another tenant sees no job; bad input is a 400 naming the field.
func TestReplayJobThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	fixed := make(chan struct{})
	b.sink.script(func(r *http.Request, n int) (int, http.Header) {
		select {
		case <-fixed:
			return http.StatusOK, nil
		default:
		}
		if strings.HasSuffix(r.URL.Path, "/gone") {
			return http.StatusNotFound, nil
		}
		return http.StatusOK, nil
	})
	var dead []string
	for i := range 5 {
		dead = append(dead, b.accept(t, fmt.Sprintf("rj-%d", i), b.sink.URL+"/gone", domain.PriorityNormal))
	}
	ok := b.accept(t, "rj-ok", b.sink.URL+"/fine", domain.PriorityNormal)
	for _, id := range dead {
		b.waitState(t, id, domain.StateDead, 20*time.Second)
	}
	b.waitState(t, ok, domain.StateDelivered, 20*time.Second)
	// The DLQ view must list them before a job can select them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := b.do(t, "GET", "/v1/dlq?channel=webhook", "", nil)
		var page struct {
			Items []json.RawMessage `json:"items"`
		}
		_ = json.Unmarshal(body, &page)
		if len(page.Items) == len(dead) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DLQ view lists %d of %d", len(page.Items), len(dead))
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(fixed)

	body := map[string]any{"reason": "receiver fixed", "channel": "webhook", "failure_class": "permanent"}
	resp, raw := b.do(t, "POST", "/v1/replays", "bulk-1", body)
	var job replayJobAnswer
	if err := json.Unmarshal(raw, &job); err != nil || resp.StatusCode != http.StatusAccepted || job.Matched != len(dead) || job.ID == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}
	resp, raw = b.do(t, "POST", "/v1/replays", "bulk-1", body)
	var again replayJobAnswer
	_ = json.Unmarshal(raw, &again)
	if resp.StatusCode != http.StatusAccepted || again.ID != job.ID || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same key: %d %s", resp.StatusCode, raw)
	}
	resp, raw = b.do(t, "POST", "/v1/replays", "bulk-1", map[string]any{"reason": "other"})
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body: %d %s", resp.StatusCode, raw)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		_, raw = b.do(t, "GET", "/v1/replays/"+job.ID, "", nil)
		_ = json.Unmarshal(raw, &job)
		if job.State == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s", raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if job.Replayed != len(dead) || job.Skipped != 0 {
		t.Fatalf("done job %s", raw)
	}
	for _, id := range dead {
		b.waitState(t, id, domain.StateDelivered, 20*time.Second)
		h := b.history(t, id)
		replays := eventsOfType(h, domain.EventReplayed)
		if len(replays) != 1 || !strings.Contains(string(replays[0].Data), `"actor":"tenant:acme"`) ||
			!strings.Contains(string(replays[0].Data), `(replay job `+job.ID+`)`) {
			t.Fatalf("%s: replays %+v", id, replays)
		}
	}
	_, raw = b.do(t, "GET", "/v1/replays", "", nil)
	if !strings.Contains(string(raw), job.ID) {
		t.Fatalf("list: %s", raw)
	}

	b.key = "globex-key"
	if resp, raw := b.do(t, "GET", "/v1/replays/"+job.ID, "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's job: %d %s", resp.StatusCode, raw)
	}
	for _, bad := range []struct {
		key  string
		body map[string]any
		want string
	}{
		{"b-1", map[string]any{}, `"field":"reason"`},
		{"b-2", map[string]any{"reason": "r", "failure_class": "bored"}, `"field":"failure_class"`},
		{"b-3", map[string]any{"reason": "r", "channel": "pigeon"}, `"field":"channel"`},
		{"b-4", map[string]any{"reason": "r", "since": "yesterday"}, `"field":"since"`},
		{"b-5", map[string]any{"reason": "r", "colour": "red"}, `"field":"colour"`},
		{"", map[string]any{"reason": "r"}, `"field":"Idempotency-Key"`},
	} {
		resp, raw := b.refusing().do(t, "POST", "/v1/replays", bad.key, bad.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), bad.want) {
			t.Errorf("%v: %d %s, want 400 with %s", bad.body, resp.StatusCode, raw, bad.want)
		}
	}
}

// TestConcurrentSingleReplaysReplayEachDeathOnce: twenty replays without an Idempotency-Key sent
// at once at a delivery that dies again at once, five times over: each death is replayed once,
// the other nineteen are 409 (field state), however fast the replayed cycle dies again. A
// request that lost the race used to decide again on the reloaded stream and, finding the
// delivery dead once more, replay the next cycle too (1, 3, 4, 4, 4 replays per round).
func TestConcurrentSingleReplaysReplayEachDeathOnce(t *testing.T) {
	t.Parallel()
	// The relay moves a replay on at once: the replayed cycle dies as fast as it can.
	b := setupE2E(t, "", func(c *Config) { c.RelayGather = 0 })
	b.sink.script(func(r *http.Request, _ int) (int, http.Header) {
		if strings.HasSuffix(r.URL.Path, "/fine") {
			return http.StatusOK, nil
		}
		return http.StatusNotFound, nil
	})
	const rounds, racers = 5, 20
	// One warm connection per racer, to the API and from it to the database, so that the twenty
	// requests load the delivery within a millisecond or two, well before the replayed cycle can
	// die again (tens of ms): a request that loaded it after that would be asking of the next
	// death, rightly. The warm-up races replays of a delivered delivery: each is a 409.
	transport := &http.Transport{MaxIdleConnsPerHost: racers}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: openapitest.Transport(t, transport), Timeout: 10 * time.Second}
	race := func(id string) map[int]int {
		start := make(chan struct{})
		statuses := make(chan int, racers)
		var wg sync.WaitGroup
		for range racers {
			wg.Go(func() {
				req := mustRequest(t, http.MethodPost, b.base+"/v1/deliveries/"+id+"/replay", `{"reason":"race"}`)
				<-start
				if req == nil {
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses <- resp.StatusCode
			})
		}
		close(start)
		wg.Wait()
		close(statuses)
		count := map[int]int{}
		for s := range statuses {
			count[s]++
		}
		return count
	}
	fine := b.accept(t, "delivered", b.sink.URL+"/fine", domain.PriorityNormal)
	b.waitState(t, fine, domain.StateDelivered, 20*time.Second)
	for range 2 {
		if count := race(fine); count[http.StatusConflict] != racers {
			t.Fatalf("replays of a delivered delivery: %v, want %d 409s", count, racers)
		}
	}

	id := b.accept(t, "dies-at-once", b.sink.URL+"/gone", domain.PriorityNormal)
	for round := range rounds {
		// The round's death: as many dead letters as replays so far, plus the first.
		deadline := time.Now().Add(20 * time.Second)
		for {
			h := b.history(t, id)
			if len(eventsOfType(h, domain.EventDeadLettered)) == round+1 && h[len(h)-1].Type == string(domain.EventDeadLettered) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the delivery did not die again: %s", round, b.historyString(t, id))
			}
			time.Sleep(5 * time.Millisecond)
		}
		count := race(id)
		replays := len(eventsOfType(b.history(t, id), domain.EventReplayed))
		if count[http.StatusAccepted] != 1 || count[http.StatusConflict] != racers-1 || replays != round+1 {
			t.Fatalf("round %d: answers %v, %d replays in the history; want one 202, %d 409s and %d replays\n%s",
				round, count, replays, racers-1, round+1, b.historyString(t, id))
		}
	}
}

// TestOverlappingReplayJobsReplayEachDeathOnce: ten jobs with their own keys and the same
// filter, created at once over ten dead deliveries whose receiver still refuses them: each
// delivery is replayed once and sent once more, by one of the jobs; the others skip it naming
// the job that replayed it, and every job ends done. A job used to replay each delivery again
// whenever its replayed cycle had died by the job's turn: up to ten replays and sends each.
// A done job cannot be cancelled (409 naming its state); an unknown one is 404.
func TestOverlappingReplayJobsReplayEachDeathOnce(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "", func(c *Config) { c.RelayGather = 0 })
	b.sink.script(func(*http.Request, int) (int, http.Header) { return http.StatusNotFound, nil })
	const n, jobs = 10, 10
	var dead []string
	for i := range n {
		dead = append(dead, b.accept(t, fmt.Sprintf("overlap-%d", i), b.sink.URL+"/gone", domain.PriorityNormal))
	}
	deadline := time.Now().Add(20 * time.Second)
	for { // the DLQ view must list them before a job can select them
		_, body := b.do(t, "GET", "/v1/dlq?channel=webhook", "", nil)
		var page struct {
			Items []json.RawMessage `json:"items"`
		}
		_ = json.Unmarshal(body, &page)
		if len(page.Items) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DLQ view lists %d of %d", len(page.Items), n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	client := openapitest.Client(t)
	ids := make(chan string, jobs)
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			req := mustRequest(t, http.MethodPost, b.base+"/v1/replays", `{"reason":"receiver fixed?","channel":"webhook"}`)
			if req == nil {
				return
			}
			req.Header.Set("Idempotency-Key", fmt.Sprintf("overlap-job-%d", i))
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var job replayJobAnswer
			if err := json.NewDecoder(resp.Body).Decode(&job); err != nil || resp.StatusCode != http.StatusAccepted || job.Matched != n {
				t.Errorf("create: %d %+v %v", resp.StatusCode, job, err)
				return
			}
			ids <- job.ID
		})
	}
	wg.Wait()
	close(ids)
	byID := map[string]replayJobAnswer{}
	for id := range ids {
		byID[id] = replayJobAnswer{}
	}
	if len(byID) != jobs {
		t.Fatalf("%d jobs created, want %d", len(byID), jobs)
	}
	replayed, skipped := 0, 0
	for id := range byID {
		deadline := time.Now().Add(30 * time.Second)
		var job replayJobAnswer
		for {
			_, raw := b.do(t, "GET", "/v1/replays/"+id, "", nil)
			if err := json.Unmarshal(raw, &job); err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			if job.State == "done" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s", raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
		replayed += job.Replayed
		skipped += job.Skipped
		for reason, count := range job.Skips {
			other, ok := strings.CutPrefix(reason, "already replayed by job ")
			if _, known := byID[other]; !ok || !known || other == id {
				t.Errorf("job %s skipped %d for %q, want only deliveries another of the jobs replayed", id, count, reason)
			}
		}
	}
	if replayed != n || skipped != n*(jobs-1) {
		t.Fatalf("the jobs replayed %d and skipped %d, want %d and %d", replayed, skipped, n, n*(jobs-1))
	}
	for _, id := range dead {
		// The replayed cycle's one attempt, then dead again: no further replay can follow.
		b.waitState(t, id, domain.StateDead, 20*time.Second)
		replays := eventsOfType(b.history(t, id), domain.EventReplayed)
		if len(replays) != 1 || b.sink.count(id) != 2 {
			t.Fatalf("%s: %d replays, %d sends; want 1 and 2 (the first attempt and the replay's)", id, len(replays), b.sink.count(id))
		}
		var data domain.Replayed
		if err := json.Unmarshal(replays[0].Data, &data); err != nil {
			t.Fatal(err)
		}
		if _, ok := byID[data.Job]; !ok || data.Of != 4 {
			t.Fatalf("%s: replay %s, want one of the jobs replaying version 4", id, replays[0].Data)
		}
	}

	for id := range byID {
		resp, raw := b.do(t, "POST", "/v1/replays/"+id+"/cancel", "", nil)
		if resp.StatusCode != http.StatusConflict || !strings.Contains(string(raw), `"field":"state"`) || !strings.Contains(string(raw), "is done") {
			t.Fatalf("cancel a done job: %d %s, want 409 naming its state", resp.StatusCode, raw)
		}
		break
	}
	if resp, raw := b.do(t, "POST", "/v1/replays/0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11/cancel", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("cancel an unknown job: %d %s", resp.StatusCode, raw)
	}
}

// mustRequest is a request to the API as tenant acme (usable in any goroutine: nil on failure,
// reported with t.Error).
func mustRequest(t *testing.T, method, url, body string) *http.Request {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return nil
	}
	req.Header.Set("Authorization", "Bearer acme-key")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}
