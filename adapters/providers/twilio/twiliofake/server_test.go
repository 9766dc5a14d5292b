package twiliofake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/twilio"
)

const (
	account    = "AC11111111111111111111111111111111"
	token      = "fakeServerSecret0123456789abcdef"
	wrongToken = "someoneElsesSecret0123456789abcd"
	from       = "+15005550006"
	to         = "+14155550100"
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

// posted is one callback the test's receiver got.
type posted struct {
	header http.Header
	form   url.Values
}

// bundle is a running fake, what it printed, a client for it, and a receiver for its callbacks.
type bundle struct {
	srv         *Server
	out         *lines
	client      *http.Client
	receiver    *httptest.Server
	callbackURL string
	mu          sync.Mutex
	got         []posted
}

// setup starts a fake on a free loopback port and a callback receiver, closed when the test
// ends; whatever the fake printed must not contain a token.
func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{out: &lines{}}
	srv, err := Start(Config{Addr: "127.0.0.1:0", AccountSID: account, AuthToken: token, Out: b.out})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	b.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	b.receiver = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		b.mu.Lock()
		b.got = append(b.got, posted{header: r.Header.Clone(), form: r.PostForm})
		b.mu.Unlock()
	}))
	b.callbackURL = b.receiver.URL + "/v1/receipts/twilio?tenant=acme"
	t.Cleanup(func() {
		b.client.CloseIdleConnections()
		srv.Close()
		b.receiver.Close()
		if s := b.out.String(); strings.Contains(s, "Secret") {
			t.Errorf("the fake printed a token:\n%s", s)
		}
	})
	return b
}

// posts returns the callbacks received so far.
func (b *bundle) posts() []posted {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]posted(nil), b.got...)
}

// answer is a call's status and JSON body.
type answer struct {
	status int
	body   map[string]any
}

// call makes an API call with the account's credentials (or the ones given).
func (b *bundle) call(t *testing.T, method, path string, form url.Values, credentials ...string) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	user, pass := account, token
	if len(credentials) == 2 {
		user, pass = credentials[0], credentials[1]
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil {
		t.Fatalf("%s %s: HTTP %d, the body is not JSON: %v", method, path, resp.StatusCode, err)
	}
	return a
}

const messagesPath = "/2010-04-01/Accounts/" + account + "/Messages.json"

// create creates a message and returns its answer.
func (b *bundle) create(t *testing.T, number, text string) answer {
	t.Helper()
	return b.call(t, http.MethodPost, messagesPath, url.Values{"To": {number}, "From": {from}, "Body": {text}, "StatusCallback": {b.callbackURL}})
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

func TestStartRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{AccountSID: account},
		{AuthToken: token},
		{AccountSID: "AC:1", AuthToken: token},
		{Addr: "0.0.0.0:0", AccountSID: account, AuthToken: token},
		{Addr: "localhost:0", AccountSID: account, AuthToken: token},
	} {
		if srv, err := Start(cfg); err == nil {
			srv.Close()
			t.Errorf("Start(%+v) = nil error, want it refused", cfg)
		}
	}
}

var sidForm = regexp.MustCompile(`^SM[0-9a-f]{32}$`)

// TestCreate: a create is answered 201 with the Message resource as Twilio writes it.
func TestCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.create(t, to, "Your code is 123456")
	if a.status != http.StatusCreated {
		t.Fatalf("create: HTTP %d %v, want 201", a.status, a.body)
	}
	sid, _ := a.body["sid"].(string)
	if !sidForm.MatchString(sid) {
		t.Errorf("sid = %q, want SM and 32 hex digits", sid)
	}
	for key, want := range map[string]any{"status": "queued", "to": to, "from": from, "body": "Your code is 123456",
		"account_sid": account, "direction": "outbound-api", "api_version": "2010-04-01", "error_code": nil, "date_sent": nil,
		"uri": "/2010-04-01/Accounts/" + account + "/Messages/" + sid + ".json", "num_segments": "1"} {
		if a.body[key] != want {
			t.Errorf("%s = %#v, want %#v", key, a.body[key], want)
		}
	}
	created, err := time.Parse(time.RFC1123Z, a.body["date_created"].(string))
	if err != nil || time.Since(created) > time.Minute || !strings.HasSuffix(a.body["date_created"].(string), "+0000") {
		t.Errorf("date_created = %v (%v), want now in RFC 2822, UTC", a.body["date_created"], err)
	}
	m := b.srv.Messages()
	if len(m) != 1 || m[0].SID != sid || m[0].To != to || m[0].From != from || m[0].StatusCallback != b.callbackURL || !m[0].DateCreated.Equal(created) {
		t.Errorf("Messages() = %+v, want the created message", m)
	}
}

