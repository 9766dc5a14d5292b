package email

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/deliveryledger/ledger/domain"
)

// TestEndOfDataWithoutReply: at go-mail's ErrSMTPDataClose without a reply code, whether a
// write failed draws the line between transient and unknown (go-mail's DataCloser.Close
// discards the write error itself).
func TestEndOfDataWithoutReply(t *testing.T) {
	t.Parallel()
	s := newSender(t, "127.0.0.1:25", Config{})
	for _, writeFailed := range []bool{false, true} {
		now := time.Now()
		a := &attempt{s: s, ctx: context.Background(), start: now, deadline: now.Add(time.Hour), conn: &attemptConn{}}
		a.conn.writeFailed.Store(writeFailed)
		o := a.sendOutcome(&mail.SendError{Reason: mail.ErrSMTPDataClose}, mail.NewMsg(), nil)
		want := domain.OutcomeUnknown
		if writeFailed {
			want = domain.OutcomeTransient
		}
		if o.Kind != want || o.StatusCode != 0 {
			t.Errorf("write failed %t: %s %d (%q), want %s without a code", writeFailed, o.Kind, o.StatusCode, o.Err, want)
		}
	}
}

// TestClean: no form of the password AUTH sends survives in an outcome's text, which stays one
// bounded line.
func TestClean(t *testing.T) {
	t.Parallel()
	s := newSender(t, "127.0.0.1:25", Config{Username: "ledger", Password: "hunter2-long"})
	for _, secret := range s.secrets {
		got := s.clean("504 5.5.4 Unrecognized: AUTH PLAIN " + secret + "\nsecond line")
		if strings.Contains(got, secret) || !strings.Contains(got, "[redacted]") || strings.Contains(got, "\n") {
			t.Errorf("clean kept %q or a line break: %q", secret, got)
		}
	}
	if got := s.clean(strings.Repeat("x", 2000)); len(got) > maxErrText+3 {
		t.Errorf("clean left %d bytes, want at most %d", len(got), maxErrText+3)
	}
}

func TestReplyText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`451 "4.7.1 Try again later"`:       "451 4.7.1 Try again later",
		`451 "4.7.1 Try again later", EOF`:  "451 4.7.1 Try again later, EOF",
		`550 "5.1.1 line one\nline two"`:    "550 5.1.1 line one\nline two",
		"451 4.7.1 Try again later":         "451 4.7.1 Try again later",
		"EOF":                               "EOF",
		"read tcp 127.0.0.1:1: i/o timeout": "read tcp 127.0.0.1:1: i/o timeout",
	} {
		if got := unquoteReply(in); got != want {
			t.Errorf("unquoteReply(%q) = %q, want %q", in, got, want)
		}
	}
	for _, tc := range []struct {
		code       int
		text, want string
	}{
		{451, "4.7.1 Greylisted", "4.7.1"},
		{250, "2.0.0 OK: queued as 1", "2.0.0"},
		{550, "4.7.1 class does not match", ""},
		{550, "User unknown 5.1.1", ""},
		{250, "OK", ""},
	} {
		if got := enhancedCode(tc.code, tc.text); got != tc.want {
			t.Errorf("enhancedCode(%d, %q) = %q, want %q", tc.code, tc.text, got, tc.want)
		}
	}
}
