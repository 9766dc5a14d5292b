package vonage

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

func TestSenderContract(t *testing.T) {
	t.Parallel()
	s := newSender(t, Config{Provider: "vonage-eu", APIKey: testKey, APISecret: testSecret, From: "Ledger",
		Callback: "https://ledger.example.com/v1/receipts/vonage-eu?token=" + testToken, CallbackToken: testToken})
	if got := s.Provider(); got != "vonage-eu" {
		t.Errorf("Provider() = %q, want the configured vonage-eu", got)
	}
	if s.Deduplicates() {
		t.Error("Deduplicates() = true, want false: the SMS API takes no idempotency key")
	}
	if _, ok := any(s).(commands.Lookup); ok {
		t.Error("the Sender implements commands.Lookup, but the SMS API has no status lookup")
	}
	for _, printed := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %s", s, s, s)} {
		if secret := holdsSecret(printed); secret != "" {
			t.Errorf("printing the Sender shows a secret: %s", printed)
		}
	}
}

// TestSendAccepted: status 0 is an acceptance, not a delivery, with Vonage's message-id; the
// fake got every parameter, the number without its +, our delivery id as client-ref and the
// callback; a text outside the GSM alphabet goes as type unicode.
func TestSendAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	texts := []string{"Your order 42 has shipped: 3 items, €12 [ref]", "Votre commande est partie 🚚"}
	var ids []string
	for _, text := range texts {
		out := send(t, b.sender, workMessage("+447700900001", text))
		if out.Kind != domain.OutcomeAccepted {
			t.Fatalf("Kind = %s (%s), want accepted", out.Kind, out.Err)
		}
		if out.Provider != "vonage" || out.StatusCode != http.StatusOK || out.Err != "" || out.Class != "" || out.ProviderCode != "" {
			t.Errorf("outcome %+v, want provider vonage, HTTP 200, no error, class or code", out)
		}
		if out.NotSent || out.ProviderFault || out.Latency <= 0 {
			t.Errorf("outcome %+v, want neither NotSent nor ProviderFault, and a latency", out)
		}
		ids = append(ids, out.ProviderOperationID)
	}
	got := b.fake.Messages()
	if len(got) != len(texts) {
		t.Fatalf("the fake got %d messages, want %d: %+v", len(got), len(texts), got)
	}
	for i, m := range got {
		want := vonagefake.Message{
			MessageID: ids[i], Status: "0", APIKey: testKey, From: "447700900999", To: "447700900001", Text: texts[i],
			ClientRef: testDeliveryID, Callback: b.sink.url(), ReportRequested: true,
		}
		if i == 1 {
			want.Type = "unicode"
		}
		if m != want {
			t.Errorf("message %d = %+v,\nwant %+v", i+1, m, want)
		}
	}
	if ids[0] == "" || ids[0] == ids[1] {
		t.Errorf("operation ids %q, want the fake's distinct message-ids", ids)
	}
}

// TestSendDeliveredOnAccept: a provider configured to count acceptance as delivery reports
// delivered, with the message-id; and without a callback none is sent.
func TestSendDeliveredOnAccept(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.DeliveredOn = DeliveredOnAccept; c.Callback = ""; c.CallbackToken = "" })

	out := send(t, b.sender, workMessage("447700900001", "hi"))

	if out.Kind != domain.OutcomeDelivered || out.ProviderOperationID == "" {
		t.Fatalf("outcome %s %q (%s), want delivered with the message-id", out.Kind, out.ProviderOperationID, out.Err)
	}
	msgs := b.fake.Messages()
	if len(msgs) != 1 || msgs[0].MessageID != out.ProviderOperationID || msgs[0].Callback != "" {
		t.Errorf("the fake got %+v, want one message %s without a callback", msgs, out.ProviderOperationID)
	}
}

