// Package twiliofake is a Twilio Messages API for tests and for `ledger sink`: it creates,
// fetches and lists messages as the real API does (paths, basic auth, forms, answers and JSON
// errors), takes each message through its statuses, posts status callbacks signed with
// X-Twilio-Signature exactly as Twilio signs them, and misbehaves on demand (error codes for
// chosen numbers or calls, a create answered too late, undelivered messages, callbacks lost,
// duplicated or delayed), so that the twilio adapter is tested against the protocol rather than
// against its own idea of it.
//
// It listens on loopback only, and posts callbacks to loopback addresses only.
package twiliofake

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/twilio"
)

const (
	// apiVersion is the Messages API's version, the first segment of every path.
	apiVersion = "2010-04-01"
	// maxBody bounds a request body.
	maxBody = 1 << 20
	// maxBodyLength is Twilio's limit on a message body, in UTF-16 code units.
	maxBodyLength = 1600
	// readHeaderTimeout keeps a client that never finishes its headers from holding a
	// goroutine for ever.
	readHeaderTimeout = 10 * time.Second
	// callbackTimeout bounds one callback post, as Twilio's own (15 s) does.
	callbackTimeout = 5 * time.Second
	// Pages of a list, as Twilio sizes them.
	defaultPageSize = 50
	maxPageSize     = 1000
	// rfc2822 is how the API writes its dates.
	rfc2822 = time.RFC1123Z
	// rawDlrDoneDate is the layout of a callback's RawDlrDoneDate.
	rawDlrDoneDate = "0601021504"
)

// Message statuses the fake takes messages through.
const (
	StatusQueued      = "queued"
	StatusSent        = "sent"
	StatusDelivered   = "delivered"
	StatusUndelivered = "undelivered"
	StatusFailed      = "failed"
)

// e164 is a number the fake sends to or takes in a behaviour: + and 8 to 15 digits.
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// Config configures a Server.
type Config struct {
	// Addr is the loopback address to listen on, "127.0.0.1:0" (the default) for any free
	// port. Only loopback IP addresses are taken.
	Addr string
	// AccountSID and AuthToken are the one account's credentials the server accepts (HTTP
	// basic auth; the path's account must be this one too); any other call is answered 401,
	// code 20003 "Authenticate", as Twilio does. The token also signs the callbacks. Both
	// required.
	AccountSID string
	AuthToken  string
	// Out receives one line per message created, per status reached, per callback and per
	// failure answered, for `ledger sink`'s operator; nil is silent. Lines never contain the
	// token, and what clients sent is quoted.
	Out io.Writer
}

// Message is one message the server created, as it stands.
type Message struct {
	SID            string
	To             string
	From           string
	Body           string
	Status         string
	StatusCallback string
	// ErrorCode is the error_code of an undelivered or failed message, 0 otherwise.
	ErrorCode   int
	DateCreated time.Time
	// DateSent is when it was sent to the carrier; zero while queued (and for a failed one).
	DateSent    time.Time
	DateUpdated time.Time
}

// Callback is one status callback the server posted, or lost on purpose.
type Callback struct {
	MessageSID string
	Status     string
	ErrorCode  int
	URL        string
	// Lost says the behaviour lost it: it was not posted.
	Lost bool
	// Answer is the HTTP status the receiver answered, 0 when the post failed (Err says why).
	Answer int
	Err    string
}

// message is a Message with what the server keeps beside it.
type message struct {
	Message
	seq   int
	final FinalRule // Status "" means delivered
	held  bool
	// statusDelay and callbackDelay are the behaviour's at creation.
	statusDelay   time.Duration
	callbackDelay time.Duration
}

// Server is a running fake Messages API.
type Server struct {
	account string
	token   string
	url     string
	srv     *http.Server
	client  *http.Client // posts the callbacks
	// ctx ends on Close: waits, held answers and callbacks in flight return.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	// work counts the calls being answered and the messages' goroutines; Close waits for them,
	// so that nothing is written to Out or posted after it returns.
	work sync.WaitGroup

	outMu sync.Mutex
	out   io.Writer

	mu         sync.Mutex
	closed     bool
	behaviour  Behaviour
	errorsLeft []int // per error rule: creates left to answer, or EveryCall
	callbacksN int   // callbacks counted since SetBehaviour, for LoseEvery and DuplicateEvery
	messages   []*message
	bySID      map[string]*message
	callbacks  []Callback
}

