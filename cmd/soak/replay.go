package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/webhook"
)

// replayEvery is how often the operator replays the DLQ during a run.
const replayEvery = 500 * time.Millisecond

// replayer plays the operator who replays the dead-letter queue while processes die around it:
// it replays a page of dead deliveries through the API again and again (POST /v1/dlq/replay),
// taking any failure (the API killed mid-request, say) as a reason to try again. A delivery the
// sink answered 410 dies; replayed, its next attempt gets 200, so at the end none is dead. Only
// webhooks are replayed: an SMS to a number that cannot take it would die again and again.
type replayer struct {
	api    string
	client *http.Client
	// replayed counts the deliveries the API reported replayed; failures the requests that got
	// no answer or an error status.
	replayed, failures atomic.Int64
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