// TestSendClassifiesStatuses: each refusal the SMS API answers with (HTTP 200, the status in the
// body), from the fake that speaks it, becomes the outcome of the status table, with Vonage's
// status and error-text recorded and the fault put where it belongs.
func TestSendClassifiesStatuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		behaviour  vonagefake.Behaviour
		secret     string
		recipient  string
		wantKind   domain.OutcomeKind
		wantCode   string
		wantFault  bool
		wantErrHas string
		// wantSuppress: the status is hard evidence against the number (suppressingStatuses).
		wantSuppress bool
	}{
		{"1 throttled is transient, the provider's", vonagefake.Behaviour{Status: "1", StatusCalls: 1}, "", "+447700900001",
			domain.OutcomeTransient, "1", true, "Throttled: Throughput Rate Exceeded", false},
		{"5 internal error is transient, the provider's", vonagefake.Behaviour{Status: "5", StatusCalls: vonagefake.EveryCall}, "", "+447700900001",
			domain.OutcomeTransient, "5", true, "Internal Error", false},
		{"4 invalid credentials is permanent, the provider's", vonagefake.Behaviour{}, otherSecret, "+447700900001",
			domain.OutcomePermanent, "4", true, "Invalid Credentials: Bad Credentials", false},
		{"6 invalid message is permanent, the recipient's", vonagefake.Behaviour{NumberStatus: map[string]string{"+447700900006": "6"}}, "", "+447700900006",
			domain.OutcomePermanent, "6", false, "Invalid Message", false},
		{"29 non-whitelisted destination is permanent, the recipient's", vonagefake.Behaviour{NumberStatus: map[string]string{"447700900029": "29"}}, "", "+447700900029",
			domain.OutcomePermanent, "29", false, "Non White-listed Destination - rejected", false},
		{"15 invalid sender for this destination is permanent, not the provider's", vonagefake.Behaviour{NumberStatus: map[string]string{"15550100015": "15"}}, "", "+15550100015",
			domain.OutcomePermanent, "15", false, "Illegal Sender Address - rejected", false},
		{"3 invalid parameters is permanent", vonagefake.Behaviour{Status: "3", StatusCalls: 1}, "", "+447700900001",
			domain.OutcomePermanent, "3", false, "Invalid Parameters", false},
		{"7 number barred is permanent and suppresses", vonagefake.Behaviour{NumberStatus: map[string]string{"+447700900007": "7"}}, "", "+447700900007",
			domain.OutcomePermanent, "7", false, "Number Barred", true},
		{"33 number de-activated is permanent and suppresses", vonagefake.Behaviour{NumberStatus: map[string]string{"+447700900033": "33"}}, "", "+447700900033",
			domain.OutcomePermanent, "33", false, "Number De-activated", true},
		{"9 out of credit is transient, the provider's", vonagefake.Behaviour{Status: "9", StatusCalls: 1}, "", "+447700900001",
			domain.OutcomeTransient, "9", true, "Partner Quota", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *Config) {
				if tt.secret != "" {
					c.APISecret = tt.secret
				}
			})
			b.fake.SetBehaviour(tt.behaviour)

			out := send(t, b.sender, workMessage(tt.recipient, "Order 42 has shipped"))

			if out.Kind != tt.wantKind || out.Class != domain.ClassOf(tt.wantKind) {
				t.Fatalf("outcome = %s/%s (%s), want %s", out.Kind, out.Class, out.Err, tt.wantKind)
			}
			if out.ProviderCode != tt.wantCode || out.StatusCode != http.StatusOK {
				t.Errorf("ProviderCode = %q, StatusCode = %d; want Vonage's status %q in an HTTP 200", out.ProviderCode, out.StatusCode, tt.wantCode)
			}
			if out.ProviderFault != tt.wantFault {
				t.Errorf("ProviderFault = %t, want %t", out.ProviderFault, tt.wantFault)
			}
			if out.Suppress != tt.wantSuppress {
				t.Errorf("Suppress = %t, want %t", out.Suppress, tt.wantSuppress)
			}
			if out.NotSent {
				t.Error("NotSent = true, but Vonage received and refused the request")
			}
			if !strings.Contains(out.Err, tt.wantErrHas) || !strings.Contains(out.Err, "status "+tt.wantCode) {
				t.Errorf("Err = %q, want the status %s and Vonage's text %q", out.Err, tt.wantCode, tt.wantErrHas)
			}
			if out.ProviderOperationID != "" {
				t.Errorf("ProviderOperationID = %q, want none for a refused message", out.ProviderOperationID)
			}
			if msgs := b.fake.Messages(); len(msgs) != 1 || msgs[0].Status != tt.wantCode || msgs[0].MessageID != "" {
				t.Errorf("the fake answered %+v, want one refusal with status %s", msgs, tt.wantCode)
			}
		})
	}
}

