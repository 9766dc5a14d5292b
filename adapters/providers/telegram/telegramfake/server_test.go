package telegramfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	token      = "123456789:AAHfakeServerSecret_0123456789"
	wrongToken = "123456789:AAHsomeoneElsesSecret_987654"
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

// bundle is a running fake, what it printed, and a client for it.
type bundle struct {
	srv    *Server
	out    *lines
	client *http.Client
}

// setup starts a fake on a free loopback port, closed when the test ends; whatever it printed
// must not contain a token.
func setup(t *testing.T) *bundle {
	t.Helper()
	out := &lines{}
	srv, err := Start(Config{Addr: "127.0.0.1:0", Token: token, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		if s := out.String(); strings.Contains(s, "fakeServerSecret") || strings.Contains(s, "someoneElses") {
			t.Errorf("the fake printed a token:\n%s", s)
		}
	})
	return &bundle{srv: srv, out: out, client: client}
}

// answer is the Bot API's answer shape as a client reads it.
type answer struct {
	OK          bool   `json:"ok"`
	ErrorCode   int    `json:"error_code"`
	Description string `json:"description"`
	Parameters  struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
	Result struct {
		MessageID int64 `json:"message_id"`
		Date      int64 `json:"date"`
		Text      string
		Chat      struct {
			ID       int64  `json:"id"`
			Type     string `json:"type"`
			Username string `json:"username"`
		} `json:"chat"`
	} `json:"result"`
}

// call sends one request and reads the answer, which must be the Bot API's JSON.
func (b *bundle) call(t *testing.T, method, path, contentType, body string) (int, answer) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("the answer is not JSON: %v", err)
	}
	if a.OK != (resp.StatusCode == http.StatusOK) {
		t.Errorf("HTTP %d with ok=%t", resp.StatusCode, a.OK)
	}
	if !a.OK && a.ErrorCode != resp.StatusCode {
		t.Errorf("error_code %d differs from HTTP %d", a.ErrorCode, resp.StatusCode)
	}
	return resp.StatusCode, a
}

// sendJSON posts a JSON sendMessage with the right token.
func (b *bundle) sendJSON(t *testing.T, body string) (int, answer) {
	t.Helper()
	return b.call(t, http.MethodPost, "/bot"+token+"/sendMessage", "application/json", body)
}

func TestStartListensOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "localhost:0", "[::]:0", "127.0.0.1"} {
		if srv, err := Start(Config{Addr: addr, Token: token}); err == nil {
			srv.Close()
			t.Errorf("Start(%q) listened, want a refusal: loopback IP addresses only", addr)
		}
	}
	if _, err := Start(Config{Token: ""}); err == nil {
		t.Error("Start without a token succeeded")
	}
	out := &lines{}
	srv, err := Start(Config{Token: token, Out: out}) // the default address
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Errorf("URL() = %q, want http://127.0.0.1:<port>", srv.URL())
	}
}

func TestSendMessageJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := time.Now().Unix()

	code, a := b.sendJSON(t, `{"chat_id":-1001234567890,"text":"Order 42 has shipped","parse_mode":"HTML","disable_notification":true}`)
	if code != http.StatusOK || a.Result.MessageID != 1 || a.Result.Text != "Order 42 has shipped" ||
		a.Result.Chat.ID != -1001234567890 || a.Result.Chat.Type != "supergroup" || a.Result.Date < before {
		t.Errorf("first send: HTTP %d %+v", code, a)
	}
	code, a = b.sendJSON(t, `{"chat_id":"@Ledger_News","text":"second"}`)
	if code != http.StatusOK || a.Result.MessageID != 2 || a.Result.Chat.Type != "channel" || a.Result.Chat.Username != "ledger_news" || a.Result.Chat.ID >= 0 {
		t.Errorf("second send: HTTP %d %+v, want message 2 to a channel", code, a)
	}
	code, a = b.sendJSON(t, `{"chat_id":"42","text":"third"}`)
	if code != http.StatusOK || a.Result.MessageID != 3 || a.Result.Chat.ID != 42 || a.Result.Chat.Type != "private" {
		t.Errorf("third send: HTTP %d %+v", code, a)
	}

	want := []Message{
		{ChatID: int64(-1001234567890), Text: "Order 42 has shipped", ParseMode: "HTML", MessageID: 1},
		{ChatID: "@Ledger_News", Text: "second", MessageID: 2},
		{ChatID: "42", Text: "third", MessageID: 3},
	}
	got := b.srv.Messages()
	if len(got) != len(want) {
		t.Fatalf("Messages() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d = %#v, want %#v", i+1, got[i], want[i])
		}
	}
	if n := strings.Count(b.out.String(), "sent message"); n != 3 {
		t.Errorf("Out has %d lines for sent messages, want 3:\n%s", n, b.out)
	}
}

