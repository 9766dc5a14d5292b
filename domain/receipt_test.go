package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// collect keeps whatever events a method produced, failing on an error.
func (s *stream) collect(t *testing.T) func([]Event, error) []Event {
	t.Helper()
	return func(events []Event, err error) []Event {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		s.events = append(s.events, events...)
		return events
	}
}

// types lists the types of events.
func types(events []Event) []EventType {
	var out []EventType
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}

// smsAccepted drives a fresh delivery to an attempt the provider accepted as SM1.
func smsAccepted(t *testing.T, maxAttempts int) *stream {
	t.Helper()
	spec := validSpec()
	spec.Channel, spec.Recipient, spec.MaxAttempts = "sms", "+15005550006", maxAttempts
	s := accept(t, spec)
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("twilio", testNow))
	s.add(t)(s.d.RecordOutcome(s.d.Attempt(), Outcome{Kind: OutcomeAccepted, Provider: "twilio",
		ProviderOperationID: "SM1", StatusCode: 201, ProviderCode: "queued",
		ReceiptTimeout: time.Minute, ReceiptMaxWait: time.Hour}, DefaultRetryPolicy(), testNow, 0))
	return s
}

func rehydrated(t *testing.T, s *stream) *Delivery {
	t.Helper()
	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatalf("Rehydrate: %v", err)
	}
	assertSameDelivery(t, r, s.d)
	if !reflect.DeepEqual(r.Awaiting(), s.d.Awaiting()) {
		t.Errorf("rehydrated Awaiting %+v, live %+v", r.Awaiting(), s.d.Awaiting())
	}
	return r
}

func TestAcceptedByProviderStaysProcessingWithDeadlines(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	if s.d.State() != StateProcessing {
		t.Fatalf("state %q, want processing", s.d.State())
	}
	acc := s.d.Awaiting()
	if acc == nil || acc.Provider != "twilio" || acc.ProviderOperationID != "SM1" || acc.Attempt != 1 ||
		!acc.CheckAt.Equal(testNow.Add(time.Minute)) || !acc.GiveUpAt.Equal(testNow.Add(time.Hour)) {
		t.Fatalf("Awaiting() = %+v", acc)
	}
	if e := s.events[len(s.events)-1]; e.Type != EventProviderAccepted || e.Key != "d-1/attempt/1/accepted" {
		t.Fatalf("event %s key %s", e.Type, e.Key)
	}
	rehydrated(t, s)
	// The provider took it once: a second acceptance of the same attempt is stale.
	if _, err := s.d.RecordOutcome(1, Outcome{Kind: OutcomeAccepted, Provider: "vonage"}, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("second acceptance: %v, want ErrStaleAttempt", err)
	}
	// Without windows the defaults apply.
	spec := validSpec()
	spec.ID = "d-2"
	d := processing(t, spec).d
	if _, err := d.RecordOutcome(1, Outcome{Kind: OutcomeAccepted, Provider: "p", ProviderOperationID: "x"}, DefaultRetryPolicy(), testNow, 0); err != nil {
		t.Fatal(err)
	}
	if !d.Awaiting().CheckAt.Equal(testNow.Add(DefaultReceiptTimeout)) || !d.Awaiting().GiveUpAt.Equal(testNow.Add(DefaultReceiptMaxWait)) {
		t.Fatalf("default windows: %+v", d.Awaiting())
	}
}