// TestSendAfterThrottleIsAccepted: the throttle covered one send; the next goes through.
func TestSendAfterThrottleIsAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(vonagefake.Behaviour{Status: "1", StatusCalls: 1})
	msg := workMessage("+447700900001", "hi")
	if out := send(t, b.sender, msg); out.Kind != domain.OutcomeTransient {
		t.Fatalf("first attempt: Kind = %s (%s), want transient", out.Kind, out.Err)
	}
	if out := send(t, b.sender, msg); out.Kind != domain.OutcomeAccepted || out.ProviderOperationID == "" {
		t.Errorf("second attempt: %s %q (%s), want accepted with a message-id", out.Kind, out.ProviderOperationID, out.Err)
	}
}

// TestSendLateAnswerIsUnknown: Vonage created the message and answered after the timeout: it
// went, and the sender cannot know.
func TestSendLateAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.SetBehaviour(vonagefake.Behaviour{AnswerDelay: 10 * testTimeout})

	out := send(t, b.sender, workMessage("+447700900001", "hi"))

	if out.Kind != domain.OutcomeUnknown || out.Class != domain.ClassUnknown || !out.ProviderFault {
		t.Fatalf("outcome = %s/%s fault=%t (%s), want unknown and the provider's", out.Kind, out.Class, out.ProviderFault, out.Err)
	}
	if !strings.Contains(out.Err, "request written") || !strings.Contains(out.Err, "may have sent") {
		t.Errorf("Err = %q, want it to say the request was written and Vonage may have sent it", out.Err)
	}
	if out.StatusCode != 0 || out.ProviderOperationID != "" || out.NotSent {
		t.Errorf("outcome %+v, want no status, operation id or NotSent without an answer", out)
	}
	if out.Latency < testTimeout {
		t.Errorf("Latency = %s, want at least the timeout %s", out.Latency, testTimeout)
	}
	if msgs := b.fake.Messages(); len(msgs) != 1 || msgs[0].Status != "0" {
		t.Errorf("the fake has %+v, want the message it created", msgs)
	}
}

// TestSendClosedServerIsTransientNotSent: nothing listens any more, so nothing was written: the
// next provider may take the message at once.
func TestSendClosedServerIsTransientNotSent(t *testing.T) {
	t.Parallel()
	// Port 1, where nothing listens: a fake closed here would free its port for another
	// parallel test's listener, which then answers (seen: a reset after the request was written).
	const host = "127.0.0.1:1"
	b := setup(t, func(c *Config) { c.BaseURL = "http://" + host })

	out := send(t, b.sender, workMessage("+447700900001", "hi"))

	if out.Kind != domain.OutcomeTransient || out.Class != domain.ClassTransient {
		t.Fatalf("outcome = %s/%s (%s), want transient", out.Kind, out.Class, out.Err)
	}
	if !out.NotSent || !out.ProviderFault {
		t.Errorf("NotSent = %t, ProviderFault = %t; want both", out.NotSent, out.ProviderFault)
	}
	if out.StatusCode != 0 || !strings.Contains(out.Err, host) || strings.Contains(out.Err, "/sms/json") {
		t.Errorf("outcome %+v, want no status and an error naming the host %s, not the URL", out, host)
	}
}

// TestSendCanceledBeforeWriteIsTransient: an attempt whose context is done before the call
// never reaches Vonage, and that is not the provider's fault.
func TestSendCanceledBeforeWriteIsTransient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	out := b.sender.Send(ctx, workMessage("+447700900001", "hi"))

	if out.Kind != domain.OutcomeTransient || !out.NotSent || out.ProviderFault {
		t.Errorf("outcome %s NotSent=%t ProviderFault=%t (%s), want transient, not sent, not the provider's", out.Kind, out.NotSent, out.ProviderFault, out.Err)
	}
	if secret := holdsSecret(out.Err); secret != "" {
		t.Errorf("Err = %q holds a secret", out.Err)
	}
	if n := len(b.fake.Messages()); n != 0 {
		t.Errorf("the fake got %d messages, want 0", n)
	}
}

