package domain

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

func validSpec() AcceptSpec {
	return AcceptSpec{
		ID:             "d-1",
		Tenant:         "acme",
		NotificationID: "n-1",
		Channel:        "webhook",
		Recipient:      "https://example.com/hook",
		Payload:        json.RawMessage(`{"hello":"world"}`),
		Priority:       PriorityNormal,
		MaxAttempts:    3,
		RequestKey:     "req-1",
	}
}

// stream is a delivery under test with the events it produced so far, oldest first.
type stream struct {
	d      *Delivery
	events []Event
}

// add returns a function that takes a method's result, fails the test on an error, and keeps the
// one event the method produced: s.add(t)(s.d.Queue(now)).
func (s *stream) add(t *testing.T) func([]Event, error) []Event {
	t.Helper()
	return func(events []Event, err error) []Event {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		if len(events) != 1 {
			t.Fatalf("got %d events, want 1", len(events))
		}
		s.events = append(s.events, events...)
		return events
	}
}

// accept opens a delivery from spec.
func accept(t *testing.T, spec AcceptSpec) *stream {
	t.Helper()
	d, events, err := Accept(spec, testNow)
	s := &stream{d: d}
	s.add(t)(events, err)
	return s
}

// processing drives a fresh delivery to processing of its first attempt.
func processing(t *testing.T, spec AcceptSpec) *stream {
	t.Helper()
	s := accept(t, spec)
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("webhook-http", testNow))
	return s
}

// retryOnce drives a processing delivery through a transient failure to processing of its next
// attempt.
func (s *stream) retryOnce(t *testing.T, policy RetryPolicy) {
	t.Helper()
	attempt := s.d.Attempt()
	s.add(t)(s.d.RecordOutcome(attempt, Outcome{Kind: OutcomeTransient}, policy, testNow, 0))
	if s.d.State() != StateRetrying {
		t.Fatalf("after a transient failure of attempt %d: state %q, want retrying", attempt, s.d.State())
	}
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("webhook-http", testNow))
}

func TestAcceptRejectsEachBadField(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		mutate  func(*AcceptSpec)
		mention string
	}{
		{"empty id", func(s *AcceptSpec) { s.ID = "" }, "id is empty"},
		{"empty tenant", func(s *AcceptSpec) { s.Tenant = "" }, "tenant"},
		{"empty channel", func(s *AcceptSpec) { s.Channel = "" }, "channel"},
		{"empty recipient", func(s *AcceptSpec) { s.Recipient = "" }, "recipient"},
		{"empty priority", func(s *AcceptSpec) { s.Priority = "" }, "priority"},
		{"unknown priority", func(s *AcceptSpec) { s.Priority = "urgent" }, "priority"},
		{"zero max attempts", func(s *AcceptSpec) { s.MaxAttempts = 0 }, "max attempts"},
		{"negative max attempts", func(s *AcceptSpec) { s.MaxAttempts = -1 }, "max attempts"},
		{"missing payload", func(s *AcceptSpec) { s.Payload = nil }, "payload"},
		{"payload not JSON", func(s *AcceptSpec) { s.Payload = json.RawMessage(`{"a":`) }, "payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec := validSpec()
			tt.mutate(&spec)
			d, events, err := Accept(spec, testNow)
			if !errors.Is(err, ErrInvalidDelivery) {
				t.Fatalf("Accept: err = %v, want ErrInvalidDelivery", err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Accept: error %q does not mention %q", err, tt.mention)
			}
			if d != nil || events != nil {
				t.Errorf("Accept refused but returned delivery %v and events %v", d, events)
			}
		})
	}
}

func TestAcceptJoinsAllProblems(t *testing.T) {
	t.Parallel()

	_, _, err := Accept(AcceptSpec{}, testNow)
	if !errors.Is(err, ErrInvalidDelivery) {
		t.Fatalf("Accept(empty spec): err = %v, want ErrInvalidDelivery", err)
	}
	for _, mention := range []string{"id", "tenant", "channel", "recipient", "priority", "max attempts", "payload"} {
		if !strings.Contains(err.Error(), mention) {
			t.Errorf("Accept(empty spec): error %q does not mention %q", err, mention)
		}
	}
	// The problems are joined, not flattened into one string: each is reachable by unwrapping.
	var problems int
	var walk func(error)
	walk = func(err error) {
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		default:
			if err != ErrInvalidDelivery {
				problems++
			}
		}
	}
	walk(err)
	if problems != 7 {
		t.Errorf("Accept(empty spec): %d joined problems, want 7 (%v)", problems, err)
	}
}