func TestReceiptDecidesTheAcceptedAttempt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		status    string
		attempts  int
		want      State
		wantTypes []EventType
	}{
		{"delivered", ReceiptDelivered, 3, StateDelivered, []EventType{EventReceiptRecorded, EventDelivered}},
		{"failed for good", ReceiptFailed, 3, StateDead, []EventType{EventReceiptRecorded, EventDeadLettered}},
		{"retry with attempts left", ReceiptRetry, 3, StateRetrying, []EventType{EventReceiptRecorded, EventRetryScheduled}},
		{"retry on the last attempt", ReceiptRetry, 1, StateDead, []EventType{EventReceiptRecorded, EventDeadLettered}},
		{"pending changes nothing", ReceiptPending, 3, StateProcessing, []EventType{EventReceiptRecorded}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := smsAccepted(t, c.attempts)
			events := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1",
				Status: c.status, ProviderStatus: "x", Code: "30003", Source: "receipt", At: testNow}, DefaultRetryPolicy(), testNow, 0))
			if !reflect.DeepEqual(types(events), c.wantTypes) || s.d.State() != c.want {
				t.Fatalf("events %v state %q, want %v %q", types(events), s.d.State(), c.wantTypes, c.want)
			}
			if len(events) == 2 {
				var res AttemptResult
				if err := json.Unmarshal(events[1].Data, &res); err != nil {
					t.Fatal(err)
				}
				if res.Source != "receipt" || res.Provider != "twilio" || res.ProviderOperationID != "SM1" || res.StatusCode != 201 {
					t.Errorf("deciding outcome %+v: want source receipt, provider twilio, SM1, the call's 201", res)
				}
				if s.d.Awaiting() != nil {
					t.Errorf("decided attempt still awaiting: %+v", s.d.Awaiting())
				}
			} else if s.d.Awaiting() == nil {
				t.Errorf("a pending receipt ended the wait")
			}
			rehydrated(t, s)
		})
	}
}

func TestSameReceiptTwiceIsRecordedOnce(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	w := ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptPending, ProviderStatus: "sent", Source: "receipt"}
	s.collect(t)(s.d.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0))
	if _, err := s.d.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptSeen) {
		t.Fatalf("same receipt again: %v, want ErrReceiptSeen", err)
	}
	r := rehydrated(t, s)
	if _, err := r.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptSeen) {
		t.Fatalf("same receipt after rehydrate: %v, want ErrReceiptSeen", err)
	}
	// Lookups that find the message on its way are each recorded, with when to ask again.
	for n := 1; n <= 2; n++ {
		next := testNow.Add(time.Duration(n) * time.Minute)
		events := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1",
			Status: ReceiptPending, ProviderStatus: "sent", Source: "lookup", NextCheck: next}, DefaultRetryPolicy(), testNow, 0))
		var data ReceiptData
		_ = json.Unmarshal(events[0].Data, &data)
		if events[0].Key != KeyLookup("d-1", 1, n) || data.NextCheckAt == nil || !data.NextCheckAt.Equal(next) {
			t.Fatalf("lookup %d: key %s data %+v", n, events[0].Key, data)
		}
	}
	r = rehydrated(t, s)
	events, err := r.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptPending,
		ProviderStatus: "sent", Source: "lookup"}, DefaultRetryPolicy(), testNow, 0)
	if err != nil || events[0].Key != KeyLookup("d-1", 1, 3) {
		t.Fatalf("third lookup after rehydrate: %v %v", events, err)
	}
}

func TestReceiptAfterTheEndIsEvidenceOnly(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptDelivered,
		ProviderStatus: "delivered", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	version := s.d.Version()
	events := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptFailed,
		ProviderStatus: "undelivered", Code: "30003", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	if len(events) != 1 || events[0].Type != EventReceiptRecorded || s.d.State() != StateDelivered || s.d.Version() != version+1 {
		t.Fatalf("late receipt: %v state %q", types(events), s.d.State())
	}
	var data ReceiptData
	_ = json.Unmarshal(events[0].Data, &data)
	if data.Evidence == "" {
		t.Errorf("a receipt that changes nothing says why: %+v", data)
	}
	// A lookup's word about another message of the provider changes nothing either.
	o := smsAccepted(t, 3)
	events = o.collect(t)(o.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM-other", Status: ReceiptDelivered,
		Source: "lookup"}, DefaultRetryPolicy(), testNow, 0))
	if len(events) != 1 || o.d.State() != StateProcessing || o.d.Awaiting() == nil {
		t.Fatalf("lookup for another message: %v state %q", types(events), o.d.State())
	}
	rehydrated(t, o)
}