// TestSendHTTPFailures: a status other than 200 is not the SMS API's answer: behind a 5xx the
// message may have gone (unknown), a 429 was refused before processing (transient), another
// 4xx or a 3xx is the endpoint's problem (permanent). All count against the provider.
func TestSendHTTPFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code     int
		wantKind domain.OutcomeKind
	}{
		{http.StatusInternalServerError, domain.OutcomeUnknown},
		{http.StatusBadGateway, domain.OutcomeUnknown},
		{http.StatusServiceUnavailable, domain.OutcomeUnknown},
		{http.StatusTooManyRequests, domain.OutcomeTransient},
		{http.StatusUnauthorized, domain.OutcomePermanent},
		{http.StatusNotFound, domain.OutcomePermanent},
		{http.StatusMovedPermanently, domain.OutcomePermanent},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.SetBehaviour(vonagefake.Behaviour{HTTPStatus: tt.code, HTTPCalls: 1})

			out := send(t, b.sender, workMessage("+447700900001", "hi"))

			if out.Kind != tt.wantKind || out.StatusCode != tt.code || !out.ProviderFault || out.NotSent {
				t.Errorf("outcome %+v, want %s with HTTP %d, the provider's fault", out, tt.wantKind, tt.code)
			}
			if !strings.Contains(out.Err, fmt.Sprintf("HTTP %d", tt.code)) {
				t.Errorf("Err = %q, want it to name HTTP %d", out.Err, tt.code)
			}
		})
	}
}

// TestSendRetryAfterOf429: a proxy's Retry-After is honoured, and capped.
func TestSendRetryAfterOf429(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]time.Duration{"7": 7 * time.Second, "99999999": MaxRetryAfter, "soon": 0} {
		srv := newServer(t, answering(http.StatusTooManyRequests, map[string]string{"Retry-After": header}, "slow down"))
		out := send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))
		if out.Kind != domain.OutcomeTransient || out.RetryAfter != want {
			t.Errorf("Retry-After %q: %s RetryAfter=%s, want transient with %s", header, out.Kind, out.RetryAfter, want)
		}
	}
}

// TestSendUnprovenAnswerIsUnknown: a 200 says Vonage took the request; unless the answer is the
// SMS API's with a status for every part, the message may or may not have gone.
func TestSendUnprovenAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	huge := `{"message-count":"1","messages":[{"status":"0","message-id":"0A01","to":"` + strings.Repeat("4", maxResponseRead) + `"}]}`
	tests := []struct {
		name   string
		body   string
		whyHas string
	}{
		{"not JSON", "<html>hello</html>", "not the SMS API's JSON"},
		{"empty body", "", "not the SMS API's JSON"},
		{"no messages", `{"message-count":"0","messages":[]}`, "lists no messages"},
		{"no status", `{"message-count":"1","messages":[{"message-id":"0A01"}]}`, "no status"},
		{"status 0 without message-id", `{"message-count":"1","messages":[{"status":"0"}]}`, "no usable message-id"},
		{"message-id not an id", `{"message-count":"1","messages":[{"status":"0","message-id":"a b\nc"}]}`, "no usable message-id"},
		{"status of the wrong type", `{"message-count":"1","messages":[{"status":{"code":0}}]}`, "not the SMS API's JSON"},
		{"longer than what is read", huge, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, answering(http.StatusOK, map[string]string{"Content-Type": "application/json"}, tt.body))

			out := send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))

			if out.Kind != domain.OutcomeUnknown || !out.ProviderFault || out.StatusCode != http.StatusOK {
				t.Fatalf("outcome %+v, want unknown, the provider's, with HTTP 200", out)
			}
			if !strings.Contains(out.Err, tt.whyHas) || !strings.Contains(out.Err, "may have been sent") {
				t.Errorf("Err = %q, want why (%q) and that the message may have been sent", out.Err, tt.whyHas)
			}
			if len(out.Err) > 2*maxPeerText {
				t.Errorf("Err has %d bytes, want it bounded", len(out.Err))
			}
		})
	}
}