func TestAcceptAcceptsEveryPriority(t *testing.T) {
	t.Parallel()

	for _, p := range []Priority{PriorityHigh, PriorityNormal, PriorityLow} {
		spec := validSpec()
		spec.Priority = p
		if _, _, err := Accept(spec, testNow); err != nil {
			t.Errorf("Accept with priority %q: %v", p, err)
		}
	}
}

func TestHappyPath(t *testing.T) {
	t.Parallel()

	spec := validSpec()
	s := accept(t, spec)
	if s.d.State() != StateAccepted || s.d.Version() != 1 || s.d.Attempt() != 0 {
		t.Fatalf("after Accept: state %q version %d attempt %d, want accepted 1 0",
			s.d.State(), s.d.Version(), s.d.Attempt())
	}
	s.add(t)(s.d.Queue(testNow.Add(time.Second)))
	s.add(t)(s.d.StartAttempt("webhook-http", testNow.Add(2*time.Second)))
	s.add(t)(s.d.RecordOutcome(1, Outcome{
		Kind:                OutcomeDelivered,
		Class:               ClassTransient,
		Provider:            "webhook-http",
		StatusCode:          200,
		Latency:             1500 * time.Microsecond,
		ProviderOperationID: "op-42",
	}, DefaultRetryPolicy(), testNow.Add(3*time.Second), 0.5))

	want := []struct {
		typ EventType
		key string
	}{
		{EventAccepted, KeyAccepted(spec.ID)},
		{EventQueued, KeyQueued(spec.ID, 1)},
		{EventAttemptStarted, KeyAttemptStarted(spec.ID, 1)},
		{EventDelivered, KeyAttemptOutcome(spec.ID, 1)},
	}
	if len(s.events) != len(want) {
		t.Fatalf("%d events, want %d", len(s.events), len(want))
	}
	keys := map[string]bool{}
	for i, e := range s.events {
		if e.Version != i+1 {
			t.Errorf("event %d: version %d, want %d", i, e.Version, i+1)
		}
		if e.Type != want[i].typ {
			t.Errorf("event %d: type %s, want %s", i, e.Type, want[i].typ)
		}
		if e.Key != want[i].key {
			t.Errorf("event %d: key %q, want %q", i, e.Key, want[i].key)
		}
		if keys[e.Key] {
			t.Errorf("event %d: key %q reused", i, e.Key)
		}
		keys[e.Key] = true
		if e.DeliveryID != spec.ID || e.Tenant != spec.Tenant {
			t.Errorf("event %d: stream (%q, %q), want (%q, %q)", i, e.DeliveryID, e.Tenant, spec.ID, spec.Tenant)
		}
		if !e.RecordedAt.Equal(testNow.Add(time.Duration(i) * time.Second)) {
			t.Errorf("event %d: recorded at %v", i, e.RecordedAt)
		}
		if !json.Valid(e.Data) {
			t.Errorf("event %d: data %q is not JSON", i, e.Data)
		}
	}

	d := s.d
	if d.State() != StateDelivered || d.Version() != 4 || d.Attempt() != 1 {
		t.Errorf("after delivery: state %q version %d attempt %d, want delivered 4 1", d.State(), d.Version(), d.Attempt())
	}
	res := d.LastResult()
	if res == nil {
		t.Fatal("LastResult() = nil after delivery")
	}
	if res.Attempt != 1 || res.ProviderOperationID != "op-42" || res.StatusCode != 200 || res.Class != "" || res.LatencyMS != 1.5 {
		t.Errorf("LastResult() = %+v", *res)
	}
	if d.ID() != spec.ID || d.Tenant() != spec.Tenant || d.NotificationID() != spec.NotificationID ||
		d.Channel() != spec.Channel || d.Recipient() != spec.Recipient || d.Priority() != spec.Priority ||
		d.MaxAttempts() != spec.MaxAttempts || d.RequestKey() != spec.RequestKey ||
		string(d.Payload()) != string(spec.Payload) {
		t.Errorf("accessors do not return the accepted spec")
	}
	if !d.AcceptedAt().Equal(testNow) || !d.UpdatedAt().Equal(testNow.Add(3*time.Second)) {
		t.Errorf("AcceptedAt %v UpdatedAt %v", d.AcceptedAt(), d.UpdatedAt())
	}

	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatalf("Rehydrate: %v", err)
	}
	assertSameDelivery(t, r, d)
}

