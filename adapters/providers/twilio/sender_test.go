package twilio_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/domain"
)

func TestSenderContract(t *testing.T) {
	t.Parallel()
	s := newSender(t, twilio.Config{Provider: "twilio-eu", AccountSID: testAccount, AuthToken: testToken, From: testFrom})
	if got := s.Provider(); got != "twilio-eu" {
		t.Errorf("Provider() = %q, want the configured twilio-eu", got)
	}
	if s.Deduplicates() {
		t.Error("Deduplicates() = true, want false: the Messages API takes no idempotency key")
	}
	if printed := fmt.Sprintf("%v %+v %s", s, s, s); holdsToken(printed) {
		t.Errorf("printing the Sender shows its auth token: %s", printed)
	}
}

// TestSendAccepted: a 201 is an acceptance under the message's sid, with Twilio's status as the
// provider code; the fake got To, From, Body and StatusCallback, under the account's basic auth
// (it creates nothing for other credentials).
func TestSendAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)

	out := send(t, b.sender, workMessage(recipient, "Your code is 123456"))

	if out.Kind != domain.OutcomeAccepted {
		t.Fatalf("Kind = %s (%s), want accepted", out.Kind, out.Err)
	}
	got := b.fake.Messages()
	if len(got) != 1 {
		t.Fatalf("the fake created %d messages, want 1", len(got))
	}
	m := got[0]
	if out.ProviderOperationID != m.SID || !strings.HasPrefix(m.SID, "SM") || len(m.SID) != 34 {
		t.Errorf("ProviderOperationID = %q, fake's sid %q; want the same SM sid", out.ProviderOperationID, m.SID)
	}
	if out.StatusCode != http.StatusCreated || out.ProviderCode != "queued" || out.Provider != "twilio" {
		t.Errorf("outcome %+v, want HTTP 201, provider code queued, provider twilio", out)
	}
	if out.Err != "" || out.Class != "" || out.NotSent || out.ProviderFault || out.Latency <= 0 {
		t.Errorf("outcome %+v, want no error, class or marks, and a latency", out)
	}
	if m.To != recipient || m.From != testFrom || m.Body != "Your code is 123456" || m.StatusCallback != b.callbackURL {
		t.Errorf("the fake got %+v, want To %s, From %s, the text and StatusCallback %s", m, recipient, testFrom, b.callbackURL)
	}
}

// TestSendDeliveredOnAccept: with delivered_on: accept, the 201 is the delivery.
func TestSendDeliveredOnAccept(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *twilio.Config) { c.DeliveredOn = twilio.DeliveredOnAccept })

	out := send(t, b.sender, workMessage(recipient, "hi"))

	if out.Kind != domain.OutcomeDelivered || out.Class != "" || out.ProviderOperationID == "" {
		t.Errorf("outcome %+v, want delivered under the sid", out)
	}
}

// TestSendWithoutStatusCallback: no StatusCallback parameter when none is configured.
func TestSendWithoutStatusCallback(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *twilio.Config) { c.StatusCallback = "" })

	if out := send(t, b.sender, workMessage(recipient, "hi")); out.Kind != domain.OutcomeAccepted {
		t.Fatalf("Kind = %s (%s), want accepted", out.Kind, out.Err)
	}
	if m := b.fake.Messages(); len(m) != 1 || m[0].StatusCallback != "" {
		t.Errorf("the fake got %+v, want one message without StatusCallback", m)
	}
}