// TestSendResetWhileReadingTheAnswerIsUnknown: the status said 200 but the body was cut off.
func TestSendResetWhileReadingTheAnswerIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"message-count":"1","mess`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})

	out := send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))

	if out.Kind != domain.OutcomeUnknown || !strings.Contains(out.Err, "reading the answer failed") {
		t.Errorf("outcome = %s (%s), want unknown because the answer could not be read", out.Kind, out.Err)
	}
}

// TestSendResetAfterWriteIsUnknown: the connection dies once the request was read: Vonage may
// have acted on it.
func TestSendResetAfterWriteIsUnknown(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		panic(http.ErrAbortHandler)
	})

	out := send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))

	if out.Kind != domain.OutcomeUnknown || !out.ProviderFault || out.NotSent {
		t.Errorf("outcome %+v, want unknown and the provider's", out)
	}
}

// TestSendParts: a long text is answered part by part. Every part accepted is an acceptance
// named by the first part; some accepted and some refused is unknown (the recipient may have
// part of it, and a retry would send those parts again).
func TestSendParts(t *testing.T) {
	t.Parallel()
	both := `{"message-count":"2","messages":[{"status":"0","message-id":"0A000001"},{"status":"0","message-id":"0A000002"}]}`
	srv := newServer(t, answering(http.StatusOK, nil, both))
	out := send(t, directSender(t, srv.URL), workMessage("+447700900001", strings.Repeat("long ", 60)))
	if out.Kind != domain.OutcomeAccepted || out.ProviderOperationID != "0A000001" {
		t.Errorf("all parts accepted: %s %q (%s), want accepted as 0A000001", out.Kind, out.ProviderOperationID, out.Err)
	}

	mixed := `{"message-count":"2","messages":[{"status":"0","message-id":"0A000003"},{"status":"1","error-text":"Throttled"}]}`
	srv = newServer(t, answering(http.StatusOK, nil, mixed))
	out = send(t, directSender(t, srv.URL), workMessage("+447700900001", strings.Repeat("long ", 60)))
	if out.Kind != domain.OutcomeUnknown || out.ProviderOperationID != "0A000003" || out.ProviderCode != "1" {
		t.Errorf("one part refused: %+v, want unknown naming the accepted part and the refusal's status", out)
	}
	if !strings.Contains(out.Err, "1 of the 2 parts") {
		t.Errorf("Err = %q, want it to say how many parts went", out.Err)
	}

	refused := `{"message-count":"2","messages":[{"status":"7","error-text":"Number Barred"},{"status":"7","error-text":"Number Barred"}]}`
	srv = newServer(t, answering(http.StatusOK, nil, refused))
	out = send(t, directSender(t, srv.URL), workMessage("+447700900001", strings.Repeat("long ", 60)))
	if out.Kind != domain.OutcomePermanent || out.ProviderCode != "7" || out.ProviderFault || !out.Suppress {
		t.Errorf("all parts refused: %+v, want permanent status 7, the recipient's, suppressing the number", out)
	}

	// A number barred after part of the text went: unknown, and no evidence against the number.
	barred := `{"message-count":"2","messages":[{"status":"0","message-id":"0A000004"},{"status":"7","error-text":"Number Barred"}]}`
	srv = newServer(t, answering(http.StatusOK, nil, barred))
	out = send(t, directSender(t, srv.URL), workMessage("+447700900001", strings.Repeat("long ", 60)))
	if out.Kind != domain.OutcomeUnknown || out.ProviderCode != "7" || out.Suppress {
		t.Errorf("one part barred: %+v, want unknown with status 7, not suppressing", out)
	}
}

// TestSendStatusAsNumberIsRead: a status sent as a JSON number is read as the string the SMS API
// sends, and an undocumented status is permanent with Vonage's text.
func TestSendStatusAsNumberIsRead(t *testing.T) {
	t.Parallel()
	srv := newServer(t, answering(http.StatusOK, nil, `{"message-count":1,"messages":[{"status":0,"message-id":"0A000009"}]}`))
	if out := send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi")); out.Kind != domain.OutcomeAccepted || out.ProviderOperationID != "0A000009" {
		t.Errorf("numeric status 0: %s %q (%s), want accepted", out.Kind, out.ProviderOperationID, out.Err)
	}
	srv = newServer(t, answering(http.StatusOK, nil, `{"message-count":"1","messages":[{"status":"101","error-text":"RESPONSE_INVALID_ACCOUNT_CAMPAIGN"}]}`))
	out := send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))
	if out.Kind != domain.OutcomePermanent || out.ProviderCode != "101" || out.ProviderFault || !strings.Contains(out.Err, "RESPONSE_INVALID_ACCOUNT_CAMPAIGN") {
		t.Errorf("undocumented status: %+v, want permanent with Vonage's text", out)
	}
}