func TestGiveUpWaitingIsUnknownAndAReceiptStillResolves(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	policy := DefaultRetryPolicy()
	policy.RetryUnknown = true // never a resend of a message the provider took
	events := s.collect(t)(s.d.GiveUpWaiting("no receipt within 1h", policy, testNow))
	if len(events) != 1 || events[0].Type != EventOutcomeUnknown || s.d.State() != StateUnknown {
		t.Fatalf("give up: %v state %q", types(events), s.d.State())
	}
	if res := s.d.LastResult(); res.Source != "deadline" || res.Provider != "twilio" || res.ProviderOperationID != "SM1" || res.Error == "" {
		t.Fatalf("unknown result %+v", res)
	}
	if _, err := s.d.GiveUpWaiting("again", policy, testNow); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("second give-up: %v", err)
	}
	// The provider's late word resolves the unknown outcome, with itself as evidence.
	events = s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptDelivered,
		ProviderStatus: "delivered", Source: "lookup"}, policy, testNow, 0))
	if !reflect.DeepEqual(types(events), []EventType{EventReceiptRecorded, EventReconciledDelivered}) || s.d.State() != StateDelivered {
		t.Fatalf("late word: %v state %q", types(events), s.d.State())
	}
	var res Resolution
	_ = json.Unmarshal(events[1].Data, &res)
	if res.Actor != "lookup" || res.Evidence == "" {
		t.Fatalf("resolution %+v", res)
	}
	rehydrated(t, s)
}

func TestReceiptResolvesAnUnknownCallOfTheSameProvider(t *testing.T) {
	t.Parallel()
	unknown := func(t *testing.T) *stream {
		spec := validSpec()
		spec.Channel = "sms"
		s := processing(t, spec)
		s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeUnknown, Provider: "twilio", Err: "timeout after write"}, DefaultRetryPolicy(), testNow, 0))
		return s
	}
	s := unknown(t)
	events := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM9", Status: ReceiptNotFound,
		Source: "lookup"}, DefaultRetryPolicy(), testNow, 0))
	if !reflect.DeepEqual(types(events), []EventType{EventReceiptRecorded, EventReconciledRetry}) || s.d.State() != StateRetrying {
		t.Fatalf("no such message: %v state %q", types(events), s.d.State())
	}
	// Another provider's word is not about this call; a pending word resolves nothing.
	for _, w := range []ReceiptWord{
		{Provider: "vonage", ProviderOperationID: "V1", Status: ReceiptDelivered, Source: "lookup"},
		{Provider: "twilio", ProviderOperationID: "SM9", Status: ReceiptPending, Source: "lookup"},
	} {
		s := unknown(t)
		events := s.collect(t)(s.d.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0))
		if len(events) != 1 || s.d.State() != StateUnknown {
			t.Fatalf("%+v: %v state %q", w, types(events), s.d.State())
		}
	}
}

func TestRetryUnknownSchedulesAPossibleDuplicate(t *testing.T) {
	t.Parallel()
	policy := DefaultRetryPolicy()
	policy.RetryUnknown = true
	s := processing(t, validSpec())
	events := s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeUnknown, Err: "timeout"}, policy, testNow, 0))
	res := s.d.LastResult()
	if events[0].Type != EventRetryScheduled || s.d.State() != StateRetrying || !res.PossibleDuplicate || res.Class != ClassUnknown || res.NextAttemptAt == nil {
		t.Fatalf("unknown with retry: %s state %q result %+v", events[0].Type, s.d.State(), res)
	}
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("webhook", testNow))
	s.add(t)(s.d.RecordOutcome(2, Outcome{Kind: OutcomeUnknown}, policy, testNow, 0))
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("webhook", testNow))
	events = s.add(t)(s.d.RecordOutcome(3, Outcome{Kind: OutcomeUnknown}, policy, testNow, 0))
	if events[0].Type != EventDeadLettered || !s.d.LastResult().Exhausted {
		t.Fatalf("unknown on the last attempt with retry: %s %+v", events[0].Type, s.d.LastResult())
	}
	rehydrated(t, s)
}

func TestReceiptAheadOfTheAcceptanceIsRefused(t *testing.T) {
	t.Parallel()
	spec := validSpec()
	spec.Channel = "sms"
	s := processing(t, spec)
	version := s.d.Version()
	if _, err := s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptDelivered,
		Source: "lookup"}, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptEarly) {
		t.Fatalf("lookup while the call is in flight: %v, want ErrReceiptEarly", err)
	}
	// A callback cannot find the delivery before the acceptance is recorded, and is refused if
	// it names it anyway.
	if _, err := s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptDelivered,
		Source: "receipt"}, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptForeign) {
		t.Fatalf("callback while the call is in flight: %v, want ErrReceiptForeign", err)
	}
	if s.d.Version() != version {
		t.Fatalf("a refused receipt recorded something")
	}
}

