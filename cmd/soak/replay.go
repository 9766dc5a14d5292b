package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/webhook"
)

// replayEvery is how often the operator replays the DLQ during a run.
const replayEvery = 500 * time.Millisecond

// replayer plays the operator who replays the dead-letter queue while processes die around it:
// it replays a page of dead deliveries through the API again and again (POST /v1/dlq/replay),
// taking any failure (the API killed mid-request, say) as a reason to try again. A delivery the
// sink answered 404 dies; replayed, its next attempt gets 200, so at the end none is dead. Only
// webhooks are replayed: an SMS to a number that cannot take it would die again and again.
type replayer struct {
	api    string
	client *http.Client
	// replayed counts the deliveries the API reported replayed; failures the requests that got
	// no answer or an error status.
	replayed, failures atomic.Int64
	// jobsStarted counts the replay jobs created, jobsUnavailable those answered 503 with
	// Retry-After, jobErrors those answered another 5xx (the first few in jobFailures).
	jobsStarted, jobsUnavailable, jobErrors atomic.Int64
	mu                                      sync.Mutex
	jobFailures                             []string
}

func newReplayer(api string) *replayer {
	return &replayer{api: api, client: &http.Client{Timeout: 10 * time.Second}}
}

// errNoReplay: the ledger under test has no DLQ replay endpoint.
var errNoReplay = errors.New("no POST /v1/dlq/replay")

// once replays one page; errNoReplay when the ledger has no such endpoint.
func (p *replayer) once(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.api+"/v1/dlq/replay?limit=100&channel="+webhook.Name,
		strings.NewReader(`{"reason":"soak: the operator replays the DLQ"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+soakAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return errNoReplay
	default:
		return fmt.Errorf("dlq replay: %d %s", resp.StatusCode, body)
	}
	var answer struct {
		Replayed []string `json:"replayed"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("dlq replay answer: %w", err)
	}
	p.replayed.Add(int64(len(answer.Replayed)))
	return nil
}

// supported asks until the API answers whether it replays (it may be restarting).
func (p *replayer) supported(ctx context.Context) bool {
	for ctx.Err() == nil {
		switch err := p.once(ctx); {
		case err == nil:
			return true
		case errors.Is(err, errNoReplay):
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(replayEvery):
		}
	}
	return false
}

// loop replays until ctx ends.
func (p *replayer) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(replayEvery):
		}
		if err := p.once(ctx); err != nil && ctx.Err() == nil {
			p.failures.Add(1)
		}
	}
}

// replayJobEvery is how often two operators start a replay job over the same page at once.
const replayJobEvery = 1500 * time.Millisecond

// jobs plays two operators who, unknown to each other, start a durable replay job over the same
// filter (the dead webhooks) at the same moment, again and again while processes die: each job
// has its own Idempotency-Key, so both are created. A delivery must be replayed once per dead
// cycle however many jobs see it; an answer of 5xx but 503 with Retry-After is a failure (no
// answer at all is a kill).
func (p *replayer) jobs(ctx context.Context) {
	for round := 0; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(replayJobEvery):
		}
		done := make(chan struct{}, 2)
		for _, who := range []string{"a", "b"} {
			go func() {
				defer func() { done <- struct{}{} }()
				p.startJob(ctx, fmt.Sprintf("soak-job-%d-%s", round, who))
			}()
		}
		<-done
		<-done
	}
}

// startJob posts one replay job and counts its answer.
func (p *replayer) startJob(ctx context.Context, key string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.api+"/v1/replays",
		strings.NewReader(`{"reason":"soak: two operators replay the same page","channel":"`+webhook.Name+`"}`))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+soakAPIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := p.client.Do(req)
	if err != nil {
		return // the API was killed mid-request
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		p.jobsStarted.Add(1)
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		p.jobsUnavailable.Add(1) // the database was cut under it: an operator tries again
	case resp.StatusCode >= 500:
		p.jobErrors.Add(1)
		p.mu.Lock()
		if len(p.jobFailures) < 5 {
			p.jobFailures = append(p.jobFailures, fmt.Sprintf("%s: %d %s", key, resp.StatusCode, strings.TrimSpace(string(body))))
		}
		p.mu.Unlock()
	}
}