// Start listens on cfg.Addr and serves the Messages API until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.AccountSID == "" || cfg.AuthToken == "" {
		return nil, errors.New("twiliofake: an account SID and an auth token are required")
	}
	if strings.ContainsAny(cfg.AccountSID, ":/?# ") {
		return nil, errors.New("twiliofake: the account SID must not contain ':', '/', '?', '#' or spaces")
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("twiliofake: address %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		// An IP literal only: a name would have to be resolved, and could resolve elsewhere.
		return nil, fmt.Errorf("twiliofake: address %q: want a loopback IP address (127.0.0.1:0, [::1]:0)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("twiliofake: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		account: cfg.AccountSID,
		token:   cfg.AuthToken,
		url:     "http://" + ln.Addr().String(),
		ctx:     ctx,
		cancel:  cancel,
		out:     cfg.Out,
		bySID:   map[string]*message{},
		client:  loopbackClient(),
	}
	s.SetBehaviour(Behaviour{})
	errorLog := io.Discard
	if cfg.Out != nil {
		errorLog = lockedWriter{s}
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          log.New(errorLog, "twiliofake: ", 0),
	}
	go func() { _ = s.srv.Serve(ln) }() // returns ErrServerClosed on Close
	return s, nil
}

// loopbackClient posts callbacks, to loopback addresses only: whatever a StatusCallback names,
// the dial itself refuses any other address, and no proxy is used.
func loopbackClient() *http.Client {
	dialer := &net.Dialer{
		Timeout: callbackTimeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip, err := netip.ParseAddr(host); err != nil || !ip.Unmap().IsLoopback() {
				return fmt.Errorf("twiliofake posts callbacks to loopback addresses only, not %s", address)
			}
			return nil
		},
	}
	return &http.Client{
		Timeout:       callbackTimeout,
		Transport:     &http.Transport{DialContext: dialer.DialContext, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// URL is the base_url to configure the twilio adapter with.
func (s *Server) URL() string { return s.url }

// Close stops the server: held answers are cut, pending transitions and callbacks dropped, and
// it returns once every call being answered and every callback in flight has finished.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		_ = s.srv.Close()
		s.work.Wait()
		s.client.CloseIdleConnections()
	})
}

// SetBehaviour replaces how the server behaves, from the next call on, and restarts the counts
// of its error rules and callbacks.
func (s *Server) SetBehaviour(b Behaviour) {
	left := make([]int, len(b.Errors))
	for i, r := range b.Errors {
		left[i] = r.Calls
		if r.Calls <= 0 {
			left[i] = EveryCall
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviour = b
	s.errorsLeft = left
	s.callbacksN = 0
}

// Release lets the messages held so far (Behaviour.Hold) move on through their statuses.
func (s *Server) Release() {
	s.mu.Lock()
	var held []*message
	for _, m := range s.messages {
		if m.held {
			m.held = false
			held = append(held, m)
		}
	}
	s.mu.Unlock()
	for _, m := range held {
		s.spawn(func() { s.progress(m) })
	}
}

// Messages returns the messages created so far, in the order they were created, as they stand.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	for i, m := range s.messages {
		out[i] = m.Message
	}
	return out
}

// Callbacks returns the status callbacks posted (or lost) so far, in order.
func (s *Server) Callbacks() []Callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.callbacks)
}

// spawn runs f in a goroutine Close waits for, unless the server is closed.
func (s *Server) spawn(f func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.work.Add(1) // under mu, so never after Close's Wait began
	s.mu.Unlock()
	go func() {
		defer s.work.Done()
		f()
	}()
	return true
}

