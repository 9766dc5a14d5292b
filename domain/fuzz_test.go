package domain

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// fuzzMaxEvents bounds a fuzzed stream: every prefix is rehydrated again, so the work per input
// grows with the square of the length. 32 events hold several attempt cycles.
const fuzzMaxEvents = 32

// Faults a fuzzed event can carry, chosen by the event's second byte. Every other value of that
// byte is a well-formed event whose attempt number is the byte modulo 8, so random input yields
// mostly well-formed events and the fuzzer still reaches every fault.
const (
	faultDataNotJSON     = 0xFF // data is not JSON at all
	faultDataWrongType   = 0xFE // data is JSON, but a string where an object is expected
	faultVersionSkipped  = 0xFD // the version jumps by two
	faultVersionRepeated = 0xFC // the version repeats the previous one
)

// followTable, set on an event's first byte, picks the event among those the table allows in the
// current state; clear, the byte indexes domain.EventTypes plus one unknown type, which yields
// streams that break the table.
const followTable = 0x80

// fuzzUnknownType is a type no version of the ledger ever recorded.
const fuzzUnknownType EventType = "delivery.renamed"

var fuzzEpoch = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// fuzzStream turns fuzz input into a stream: two bytes per event, the first choosing its type,
// the second its data and version (see the fault constants). It also returns the index of the
// first event built with a fault of its own (a bad version or undecodable data), or -1.
func fuzzStream(input []byte) (events []Event, firstFault int) {
	firstFault = -1
	state := StateNone
	version := 0
	for i := 0; i+1 < len(input) && len(events) < fuzzMaxEvents; i += 2 {
		pick, variant := input[i], input[i+1]
		typ := pickType(state, pick)
		version++
		data := fuzzData(typ, int(variant%8))
		fault := true
		switch variant {
		case faultDataNotJSON:
			data = json.RawMessage(`{"attempt":`)
		case faultDataWrongType:
			data = json.RawMessage(`"attempt 1"`)
		case faultVersionSkipped:
			version++ // 1, 3, 4: the events after the gap follow on, so it is the only fault
		case faultVersionRepeated:
			version-- // 1, 2, 2, 3
		default:
			fault = false
		}
		if fault && firstFault < 0 {
			firstFault = len(events)
		}
		events = append(events, Event{
			DeliveryID: "d-fuzz",
			Tenant:     "acme",
			Version:    version,
			Type:       typ,
			Key:        "d-fuzz/" + string(typ),
			Data:       data,
			RecordedAt: fuzzEpoch.Add(time.Duration(len(events)) * time.Second),
		})
		if next, err := Next(state, typ); err == nil {
			state = next
		}
	}
	return events, firstFault
}

// pickType chooses an event type; see followTable.
func pickType(state State, pick byte) EventType {
	if pick&followTable != 0 {
		var allowed []EventType
		for _, typ := range EventTypes {
			if _, err := Next(state, typ); err == nil {
				allowed = append(allowed, typ)
			}
		}
		if len(allowed) > 0 {
			return allowed[int(pick&^followTable)%len(allowed)]
		}
	}
	i := int(pick&^followTable) % (len(EventTypes) + 1)
	if i == len(EventTypes) {
		return fuzzUnknownType
	}
	return EventTypes[i]
}

