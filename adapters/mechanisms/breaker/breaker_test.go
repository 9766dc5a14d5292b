package breaker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/mechanisms/breaker"
	"github.com/deliveryledger/ledger/commands"
)

func call(t *testing.T, r *breaker.Registry, res commands.BreakerResult) bool {
	t.Helper()
	done, _, ok := r.Allow("twilio")
	if ok {
		done(res)
	}
	return ok
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	t.Parallel()
	var changes []breaker.State
	r, err := breaker.New([]breaker.Provider{{Name: "twilio", Channel: "sms",
		Settings: breaker.Settings{Failures: 3, Cooldown: 80 * time.Millisecond}}},
		func(_ string, to breaker.State) { changes = append(changes, to) })
	if err != nil {
		t.Fatal(err)
	}
	// A per-recipient refusal is a success for the provider's health; ignored calls count not.
	for range 10 {
		call(t, r, commands.BreakerSuccess)
		call(t, r, commands.BreakerIgnore)
	}
	for i := range 2 {
		if !call(t, r, commands.BreakerFault) {
			t.Fatalf("fault %d refused while closed", i+1)
		}
	}
	call(t, r, commands.BreakerSuccess) // breaks the run of consecutive failures
	for range 3 {
		call(t, r, commands.BreakerFault)
	}
	if s := r.State("twilio"); s != breaker.Open {
		t.Fatalf("after 3 consecutive faults: %s, want open", s)
	}
	_, wait, ok := r.Allow("twilio")
	if ok || wait <= 0 || wait > 80*time.Millisecond {
		t.Fatalf("open circuit: ok %v, retry after %s", ok, wait)
	}
	time.Sleep(100 * time.Millisecond)
	// Half open: one probe goes, a second call waits for it.
	done, _, ok := r.Allow("twilio")
	if !ok || r.State("twilio") != breaker.HalfOpen {
		t.Fatalf("after the cool-down: probe ok %v, state %s", ok, r.State("twilio"))
	}
	if _, _, second := r.Allow("twilio"); second {
		t.Fatalf("a half-open circuit let a second call through beside its probe")
	}
	done(commands.BreakerFault)
	if s := r.State("twilio"); s != breaker.Open {
		t.Fatalf("failed probe: %s, want open again", s)
	}
	time.Sleep(100 * time.Millisecond)
	if !call(t, r, commands.BreakerSuccess) {
		t.Fatal("second probe refused")
	}
	if s := r.State("twilio"); s != breaker.Closed {
		t.Fatalf("successful probe: %s, want closed", s)
	}
	want := []breaker.State{breaker.Open, breaker.HalfOpen, breaker.Open, breaker.HalfOpen, breaker.Closed}
	if len(changes) != len(want) {
		t.Fatalf("state changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("state changes %v, want %v", changes, want)
		}
	}
}

func TestBreakerOpensOnErrorRate(t *testing.T) {
	t.Parallel()
	r, err := breaker.New([]breaker.Provider{{Name: "twilio", Settings: breaker.Settings{Failures: 100, ErrorRate: 0.5, MinRequests: 10}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		res := commands.BreakerSuccess
		if i%2 == 0 {
			res = commands.BreakerFault
		}
		call(t, r, res)
	}
	if s := r.State("twilio"); s != breaker.Closed {
		t.Fatalf("below min_requests: %s", s)
	}
	call(t, r, commands.BreakerSuccess) // 10 calls, 5 faults: not yet, the rate is checked on a failure
	call(t, r, commands.BreakerFault)   // 11 calls, 6 faults
	if s := r.State("twilio"); s != breaker.Open {
		t.Fatalf("6 of 11 failed: %s, want open", s)
	}
	if h := r.Snapshot(); len(h) != 1 || h[0].Provider != "twilio" || h[0].State != breaker.Open || h[0].Requests != 11 || h[0].Failures != 6 {
		t.Fatalf("snapshot %+v", h)
	}
}

func TestSettingsAreValidated(t *testing.T) {
	t.Parallel()
	_, err := breaker.New([]breaker.Provider{{Name: "p", Settings: breaker.Settings{ErrorRate: 1.5, Failures: -1}}}, nil)
	if err == nil {
		t.Fatal("bad settings accepted")
	}
	for _, want := range []string{"breaker.error_rate", "breaker.failures"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, _, ok := (&breaker.Registry{}).Allow("unknown"); !ok {
		t.Error("a provider without a breaker must be admitted")
	}
}