// TestCreateRefuses: credentials and parameters are checked as Twilio checks them.
func TestCreateRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	full := url.Values{"To": {to}, "From": {from}, "Body": {"hi"}}
	without := func(key string) url.Values {
		f := url.Values{}
		for k, v := range full {
			if k != key {
				f[k] = v
			}
		}
		return f
	}
	with := func(key, value string) url.Values {
		f := without(key)
		f.Set(key, value)
		return f
	}
	tests := []struct {
		name        string
		path        string
		form        url.Values
		credentials []string
		wantStatus  int
		wantCode    float64
	}{
		{"no credentials", messagesPath, full, []string{"", ""}, 401, 20003},
		{"a wrong token", messagesPath, full, []string{account, wrongToken}, 401, 20003},
		{"another account's path", "/2010-04-01/Accounts/AC22222222222222222222222222222222/Messages.json", full, nil, 401, 20003},
		{"no To", messagesPath, without("To"), nil, 400, 21604},
		{"no From", messagesPath, without("From"), nil, 400, 21603},
		{"no Body", messagesPath, without("Body"), nil, 400, 21602},
		{"To not a number", messagesPath, with("To", "4155550100"), nil, 400, 21211},
		{"Body too long", messagesPath, with("Body", strings.Repeat("😀", 801)), nil, 400, 21617},
		{"StatusCallback not on loopback", messagesPath, with("StatusCallback", "https://ledger.example/r"), nil, 400, 21609},
		{"an unknown resource", "/2010-04-01/Accounts/" + account + "/Calls.json", full, nil, 404, 20404},
		{"another path", "/v1/Messages", full, nil, 404, 20404},
	}
	for _, tt := range tests {
		a := b.call(t, http.MethodPost, tt.path, tt.form, tt.credentials...)
		if a.status != tt.wantStatus || a.body["code"] != tt.wantCode || a.body["status"] != float64(tt.wantStatus) {
			t.Errorf("%s: HTTP %d %v, want %d with code %v", tt.name, a.status, a.body, tt.wantStatus, tt.wantCode)
		}
		if info, _ := a.body["more_info"].(string); !strings.HasSuffix(info, "/errors/"+strings.TrimSuffix(jsonNumber(tt.wantCode), ".0")) {
			t.Errorf("%s: more_info = %q, want Twilio's page of the code", tt.name, info)
		}
	}
	if n := len(b.srv.Messages()); n != 0 {
		t.Errorf("the fake created %d messages, want 0", n)
	}
}

func jsonNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// TestErrorRules: a rule answers the creates it covers, as many as its count, and only those.
func TestErrorRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{Errors: []ErrorRule{
		{Code: 21211, To: []string{"+14155550111"}},
		{Code: 20429, Calls: 2},
	}})
	for i, want := range []struct {
		number string
		status int
		code   any
	}{
		{"+14155550111", 400, float64(21211)},
		{to, 429, float64(20429)},
		{"+14155550111", 400, float64(21211)},
		{to, 429, float64(20429)},
		{to, 201, nil},
		{"+14155550111", 400, float64(21211)},
	} {
		a := b.create(t, want.number, "hi")
		if a.status != want.status || a.body["code"] != want.code {
			t.Errorf("create %d to %s: HTTP %d %v, want %d code %v", i+1, want.number, a.status, a.body, want.status, want.code)
		}
	}
	if n := len(b.srv.Messages()); n != 1 {
		t.Errorf("the fake created %d messages, want 1", n)
	}
	if out := b.out.String(); !strings.Contains(out, `answered error 21211 to a create for "+14155550111"`) {
		t.Errorf("Out = %s, want it to say what it answered", out)
	}
}

