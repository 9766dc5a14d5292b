package main

import (
	"encoding/csv"
	"errors"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// Fates of a first attempt, decided from a hash of the delivery id so that a run's mix does not
// depend on timing: about 5 % answer 503 (the delivery is retried), about 1 % answer only after
// the worker's webhook timeout (the worker records the outcome as unknown) and about 1.5 % answer
// 404 (the delivery dies, and the soak's operator replays it). Later attempts always get 200.
const (
	fatePermille503  = 50
	fatePermilleSlow = 10
	fatePermilleGone = 15
	// slowAnswer is well past the webhook timeout.
	slowAnswer = webhookTimeout + 500*time.Millisecond
)

type fate int

const (
	fateOK fate = iota
	fateUnavailable
	fateSlow
	fateGone
)

func fateOf(id string, attempt int) fate {
	if attempt != 1 {
		return fateOK
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	switch n := h.Sum32() % 1000; {
	case n < fatePermille503:
		return fateUnavailable
	case n < fatePermille503+fatePermilleSlow:
		return fateSlow
	case n < fatePermille503+fatePermilleSlow+fatePermilleGone:
		return fateGone
	}
	return fateOK
}

// sinkCall is one webhook request the sink received.
type sinkCall struct {
	ID      string
	Attempt int
	At      time.Time
	// Status is what the sink answered (a slow call's answer may have come too late to be read).
	Status int
	Slow   bool
}

// sink is the soak's webhook receiver: it records every call and answers by the call's fate.
type sink struct {
	server   *http.Server
	listener net.Listener
	mu       sync.Mutex
	calls    []sinkCall
}

func startSink() (*sink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{listener: l}
	s.server = &http.Server{Handler: http.HandlerFunc(s.receive), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err)
		}
	}()
	return s, nil
}

// URL is where deliveries are sent.
func (s *sink) URL() string { return "http://" + s.listener.Addr().String() + "/hook" }

// deadStatus is the sink's permanent refusal, which kills a delivery for the replayer to bring
// back: 404, permanent and no evidence against the recipient. It was 410 until 410 Gone became
// hard evidence (issue 25): the endpoint went onto the suppression list, and its replay ended
// suppressed instead of delivered.
const deadStatus = http.StatusNotFound

func (s *sink) receive(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	id := r.Header.Get("webhook-id")
	attempt, _ := strconv.Atoi(r.Header.Get("X-Ledger-Attempt"))
	call := sinkCall{ID: id, Attempt: attempt, At: time.Now(), Status: http.StatusOK}
	f := fateOf(id, attempt)
	switch f {
	case fateUnavailable:
		call.Status = http.StatusServiceUnavailable
	case fateSlow:
		call.Slow = true
	case fateGone:
		call.Status = deadStatus
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if f == fateSlow {
		select {
		case <-time.After(slowAnswer):
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(call.Status)
}

// Calls returns a copy of the calls so far.
func (s *sink) Calls() []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkCall(nil), s.calls...)
}

// Count is the number of calls so far.
func (s *sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *sink) Close() { _ = s.server.Close() }

// save writes the calls as CSV (kept with --keep, for investigation).
func (s *sink) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"at", "delivery_id", "attempt", "status", "slow"})
	for _, c := range s.Calls() {
		_ = w.Write([]string{c.At.UTC().Format(time.RFC3339Nano), c.ID, strconv.Itoa(c.Attempt), strconv.Itoa(c.Status), strconv.FormatBool(c.Slow)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}