// TestSendClassifiesTwilioErrors: each error the fake answers as Twilio does becomes the
// outcome the classification gives, with Twilio's code and message recorded and nothing
// created.
func TestSendClassifiesTwilioErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		rule       twiliofake.ErrorRule
		token      string
		wantKind   domain.OutcomeKind
		wantFault  bool
		wantStatus int
		wantCode   string
		wantErrHas string
		// wantSuppress: the code is hard evidence against the number (suppressingAPICodes).
		wantSuppress bool
	}{
		{name: "21211 invalid number", rule: twiliofake.ErrorRule{Code: 21211, To: []string{recipient}},
			wantKind: domain.OutcomePermanent, wantStatus: 400, wantCode: "21211", wantErrHas: "is not a valid phone number", wantSuppress: true},
		{name: "21610 unsubscribed", rule: twiliofake.ErrorRule{Code: 21610},
			wantKind: domain.OutcomePermanent, wantStatus: 400, wantCode: "21610", wantErrHas: "unsubscribed recipient", wantSuppress: true},
		{name: "21614 not a mobile number", rule: twiliofake.ErrorRule{Code: 21614},
			wantKind: domain.OutcomePermanent, wantStatus: 400, wantCode: "21614", wantErrHas: "not a valid mobile number", wantSuppress: true},
		{name: "21612 not reachable from this sender", rule: twiliofake.ErrorRule{Code: 21612},
			wantKind: domain.OutcomePermanent, wantStatus: 400, wantCode: "21612"},
		{name: "21408 region not enabled", rule: twiliofake.ErrorRule{Code: 21408},
			wantKind: domain.OutcomePermanent, wantStatus: 400, wantCode: "21408", wantErrHas: "Permission to send an SMS"},
		{name: "20429 too many requests", rule: twiliofake.ErrorRule{Code: 20429, Calls: 1},
			wantKind: domain.OutcomeTransient, wantFault: true, wantStatus: 429, wantCode: "20429", wantErrHas: "Too Many Requests"},
		{name: "429 with another code", rule: twiliofake.ErrorRule{Code: 20001, Status: 429},
			wantKind: domain.OutcomeTransient, wantFault: true, wantStatus: 429, wantCode: "20001"},
		{name: "401 wrong credentials", token: otherToken,
			wantKind: domain.OutcomePermanent, wantFault: true, wantStatus: 401, wantCode: "20003", wantErrHas: "Authenticate"},
		{name: "500 internal error", rule: twiliofake.ErrorRule{Code: 20500, Status: 500},
			wantKind: domain.OutcomeUnknown, wantFault: true, wantStatus: 500, wantCode: "20500", wantErrHas: "may have created"},
		{name: "another 4xx", rule: twiliofake.ErrorRule{Code: 21620, Status: 400, Message: "Invalid media URL(s)"},
			wantKind: domain.OutcomePermanent, wantStatus: 400, wantCode: "21620", wantErrHas: "Invalid media URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *twilio.Config) {
				if tt.token != "" {
					c.AuthToken = tt.token
				}
			})
			if tt.rule.Code != 0 {
				b.fake.SetBehaviour(twiliofake.Behaviour{Errors: []twiliofake.ErrorRule{tt.rule}})
			}

			out := send(t, b.sender, workMessage(recipient, "Order 42 has shipped"))

			if out.Kind != tt.wantKind || out.Class != domain.ClassOf(tt.wantKind) {
				t.Fatalf("outcome = %s/%s (%s), want %s", out.Kind, out.Class, out.Err, tt.wantKind)
			}
			if out.Suppress != tt.wantSuppress {
				t.Errorf("Suppress = %v, want %v", out.Suppress, tt.wantSuppress)
			}
			if out.ProviderFault != tt.wantFault || out.NotSent {
				t.Errorf("ProviderFault = %v, NotSent = %v; want %v and false", out.ProviderFault, out.NotSent, tt.wantFault)
			}
			if out.StatusCode != tt.wantStatus || out.ProviderCode != tt.wantCode {
				t.Errorf("StatusCode %d, ProviderCode %q; want %d and Twilio's code %s", out.StatusCode, out.ProviderCode, tt.wantStatus, tt.wantCode)
			}
			if !strings.Contains(out.Err, tt.wantErrHas) || !strings.Contains(out.Err, tt.wantCode) {
				t.Errorf("Err = %q, want Twilio's code and message (%q)", out.Err, tt.wantErrHas)
			}
			if out.ProviderOperationID != "" {
				t.Errorf("ProviderOperationID = %q, want none without a message", out.ProviderOperationID)
			}
			if n := len(b.fake.Messages()); n != 0 {
				t.Errorf("the fake created %d messages, want 0", n)
			}
		})
	}
}