// TestLateReceiptOfAnEarlierAttemptIsEvidenceDuringACall: the first attempt's message failed
// for now (a receipt said retry) and the second attempt's call is in flight when the provider
// repeats its word about the first message: that cannot be the acceptance the call waits for, so
// it is recorded as evidence at once and changes nothing, rather than refused until the call ends.
func TestLateReceiptOfAnEarlierAttemptIsEvidenceDuringACall(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptRetry,
		ProviderStatus: "undelivered", Code: "30003", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	if s.d.State() != StateRetrying {
		t.Fatalf("after a retry receipt: %s, want retrying", s.d.State())
	}
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("twilio", testNow))
	version := s.d.Version()
	late := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptFailed,
		ProviderStatus: "failed", Code: "30003", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	if got := types(late); len(got) != 1 || got[0] != EventReceiptRecorded {
		t.Fatalf("late word about SM1 recorded %v, want the receipt alone", got)
	}
	if s.d.State() != StateProcessing || s.d.Version() != version+1 {
		t.Fatalf("after the late word: %s v%d, want processing at v%d", s.d.State(), s.d.Version(), version+1)
	}
	var data ReceiptData
	_ = json.Unmarshal(late[0].Data, &data)
	if data.Evidence == "" {
		t.Errorf("late word %+v, want evidence saying it changes nothing", data)
	}
	// A lookup's word about another message while the call is in flight may be the call's own
	// acceptance.
	if _, err := s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM2", Status: ReceiptDelivered,
		Source: "lookup"}, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptEarly) {
		t.Fatalf("word about SM2 during the call: %v, want ErrReceiptEarly", err)
	}
	rehydrated(t, s)
}

func TestFailOverNamesTheProviderCalled(t *testing.T) {
	t.Parallel()
	spec := validSpec()
	spec.Channel = "sms"
	s := accept(t, spec)
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("twilio", testNow))
	if s.d.Calling() != "twilio" {
		t.Fatalf("calling %q after the start", s.d.Calling())
	}
	if _, err := s.d.FailOver("vonage", "other", "refused", testNow); !errors.Is(err, ErrStaleAttempt) {
		t.Fatalf("fail over from a provider not called: %v", err)
	}
	events := s.add(t)(s.d.FailOver("twilio", "vonage", "connection refused", testNow))
	if events[0].Key != KeyFailedOver("d-1", 1, 1) || s.d.Calling() != "vonage" || s.d.State() != StateProcessing {
		t.Fatalf("failover %s: calling %q state %q", events[0].Key, s.d.Calling(), s.d.State())
	}
	r := rehydrated(t, s)
	if r.Calling() != "vonage" {
		t.Fatalf("rehydrated calling %q", r.Calling())
	}
	events = s.add(t)(s.d.FailOver("vonage", "third", "dns", testNow))
	if events[0].Key != KeyFailedOver("d-1", 1, 2) {
		t.Fatalf("second failover key %s", events[0].Key)
	}
}

func TestReplayOfAnUnknownNeedsToBeAskedFor(t *testing.T) {
	t.Parallel()
	s := processing(t, validSpec())
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeUnknown, Err: "timeout"}, DefaultRetryPolicy(), testNow, 0))
	if _, err := s.d.Replay("plain", testNow); !errors.Is(err, ErrNotDead) {
		t.Fatalf("plain replay of an unknown: %v", err)
	}
	events := s.add(t)(s.d.ReplayAs(ReplayAsk{Reason: "the receiver dedupes", Actor: "tenant:acme", Unknown: true}, testNow))
	var r Replayed
	_ = json.Unmarshal(events[0].Data, &r)
	if s.d.State() != StateQueued || !r.FromUnknown || r.Actor != "tenant:acme" || r.Cycle != 1 || r.Attempt != 2 {
		t.Fatalf("state %q, replayed %+v", s.d.State(), r)
	}
	rehydrated(t, s)
}