// TestFetchAndList: a message is fetched by sid, and listed by To, From and DateSent, newest
// first, in pages; a message not sent yet has no date_sent and the date filter leaves it out.
func TestFetchAndList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var sids []string
	for _, text := range []string{"one", "two", "three"} {
		sids = append(sids, b.create(t, to, text).body["sid"].(string))
	}
	b.create(t, "+14155550199", "elsewhere")
	eventually(t, func() bool {
		for _, m := range b.srv.Messages() {
			if m.Status != StatusDelivered {
				return false
			}
		}
		return true
	}, "every message is delivered")
	b.srv.SetBehaviour(Behaviour{Hold: true})
	held := b.create(t, to, "held").body["sid"].(string)

	a := b.call(t, http.MethodGet, "/2010-04-01/Accounts/"+account+"/Messages/"+sids[0]+".json", nil)
	if a.status != 200 || a.body["sid"] != sids[0] || a.body["status"] != StatusDelivered || a.body["date_sent"] == nil {
		t.Errorf("fetch: HTTP %d %v, want the delivered message", a.status, a.body)
	}
	a = b.call(t, http.MethodGet, "/2010-04-01/Accounts/"+account+"/Messages/SM0.json", nil)
	if a.status != 404 || a.body["code"] != float64(20404) {
		t.Errorf("fetch of an unknown sid: HTTP %d %v, want 404 code 20404", a.status, a.body)
	}

	listed := func(query url.Values) []string {
		var got []string
		path := messagesPath + "?" + query.Encode()
		for path != "" {
			a := b.call(t, http.MethodGet, path, nil)
			if a.status != 200 {
				t.Fatalf("list %s: HTTP %d %v", path, a.status, a.body)
			}
			for _, m := range a.body["messages"].([]any) {
				got = append(got, m.(map[string]any)["sid"].(string))
			}
			path, _ = a.body["next_page_uri"].(string)
		}
		return got
	}
	today := time.Now().UTC().Format(time.DateOnly)
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	newestFirst := []string{held, sids[2], sids[1], sids[0]}
	for name, tt := range map[string]struct {
		query url.Values
		want  []string
	}{
		"To and From, in pages of 1": {url.Values{"To": {to}, "From": {from}, "PageSize": {"1"}}, newestFirst},
		"DateSent>= today":           {url.Values{"To": {to}, "DateSent>": {today}}, newestFirst[1:]},
		"DateSent>= tomorrow":        {url.Values{"To": {to}, "DateSent>": {tomorrow}}, nil},
		"DateSent today":             {url.Values{"To": {to}, "DateSent": {today}, "PageSize": {"2"}}, newestFirst[1:]},
		"DateSent<= today":           {url.Values{"To": {to}, "DateSent<": {today + "T23:59:59Z"}}, newestFirst[1:]},
		"another sender":             {url.Values{"From": {"+15005550007"}}, nil},
	} {
		got := listed(tt.query)
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: listed %v, want %v", name, got, tt.want)
		}
	}
	if a := b.call(t, http.MethodGet, messagesPath+"?DateSent%3E=yesterday", nil); a.status != 400 {
		t.Errorf("a bad date: HTTP %d, want 400", a.status)
	}
}