// wait waits d, reporting false when the server closed first.
func (s *Server) wait(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// apiError is an error answer in Twilio's shape.
type apiError struct {
	status  int
	code    int
	message string
}

// knownErrors are the status and message Twilio answers each code with.
var knownErrors = map[int]apiError{
	20003: {status: 401, message: "Authenticate"},
	20004: {status: 405, message: "Method not allowed"},
	20429: {status: 429, message: "Too Many Requests"},
	20500: {status: 500, message: "An internal server error has occurred"},
	21211: {status: 400, message: "The 'To' number %s is not a valid phone number."},
	21408: {status: 400, message: "Permission to send an SMS has not been enabled for the region indicated by the 'To' number: %s."},
	21602: {status: 400, message: "Message body is required."},
	21603: {status: 400, message: "A 'From' phone number is required."},
	21604: {status: 400, message: "A 'To' phone number is required."},
	21609: {status: 400, message: "Invalid StatusCallback url"},
	21610: {status: 400, message: "Attempt to send to unsubscribed recipient"},
	21614: {status: 400, message: "'To' number %s is not a valid mobile number"},
	21617: {status: 400, message: "The concatenated message body exceeds the 1600 character limit."},
}

// errorFor is the answer of code for a create to number to.
func errorFor(code, status int, message, to string) apiError {
	e, ok := knownErrors[code]
	if !ok {
		e = apiError{status: 400, message: fmt.Sprintf("Error %d", code)}
	}
	e.code = code
	if strings.Contains(e.message, "%s") {
		e.message = fmt.Sprintf(e.message, to)
	}
	if status != 0 {
		e.status = status
	}
	if message != "" {
		e.message = message
	}
	return e
}

// serve answers one call.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		panic(http.ErrAbortHandler) // Close is waiting; answer nothing
	}
	s.work.Add(1)
	s.mu.Unlock()
	defer s.work.Done()

	rest, ok := strings.CutPrefix(r.URL.Path, "/"+apiVersion+"/Accounts/")
	account, resource, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		s.fail(w, apiError{status: 404, code: 20404, message: "The requested resource " + r.URL.Path + " was not found"})
		return
	}
	user, pass, hasAuth := r.BasicAuth()
	if !hasAuth || subtle.ConstantTimeCompare([]byte(user), []byte(s.account)) != 1 ||
		subtle.ConstantTimeCompare([]byte(pass), []byte(s.token)) != 1 || account != s.account {
		// The credentials sent are not repeated anywhere: they may be a real account's.
		s.fail(w, errorFor(20003, 0, "", ""))
		return
	}
	switch {
	case resource == "Messages.json" && r.Method == http.MethodPost:
		s.create(w, r)
	case resource == "Messages.json" && r.Method == http.MethodGet:
		s.list(w, r)
	case strings.HasPrefix(resource, "Messages/") && strings.HasSuffix(resource, ".json") && r.Method == http.MethodGet:
		s.fetch(w, r, strings.TrimSuffix(strings.TrimPrefix(resource, "Messages/"), ".json"))
	case resource == "Messages.json" || strings.HasPrefix(resource, "Messages/"):
		s.fail(w, errorFor(20004, 0, "", ""))
	default:
		s.fail(w, apiError{status: 404, code: 20404, message: "The requested resource " + r.URL.Path + " was not found"})
	}
}

// create answers a create: the checks Twilio makes, the behaviour's errors, then the message.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.fail(w, apiError{status: 413, code: 20001, message: "Request Entity Too Large"})
			return
		}
		s.fail(w, apiError{status: 400, code: 20001, message: "Unable to parse the request"})
		return
	}
	to, from, body, callback := r.PostForm.Get("To"), r.PostForm.Get("From"), r.PostForm.Get("Body"), r.PostForm.Get("StatusCallback")
	switch {
	case to == "":
		s.fail(w, errorFor(21604, 0, "", ""))
		return
	case from == "":
		s.fail(w, errorFor(21603, 0, "", ""))
		return
	case body == "":
		s.fail(w, errorFor(21602, 0, "", ""))
		return
	case !e164.MatchString(to):
		s.fail(w, errorFor(21211, 0, "", to))
		return
	case utf16Length(body) > maxBodyLength:
		s.fail(w, errorFor(21617, 0, "", ""))
		return
	case callback != "" && !loopbackURL(callback):
		s.fail(w, errorFor(21609, 0, "Invalid StatusCallback url: twiliofake calls back loopback http(s) URLs only", ""))
		return
	}

	s.mu.Lock()
	if rule, ok := s.takeError(to); ok {
		s.mu.Unlock()
		s.logf("answered error %d to a create for %q", rule.code, to)
		s.fail(w, rule)
		return
	}
	b := s.behaviour
	now := time.Now().UTC().Truncate(time.Second)
	m := &message{
		Message: Message{SID: newSID(), To: to, From: from, Body: body, Status: StatusQueued, StatusCallback: callback,
			DateCreated: now, DateUpdated: now},
		seq:           len(s.messages) + 1,
		final:         finalFor(b.Final, to),
		held:          b.Hold,
		statusDelay:   b.StatusDelay,
		callbackDelay: b.CallbackDelay,
	}
	s.messages = append(s.messages, m)
	s.bySID[m.SID] = m
	answer := s.resource(m.Message)
	s.mu.Unlock()

	s.logf("created %s from %q to %q: %q", m.SID, from, to, body)
	if !m.held {
		s.spawn(func() { s.progress(m) })
	}
	if b.CreateDelay > 0 {
		s.logf("holding the answer for %s for %s", m.SID, b.CreateDelay)
		t := time.NewTimer(b.CreateDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return // the client gave up: the message exists all the same
		case <-s.ctx.Done():
			panic(http.ErrAbortHandler)
		}
	}
	writeJSON(w, http.StatusCreated, answer)
}