// assertSameDelivery compares what a rehydrated delivery exposes with the live one.
func assertSameDelivery(t *testing.T, got, want *Delivery) {
	t.Helper()
	if got.State() != want.State() || got.Version() != want.Version() || got.Attempt() != want.Attempt() ||
		got.AttemptsInCycle() != want.AttemptsInCycle() {
		t.Errorf("rehydrated: state %q version %d attempt %d in-cycle %d; live: %q %d %d %d",
			got.State(), got.Version(), got.Attempt(), got.AttemptsInCycle(),
			want.State(), want.Version(), want.Attempt(), want.AttemptsInCycle())
	}
	if got.ID() != want.ID() || got.Tenant() != want.Tenant() || got.NotificationID() != want.NotificationID() ||
		got.Channel() != want.Channel() || got.Recipient() != want.Recipient() || got.Priority() != want.Priority() ||
		got.MaxAttempts() != want.MaxAttempts() || got.RequestKey() != want.RequestKey() ||
		string(got.Payload()) != string(want.Payload()) {
		t.Errorf("rehydrated fields differ from the live delivery")
	}
	if !got.AcceptedAt().Equal(want.AcceptedAt()) || !got.UpdatedAt().Equal(want.UpdatedAt()) {
		t.Errorf("rehydrated times (%v, %v), live (%v, %v)",
			got.AcceptedAt(), got.UpdatedAt(), want.AcceptedAt(), want.UpdatedAt())
	}
	if (got.LastResult() == nil) != (want.LastResult() == nil) {
		t.Errorf("rehydrated LastResult %v, live %v", got.LastResult(), want.LastResult())
	}
	g, w := got.NextAttemptAt(), want.NextAttemptAt()
	if (g == nil) != (w == nil) || (g != nil && !g.Equal(*w)) {
		t.Errorf("rehydrated NextAttemptAt %v, live %v", g, w)
	}
}

func TestTransientWithAttemptsLeftRetries(t *testing.T) {
	t.Parallel()

	policy := RetryPolicy{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}, MaxAttempts: 3}
	s := processing(t, validSpec())
	events := s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient, StatusCode: 503},
		policy, testNow, 0.5))

	if events[0].Type != EventRetryScheduled {
		t.Fatalf("event type %s, want %s", events[0].Type, EventRetryScheduled)
	}
	if s.d.State() != StateRetrying {
		t.Fatalf("state %q, want retrying", s.d.State())
	}
	next := s.d.NextAttemptAt()
	if next == nil {
		t.Fatal("NextAttemptAt() = nil while retrying")
	}
	if next.Before(testNow) {
		t.Errorf("NextAttemptAt %v is before now %v", next, testNow)
	}
	if want := testNow.Add(15 * time.Second); !next.Equal(want) {
		t.Errorf("NextAttemptAt %v, want %v (half of the first ceiling)", next, want)
	}
	res := s.d.LastResult()
	if res == nil || res.Class != ClassTransient || res.Exhausted || res.NextAttemptAt == nil {
		t.Errorf("LastResult() = %+v, want class transient, not exhausted, next attempt set", res)
	}
	var data AttemptResult
	if err := json.Unmarshal(events[0].Data, &data); err != nil {
		t.Fatalf("decode event data: %v", err)
	}
	if data.NextAttemptAt == nil || !data.NextAttemptAt.Equal(*next) || data.Attempt != 1 || data.StatusCode != 503 {
		t.Errorf("event data %+v does not carry the schedule", data)
	}

	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatalf("Rehydrate: %v", err)
	}
	assertSameDelivery(t, r, s.d)
}

func TestRetryAfterLongerThanJitteredDelayWins(t *testing.T) {
	t.Parallel()

	policy := RetryPolicy{Strategy: Exponential{Base: 30 * time.Second, Cap: 30 * time.Minute}, MaxAttempts: 3}
	tests := []struct {
		name       string
		retryAfter time.Duration
		want       time.Duration
	}{
		{"longer retry-after wins", 10 * time.Minute, 10 * time.Minute},
		{"shorter retry-after loses", time.Second, 15 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := processing(t, validSpec())
			s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient, StatusCode: 429, RetryAfter: tt.retryAfter},
				policy, testNow, 0.5))
			next := s.d.NextAttemptAt()
			if next == nil || !next.Equal(testNow.Add(tt.want)) {
				t.Errorf("NextAttemptAt %v, want now+%v", next, tt.want)
			}
		})
	}
}

