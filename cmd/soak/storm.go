package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/domain"
)

// Settings of the receipt storm.
const (
	// stormEvery is how often the storm picks a delivery and sends it its receipt again.
	stormEvery = 700 * time.Millisecond
	// stormWidth is how many copies of one receipt arrive at once: a provider that resends a
	// callback it thinks was lost, on several connections, as Vonage does after a timeout.
	stormWidth = 20
)

// receiptStorm plays a provider that sends one delivery's receipt many times at once while
// processes die around it: every stormEvery it takes an SMS delivery whose Vonage receipt the
// ledger recorded and posts that receipt again stormWidth times in parallel. Every copy must be
// answered 2xx (recorded once, the rest repeats) or 503 with Retry-After (the provider sends it
// again); any other 5xx is a failure of the run. A copy that gets no answer at all (the API was
// killed mid-request) is counted apart: a provider would send it again.
type receiptStorm struct {
	api    string
	client *http.Client
	store  *postgres.EventStore
	ids    func() []string
	// stormed are the deliveries already chosen, so that each storm hits another one.
	stormed map[string]bool

	posted, ok, unavailable, noAnswer atomic.Int64
	mu                                sync.Mutex
	errors                            []string
}

func newReceiptStorm(api string, store *postgres.EventStore, ids func() []string) *receiptStorm {
	return &receiptStorm{api: api, client: &http.Client{Timeout: 10 * time.Second}, store: store, ids: ids, stormed: map[string]bool{}}
}

// vonageReceipt is a receipt the ledger recorded from the Vonage fake, enough to send it again.
type vonageReceipt struct {
	delivery, messageID, status, code string
}

// loop storms until ctx ends.
func (s *receiptStorm) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(stormEvery):
		}
		rc, found, err := s.pick(ctx)
		if err != nil || !found {
			continue
		}
		s.burst(ctx, rc)
	}
}

// pick finds a delivery not stormed yet whose history holds a Vonage receipt.
func (s *receiptStorm) pick(ctx context.Context) (vonageReceipt, bool, error) {
	var candidates []string
	for _, id := range s.ids() {
		if !s.stormed[id] {
			candidates = append(candidates, id)
		}
	}
	for start := len(candidates); start > 0; start -= loadChunk {
		chunk := candidates[max(0, start-loadChunk):start]
		streams, err := s.store.LoadMany(ctx, chunk)
		if err != nil {
			return vonageReceipt{}, false, err
		}
		for _, id := range chunk {
			for _, e := range streams[id] {
				if e.Type != domain.EventReceiptRecorded {
					continue
				}
				data, err := domain.DecodeData(e)
				if err != nil {
					continue
				}
				r, ok := data.(*domain.ReceiptData)
				if !ok || r.Provider != vonageProvider || r.Source != "receipt" || r.ProviderOperationID == "" || r.ProviderStatus == "" {
					continue
				}
				s.stormed[id] = true
				return vonageReceipt{delivery: id, messageID: r.ProviderOperationID, status: r.ProviderStatus, code: r.Code}, true, nil
			}
		}
	}
	return vonageReceipt{}, false, nil
}

// burst posts stormWidth copies of the receipt at once and counts their answers.
func (s *receiptStorm) burst(ctx context.Context, rc vonageReceipt) {
	form := url.Values{
		"messageId": {rc.messageID}, "status": {rc.status}, "err-code": {rc.code},
		"api-key": {smsAPIKey}, "network-code": {"12345"},
	}
	body := form.Encode()
	target := s.api + "/v1/receipts/" + vonageProvider + "?token=" + url.QueryEscape(smsCallbackToken)
	var wg sync.WaitGroup
	for range stormWidth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.posted.Add(1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
			if err != nil {
				s.fail(fmt.Sprintf("delivery %s: %v", rc.delivery, err))
				return
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := s.client.Do(req)
			if err != nil {
				s.noAnswer.Add(1)
				return
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode < 300:
				s.ok.Add(1)
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				s.unavailable.Add(1)
			default:
				s.fail(fmt.Sprintf("delivery %s: a copy of its %s receipt answered %s", rc.delivery, rc.status, resp.Status))
			}
		}()
	}
	wg.Wait()
}

func (s *receiptStorm) fail(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors = append(s.errors, what)
}

// failures are the copies answered with an error other than 503 with Retry-After, the first few
// named.
func (s *receiptStorm) failures() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.errors), s.errors[:min(len(s.errors), 5)]
}

// summary is the storm's line in the report.
func (s *receiptStorm) summary() string {
	n, _ := s.failures()
	return fmt.Sprintf("receipt storm: %d deliveries, %d copies posted %d at a time: %d answered 2xx, %d 503 with Retry-After, %d no answer (API killed), %d errors",
		len(s.stormed), s.posted.Load(), stormWidth, s.ok.Load(), s.unavailable.Load(), s.noAnswer.Load(), n)
}