// takeError returns the answer of the first error rule that covers a create to number to, and
// consumes one of its calls. Called under mu.
func (s *Server) takeError(to string) (apiError, bool) {
	for i, r := range s.behaviour.Errors {
		if len(r.To) > 0 && !slices.Contains(r.To, to) {
			continue
		}
		switch left := s.errorsLeft[i]; {
		case left == EveryCall:
		case left > 0:
			s.errorsLeft[i]--
		default:
			continue
		}
		return errorFor(r.Code, r.Status, r.Message, to), true
	}
	return apiError{}, false
}

// finalFor is the final rule of a message to number to; the zero rule means delivered.
func finalFor(rules []FinalRule, to string) FinalRule {
	for _, r := range rules {
		if len(r.To) == 0 || slices.Contains(r.To, to) {
			return r
		}
	}
	return FinalRule{}
}

// loopbackURL reports whether a callback URL is http(s) to a loopback IP address or localhost.
func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true // the dial checks where it resolves to
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return err == nil && ip.Unmap().IsLoopback()
}

// newSID is a message sid as Twilio makes them: SM and 32 hex digits.
func newSID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return "SM" + hex.EncodeToString(b)
}

// transition is one status a message reached, for its callback.
type transition struct {
	status string
	code   int
	at     time.Time
}

// progress takes a message through its statuses: sent, then its final status (or straight to
// failed), each after the status delay, and has each transition called back.
func (s *Server) progress(m *message) {
	calls := make(chan transition, 2)
	if !s.spawn(func() { s.callBack(m, calls) }) {
		return
	}
	defer close(calls)
	s.mu.Lock()
	final, delay := m.final, m.statusDelay
	s.mu.Unlock()
	if final.Status != StatusFailed {
		if !s.wait(delay) {
			return
		}
		calls <- s.reach(m, StatusSent, 0)
	}
	if !s.wait(delay) {
		return
	}
	status := final.Status
	if status == "" {
		status = StatusDelivered
	}
	calls <- s.reach(m, status, final.Code)
}

// reach moves a message to status.
func (s *Server) reach(m *message, status string, code int) transition {
	now := time.Now().UTC()
	s.mu.Lock()
	m.Status, m.ErrorCode, m.DateUpdated = status, code, now.Truncate(time.Second)
	if status == StatusSent {
		m.DateSent = m.DateUpdated
	}
	s.mu.Unlock()
	s.logf("%s to %q is %s", m.SID, m.To, status)
	return transition{status: status, code: code, at: now}
}

// callBack posts a message's transitions to its StatusCallback, in order, each the callback
// delay after it happened.
func (s *Server) callBack(m *message, calls <-chan transition) {
	for t := range calls {
		if m.StatusCallback == "" {
			continue
		}
		if !s.wait(time.Until(t.at.Add(m.callbackDelay))) {
			return
		}
		s.post(m, t)
	}
}