func TestTransientAtLastAttemptIsExhausted(t *testing.T) {
	t.Parallel()

	policy := RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 3}
	spec := validSpec()
	spec.MaxAttempts = 3
	s := processing(t, spec)
	s.retryOnce(t, policy)
	s.retryOnce(t, policy)
	if s.d.Attempt() != 3 || s.d.AttemptsInCycle() != 3 {
		t.Fatalf("attempt %d in-cycle %d, want 3 3", s.d.Attempt(), s.d.AttemptsInCycle())
	}
	events := s.add(t)(s.d.RecordOutcome(3, Outcome{Kind: OutcomeTransient}, policy, testNow, 0.5))
	if events[0].Type != EventDeadLettered || events[0].Key != KeyAttemptOutcome(spec.ID, 3) {
		t.Errorf("event (%s, %q), want (%s, %q)", events[0].Type, events[0].Key,
			EventDeadLettered, KeyAttemptOutcome(spec.ID, 3))
	}
	if s.d.State() != StateDead {
		t.Errorf("state %q, want dead", s.d.State())
	}
	res := s.d.LastResult()
	if res == nil || !res.Exhausted || res.Class != ClassTransient || res.NextAttemptAt != nil {
		t.Errorf("LastResult() = %+v, want exhausted transient without a next attempt", res)
	}

	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatalf("Rehydrate: %v", err)
	}
	assertSameDelivery(t, r, s.d)
	if r.LastResult() == nil || !r.LastResult().Exhausted {
		t.Errorf("rehydrated LastResult() = %+v, want exhausted", r.LastResult())
	}
}

func TestSingleAttemptTransientIsExhausted(t *testing.T) {
	t.Parallel()

	spec := validSpec()
	spec.MaxAttempts = 1
	s := processing(t, spec)
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient}, DefaultRetryPolicy(), testNow, 0))
	if s.d.State() != StateDead || s.d.LastResult() == nil || !s.d.LastResult().Exhausted {
		t.Errorf("state %q result %+v, want dead and exhausted", s.d.State(), s.d.LastResult())
	}
}

func TestOutcomeKinds(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		outcome   Outcome
		wantType  EventType
		wantState State
		wantClass ErrorClass
	}{
		{"permanent", Outcome{Kind: OutcomePermanent, StatusCode: 404},
			EventDeadLettered, StateDead, ClassPermanent},
		{"permanent panic keeps its class", Outcome{Kind: OutcomePermanent, Class: ClassPanic},
			EventDeadLettered, StateDead, ClassPanic},
		{"unknown", Outcome{Kind: OutcomeUnknown, Err: "read timeout after write"},
			EventOutcomeUnknown, StateUnknown, ClassUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := processing(t, validSpec())
			events := s.add(t)(s.d.RecordOutcome(1, tt.outcome, DefaultRetryPolicy(), testNow, 0.5))
			if events[0].Type != tt.wantType {
				t.Errorf("event type %s, want %s", events[0].Type, tt.wantType)
			}
			if s.d.State() != tt.wantState {
				t.Errorf("state %q, want %q", s.d.State(), tt.wantState)
			}
			res := s.d.LastResult()
			if res == nil || res.Class != tt.wantClass || res.Exhausted || res.NextAttemptAt != nil {
				t.Errorf("LastResult() = %+v, want class %q, not exhausted, no next attempt", res, tt.wantClass)
			}
			if s.d.NextAttemptAt() != nil {
				t.Errorf("NextAttemptAt() = %v, want nil", s.d.NextAttemptAt())
			}
			r, err := Rehydrate(s.events)
			if err != nil {
				t.Fatalf("Rehydrate: %v", err)
			}
			assertSameDelivery(t, r, s.d)
		})
	}
}