// TestSendAfterTooManyRequestsAccepted: the 429 covered one create; the retry goes through.
func TestSendAfterTooManyRequestsAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(twiliofake.Behaviour{Errors: []twiliofake.ErrorRule{{Code: 20429, Calls: 1}}})
	msg := workMessage(recipient, "hi")
	if out := send(t, b.sender, msg); out.Kind != domain.OutcomeTransient {
		t.Fatalf("first attempt: Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	if out := send(t, b.sender, msg); out.Kind != domain.OutcomeAccepted {
		t.Errorf("second attempt: Kind = %s (%s), want accepted", out.Kind, out.Err)
	}
}

// TestSendAnswerTooLateIsUnknown: the fake created the message and answered after the timeout.
// The outcome is unknown, and a lookup by recipient, sender and text finds the message and
// follows it to delivered.
func TestSendAnswerTooLateIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(twiliofake.Behaviour{CreateDelay: 3 * testTimeout})
	since := time.Now()
	msg := workMessage(recipient, "Your code is 654321")

	out := send(t, b.sender, msg)

	if out.Kind != domain.OutcomeUnknown || out.Class != domain.ClassUnknown || !out.ProviderFault || out.NotSent {
		t.Fatalf("outcome = %+v, want unknown and a provider fault", out)
	}
	if !strings.Contains(out.Err, "request written") || !strings.Contains(out.Err, "may have created") {
		t.Errorf("Err = %q, want it to say the request was written and Twilio may have created the message", out.Err)
	}
	if out.Latency < testTimeout || out.StatusCode != 0 || out.ProviderOperationID != "" {
		t.Errorf("outcome %+v, want at least the timeout, no status and no sid", out)
	}
	created := b.fake.Messages()
	if len(created) != 1 {
		t.Fatalf("the fake created %d messages, want the one whose answer came too late", len(created))
	}

	q := lookupQuery(msg, since)
	var last string
	eventually(t, func() bool {
		r, err := lookup(t, b.sender, q)
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		if r.OperationID != created[0].SID || r.DeliveryID != msg.DeliveryID || r.Provider != "twilio" {
			t.Fatalf("Lookup = %+v, want the created message %s for delivery %s", r, created[0].SID, msg.DeliveryID)
		}
		last = string(r.Status) + "/" + r.ProviderStatus
		return r.Status == "delivered"
	}, "a lookup without sid says delivered (last: "+last+")")
}

// TestSendNothingListeningIsTransient: the connection is refused, so nothing was written: the
// attempt may fail over at once.
func TestSendNothingListeningIsTransient(t *testing.T) {
	t.Parallel()
	// Port 1, where nothing listens: a fake closed here would free its port for another
	// parallel test's listener, which then answers.
	const host = "127.0.0.1:1"
	b := setup(t, func(c *twilio.Config) { c.BaseURL = "http://" + host })

	out := send(t, b.sender, workMessage(recipient, "hi"))

	if out.Kind != domain.OutcomeTransient || out.Class != domain.ClassTransient {
		t.Fatalf("outcome = %s/%s (%s), want transient", out.Kind, out.Class, out.Err)
	}
	if !out.NotSent || !out.ProviderFault || out.StatusCode != 0 {
		t.Errorf("outcome %+v, want NotSent, a provider fault, no status", out)
	}
	if !strings.Contains(out.Err, host) || strings.Contains(out.Err, "/2010-04-01") {
		t.Errorf("Err = %q, want it to name the host %s and not the URL", out.Err, host)
	}
}

// TestSendCanceledBeforeWriteIsNotSent: an attempt whose context is done before the call never
// reaches Twilio, and that is not the provider's fault.
func TestSendCanceledBeforeWriteIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	out := b.sender.Send(ctx, workMessage(recipient, "hi"))

	if out.Kind != domain.OutcomeTransient || !out.NotSent || out.ProviderFault {
		t.Errorf("outcome %+v, want transient, NotSent, no provider fault", out)
	}
	if n := len(b.fake.Messages()); n != 0 {
		t.Errorf("the fake created %d messages, want 0", n)
	}
}