// TestCallbacks: each transition is posted to the StatusCallback, in order, signed as Twilio
// signs it (over the full URL, query included), with Twilio's parameters.
func TestCallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{Final: []FinalRule{{Status: StatusUndelivered, Code: 30003, To: []string{"+14155550199"}}}})
	delivered := b.create(t, to, "hi").body["sid"].(string)
	undelivered := b.create(t, "+14155550199", "hi").body["sid"].(string)
	eventually(t, func() bool { return len(b.posts()) == 4 }, "four callbacks arrive")

	statuses := map[string][]string{}
	for _, p := range b.posts() {
		if want := twilio.Signature(token, b.callbackURL, p.form); p.header.Get("X-Twilio-Signature") != want {
			t.Errorf("callback %v signed %q, want %q", p.form, p.header.Get("X-Twilio-Signature"), want)
		}
		if p.form.Get("AccountSid") != account || p.form.Get("From") != from || p.form.Get("ApiVersion") != "2010-04-01" ||
			p.form.Get("SmsSid") != p.form.Get("MessageSid") || p.form.Get("SmsStatus") != p.form.Get("MessageStatus") {
			t.Errorf("callback %v, want Twilio's parameters", p.form)
		}
		if p.header.Get("I-Twilio-Idempotency-Token") == "" {
			t.Errorf("callback %v has no idempotency token", p.form)
		}
		sid, status := p.form.Get("MessageSid"), p.form.Get("MessageStatus")
		statuses[sid] = append(statuses[sid], status)
		if code := p.form.Get("ErrorCode"); (status == StatusUndelivered) != (code == "30003") {
			t.Errorf("callback %s %s has ErrorCode %q, want 30003 on the undelivered one only", sid, status, code)
		}
		if hasDone := p.form.Get("RawDlrDoneDate") != ""; hasDone != (status != StatusSent) {
			t.Errorf("callback %s %s: RawDlrDoneDate %q, want it on final statuses only", sid, status, p.form.Get("RawDlrDoneDate"))
		}
	}
	if got := strings.Join(statuses[delivered], ","); got != "sent,delivered" {
		t.Errorf("callbacks of %s: %s, want sent,delivered", delivered, got)
	}
	if got := strings.Join(statuses[undelivered], ","); got != "sent,undelivered" {
		t.Errorf("callbacks of %s: %s, want sent,undelivered", undelivered, got)
	}
	for _, c := range b.srv.Callbacks() {
		if c.Lost || c.Answer != 200 || c.Err != "" || c.URL != b.callbackURL {
			t.Errorf("Callbacks() has %+v, want every one answered 200", c)
		}
	}
}

// TestCallbacksLostAndDuplicated: every n-th callback lost, every callback of chosen numbers
// lost, callbacks posted twice with the same idempotency token.
func TestCallbacksLostAndDuplicated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{LoseFor: []string{"+14155550199"}, DuplicateEvery: 1})
	lostSID := b.create(t, "+14155550199", "hi").body["sid"].(string)
	kept := b.create(t, to, "hi").body["sid"].(string)
	eventually(t, func() bool { return len(b.srv.Callbacks()) == 6 }, "six callbacks are recorded")
	tokens := map[string]int{}
	for _, p := range b.posts() {
		if p.form.Get("MessageSid") == lostSID {
			t.Errorf("a callback of %s arrived, want them all lost", lostSID)
		}
		tokens[p.header.Get("I-Twilio-Idempotency-Token")]++
	}
	if len(b.posts()) != 4 || len(tokens) != 2 {
		t.Errorf("got %d posts with %d idempotency tokens, want each of %s's two callbacks twice", len(b.posts()), len(tokens), kept)
	}

	b2 := setup(t)
	b2.srv.SetBehaviour(Behaviour{LoseEvery: 2})
	b2.create(t, to, "hi")
	eventually(t, func() bool { return len(b2.srv.Callbacks()) == 2 }, "two callbacks are recorded")
	if got := b2.srv.Callbacks(); !got[1].Lost || got[0].Lost || len(b2.posts()) != 1 || b2.posts()[0].form.Get("MessageStatus") != StatusSent {
		t.Errorf("Callbacks() = %+v, posts %v; want the second (delivered) lost", got, b2.posts())
	}
}

// TestCallbackDelay: a lookup can see a status before its callback arrives.
func TestCallbackDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{CallbackDelay: 2 * time.Second})
	b.create(t, to, "hi")
	eventually(t, func() bool { return b.srv.Messages()[0].Status == StatusDelivered }, "the message is delivered")
	if n := len(b.posts()); n != 0 {
		t.Errorf("%d callbacks arrived at once, want them delayed", n)
	}
	eventually(t, func() bool { return len(b.posts()) == 2 }, "the delayed callbacks arrive")
}

// TestHoldAndRelease: held messages stay queued until Release.
func TestHoldAndRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{Hold: true, StatusDelay: 10 * time.Millisecond})
	b.create(t, to, "hi")
	if m := b.srv.Messages()[0]; m.Status != StatusQueued || !m.DateSent.IsZero() {
		t.Errorf("held message %+v, want queued and not sent", m)
	}
	b.srv.Release()
	eventually(t, func() bool { return b.srv.Messages()[0].Status == StatusDelivered }, "the released message is delivered")
	if m := b.srv.Messages()[0]; m.DateSent.IsZero() {
		t.Errorf("delivered message %+v, want a date_sent", m)
	}
}

