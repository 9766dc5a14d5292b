package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/domain"
)

// TestUnanswered: the line every adapter's call without an answer is judged by: written means
// unknown and never NotSent; not written means transient and NotSent; the caller's end is never
// the provider's fault.
func TestUnanswered(t *testing.T) {
	for _, tt := range []struct {
		written, callerGone bool
		want                provider.Verdict
	}{
		{false, false, provider.Verdict{Kind: domain.OutcomeTransient, NotSent: true, ProviderFault: true}},
		{false, true, provider.Verdict{Kind: domain.OutcomeTransient, NotSent: true}},
		{true, false, provider.Verdict{Kind: domain.OutcomeUnknown, ProviderFault: true}},
		{true, true, provider.Verdict{Kind: domain.OutcomeUnknown}},
	} {
		if got := provider.Unanswered(tt.written, tt.callerGone); got != tt.want {
			t.Errorf("Unanswered(written=%t, callerGone=%t) = %+v, want %+v", tt.written, tt.callerGone, got, tt.want)
		}
	}
}

// TestMarkKeepsNotSentToTransient: a verdict's NotSent never reaches an outcome that is not
// transient, whatever built it: only a call that cannot have reached the provider may fail over.
func TestMarkKeepsNotSentToTransient(t *testing.T) {
	v := provider.Verdict{NotSent: true, ProviderFault: true}
	for _, kind := range []domain.OutcomeKind{domain.OutcomeUnknown, domain.OutcomePermanent, domain.OutcomeDelivered} {
		if o := v.Mark(domain.Outcome{Kind: kind}); o.NotSent || !o.ProviderFault {
			t.Errorf("Mark on %s: NotSent=%t ProviderFault=%t, want false and true", kind, o.NotSent, o.ProviderFault)
		}
	}
	if o := v.Mark(domain.Outcome{Kind: domain.OutcomeTransient}); !o.NotSent {
		t.Error("Mark on transient dropped NotSent")
	}
}

// TestAnswered: 5xx and 408 count against the provider, a throttle and a refusal do not.
func TestAnswered(t *testing.T) {
	for code, want := range map[int]provider.Verdict{
		200: {Kind: domain.OutcomeDelivered},
		429: {Kind: domain.OutcomeTransient},
		425: {Kind: domain.OutcomeTransient},
		408: {Kind: domain.OutcomeTransient, ProviderFault: true},
		503: {Kind: domain.OutcomeTransient, ProviderFault: true},
		400: {Kind: domain.OutcomePermanent},
		302: {Kind: domain.OutcomePermanent},
	} {
		if got := provider.Answered(code); got != want {
			t.Errorf("Answered(%d) = %+v, want %+v", code, got, want)
		}
	}
}

// TestRetryAfterCapsAtTheGivenBound: each adapter caps a peer's wait at its own bound.
func TestRetryAfterCapsAtTheGivenBound(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		v    string
		want time.Duration
	}{
		{"7", 7 * time.Second}, {"7200", time.Hour}, {"99999999999999999999", time.Hour}, {"-1", 0}, {"", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
	} {
		if got := provider.RetryAfter(tt.v, now, time.Hour); got != tt.want {
			t.Errorf("RetryAfter(%q) = %s, want %s", tt.v, got, tt.want)
		}
	}
}

// TestCheckBaseURL: every fixed API's base URL is refused the same way, without repeating it.
func TestCheckBaseURL(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://api.example.com":         true,
		"http://127.0.0.1:8080/prefix":    true,
		"ftp://api.example.com":           false,
		"https://":                        false,
		"https://user:pw@api.example.com": false,
		"https://api.example.com/?a=1":    false,
		"https://api.example.com:":        false,
	} {
		err := provider.CheckBaseURL(raw, "the keys")
		if (err == nil) != ok {
			t.Errorf("CheckBaseURL(%q) = %v, want ok=%t", raw, err, ok)
		}
	}
}
