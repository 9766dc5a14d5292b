package domain

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestReplayAskedOfAVersionIsOnePerDeath: a replay asked of the delivery as it was at a dead
// version is recorded once; asked of that version again (by another job, or a request that
// lost the race) it is refused with the replay that took it, even after the delivery died
// again, and the replay names the version it replays and its job. Asked of the new death, it
// is recorded.
func TestReplayAskedOfAVersionIsOnePerDeath(t *testing.T) {
	t.Parallel()
	policy := RetryPolicy{MaxAttempts: 1}
	s := processing(t, validSpec())
	s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomePermanent}, policy, testNow, 0))
	dead := s.d.Version()

	events := s.add(t)(s.d.ReplayAs(ReplayAsk{Reason: "fixed", Actor: "ops", Of: dead, Job: "job-a"}, testNow))
	var data Replayed
	if err := json.Unmarshal(events[0].Data, &data); err != nil || data.Of != dead || data.Job != "job-a" {
		t.Fatalf("replayed %s (%v), want of_version %d and job job-a", events[0].Data, err, dead)
	}
	s.add(t)(s.d.StartAttempt("webhook", testNow))
	s.add(t)(s.d.RecordOutcome(2, Outcome{Kind: OutcomePermanent}, policy, testNow, 0))

	_, err := s.d.ReplayAs(ReplayAsk{Of: dead, Job: "job-b"}, testNow)
	var already *AlreadyReplayedError
	if !errors.As(err, &already) || !errors.Is(err, ErrAlreadyReplayed) || already.Version != dead+1 || already.By() != "job job-a" {
		t.Fatalf("second replay of version %d: %v, want AlreadyReplayedError by job job-a at %d", dead, err, dead+1)
	}
	if _, err := s.d.ReplayAs(ReplayAsk{Of: s.d.Version()}, testNow); err != nil {
		t.Fatalf("replay of the second death: %v", err)
	}
	r, err := Rehydrate(s.events)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReplayAs(ReplayAsk{Of: dead}, testNow); !errors.Is(err, ErrAlreadyReplayed) {
		t.Fatalf("rehydrated: replay of version %d: %v, want ErrAlreadyReplayed", dead, err)
	}
}