// TestSendRefusesUnsendableWithoutNetwork: what the channel's check would refuse is permanent at
// send time (the work message is a snapshot: it cannot get better), and no call is made.
func TestSendRefusesUnsendableWithoutNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct{ recipient, payload, wantErrHas string }{
		{"07700900001", `{"text":"hi"}`, "recipient"},
		{"+44 7700 900001", `{"text":"hi"}`, "recipient"},
		{"+123", `{"text":"hi"}`, "recipient"},
		{"+447700900001", `{"subject":"no text"}`, "payload.text"},
		{"+447700900001", `{"text":"   "}`, "payload.text"},
		{"+447700900001", `{"text":42}`, "payload.text"},
		{"+447700900001", `{"text":`, "payload"},
	}
	for _, tt := range tests {
		msg := workMessage(tt.recipient, "")
		msg.Payload = []byte(tt.payload)
		out := send(t, b.sender, msg)
		if out.Kind != domain.OutcomePermanent || out.ProviderFault || out.NotSent {
			t.Errorf("%s %s: outcome %+v, want permanent, not the provider's", tt.recipient, tt.payload, out)
		}
		if !strings.Contains(out.Err, tt.wantErrHas) {
			t.Errorf("%s %s: Err = %q, want it to name %s", tt.recipient, tt.payload, out.Err, tt.wantErrHas)
		}
	}
	if n := len(b.fake.Messages()); n != 0 {
		t.Errorf("the fake got %d messages, want 0", n)
	}
}

// TestSendRecordsAnswersSafely: what a peer answers reaches the history bounded, on one
// printable line, without the API secret or the callback token even when the peer echoes the
// request.
func TestSendRecordsAnswersSafely(t *testing.T) {
	t.Parallel()
	echo := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusBadGateway)
		_, _ = fmt.Fprintf(w, "<html>502 for POST %s with %s</html>", r.URL, body)
	}
	srv := newServer(t, echo)
	s := newSender(t, Config{Provider: "vonage", BaseURL: srv.URL, APIKey: testKey, APISecret: testSecret, From: "Ledger",
		Callback: "https://ledger.example.com/v1/receipts/vonage?token=" + testToken, CallbackToken: testToken, Timeout: testTimeout})
	out := send(t, s, workMessage("+447700900001", "hi"))
	if out.Kind != domain.OutcomeUnknown || !strings.Contains(out.Err, "HTTP 502") {
		t.Errorf("an echoing proxy: %+v, want unknown naming HTTP 502", out)
	}

	// A secret across the cut is removed before the cut, so that no half of it survives.
	srv = newServer(t, answering(http.StatusOK, nil,
		`{"message-count":"1","messages":[{"status":"3","error-text":"`+strings.Repeat("x", maxPeerText-8)+testSecret+`"}]}`))
	out = send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))
	if out.Kind != domain.OutcomePermanent || !strings.Contains(out.Err, "xxx[redact") {
		t.Errorf("a secret across the cut: %+v, want it redacted", out)
	}

	srv = newServer(t, answering(http.StatusOK, nil,
		`{"message-count":"1","messages":[{"status":"6","error-text":"line one\r\nline two\u2028three\u202efour\u0000 `+strings.Repeat("é", 400)+`"}]}`))
	out = send(t, directSender(t, srv.URL), workMessage("+447700900001", "hi"))
	if !strings.Contains(out.Err, "line one  line two three four") || !strings.Contains(out.Err, "…") || len(out.Err) > 2*maxPeerText {
		t.Errorf("Err = %q, want controls replaced and the text cut", out.Err)
	}
}