func TestRecordOutcomeUnknownKindIsRefused(t *testing.T) {
	t.Parallel()

	s := processing(t, validSpec())
	events, err := s.d.RecordOutcome(1, Outcome{Kind: "maybe"}, DefaultRetryPolicy(), testNow, 0)
	if err == nil || events != nil {
		t.Fatalf("RecordOutcome with an unknown kind = (%v, %v), want an error", events, err)
	}
	if s.d.State() != StateProcessing || s.d.Version() != 3 {
		t.Errorf("refused outcome changed the delivery: state %q version %d", s.d.State(), s.d.Version())
	}
}

func TestRecordOutcomeForWrongAttemptIsStale(t *testing.T) {
	t.Parallel()

	policy := DefaultRetryPolicy()
	delivered := Outcome{Kind: OutcomeDelivered}

	t.Run("other attempt number", func(t *testing.T) {
		t.Parallel()
		s := processing(t, validSpec())
		for _, attempt := range []int{0, 2} {
			events, err := s.d.RecordOutcome(attempt, delivered, policy, testNow, 0)
			if !errors.Is(err, ErrStaleAttempt) || events != nil {
				t.Errorf("RecordOutcome(attempt %d) = (%v, %v), want ErrStaleAttempt", attempt, events, err)
			}
		}
		if s.d.State() != StateProcessing || s.d.Version() != 3 {
			t.Errorf("stale outcome changed the delivery: state %q version %d", s.d.State(), s.d.Version())
		}
	})
	t.Run("attempt already closed", func(t *testing.T) {
		t.Parallel()
		s := processing(t, validSpec())
		s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient}, policy, testNow, 0))
		_, err := s.d.RecordOutcome(1, delivered, policy, testNow, 0)
		if !errors.Is(err, ErrStaleAttempt) {
			t.Errorf("second outcome of attempt 1: err = %v, want ErrStaleAttempt", err)
		}
	})
	t.Run("attempt not started", func(t *testing.T) {
		t.Parallel()
		s := accept(t, validSpec())
		s.add(t)(s.d.Queue(testNow))
		_, err := s.d.RecordOutcome(1, delivered, policy, testNow, 0)
		if !errors.Is(err, ErrStaleAttempt) {
			t.Errorf("outcome of a queued attempt: err = %v, want ErrStaleAttempt", err)
		}
	})
}

func TestQueueFromRetryingIsNextAttempt(t *testing.T) {
	t.Parallel()

	policy := RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 3}
	spec := validSpec()
	s := processing(t, spec)
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient}, policy, testNow, 0.3))
	events := s.add(t)(s.d.Queue(testNow))
	if s.d.State() != StateQueued || s.d.Attempt() != 2 || s.d.AttemptsInCycle() != 2 {
		t.Fatalf("after requeue: state %q attempt %d in-cycle %d, want queued 2 2",
			s.d.State(), s.d.Attempt(), s.d.AttemptsInCycle())
	}
	if events[0].Key != KeyQueued(spec.ID, 2) {
		t.Errorf("queued key %q, want %q", events[0].Key, KeyQueued(spec.ID, 2))
	}
	var q Queued
	if err := json.Unmarshal(events[0].Data, &q); err != nil || q.Attempt != 2 {
		t.Errorf("queued data %s (%v), want attempt 2", events[0].Data, err)
	}
	if s.d.NextAttemptAt() != nil {
		t.Errorf("NextAttemptAt() = %v after requeue, want nil", s.d.NextAttemptAt())
	}
	events = s.add(t)(s.d.StartAttempt("webhook-http", testNow))
	if events[0].Key != KeyAttemptStarted(spec.ID, 2) {
		t.Errorf("started key %q, want %q", events[0].Key, KeyAttemptStarted(spec.ID, 2))
	}
	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatalf("Rehydrate: %v", err)
	}
	assertSameDelivery(t, r, s.d)
}

func TestMethodsRefuseIllegalTransitions(t *testing.T) {
	t.Parallel()

	s := accept(t, validSpec())
	_, err := s.d.StartAttempt("webhook-http", testNow)
	var terr *TransitionError
	if !errors.As(err, &terr) || terr.From != StateAccepted || terr.Event != EventAttemptStarted {
		t.Errorf("StartAttempt from accepted: err = %v, want TransitionError(accepted, attempt_started)", err)
	}
	s.add(t)(s.d.Queue(testNow))
	if _, err := s.d.Queue(testNow); !errors.As(err, &terr) {
		t.Errorf("Queue from queued: err = %v, want a TransitionError", err)
	}
	if s.d.State() != StateQueued || s.d.Version() != 2 || s.d.Attempt() != 1 {
		t.Errorf("refused commands changed the delivery: state %q version %d attempt %d",
			s.d.State(), s.d.Version(), s.d.Attempt())
	}
}