// post posts one transition's callback: lost, once or twice, as the behaviour says.
func (s *Server) post(m *message, t transition) {
	s.mu.Lock()
	b := s.behaviour
	s.callbacksN++
	n := s.callbacksN
	s.mu.Unlock()
	record := Callback{MessageSID: m.SID, Status: t.status, ErrorCode: t.code, URL: m.StatusCallback}
	if (b.LoseEvery > 0 && n%b.LoseEvery == 0) || slices.Contains(b.LoseFor, m.To) {
		record.Lost = true
		s.addCallback(record)
		s.logf("lost the %s callback of %s on purpose", t.status, m.SID)
		return
	}
	times := 1
	if b.DuplicateEvery > 0 && n%b.DuplicateEvery == 0 {
		times = 2
	}
	form := url.Values{
		"MessageSid":    {m.SID},
		"SmsSid":        {m.SID},
		"MessageStatus": {t.status},
		"SmsStatus":     {t.status},
		"AccountSid":    {s.account},
		"From":          {m.From},
		"To":            {m.To},
		"ApiVersion":    {apiVersion},
	}
	if t.code != 0 {
		form.Set("ErrorCode", strconv.Itoa(t.code))
	}
	if t.status == StatusDelivered || t.status == StatusUndelivered {
		form.Set("RawDlrDoneDate", t.at.Format(rawDlrDoneDate))
	}
	signature := twilio.Signature(s.token, m.StatusCallback, form)
	idempotency := newSID()[2:] // one per callback: a repeat carries the same, as Twilio's do
	for range times {
		r := record
		r.Answer, r.Err = s.postForm(m.StatusCallback, form, signature, idempotency)
		s.addCallback(r)
		if r.Err != "" {
			s.logf("the %s callback of %s failed: %s", t.status, m.SID, r.Err)
		} else {
			s.logf("called back %s of %s: HTTP %d", t.status, m.SID, r.Answer)
		}
	}
}

// postForm posts a signed form, returning the answer's status or why there is none.
func (s *Server) postForm(target string, form url.Values, signature, idempotency string) (int, string) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, target, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, "build the callback: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	req.Header.Set("User-Agent", "TwilioProxy/1.1")
	req.Header.Set("X-Twilio-Signature", signature)
	req.Header.Set("I-Twilio-Idempotency-Token", idempotency)
	resp, err := s.client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return 0, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, ""
}

func (s *Server) addCallback(c Callback) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callbacks = append(s.callbacks, c)
}