// TestSendMessageForm: the real API takes its parameters as form fields too, in the body or the
// query string, and method names in any case.
func TestSendMessageForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	form := url.Values{"chat_id": {"42"}, "text": {"hi there"}, "parse_mode": {"MarkdownV2"}}.Encode()
	if code, a := b.call(t, http.MethodPost, "/bot"+token+"/sendMessage", "application/x-www-form-urlencoded", form); code != http.StatusOK || a.Result.MessageID != 1 {
		t.Errorf("urlencoded: HTTP %d %+v", code, a)
	}
	if code, a := b.call(t, http.MethodGet, "/bot"+token+"/sendmessage?chat_id=-42&text=query", "", ""); code != http.StatusOK || a.Result.Chat.Type != "group" {
		t.Errorf("query string: HTTP %d %+v", code, a)
	}
	got := b.srv.Messages()
	want := []Message{{ChatID: "42", Text: "hi there", ParseMode: "MarkdownV2", MessageID: 1}, {ChatID: "-42", Text: "query", MessageID: 2}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Messages() = %+v, want %+v", got, want)
	}
}

// TestRefusals: what the real API refuses, the fake refuses in the same shape, and sends
// nothing.
func TestRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path, contentType, body string
		wantCode                              int
		wantDescription                       string
	}{
		{"wrong token", "POST", "/bot" + wrongToken + "/sendMessage", "application/json", `{"chat_id":42,"text":"hi"}`, 401, "Unauthorized"},
		{"no token", "POST", "/sendMessage", "application/json", `{"chat_id":42,"text":"hi"}`, 404, "Not Found"},
		{"unknown method", "POST", "/bot" + token + "/sendPigeon", "application/json", `{"chat_id":42,"text":"hi"}`, 404, "Not Found: method not found"},
		{"unreadable JSON", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":42,`, 400, "Bad Request: can't parse JSON object"},
		{"JSON not an object", "POST", "/bot" + token + "/sendMessage", "application/json", `[42]`, 400, "Bad Request: can't parse JSON object"},
		{"no chat_id", "POST", "/bot" + token + "/sendMessage", "application/json", `{"text":"hi"}`, 400, "Bad Request: chat_id is empty"},
		{"chat_id not a chat", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":"alice","text":"hi"}`, 400, "Bad Request: chat not found"},
		{"username that cannot exist", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":"@abc","text":"hi"}`, 400, "Bad Request: chat not found"},
		{"chat_id a fraction", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":4.2,"text":"hi"}`, 400, "Bad Request: chat not found"},
		{"no text", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":42}`, 400, "Bad Request: message text is empty"},
		{"text not a string", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":42,"text":7}`, 400, `Bad Request: field "text" must be of type String`},
		{"text too long", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":42,"text":"` + strings.Repeat("é", 4097) + `"}`, 400, "Bad Request: message is too long"},
		{"unknown parse_mode", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":42,"text":"hi","parse_mode":"BBCode"}`, 400, "Bad Request: unsupported parse_mode"},
		{"unknown content type", "POST", "/bot" + token + "/sendMessage", "text/plain", `chat_id=42`, 400, `Bad Request: unsupported Content-Type "text/plain"`},
		{"body too large", "POST", "/bot" + token + "/sendMessage", "application/json", `{"chat_id":42,"text":"` + strings.Repeat("x", maxBody) + `"}`, 413, "Request Entity Too Large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			code, a := b.call(t, tt.method, tt.path, tt.contentType, tt.body)
			if code != tt.wantCode || a.Description != tt.wantDescription {
				t.Errorf("HTTP %d %q, want %d %q", code, a.Description, tt.wantCode, tt.wantDescription)
			}
			if n := len(b.srv.Messages()); n != 0 {
				t.Errorf("the fake sent %d messages, want 0", n)
			}
			if line := fmt.Sprintf("answered %d: %s", tt.wantCode, tt.wantDescription); !strings.Contains(b.out.String(), line) {
				t.Errorf("Out does not report the failure:\n%s", b.out)
			}
		})
	}
}

// TestBehaviours: each switch answers as documented, counts are consumed by the calls they
// answer, and SetBehaviour takes effect from the next call.
func TestBehaviours(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msg := func(chat string) string { return `{"chat_id":` + chat + `,"text":"hi"}` }

	b.srv.SetBehaviour(Behaviour{ServerErrors: 1, TooManyRequests: 2, RetryAfter: 3})
	for i, want := range []int{500, 429, 429, 200} {
		code, a := b.sendJSON(t, msg("42"))
		if code != want {
			t.Fatalf("call %d: HTTP %d %+v, want %d", i+1, code, a, want)
		}
		if code == 429 && (a.Parameters.RetryAfter != 3 || a.Description != "Too Many Requests: retry after 3") {
			t.Errorf("call %d: 429 %+v, want retry_after 3", i+1, a)
		}
		if code == 500 && a.Description != "Internal Server Error" {
			t.Errorf("call %d: 500 %q", i+1, a.Description)
		}
	}

	b.srv.SetBehaviour(Behaviour{ChatNotFound: []string{"-100123", "@Gone_Chat"}, Blocked: []string{"42"},
		Refusals: []Refusal{{Chat: "44", Code: 403, Description: "Forbidden: user is deactivated"}}})
	for _, tt := range []struct {
		chat        string
		code        int
		description string
	}{
		{"-100123", 400, "Bad Request: chat not found"},
		{`"@gone_chat"`, 400, "Bad Request: chat not found"}, // usernames match in any case
		{`"42"`, 403, "Forbidden: bot was blocked by the user"},
		{"44", 403, "Forbidden: user is deactivated"},
		{"43", 200, ""},
	} {
		code, a := b.sendJSON(t, msg(tt.chat))
		if code != tt.code || a.Description != tt.description {
			t.Errorf("chat %s: HTTP %d %q, want %d %q", tt.chat, code, a.Description, tt.code, tt.description)
		}
	}

	b.srv.SetBehaviour(Behaviour{TooManyRequests: EveryCall, RetryAfter: 1})
	for i := range 3 {
		if code, _ := b.sendJSON(t, msg("42")); code != 429 {
			t.Errorf("every call: call %d got HTTP %d, want 429", i+1, code)
		}
	}

	if got := b.srv.Messages(); len(got) != 2 || got[0].MessageID != 1 || got[1].MessageID != 2 || got[1].ChatID != int64(43) {
		t.Errorf("Messages() = %+v, want the two calls answered 200", got)
	}
	if n := strings.Count(b.out.String(), "\n"); n != 4+5+3 {
		t.Errorf("Out has %d lines, want one per call (12):\n%s", n, b.out)
	}
}

// TestHangAfterRead: the request is read whole, nothing is answered, and the client that gives
// up sees its own timeout; Close cuts a call still hanging.
func TestHangAfterRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{HangAfterRead: true})

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL()+"/bot"+token+"/sendMessage", strings.NewReader(`{"chat_id":42,"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("HTTP %d, want no answer", resp.StatusCode)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the client's deadline", err)
	}
	eventually(t, func() bool { return strings.Contains(b.out.String(), "hanging") },
		"Out says the fake read the message and hung")
	if n := len(b.srv.Messages()); n != 0 {
		t.Errorf("the fake recorded %d messages, want 0 (it never answered)", n)
	}

	// A call without a deadline of its own ends when the server closes.
	out := &lines{}
	srv, err := Start(Config{Token: token, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetBehaviour(Behaviour{HangAfterRead: true})
	done := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL()+"/bot"+token+"/sendMessage", "application/json", strings.NewReader(`{"chat_id":42,"text":"hi"}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	eventually(t, func() bool { return strings.Contains(out.String(), "hanging") }, "the call hangs")
	srv.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the hanging call got an answer, want its connection cut")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hanging call did not end when the server closed")
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
