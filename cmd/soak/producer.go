package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
)

// producer sends the deliveries through the API, one Idempotency-Key each: to the webhook sink,
// or as SMS where the plan says so. While the API process is down or answers 5xx or 409 it sends
// the same request again (same key, same body) until it gets a 2xx: a key counts as accepted
// only then. A share of the webhooks carries a send_at a few seconds ahead, and the canceller
// cancels a share of those once accepted, at times that race their due time.
type producer struct {
	api       string
	sink      string
	sms       smsPlan
	schedule  schedulePlan
	cancels   *canceller
	run       string
	n         int
	clients   int
	perSecond float64
	burst     int
	client    *http.Client
	accepted  atomic.Int64
	retries   atomic.Int64
	replayed  atomic.Int64
	mu        sync.Mutex
	ids       map[string]string // Idempotency-Key → delivery id
	rejected  map[string]string // Idempotency-Key → why the API refused it for good
	lastError string
	// scheduled counts the requests sent with a send_at.
	scheduled atomic.Int64
	// sentAt is when each key's first request was sent: a delivery accepted after its
	// recipient's opt-out is one whose every request followed the opt-out's answer.
	sentAt map[string]time.Time
}

func newProducer(api, sinkURL string, plan smsPlan, cancels *canceller, run string, n, clients int, perSecond float64, burst int) *producer {
	return &producer{
		api: api, sink: sinkURL, sms: plan, schedule: schedulePlan{sms: plan}, cancels: cancels, run: run, n: n, clients: clients, perSecond: perSecond, burst: max(burst, 1),
		// No keep-alive: a killed API leaves no stale pooled connection behind, and each retry
		// finds out at once whether the new process listens.
		client:   &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		ids:      map[string]string{},
		rejected: map[string]string{},
		sentAt:   map[string]time.Time{},
	}
}

// key is the Idempotency-Key of the i-th delivery.
func (p *producer) key(i int) string { return fmt.Sprintf("soak-%s-%06d", p.run, i) }

// body is the request of the i-th delivery, with sendAt when it is not zero. Every request
// carries soakCategory, which a recipient's preference may opt out of.
func (p *producer) body(i int, sendAt time.Time) []byte {
	req := map[string]any{
		"channel":   webhook.Name,
		"recipient": webhookRecipient(p.sink, webhookRecipientOf(i)),
		"payload":   map[string]any{"soak": p.run, "n": i},
		"category":  soakCategory,
	}
	if !sendAt.IsZero() {
		req["send_at"] = sendAt.UTC().Format(time.RFC3339Nano)
	}
	if j, ok := p.sms.ordinal(i); ok {
		req = map[string]any{
			"channel":   sms.Name,
			"recipient": p.sms.number(j),
			"payload":   map[string]any{"text": smsText(p.key(i))},
			"category":  soakCategory,
		}
	}
	body, _ := json.Marshal(req) // maps of strings and numbers always encode
	return body
}

// produce sends every delivery; it returns when each has been accepted or refused for good, or
// ctx ends. Deliveries go out in waves of burst, as fast as the API takes them, spaced so that the
// average is perSecond: a wave builds a backlog that fills the workers' limits (deferrals, delay
// tiers), as real traffic does.
func (p *producer) produce(ctx context.Context) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range p.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p.send(ctx, i)
			}
		}()
	}
	start := time.Now()
	for i := range p.n {
		if i > 0 && i%p.burst == 0 && p.perSecond > 0 {
			due := start.Add(time.Duration(float64(i) / p.perSecond * float64(time.Second)))
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(due)):
			}
		}
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
}

// send posts one delivery until the API accepts or refuses it. A send_at is fixed when the first
// request is built: a repeat is the same request, and one that comes after the send_at is sent
// at once by the ledger (the checks read what was scheduled from the history).
func (p *producer) send(ctx context.Context, i int) {
	var sendAt time.Time
	if ahead, ok := p.schedule.sendAhead(i); ok {
		sendAt = time.Now().Add(ahead)
		p.scheduled.Add(1)
	}
	key, body := p.key(i), p.body(i, sendAt)
	p.mu.Lock()
	p.sentAt[key] = time.Now()
	p.mu.Unlock()
	pause := 50 * time.Millisecond
	for ctx.Err() == nil {
		id, retry, err := p.post(ctx, key, body)
		if err == nil {
			p.mu.Lock()
			p.ids[key] = id
			p.mu.Unlock()
			p.accepted.Add(1)
			if offset, ok := p.schedule.cancelAt(i); ok && p.cancels != nil {
				p.cancels.add(id, sendAt.Add(offset))
			}
			return
		}
		if !retry {
			p.mu.Lock()
			p.rejected[key] = err.Error()
			p.mu.Unlock()
			return
		}
		p.retries.Add(1)
		p.mu.Lock()
		p.lastError = err.Error()
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(pause/2 + rand.N(pause)):
		}
		pause = min(pause*2, time.Second)
	}
}

// post sends the request once. retry reports whether the same request should be sent again.
func (p *producer) post(ctx context.Context, key string, body []byte) (id string, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.api+"/v1/deliveries", bytes.NewReader(body))
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Authorization", "Bearer "+soakAPIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := p.client.Do(req)
	if err != nil {
		return "", true, err // refused or reset: the API process is down or was killed mid-request
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		var out struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(answer, &out); err != nil || out.ID == "" {
			return "", false, fmt.Errorf("%d without a delivery id: %s", resp.StatusCode, answer)
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			p.replayed.Add(1)
		}
		return out.ID, false, nil
	case resp.StatusCode == http.StatusConflict, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return "", true, fmt.Errorf("%d: %s", resp.StatusCode, bytes.TrimSpace(answer))
	default:
		return "", false, fmt.Errorf("%d: %s", resp.StatusCode, bytes.TrimSpace(answer))
	}
}

// sentTimes returns when each key's first request was sent.
func (p *producer) sentTimes() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.sentAt)
}

// accepts returns the accepted keys and their delivery ids, and the keys refused for good.
func (p *producer) accepts() (ids, rejected map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids = make(map[string]string, len(p.ids))
	for k, v := range p.ids {
		ids[k] = v
	}
	rejected = make(map[string]string, len(p.rejected))
	for k, v := range p.rejected {
		rejected[k] = v
	}
	return ids, rejected
}