func TestRehydrateRefusesBrokenStreams(t *testing.T) {
	t.Parallel()

	s := processing(t, validSpec())
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeDelivered}, DefaultRetryPolicy(), testNow, 0))
	good := s.events

	clone := func() []Event { return append([]Event(nil), good...) }

	t.Run("empty stream", func(t *testing.T) {
		t.Parallel()
		for _, events := range [][]Event{nil, {}} {
			if d, err := Rehydrate(events); err == nil || d != nil {
				t.Errorf("Rehydrate(%v) = (%v, %v), want an error", events, d, err)
			}
		}
	})
	t.Run("gap in versions", func(t *testing.T) {
		t.Parallel()
		events := clone()
		events[3].Version = 5 // versions 1, 2, 3, 5; the types alone would be a legal stream
		d, err := Rehydrate(events)
		if err == nil || d != nil {
			t.Fatalf("Rehydrate with a gap = (%v, %v), want an error", d, err)
		}
		var terr *TransitionError
		if errors.As(err, &terr) {
			t.Errorf("Rehydrate with a gap failed on the transition, not the version: %v", err)
		}
	})
	t.Run("repeated version", func(t *testing.T) {
		t.Parallel()
		events := clone()
		events[2].Version = 2
		if _, err := Rehydrate(events); err == nil {
			t.Errorf("Rehydrate with a repeated version succeeded")
		}
	})
	t.Run("not starting at 1", func(t *testing.T) {
		t.Parallel()
		events := clone()
		for i := range events {
			events[i].Version++
		}
		if _, err := Rehydrate(events); err == nil {
			t.Errorf("Rehydrate of a stream starting at version 2 succeeded")
		}
	})
	t.Run("illegal transition", func(t *testing.T) {
		t.Parallel()
		events := clone()
		events[1].Type = EventDelivered // accepted → delivered skips the attempt
		d, err := Rehydrate(events)
		var terr *TransitionError
		if !errors.As(err, &terr) || d != nil {
			t.Fatalf("Rehydrate(accepted, delivered, ...) = (%v, %v), want a TransitionError", d, err)
		}
		if terr.From != StateAccepted || terr.Event != EventDelivered {
			t.Errorf("TransitionError names (%q, %s), want (accepted, %s)", terr.From, terr.Event, EventDelivered)
		}
	})
	t.Run("stream not opened by accepted", func(t *testing.T) {
		t.Parallel()
		events := clone()[1:]
		for i := range events {
			events[i].Version = i + 1
		}
		var terr *TransitionError
		if _, err := Rehydrate(events); !errors.As(err, &terr) || terr.From != StateNone {
			t.Errorf("Rehydrate of a stream without accepted: err = %v, want TransitionError from none", err)
		}
	})
	t.Run("undecodable data", func(t *testing.T) {
		t.Parallel()
		events := clone()
		events[1].Data = json.RawMessage(`{"attempt":"one"}`)
		if _, err := Rehydrate(events); err == nil {
			t.Errorf("Rehydrate with undecodable data succeeded")
		}
	})
}

func TestDecodeDataKnowsEveryEventType(t *testing.T) {
	t.Parallel()

	for _, typ := range EventTypes {
		v, err := DecodeData(Event{Type: typ, Data: json.RawMessage(`{"attempt":1}`)})
		if err != nil || v == nil {
			t.Errorf("DecodeData(%s) = (%v, %v)", typ, v, err)
		}
	}
	if _, err := DecodeData(Event{Type: "delivery.renamed", Data: json.RawMessage(`{}`)}); err == nil {
		t.Errorf("DecodeData of an unknown type succeeded")
	}
}