// fetch answers a message by its sid.
func (s *Server) fetch(w http.ResponseWriter, r *http.Request, sid string) {
	s.mu.Lock()
	m, ok := s.bySID[sid]
	var answer map[string]any
	if ok {
		answer = s.resource(m.Message)
	}
	s.mu.Unlock()
	if !ok {
		s.fail(w, apiError{status: 404, code: 20404, message: "The requested resource " + r.URL.Path + " was not found"})
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

// list answers the Messages list: To, From and DateSent filters (DateSent=, DateSent>=,
// DateSent<= a YYYY-MM-DD day in UTC; a message not sent yet has no date_sent, and any date
// filter leaves it out), newest first, in pages of PageSize (50 by default, at most 1000)
// numbered by Page from 0.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	to, from := q.Get("To"), q.Get("From")
	dates := map[string]string{} // "=", ">", "<" to a day
	for key, op := range map[string]string{"DateSent": "=", "DateSent>": ">", "DateSent<": "<"} {
		v := q.Get(key)
		if v == "" {
			continue
		}
		if len(v) > len(time.DateOnly) {
			v = v[:len(time.DateOnly)] // a full timestamp is read as its day
		}
		if _, err := time.Parse(time.DateOnly, v); err != nil {
			s.fail(w, apiError{status: 400, code: 20001, message: "Invalid " + key + ": want YYYY-MM-DD"})
			return
		}
		dates[op] = v
	}
	size, err := strconv.Atoi(q.Get("PageSize"))
	if err != nil || size < 1 {
		size = defaultPageSize
	}
	size = min(size, maxPageSize)
	page, err := strconv.Atoi(q.Get("Page"))
	if err != nil || page < 0 {
		page = 0
	}

	s.mu.Lock()
	var matched []*message
	for _, m := range s.messages {
		if (to != "" && m.To != to) || (from != "" && m.From != from) || !sentWithin(m, dates) {
			continue
		}
		matched = append(matched, m)
	}
	slices.SortFunc(matched, func(a, b *message) int {
		if c := b.DateCreated.Compare(a.DateCreated); c != 0 {
			return c
		}
		return b.seq - a.seq
	})
	start := min(page*size, len(matched))
	end := min(start+size, len(matched))
	resources := make([]map[string]any, 0, end-start)
	for _, m := range matched[start:end] {
		resources = append(resources, s.resource(m.Message))
	}
	var lastSID string
	if end > start {
		lastSID = matched[end-1].SID
	}
	more := end < len(matched)
	s.mu.Unlock()

	base := url.Values{}
	for _, key := range []string{"To", "From", "DateSent", "DateSent>", "DateSent<"} {
		if v := q.Get(key); v != "" {
			base.Set(key, v)
		}
	}
	base.Set("PageSize", strconv.Itoa(size))
	pageURI := func(n int, token string) string {
		v := url.Values{}
		for k, vs := range base {
			v[k] = vs
		}
		v.Set("Page", strconv.Itoa(n))
		if token != "" {
			v.Set("PageToken", token)
		}
		return r.URL.Path + "?" + v.Encode()
	}
	answer := map[string]any{
		"messages":          resources,
		"page":              page,
		"page_size":         size,
		"start":             start,
		"end":               max(end-1, start),
		"uri":               r.URL.RequestURI(),
		"first_page_uri":    pageURI(0, ""),
		"next_page_uri":     nil,
		"previous_page_uri": nil,
	}
	if more {
		answer["next_page_uri"] = pageURI(page+1, "PA"+lastSID)
	}
	if page > 0 {
		answer["previous_page_uri"] = pageURI(page-1, "")
	}
	writeJSON(w, http.StatusOK, answer)
}

// sentWithin applies a list's date filters to a message. Called under mu.
func sentWithin(m *message, dates map[string]string) bool {
	if len(dates) == 0 {
		return true
	}
	if m.DateSent.IsZero() {
		return false
	}
	day := m.DateSent.UTC().Format(time.DateOnly)
	if v, ok := dates["="]; ok && day != v {
		return false
	}
	if v, ok := dates[">"]; ok && day < v {
		return false
	}
	if v, ok := dates["<"]; ok && day > v {
		return false
	}
	return true
}

// resource is a message as the API answers it. Called under mu.
func (s *Server) resource(m Message) map[string]any {
	path := "/" + apiVersion + "/Accounts/" + s.account + "/Messages/" + m.SID
	res := map[string]any{
		"sid":                   m.SID,
		"account_sid":           s.account,
		"to":                    m.To,
		"from":                  m.From,
		"body":                  m.Body,
		"status":                m.Status,
		"num_segments":          strconv.Itoa(segments(m.Body)),
		"num_media":             "0",
		"direction":             "outbound-api",
		"api_version":           apiVersion,
		"price":                 nil,
		"price_unit":            "USD",
		"error_code":            nil,
		"error_message":         nil,
		"messaging_service_sid": nil,
		"date_created":          m.DateCreated.Format(rfc2822),
		"date_updated":          m.DateUpdated.Format(rfc2822),
		"date_sent":             nil,
		"uri":                   path + ".json",
		"subresource_uris": map[string]string{
			"media":    path + "/Media.json",
			"feedback": path + "/Feedback.json",
		},
	}
	if m.ErrorCode != 0 {
		res["error_code"] = m.ErrorCode
	}
	if !m.DateSent.IsZero() {
		res["date_sent"] = m.DateSent.Format(rfc2822)
	}
	return res
}

// segments is roughly how many SMS segments a body takes (160 characters alone, 153 each when
// concatenated).
func segments(body string) int {
	n := utf16Length(body)
	if n <= 160 {
		return 1
	}
	return (n + 152) / 153
}

// utf16Length counts text as UTF-16 does: two units for a character beyond U+FFFF.
func utf16Length(text string) int {
	n := 0
	for _, r := range text {
		n++
		if r > 0xFFFF {
			n++
		}
	}
	return n
}

// fail answers a call with an error in Twilio's shape, and says so on Out.
func (s *Server) fail(w http.ResponseWriter, e apiError) {
	s.logf("answered HTTP %d, error %d: %q", e.status, e.code, e.message)
	writeJSON(w, e.status, map[string]any{
		"code":      e.code,
		"message":   e.message,
		"more_info": "https://www.twilio.com/docs/errors/" + strconv.Itoa(e.code),
		"status":    e.status,
	})
}

// writeJSON writes an answer; a client that went away is no concern of the fake's.
func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// logf writes one line to Out, whole, whatever the calls in flight.
func (s *Server) logf(format string, args ...any) {
	if s.out == nil {
		return
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_, _ = fmt.Fprintf(s.out, "twiliofake: "+format+"\n", args...)
}

// lockedWriter writes net/http's own log lines to Out under the same lock as the fake's.
type lockedWriter struct{ s *Server }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.s.outMu.Lock()
	defer l.s.outMu.Unlock()
	return l.s.out.Write(p)
}