// TestSendRefusesUnsendableWithoutNetwork: what sms.Check would refuse is permanent at send
// time (the work message is a snapshot: it cannot get better), and no call is made.
func TestSendRefusesUnsendableWithoutNetwork(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := newServer(t, func(http.ResponseWriter, *http.Request) { calls.Add(1) })
	s := senderFor(t, srv.URL)
	for _, tt := range []struct{ recipient, payload, wantErrHas string }{
		{"4155550100", `{"text":"hi"}`, "recipient"},
		{recipient, `{"subject":"no text"}`, "payload.text"},
		{recipient, `{"text":"` + strings.Repeat("x", 1601) + `"}`, "payload.text"},
		{recipient, `{"text":`, "payload"},
	} {
		msg := workMessage(tt.recipient, "")
		msg.Payload = []byte(tt.payload)
		out := send(t, s, msg)
		if out.Kind != domain.OutcomePermanent || out.ProviderFault || out.NotSent {
			t.Errorf("%s %.30s: outcome %+v, want permanent without marks", tt.recipient, tt.payload, out)
		}
		if !strings.Contains(out.Err, tt.wantErrHas) {
			t.Errorf("%s %.30s: Err = %q, want it to name %s", tt.recipient, tt.payload, out.Err, tt.wantErrHas)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the server got %d calls, want 0", n)
	}
}

// TestSendUnprovenAnswerIsUnknown: a 2xx says Twilio took the request; unless the answer names
// the message (a sid), it may or may not have been created, and a retry could send it twice.
func TestSendUnprovenAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, whyHas string
	}{
		{"not JSON", "<html>hello</html>", "not Twilio's JSON"},
		{"empty body", "", "not Twilio's JSON"},
		{"no sid", `{"status":"queued"}`, "no sid"},
		{"sid not an id", `{"sid":"../../x","status":"queued"}`, "not a message id"},
		{"sid not a string", `{"sid":42}`, "not Twilio's JSON"},
		{"longer than what is read", `{"sid":"SM1","body":"` + strings.Repeat("x", 70<<10) + `"}`, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := senderFor(t, newServer(t, answering(201, nil, tt.body)).URL)

			out := send(t, s, workMessage(recipient, "hi"))

			if out.Kind != domain.OutcomeUnknown || !out.ProviderFault || out.StatusCode != 201 {
				t.Fatalf("outcome = %+v, want unknown with HTTP 201 and a provider fault", out)
			}
			if !strings.Contains(out.Err, tt.whyHas) || !strings.Contains(out.Err, "may have been created") {
				t.Errorf("Err = %q, want why (%q) and that the message may have been created", out.Err, tt.whyHas)
			}
		})
	}
}

// TestSendResetWhileReadingTheAnswerIsUnknown: the status said 201 but the body was cut off.
func TestSendResetWhileReadingTheAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"sid":"SM`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})

	out := send(t, senderFor(t, srv.URL), workMessage(recipient, "hi"))

	if out.Kind != domain.OutcomeUnknown || !strings.Contains(out.Err, "reading the answer failed") {
		t.Errorf("outcome = %s (%s), want unknown because the answer could not be read", out.Kind, out.Err)
	}
}

// TestSendResetAfterWriteIsUnknown: the connection closes after Twilio read the request.
func TestSendResetAfterWriteIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler)
	})

	out := send(t, senderFor(t, srv.URL), workMessage(recipient, "hi"))

	if out.Kind != domain.OutcomeUnknown || !out.ProviderFault || out.NotSent {
		t.Errorf("outcome = %+v, want unknown and a provider fault", out)
	}
}