// TestCallbackAboutAMessageNotGivenIsRefused (issue 23, row 1): a callback may only speak of a
// message the history records its provider accepting for the delivery. One about any other
// message (another provider's, or an id the delivery never got) is refused and records nothing,
// whatever the state; one about an earlier attempt's message does not resolve a later attempt
// whose call timed out before the provider named its message (only a lookup, the reconciler's
// own question, may match that call by what was sent).
func TestCallbackAboutAMessageNotGivenIsRefused(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	version := s.d.Version()
	for _, w := range []ReceiptWord{
		{Provider: "twilio", ProviderOperationID: "SM-other", Status: ReceiptFailed, ProviderStatus: "failed"},
		{Provider: "vonage", ProviderOperationID: "SM1", Status: ReceiptDelivered, ProviderStatus: "delivered"},
	} {
		w.Source = "receipt"
		if _, err := s.d.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptForeign) {
			t.Fatalf("callback %+v: %v, want ErrReceiptForeign", w, err)
		}
	}
	if s.d.Version() != version || s.d.State() != StateProcessing {
		t.Fatalf("refused callbacks left v%d %s, want v%d processing", s.d.Version(), s.d.State(), version)
	}

	// Attempt 1's message SM1 failed for now; attempt 2's call timed out unnamed.
	s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptRetry,
		ProviderStatus: "undelivered", Code: "30003", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	s.add(t)(s.d.Queue(testNow))
	s.add(t)(s.d.StartAttempt("twilio", testNow))
	s.add(t)(s.d.RecordOutcome(2, Outcome{Kind: OutcomeUnknown, Provider: "twilio", Err: "timeout after write"}, DefaultRetryPolicy(), testNow, 0))
	events := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptDelivered,
		ProviderStatus: "delivered", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	if len(events) != 1 || s.d.State() != StateUnknown {
		t.Fatalf("callback about attempt 1's message on attempt 2's unknown: %v state %s, want evidence alone", types(events), s.d.State())
	}
	r := rehydrated(t, s)
	if _, err := r.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM9", Status: ReceiptDelivered,
		ProviderStatus: "delivered", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptForeign) {
		t.Fatalf("callback about an unnamed message after rehydrate: %v, want ErrReceiptForeign", err)
	}
}

// TestKnownStatusAgainRecordsNothing (issue 23, rows 1 and 2): a status of a message said again
// with another code records nothing, live and after rehydrating; invented statuses that decide
// nothing are recorded up to maxCallbackWords; a word that decides is recorded after them all.
func TestKnownStatusAgainRecordsNothing(t *testing.T) {
	t.Parallel()
	s := smsAccepted(t, 3)
	sent := func(code string) ReceiptWord {
		return ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptPending, ProviderStatus: "sent", Code: code, Source: "receipt"}
	}
	s.collect(t)(s.d.RecordReceipt(sent("30001"), DefaultRetryPolicy(), testNow, 0))
	if _, err := s.d.RecordReceipt(sent("30002"), DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptSeen) {
		t.Fatalf("sent again with another code: %v, want ErrReceiptSeen", err)
	}
	if _, err := rehydrated(t, s).RecordReceipt(sent(""), DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptSeen) {
		t.Fatalf("sent again after rehydrate: %v, want ErrReceiptSeen", err)
	}
	for i := 1; i < maxCallbackWords; i++ {
		w := sent("")
		w.ProviderStatus = fmt.Sprintf("invented%c", 'a'+i)
		s.collect(t)(s.d.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0))
	}
	w := sent("")
	w.ProviderStatus = "one-too-many"
	if _, err := s.d.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptSeen) {
		t.Fatalf("word %d that decides nothing: %v, want ErrReceiptSeen", maxCallbackWords+1, err)
	}
	r := rehydrated(t, s)
	if _, err := r.RecordReceipt(w, DefaultRetryPolicy(), testNow, 0); !errors.Is(err, ErrReceiptSeen) {
		t.Fatalf("word %d after rehydrate: %v, want ErrReceiptSeen", maxCallbackWords+1, err)
	}
	events := s.collect(t)(s.d.RecordReceipt(ReceiptWord{Provider: "twilio", ProviderOperationID: "SM1", Status: ReceiptDelivered,
		ProviderStatus: "delivered", Source: "receipt"}, DefaultRetryPolicy(), testNow, 0))
	if !reflect.DeepEqual(types(events), []EventType{EventReceiptRecorded, EventDelivered}) {
		t.Fatalf("the deciding word after %d others: %v", maxCallbackWords, types(events))
	}
}