// TestFailedSkipsSent: a failed message never reached a carrier.
func TestFailedSkipsSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{Final: []FinalRule{{Status: StatusFailed, Code: 30001}}})
	b.create(t, to, "hi")
	eventually(t, func() bool { return len(b.srv.Callbacks()) == 1 }, "one callback")
	if m := b.srv.Messages()[0]; m.Status != StatusFailed || m.ErrorCode != 30001 || !m.DateSent.IsZero() {
		t.Errorf("message %+v, want failed 30001 without date_sent", m)
	}
}

// TestCreateDelay: the message exists before the answer comes, and a client that gives up first
// gets none.
func TestCreateDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{CreateDelay: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL()+messagesPath,
		strings.NewReader(url.Values{"To": {to}, "From": {from}, "Body": {"hi"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(account, token)
	resp, err := b.client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the create was answered HTTP %d, want the client to time out", resp.StatusCode)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do = %v, want the client's deadline", err)
	}
	if n := len(b.srv.Messages()); n != 1 {
		t.Errorf("the fake has %d messages, want the one created before the late answer", n)
	}
}

// TestCloseCutsHeldAnswers: Close returns while a create's answer is held.
func TestCloseCutsHeldAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.SetBehaviour(Behaviour{CreateDelay: time.Hour, CallbackDelay: time.Hour})
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL()+messagesPath,
			strings.NewReader(url.Values{"To": {to}, "From": {from}, "Body": {"hi"}, "StatusCallback": {b.callbackURL}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(account, token)
		resp, err := b.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	eventually(t, func() bool { return len(b.srv.Messages()) == 1 }, "the message is created")
	b.srv.Close()
	if err := <-done; err == nil {
		t.Error("the held create was answered, want it cut")
	}
}

func TestParseBehaviour(t *testing.T) {
	t.Parallel()
	got, err := ParseBehaviour(" error=21211@+15005550001,+15005550002; error=20429*2 ; error=20500:503; delay-create=2s;" +
		"undelivered=30003@+15005550006; failed=30001; hold; status-delay=100ms; callback-delay=250ms; lose-callbacks=3;" +
		"lose-callbacks-for=+15005550009; duplicate-callbacks=2")
	if err != nil {
		t.Fatal(err)
	}
	want := Behaviour{
		Errors: []ErrorRule{
			{Code: 21211, To: []string{"+15005550001", "+15005550002"}},
			{Code: 20429, Calls: 2},
			{Code: 20500, Status: 503},
		},
		CreateDelay: 2 * time.Second,
		Final: []FinalRule{
			{Status: StatusUndelivered, Code: 30003, To: []string{"+15005550006"}},
			{Status: StatusFailed, Code: 30001},
		},
		Hold:           true,
		StatusDelay:    100 * time.Millisecond,
		CallbackDelay:  250 * time.Millisecond,
		LoseEvery:      3,
		LoseFor:        []string{"+15005550009"},
		DuplicateEvery: 2,
	}
	if g, w := jsonOf(got), jsonOf(want); g != w {
		t.Errorf("ParseBehaviour =\n%s\nwant\n%s", g, w)
	}
	if b, err := ParseBehaviour("duplicate-callbacks"); err != nil || b.DuplicateEvery != 1 {
		t.Errorf("duplicate-callbacks = %+v, %v; want every callback twice", b, err)
	}
	if b, err := ParseBehaviour(""); err != nil || jsonOf(b) != jsonOf(Behaviour{}) {
		t.Errorf("empty = %+v, %v; want the zero Behaviour", b, err)
	}

	_, err = ParseBehaviour("error=abc; error=21211@4155550100; error=1:200; delay-create; hold=1; lose-callbacks=0; " +
		"status-delay=soon; unknown; hold; undelivered=x")
	if err == nil {
		t.Fatal("ParseBehaviour accepted bad switches")
	}
	for _, want := range []string{`"error=abc"`, `"4155550100" is not a number`, "not an error status", `"delay-create"`,
		`"hold=1"`, `"lose-callbacks=0"`, `"status-delay=soon"`, `"unknown"`, `"hold" is given twice`, `"undelivered=x"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ParseBehaviour error %q, want it to name %s", err, want)
		}
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