// TestSendRecordsAnswersSafely: what a peer answers reaches the history bounded, on one
// printable line, without the auth token even when the peer echoes it; a redirect is not
// followed; a 429's Retry-After is kept, capped.
func TestSendRecordsAnswersSafely(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		wantKind   domain.OutcomeKind
		wantFault  bool
		wantRetry  time.Duration
		wantErrHas []string
	}{
		{
			name: "control characters and separators are replaced", status: 400,
			body:     `{"code":21211,"message":"line one\r\nline two\u2028three\u202efour\u0000","status":400}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"line one  line two three four"},
		},
		{
			name: "a long message is cut", status: 400,
			body:     `{"code":21211,"message":"` + strings.Repeat("é", 4000) + `","status":400}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"error 21211: éé", "…"},
		},
		{
			name: "a proxy that echoes the credentials", status: 502,
			body:     "<html>502 Bad Gateway: Authorization: Basic " + basicAuth(testAccount, testToken) + " password " + testToken + "</html>",
			wantKind: domain.OutcomeUnknown, wantFault: true, wantErrHas: []string{"HTTP 502 Bad Gateway", "[auth token]"},
		},
		{
			name: "a token across the cut is removed before the cut", status: 400,
			body:     strings.Repeat("x", 240) + testToken,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"xxx[auth token]"},
		},
		{
			name: "a Retry-After on a 429 is kept", status: 429, header: map[string]string{"Retry-After": "7"},
			body:     `{"code":20429,"message":"Too Many Requests","status":429}`,
			wantKind: domain.OutcomeTransient, wantFault: true, wantRetry: 7 * time.Second,
		},
		{
			name: "an absurd Retry-After is capped", status: 429, header: map[string]string{"Retry-After": "99999999999"},
			body:     `{"code":20429,"message":"Too Many Requests","status":429}`,
			wantKind: domain.OutcomeTransient, wantFault: true, wantRetry: twilio.MaxRetryAfter,
		},
		{
			name: "a redirect is permanent and not followed", status: 301,
			header:   map[string]string{"Location": "https://elsewhere.example/"},
			wantKind: domain.OutcomePermanent, wantFault: true, wantErrHas: []string{"HTTP 301", "redirects are not followed"},
		},
		{
			name: "an error code written as a string", status: 400,
			body:     `{"code":"21614","message":"not mobile","status":400}`,
			wantKind: domain.OutcomePermanent, wantErrHas: []string{"error 21614: not mobile"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := senderFor(t, newServer(t, answering(tt.status, tt.header, tt.body)).URL)

			out := send(t, s, workMessage(recipient, "hi"))

			if out.Kind != tt.wantKind || out.ProviderFault != tt.wantFault {
				t.Fatalf("outcome = %s fault %v (%s), want %s fault %v", out.Kind, out.ProviderFault, out.Err, tt.wantKind, tt.wantFault)
			}
			if out.StatusCode != tt.status || out.RetryAfter != tt.wantRetry {
				t.Errorf("StatusCode %d, RetryAfter %s; want %d and %s", out.StatusCode, out.RetryAfter, tt.status, tt.wantRetry)
			}
			for _, want := range tt.wantErrHas {
				if !strings.Contains(out.Err, want) {
					t.Errorf("Err = %q, want it to contain %q", out.Err, want)
				}
			}
			if len(out.Err) > 400 {
				t.Errorf("Err has %d bytes, want it bounded", len(out.Err))
			}
		})
	}
}

// TestSendTransportErrorHidesTheToken: net/http's errors repeat the URL; a base URL cannot hold
// the credentials (Validate refuses it), and the outcome names the host only.
func TestSendTransportErrorHidesTheToken(t *testing.T) {
	t.Parallel()
	const addr = "127.0.0.1:1" // nothing listens (a port just freed could be taken by another test)
	out := send(t, senderFor(t, "http://"+addr+"/proxy"), workMessage(recipient, "hi"))
	if out.Kind != domain.OutcomeTransient || !strings.Contains(out.Err, addr) || strings.Contains(out.Err, "Accounts") {
		t.Errorf("outcome %+v, want transient naming %s without the path", out, addr)
	}
}