// TestKeys pins the spelling of the idempotency keys: they are stored under a unique constraint,
// so a change of spelling would let a redelivered message record a transition twice.
func TestKeys(t *testing.T) {
	t.Parallel()

	tests := []struct{ got, want string }{
		{KeyAccepted("d-1"), "d-1/accepted"},
		{KeyQueued("d-1", 2), "d-1/queued/2"},
		{KeyAttemptStarted("d-1", 3), "d-1/attempt/3/started"},
		{KeyAttemptOutcome("d-1", 4), "d-1/attempt/4/outcome"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("key %q, want %q", tt.got, tt.want)
		}
	}
	seen := map[string]bool{}
	for _, id := range []string{"d-1", "d-2"} {
		keys := []string{KeyAccepted(id)}
		for attempt := 1; attempt <= 3; attempt++ {
			keys = append(keys, KeyQueued(id, attempt), KeyAttemptStarted(id, attempt),
				KeyAttemptOutcome(id, attempt))
		}
		for _, k := range keys {
			if seen[k] {
				t.Errorf("key %q names two operations", k)
			}
			seen[k] = true
		}
	}
}

func TestDeferKeepsAttemptAndCountsDeferrals(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, _, err := Accept(AcceptSpec{ID: "d1", Tenant: "t", Channel: "webhook", Recipient: "https://x",
		Payload: json.RawMessage(`{}`), Priority: PriorityNormal, MaxAttempts: 2}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Defer("too early", now, now); err == nil {
		t.Fatal("deferring an accepted delivery must be refused")
	}
	if _, err := d.Queue(now); err != nil {
		t.Fatal(err)
	}
	first, err := d.Defer("host example.com rate 5/s", now.Add(time.Second), now)
	if err != nil {
		t.Fatal(err)
	}
	second, err := d.Defer("host example.com rate 5/s", now.Add(2*time.Second), now)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Key != "d1/queued/1/deferred/1" || second[0].Key != "d1/queued/1/deferred/2" {
		t.Fatalf("keys %s %s", first[0].Key, second[0].Key)
	}
	if d.State() != StateQueued || d.Attempt() != 1 || d.AttemptsInCycle() != 1 {
		t.Fatalf("after deferrals: %s attempt %d", d.State(), d.Attempt())
	}
	if due := d.NextAttemptAt(); due == nil || !due.Equal(now.Add(2*time.Second)) {
		t.Fatalf("next attempt at %v", due)
	}
	started, err := d.StartAttempt("webhook", now)
	if err != nil || started[0].Key != "d1/attempt/1/started" {
		t.Fatalf("start after deferral: %v %v", started, err)
	}
}

func TestReconcileResolvesOnlyUnknown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	policy := RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 2}
	unknownAt := func(t *testing.T, maxAttempts int) *Delivery {
		d, _, err := Accept(AcceptSpec{ID: "r1", Tenant: "t", Channel: "webhook", Recipient: "https://x",
			Payload: json.RawMessage(`{}`), Priority: PriorityNormal, MaxAttempts: maxAttempts}, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []func() ([]Event, error){
			func() ([]Event, error) { return d.Queue(now) },
			func() ([]Event, error) { return d.StartAttempt("webhook", now) },
			func() ([]Event, error) {
				return d.RecordOutcome(1, Outcome{Kind: OutcomeUnknown}, policy, now, 0)
			},
		} {
			if _, err := step(); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	cases := []struct {
		kind        OutcomeKind
		maxAttempts int
		want        State
		event       EventType
	}{
		{OutcomeDelivered, 2, StateDelivered, EventReconciledDelivered},
		{OutcomePermanent, 2, StateDead, EventReconciledDead},
		{OutcomeTransient, 2, StateRetrying, EventReconciledRetry},
		{OutcomeTransient, 1, StateDead, EventReconciledDead},
	}
	for _, c := range cases {
		d := unknownAt(t, c.maxAttempts)
		events, err := d.Reconcile(Outcome{Kind: c.kind, StatusCode: 200}, "provider log line 42", "test", policy, now, 0.5)
		if err != nil {
			t.Fatalf("%s: %v", c.kind, err)
		}
		if d.State() != c.want || events[0].Type != c.event || events[0].Key != "r1/attempt/1/reconciled" {
			t.Fatalf("%s (max %d): state %s event %s key %s", c.kind, c.maxAttempts, d.State(), events[0].Type, events[0].Key)
		}
	}
	d := unknownAt(t, 2)
	if _, err := d.Reconcile(Outcome{Kind: OutcomeUnknown}, "", "", policy, now, 0); err == nil {
		t.Fatal("an unknown outcome must not resolve an unknown outcome")
	}
	d, _, _ = Accept(AcceptSpec{ID: "r2", Tenant: "t", Channel: "webhook", Recipient: "https://x",
		Payload: json.RawMessage(`{}`), Priority: PriorityNormal, MaxAttempts: 2}, now)
	if _, err := d.Reconcile(Outcome{Kind: OutcomeDelivered}, "e", "", policy, now, 0); !errors.Is(err, ErrNotUnknown) {
		t.Fatalf("reconciling an accepted delivery: %v", err)
	}
}

// TestFirstQueuedIsQueueAfterAccept: the event a writer records without loading the stream is
// exactly the one Queue records on a freshly accepted delivery.
func TestFirstQueuedIsQueueAfterAccept(t *testing.T) {
	t.Parallel()
	s := accept(t, validSpec())
	at := testNow.Add(time.Second)
	queued, err := s.d.Queue(at)
	if err != nil || len(queued) != 1 {
		t.Fatalf("Queue: %v, %d events", err, len(queued))
	}
	got, want := FirstQueued(s.d.ID(), s.d.Tenant(), at), queued[0]
	if got.DeliveryID != want.DeliveryID || got.Tenant != want.Tenant || got.Version != want.Version ||
		got.Type != want.Type || got.Key != want.Key || string(got.Data) != string(want.Data) ||
		!got.RecordedAt.Equal(want.RecordedAt) {
		t.Fatalf("FirstQueued = %+v, want %+v", got, want)
	}
	if _, err := Rehydrate(append(s.events, got)); err != nil {
		t.Fatalf("accepted + FirstQueued does not fold: %v", err)
	}
}

// TestReplayOpensANewCycle: a dead delivery replayed is queued for the attempt after its last,
// with the full number of attempts again; a second death and replay opens the next cycle under
// another key; anything but a dead delivery refuses.
func TestReplayOpensANewCycle(t *testing.T) {
	t.Parallel()
	policy := RetryPolicy{Strategy: Exponential{Base: time.Second, Cap: time.Minute}, MaxAttempts: 2}
	spec := validSpec()
	spec.MaxAttempts = 2
	s := processing(t, spec)
	if _, err := s.d.Replay("too early", testNow); !errors.Is(err, ErrNotDead) {
		t.Fatalf("replay of a processing delivery: %v, want ErrNotDead", err)
	}
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomePermanent, StatusCode: 410}, policy, testNow, 0))

	events := s.add(t)(s.d.Replay("receiver fixed", testNow))
	if events[0].Type != EventReplayed || events[0].Key != KeyReplayed(spec.ID, 1) {
		t.Fatalf("event (%s, %q), want (%s, %q)", events[0].Type, events[0].Key, EventReplayed, KeyReplayed(spec.ID, 1))
	}
	if s.d.State() != StateQueued || s.d.Attempt() != 2 || s.d.AttemptsInCycle() != 1 || s.d.LastResult() != nil {
		t.Fatalf("after replay: state %s attempt %d in cycle %d result %+v; want queued, 2, 1, none",
			s.d.State(), s.d.Attempt(), s.d.AttemptsInCycle(), s.d.LastResult())
	}
	if _, err := s.d.Replay("again", testNow); !errors.Is(err, ErrNotDead) {
		t.Fatalf("second replay while queued: %v, want ErrNotDead", err)
	}

	// The new cycle has both attempts: one transient failure retries instead of dying.
	s.add(t)(s.d.StartAttempt("webhook", testNow))
	s.add(t)(s.d.RecordOutcome(2, Outcome{Kind: OutcomeTransient}, policy, testNow, 0))
	if s.d.State() != StateRetrying {
		t.Fatalf("first failure of the new cycle: state %s, want retrying", s.d.State())
	}
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("webhook", testNow))
	s.add(t)(s.d.RecordOutcome(3, Outcome{Kind: OutcomeTransient}, policy, testNow, 0))
	if s.d.State() != StateDead || !s.d.LastResult().Exhausted {
		t.Fatalf("second failure of the new cycle: state %s, want dead and exhausted", s.d.State())
	}
	events = s.add(t)(s.d.Replay("", testNow))
	if events[0].Key != KeyReplayed(spec.ID, 2) || s.d.Attempt() != 4 {
		t.Fatalf("second replay: key %q attempt %d, want %q and 4", events[0].Key, s.d.Attempt(), KeyReplayed(spec.ID, 2))
	}
	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatalf("Rehydrate: %v", err)
	}
	assertSameDelivery(t, r, s.d)
}
