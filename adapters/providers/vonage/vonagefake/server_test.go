package vonagefake

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	apiKey      = "abcd1234"
	apiSecret   = "fakeServerSecret"
	wrongSecret = "someoneElsesSecr"
	token       = "receiptTokenOfTheTest0123"
)

// lines is the fake's Out in tests.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// sinkRequest is one receipt as the endpoint received it.
type sinkRequest struct {
	method string
	uri    string
	header http.Header
	body   []byte
}

// sink is a receipts endpoint on loopback that answers with the statuses in answers, in turn,
// then 200.
type sink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	got     []sinkRequest
	answers []int
}

func newSink(t *testing.T, answers ...int) *sink {
	t.Helper()
	s := &sink{answers: answers}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, sinkRequest{method: r.Method, uri: r.URL.RequestURI(), header: r.Header.Clone(), body: body})
		code := http.StatusOK
		if len(s.answers) > 0 {
			code, s.answers = s.answers[0], s.answers[1:]
		}
		s.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) callback() string { return s.srv.URL + "/v1/receipts/vonage?token=" + token }

func (s *sink) requests() []sinkRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkRequest(nil), s.got...)
}

// bundle is a running fake, what it printed, and a client for it.
type bundle struct {
	srv    *Server
	out    *lines
	client *http.Client
}

// setup starts a fake on a free loopback port, closed when the test ends; whatever it printed
// must not contain the API secrets or the receipt token.
func setup(t *testing.T) *bundle {
	t.Helper()
	out := &lines{}
	srv, err := Start(Config{Addr: "127.0.0.1:0", APIKey: apiKey, APISecret: apiSecret, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		if s := out.String(); strings.Contains(s, apiSecret) || strings.Contains(s, wrongSecret) || strings.Contains(s, token) {
			t.Errorf("the fake printed a secret:\n%s", s)
		}
	})
	return &bundle{srv: srv, out: out, client: client}
}

// answer is the SMS API's answer as a client reads it.
type answer struct {
	MessageCount string              `json:"message-count"`
	Messages     []map[string]string `json:"messages"`
}

// sendParams is a well-formed send to number.
func sendParams(number string) url.Values {
	return url.Values{"api_key": {apiKey}, "api_secret": {apiSecret}, "from": {"Ledger"}, "to": {number},
		"text": {"Order 42 has shipped"}, "client-ref": {"0190f0c2-6f4e-7a62-9e4c-7d0c0f3f8a11"}}
}

// post sends a form to /sms/json and reads the answer, which must be the SMS API's: HTTP 200
// and one message.
func (b *bundle) post(t *testing.T, form url.Values) map[string]string {
	t.Helper()
	resp, err := b.client.PostForm(b.srv.URL()+"/sms/json", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("decode the answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || a.MessageCount != "1" || len(a.Messages) != 1 {
		t.Fatalf("answer HTTP %d %s %+v, want the SMS API's: 200, JSON, one message", resp.StatusCode, resp.Header.Get("Content-Type"), a)
	}
	return a.Messages[0]
}

var messageID = regexp.MustCompile(`^0A[0-9A-F]{14}$`)

func TestAcceptsAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	form := sendParams("+447700900001")
	form.Set("callback", "http://127.0.0.1:1/r?token="+token)

	got := b.post(t, form)

	if got["status"] != "0" || !messageID.MatchString(got["message-id"]) || got["to"] != "447700900001" ||
		got["client-ref"] != form.Get("client-ref") || got["message-price"] == "" || got["error-text"] != "" {
		t.Errorf("answer %+v, want status 0 with a message-id, to without +, client-ref and price", got)
	}
	want := Message{MessageID: got["message-id"], Status: "0", APIKey: apiKey, From: "Ledger", To: "447700900001",
		Text: "Order 42 has shipped", ClientRef: form.Get("client-ref"), Callback: form.Get("callback"), ReportRequested: true}
	if msgs := b.srv.Messages(); len(msgs) != 1 || msgs[0] != want {
		t.Errorf("Messages() = %+v, want [%+v]", msgs, want)
	}
	if next := b.post(t, sendParams("447700900002")); next["message-id"] <= got["message-id"] {
		t.Errorf("second message-id %s, want one after %s", next["message-id"], got["message-id"])
	}
}

func TestAcceptsJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"api_key":"` + apiKey + `","api_secret":"` + apiSecret + `","from":"Ledger","to":447700900001,"text":"hi","type":"unicode","status-report-req":false}`
	resp, err := b.client.Post(b.srv.URL()+"/sms/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || len(a.Messages) != 1 || a.Messages[0]["status"] != "0" {
		t.Fatalf("answer %+v, %v; want status 0", a, err)
	}
	if m := b.srv.Messages()[0]; m.To != "447700900001" || m.Type != "unicode" || m.ReportRequested {
		t.Errorf("message %+v, want to read as a string, type unicode, no report requested", m)
	}
}

// TestRefusesAsVonage: what the SMS API refuses is answered HTTP 200 with the status and
// error-text in the body, and nothing is sent.
func TestRefusesAsVonage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name       string
		change     func(url.Values)
		wantStatus string
		wantText   string
	}{
		{"no api_key", func(f url.Values) { f.Del("api_key") }, "2", "Missing api_key"},
		{"no api_secret", func(f url.Values) { f.Del("api_secret") }, "2", "Missing api_secret"},
		{"a wrong secret", func(f url.Values) { f.Set("api_secret", wrongSecret) }, "4", "Bad Credentials"},
		{"a wrong key", func(f url.Values) { f.Set("api_key", "dcba4321") }, "4", "Bad Credentials"},
		{"no from", func(f url.Values) { f.Del("from") }, "2", "Missing from param"},
		{"no to", func(f url.Values) { f.Del("to") }, "2", "Missing to param"},
		{"a to that is no number", func(f url.Values) { f.Set("to", "44 7700 900001") }, "3", "Invalid to param"},
		{"no text", func(f url.Values) { f.Del("text") }, "2", "Missing text param"},
		{"a text too long", func(f url.Values) { f.Set("text", strings.Repeat("x", maxText+1)) }, "12", "Message Too Long"},
		{"a client-ref too long", func(f url.Values) { f.Set("client-ref", strings.Repeat("r", maxClientRef+1)) }, "3", "Invalid client-ref param"},
		{"a callback elsewhere", func(f url.Values) { f.Set("callback", "https://ledger.example.com/r?token="+token) }, "23", "Invalid Callback Url"},
		{"an unknown type", func(f url.Values) { f.Set("type", "vcard") }, "3", "Invalid type param"},
	}
	for _, tt := range tests {
		form := sendParams("447700900001")
		tt.change(form)
		got := b.post(t, form)
		if got["status"] != tt.wantStatus || !strings.HasPrefix(got["error-text"], tt.wantText) || got["message-id"] != "" {
			t.Errorf("%s: answer %+v, want status %s %q without a message-id", tt.name, got, tt.wantStatus, tt.wantText)
		}
	}
	for _, m := range b.srv.Messages() {
		if m.MessageID != "" || m.Status == "0" {
			t.Errorf("message %+v was accepted, want every one refused", m)
		}
	}
}

func TestNotTheSMSAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := b.client.Get(b.srv.URL() + "/sms/json?" + sendParams("447700900001").Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /sms/json: HTTP %d, want 405", resp.StatusCode)
	}
	resp, err = b.client.PostForm(b.srv.URL()+"/sms/xml", sendParams("447700900001"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /sms/xml: HTTP %d, want 404", resp.StatusCode)
	}
}

// TestBehaviourOfAnswers: forced statuses cover the sends they count, numbers keep theirs, and
// an HTTP failure answers without the SMS API's body.
func TestBehaviourOfAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{Status: "1", StatusCalls: 2, NumberStatus: map[string]string{"+447700900029": "29"}})
	for i, want := range []string{"1", "1", "0", "29"} {
		number := "447700900001"
		if i == 3 {
			number = "447700900029"
		}
		if got := b.post(t, sendParams(number)); got["status"] != want {
			t.Errorf("send %d: status %s (%s), want %s", i+1, got["status"], got["error-text"], want)
		}
	}

	b.srv.SetBehaviour(Behaviour{HTTPStatus: http.StatusServiceUnavailable, HTTPCalls: 1})
	resp, err := b.client.PostForm(b.srv.URL()+"/sms/json", sendParams("447700900001"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("HTTP %d, want 503", resp.StatusCode)
	}
	if got := b.post(t, sendParams("447700900001")); got["status"] != "0" {
		t.Errorf("after the HTTP failure: status %s, want 0", got["status"])
	}
}

// TestAnswerDelay: the message is created, then the answer waits; a client that gives up does
// not undo the message, and Close does not wait for the delay.
func TestAnswerDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{AnswerDelay: time.Hour})
	client := &http.Client{Timeout: 200 * time.Millisecond}
	if resp, err := client.PostForm(b.srv.URL()+"/sms/json", sendParams("447700900001")); err == nil {
		resp.Body.Close()
		t.Fatal("the answer came, want it held past the client's timeout")
	}
	if msgs := b.srv.Messages(); len(msgs) != 1 || msgs[0].Status != "0" {
		t.Errorf("Messages() = %+v, want the message created", msgs)
	}
	closed := make(chan struct{})
	go func() { b.srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the delayed answer")
	}
}

// TestReceipts: each accepted message with a callback gets its receipts, in the way the
// behaviour says, with Vonage's DLR parameters and the callback's own query kept.
func TestReceipts(t *testing.T) {
	t.Parallel()
	for _, method := range []string{ReceiptPost, ReceiptGet, ReceiptJSON} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := newSink(t)
			b.srv.SetBehaviour(Behaviour{ReceiptMethod: method, Final: map[string]DLR{"447700900003": {Status: "failed", ErrCode: "3"}}})
			form := sendParams("447700900003")
			form.Set("callback", s.callback())
			got := b.post(t, form)
			eventually(t, func() bool { return len(s.requests()) == 1 }, "the receipt arrives")

			r := s.requests()[0]
			u, err := url.Parse(r.uri)
			if err != nil {
				t.Fatal(err)
			}
			dlr := map[string]string{}
			switch method {
			case ReceiptGet:
				if r.method != http.MethodGet || len(r.body) != 0 {
					t.Errorf("%s with a body of %d bytes, want a GET", r.method, len(r.body))
				}
				for k, v := range u.Query() {
					dlr[k] = v[0]
				}
			case ReceiptJSON:
				if r.method != http.MethodPost || r.header.Get("Content-Type") != "application/json" {
					t.Errorf("%s %s, want a POST of JSON", r.method, r.header.Get("Content-Type"))
				}
				if err := json.Unmarshal(r.body, &dlr); err != nil {
					t.Fatalf("the JSON receipt: %v", err)
				}
			default:
				if r.method != http.MethodPost || r.header.Get("Content-Type") != "application/x-www-form-urlencoded" {
					t.Errorf("%s %s, want a POST form", r.method, r.header.Get("Content-Type"))
				}
				f, _ := url.ParseQuery(string(r.body))
				for k, v := range f {
					dlr[k] = v[0]
				}
			}
			if u.Path != "/v1/receipts/vonage" || u.Query().Get("token") != token {
				t.Errorf("receipt sent to %s, want the callback with its token", r.uri)
			}
			want := map[string]string{"messageId": got["message-id"], "status": "failed", "err-code": "3", "msisdn": "447700900003",
				"to": "Ledger", "client-ref": form.Get("client-ref"), "api-key": apiKey}
			for k, v := range want {
				if dlr[k] != v {
					t.Errorf("%s = %q, want %q", k, dlr[k], v)
				}
			}
			if _, err := time.Parse("2006-01-02 15:04:05", dlr["message-timestamp"]); err != nil || len(dlr["scts"]) != 10 || dlr["price"] == "" {
				t.Errorf("receipt %+v, want message-timestamp, scts and price of Vonage's forms", dlr)
			}
			eventually(t, func() bool { return len(b.srv.Receipts()) == 1 }, "the fake records the receipt's answer")
			if rec := b.srv.Receipts(); len(rec) != 1 || rec[0].HTTPStatus != http.StatusOK || rec[0].Try != 1 || rec[0].Method != method {
				t.Errorf("Receipts() = %+v, want one receipt answered 200 at the first try", rec)
			}
		})
	}
}

// TestReceiptsTriedAgain: a callback that answers 503 gets the receipt again, as Vonage tries
// again; one that answers 400 does not, and with NoReceiptRetry none does.
func TestReceiptsTriedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t, http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusNoContent)
	form := sendParams("447700900001")
	form.Set("callback", s.callback())
	b.post(t, form)
	eventually(t, func() bool { return len(b.srv.Receipts()) == 3 }, "the receipt is tried three times")
	for i, r := range b.srv.Receipts() {
		if r.Try != i+1 || r.Status != "delivered" {
			t.Errorf("try %d: %+v, want the delivered receipt's try %d", i+1, r, i+1)
		}
	}

	s = newSink(t, http.StatusServiceUnavailable)
	b.srv.SetBehaviour(Behaviour{NoReceiptRetry: true})
	form.Set("callback", s.callback())
	b.post(t, form)
	eventually(t, func() bool { return len(b.srv.Receipts()) == 4 }, "the receipt is tried once")
	if r := b.srv.Receipts()[3]; r.HTTPStatus != http.StatusServiceUnavailable || r.Try != 1 {
		t.Errorf("receipt %+v, want one try answered 503", r)
	}
}

// TestReceiptsPlanned: a first receipt, lost and repeated receipts, and a message without a
// callback or that asked for no report, which get none.
func TestReceiptsPlanned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t)
	b.srv.SetBehaviour(Behaviour{First: "buffered", LoseReceipts: 1, DuplicateReceipts: 1})
	form := sendParams("447700900001")
	b.post(t, form) // no callback: no receipts, and no count consumed
	noReport := sendParams("447700900001")
	noReport.Set("callback", s.callback())
	noReport.Set("status-report-req", "0")
	b.post(t, noReport)
	form.Set("callback", s.callback())
	b.post(t, form)
	// buffered: lost; delivered: sent twice.
	eventually(t, func() bool { return len(b.srv.Receipts()) == 3 }, "the fake decides the receipts")
	rec := b.srv.Receipts()
	if !rec[0].Lost || rec[0].Status != "buffered" || rec[1].Lost || rec[1].Status != "delivered" || rec[2].Status != "delivered" {
		t.Errorf("Receipts() = %+v, want buffered lost, then delivered twice", rec)
	}
	if got := s.requests(); len(got) != 2 || !bytes.Equal(got[0].body, got[1].body) {
		t.Errorf("the endpoint got %d receipts, want the same delivered receipt twice", len(got))
	}
}

// TestReceiptDelayAndClose: a receipt waits its delay, and Close cuts the wait.
func TestReceiptDelayAndClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newSink(t)
	b.srv.SetBehaviour(Behaviour{ReceiptDelay: time.Hour})
	form := sendParams("447700900001")
	form.Set("callback", s.callback())
	b.post(t, form)
	closed := make(chan struct{})
	go func() { b.srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the receipt's delay")
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("the endpoint got %d receipts, want none before the delay", n)
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "127.5.6.7:80": true,
		"10.0.0.1:80": false, "[2001:db8::1]:80": false, "93.184.216.34:443": false, "[::ffff:127.0.0.1]:80": true} {
		if err := loopbackOnly("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("loopbackOnly(%s) = %v, want allowed %t", addr, err, ok)
		}
	}
	for raw, ok := range map[string]bool{"http://127.0.0.1:8080/r": true, "https://localhost/r": true, "http://[::1]/r": true,
		"https://ledger.example.com/r": false, "ftp://127.0.0.1/r": false, "http://u:p@127.0.0.1/r": false, "http://10.1.2.3/r": false} {
		if got := loopbackURL(raw); got != ok {
			t.Errorf("loopbackURL(%s) = %t, want %t", raw, got, ok)
		}
	}
}

func TestStartRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Addr: "0.0.0.0:0", APIKey: apiKey, APISecret: apiSecret},
		{Addr: "localhost:0", APIKey: apiKey, APISecret: apiSecret},
		{Addr: "127.0.0.1", APIKey: apiKey, APISecret: apiSecret},
		{APISecret: apiSecret},
		{APIKey: apiKey},
	} {
		if srv, err := Start(cfg); err == nil {
			srv.Close()
			t.Errorf("Start(%+v) = nil error, want it refused", cfg)
		}
	}
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}