// fuzzData is well-formed data for an event type.
func fuzzData(typ EventType, attempt int) json.RawMessage {
	next := fuzzEpoch.Add(time.Minute)
	var v any
	switch typ {
	case EventAccepted:
		v = Accepted{NotificationID: "n-fuzz", Channel: "webhook", Recipient: "https://example.com/h",
			Payload: json.RawMessage(`{"n":1}`), Priority: PriorityNormal, MaxAttempts: attempt + 1, RequestKey: "k"}
	case EventQueued:
		v = Queued{Attempt: attempt}
	case EventDeferred:
		v = Deferred{Attempt: attempt, Reason: "rate limit", Until: next}
	case EventAttemptStarted:
		v = AttemptStarted{Attempt: attempt, Provider: "webhook-http"}
	case EventRetryScheduled:
		v = AttemptResult{Attempt: attempt, Class: ClassTransient, NextAttemptAt: &next}
	case EventDelivered, EventDeadLettered, EventOutcomeUnknown:
		v = AttemptResult{Attempt: attempt, StatusCode: 200 + attempt}
	case EventReconciledRetry:
		v = Resolution{Attempt: attempt, Evidence: "provider log", NextAttemptAt: &next}
	case EventReconciledDelivered, EventReconciledDead:
		v = Resolution{Attempt: attempt, Evidence: "provider log"}
	case EventReplayed:
		v = Replayed{Attempt: attempt + 1, Cycle: 2}
	default:
		return json.RawMessage(`{}`)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzRehydrate checks the event fold against the transition table. For any stream it either
// fails with an error that says why (a *TransitionError for an event the table does not allow in
// its state), or it succeeds, and then the stream follows the table, its versions are 1..n, the
// state is the fold of Next over the types, and every prefix rehydrates too. It never changes the
// stream it is given.
func FuzzRehydrate(f *testing.F) {
	const (
		accepted  = followTable | 0 // the only event allowed in none and in accepted...
		queued    = followTable | 0 // ...queued is the only one allowed in accepted and retrying
		deferred  = followTable | 0 // queued: deferred, attempt_started (the order of EventTypes)
		started   = followTable | 1
		delivered = followTable | 0 // processing: delivered, retry_scheduled, dead_lettered, unknown
		retry     = followTable | 1
		dead      = followTable | 2
		unknown   = followTable | 3
		replayed  = followTable | 0 // the only event allowed in dead
		recDead   = followTable | 1 // unknown: reconciled_delivered, reconciled_dead, reconciled_retry
		recRetry  = followTable | 2
		ok        = 0x01 // a well-formed event for attempt 1
	)
	for _, seed := range [][]byte{
		{},
		{accepted, ok},
		{accepted, ok, queued, ok, started, ok, delivered, ok},
		{accepted, ok, queued, ok, deferred, ok, deferred, 0x02, started, ok, retry, ok, queued, 0x02, started, 0x02, dead, 0x02, replayed, 0x03, queued, 0x03},
		{accepted, ok, queued, ok, started, ok, unknown, ok, recRetry, ok, queued, 0x02, started, 0x02, unknown, 0x02, recDead, 0x02, replayed, 0x03},
		// Broken streams: an illegal transition, an unknown type, a stream not opened by
		// accepted, a version gap, a repeated version, undecodable data.
		{accepted, ok, 4, ok},                                         // accepted → delivered
		{accepted, ok, byte(len(EventTypes)), ok},                     // unknown type
		{1, ok, started, ok},                                          // opened by queued
		{accepted, ok, queued, faultVersionSkipped, started, ok},      // versions 1, 3, 4
		{accepted, ok, queued, ok, started, faultVersionRepeated},     // versions 1, 2, 2
		{accepted, faultVersionRepeated},                              // starts at version 0
		{accepted, ok, queued, faultDataNotJSON, started, ok},         // truncated data
		{accepted, faultDataWrongType, queued, ok},                    // data not an object
		{accepted, ok, queued, ok, started, ok, delivered, ok, 1, ok}, // queued after delivered
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		events, firstFault := fuzzStream(input)
		before := cloneEvents(events)
		d, err := Rehydrate(events)
		if !reflect.DeepEqual(events, before) {
			t.Fatalf("Rehydrate changed its input")
		}

		// The reference: walk the table over the types, stopping at the first fault. At a faulty
		// event the version is judged first, then the transition, then the data, the order in
		// which Rehydrate checks them (TestRehydrateRefusesBrokenStreams relies on it too).
		state, version := StateNone, 0
		for i, e := range events {
			if e.Version != version+1 || i == firstFault {
				if err == nil {
					t.Fatalf("event %d (version %d after %d, fault %v) broke the stream, but Rehydrate succeeded",
						i, e.Version, version, i == firstFault)
				}
				if e.Version == version+1 {
					// Data is decoded only for an allowed transition, so a bad transition is
					// reported as such whatever the data.
					if _, nerr := Next(state, e.Type); nerr != nil {
						expectTransitionError(t, err, state, e.Type)
						return
					}
				}
				var terr *TransitionError
				if errors.As(err, &terr) {
					t.Fatalf("event %d has a bad version or data, but Rehydrate blames the transition: %v", i, err)
				}
				return
			}
			next, nerr := Next(state, e.Type)
			if nerr != nil {
				expectTransitionError(t, err, state, e.Type)
				return
			}
			state, version = next, e.Version
		}
		if len(events) == 0 {
			if err == nil || d != nil {
				t.Fatalf("Rehydrate of an empty stream = (%v, %v), want an error", d, err)
			}
			return
		}

		// A stream that follows the table.
		if err != nil || d == nil {
			t.Fatalf("Rehydrate of a stream that follows the table failed: %v", err)
		}
		last := events[len(events)-1]
		if d.State() != state || d.Version() != len(events) || d.Version() != last.Version {
			t.Fatalf("Rehydrate: state %q version %d, want %q and %d", d.State(), d.Version(), state, len(events))
		}
		if d.ID() != events[0].DeliveryID || d.Tenant() != events[0].Tenant {
			t.Fatalf("Rehydrate: delivery %q of %q, want %q of %q", d.ID(), d.Tenant(), events[0].DeliveryID, events[0].Tenant)
		}
		if !d.AcceptedAt().Equal(events[0].RecordedAt) || !d.UpdatedAt().Equal(last.RecordedAt) {
			t.Fatalf("Rehydrate: accepted at %s, updated at %s; want %s and %s",
				d.AcceptedAt(), d.UpdatedAt(), events[0].RecordedAt, last.RecordedAt)
		}
		state = StateNone
		for n := 1; n <= len(events); n++ {
			state, _ = Next(state, events[n-1].Type)
			p, err := Rehydrate(events[:n])
			if err != nil {
				t.Fatalf("the whole stream rehydrates, but its prefix of %d events does not: %v", n, err)
			}
			if p.State() != state || p.Version() != n {
				t.Fatalf("prefix of %d events: state %q version %d, want %q and %d", n, p.State(), p.Version(), state, n)
			}
		}
	})
}

// expectTransitionError fails the test unless err is a *TransitionError for (from, typ).
func expectTransitionError(t *testing.T, err error, from State, typ EventType) {
	t.Helper()
	var terr *TransitionError
	if !errors.As(err, &terr) {
		t.Fatalf("event %s in state %q is not allowed, but Rehydrate returned %v, want a *TransitionError", typ, from, err)
	}
	if terr.From != from || terr.Event != typ {
		t.Fatalf("TransitionError names (%q, %s), want (%q, %s)", terr.From, terr.Event, from, typ)
	}
}

func cloneEvents(events []Event) []Event {
	if events == nil {
		return nil
	}
	out := make([]Event, len(events))
	for i, e := range events {
		e.Data = append(json.RawMessage(nil), e.Data...)
		out[i] = e
	}
	return out
}
