// Package vonagefake is a Vonage (Nexmo) SMS API server for tests and for `ledger sink`: it
// speaks POST /sms/json as the real API does (form or JSON parameters, HTTP 200 with the status
// in the body, refusals included), keeps what it was sent, sends delivery receipts (DLRs) to
// each message's callback, and misbehaves on demand (statuses for the first sends or for chosen
// numbers, HTTP failures, a late answer, failed, lost, repeated or late receipts), so that the
// vonage adapter is tested against the protocol rather than against its own idea of it.
//
// It listens on loopback only and sends receipts to loopback addresses only: it accepts one
// account's messages, and a receipt must not leave the machine.
package vonagefake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	// maxBody bounds a request body: an SMS text, even a long one sent in parts, is a few KiB.
	maxBody = 64 << 10
	// maxClientRef is the longest client-ref the SMS API takes.
	maxClientRef = 40
	// maxText is the longest text the fake takes, in characters: Vonage's documented maximum
	// for a concatenated message is a few thousand; past that it answers status 12.
	maxText = 3200
	// readHeaderTimeout keeps a client that never finishes its headers from holding a
	// goroutine for ever.
	readHeaderTimeout = 10 * time.Second
	// receiptTimeout bounds one try of a receipt's delivery.
	receiptTimeout = 5 * time.Second
	// A receipt the callback did not take is tried again (see deliverReceipt).
	receiptTries      = 8
	receiptRetryFirst = 50 * time.Millisecond
	receiptRetryMax   = 2 * time.Second
	// price and network are what the fake says each message cost and which network took it.
	price   = "0.03330000"
	network = "23410"
)

// errorTexts are the statuses the fake answers and the error-text it answers each with, as
// Vonage's SMS API writes them (https://developer.vonage.com/messaging/sms/guides/troubleshooting-sms).
var errorTexts = map[string]string{
	"1":  "Throughput Rate Exceeded - please wait [ 1000 ] and retry",
	"2":  "Missing Parameters",
	"3":  "Invalid Parameters",
	"4":  "Bad Credentials",
	"5":  "Internal Error",
	"6":  "Invalid Message",
	"7":  "Number Barred",
	"8":  "Partner Account Barred",
	"9":  "Partner Quota Exceeded",
	"10": "Too Many Existing Binds",
	"11": "Account Not Enabled For HTTP",
	"12": "Message Too Long",
	"13": "Communication Failed",
	"14": "Invalid Signature",
	"15": "Illegal Sender Address - rejected",
	"22": "Invalid Network Code",
	"23": "Invalid Callback Url",
	"29": "Non White-listed Destination - rejected",
	"32": "Signature And API Secret Disallowed",
	"33": "Number De-activated",
	"34": "Invalid or Missing Msisdn Param",
}

// Config configures a Server.
type Config struct {
	// Addr is the loopback address to listen on, "127.0.0.1:0" (the default) for any free
	// port. Only loopback IP addresses are taken.
	Addr string
	// APIKey and APISecret are the one account the server accepts; a send with others is
	// answered status 4 "Bad Credentials", as the real API does. Both required.
	APIKey    string
	APISecret string
	// Out receives one line per message, refusal and receipt, for `ledger sink`'s operator; nil
	// is silent. Lines never contain the API secret or a callback's query (it holds a token),
	// and what clients sent is quoted.
	Out io.Writer
}

// Message is one send the server answered with the SMS API's body.
type Message struct {
	// MessageID is the id the server answered with for an accepted message ("0A00000000000001",
	// counting up); empty for a refusal.
	MessageID string
	// Status is the status answered: "0" accepted, or the refusal's.
	Status string
	// APIKey, From, To, Text, Type, ClientRef and Callback are the parameters as sent (To as
	// the SMS API reads it, without a +).
	APIKey    string
	From      string
	To        string
	Text      string
	Type      string
	ClientRef string
	Callback  string
	// ReportRequested is status-report-req: false when the client said 0 or false.
	ReportRequested bool
}

// Receipt is one try of a delivery receipt the server sent to a callback, or one it lost on
// purpose.
type Receipt struct {
	MessageID string
	ClientRef string
	To        string
	Status    string
	ErrCode   string
	// Method is how it was sent (ReceiptPost, ReceiptGet, ReceiptJSON).
	Method string
	// Lost says the receipt was dropped by Behaviour.LoseReceipts and never sent.
	Lost bool
	// Try counts the tries of this copy: a callback that answers 429 or 5xx, or does not
	// answer, gets the receipt again, as Vonage retries.
	Try int
	// HTTPStatus is the callback's answer, 0 when there was none (Err says why).
	HTTPStatus int
	Err        string
}

// Server is a running fake SMS API.
type Server struct {
	apiKey    string
	apiSecret string
	url       string
	srv       *http.Server
	receipts  *http.Client
	// closing is closed by Close, so that waiting handlers and receipts return.
	closing   chan struct{}
	closeOnce sync.Once
	// work counts the calls being answered and the receipts being sent; Close waits for them,
	// so that nothing is written to Out after it returns.
	work sync.WaitGroup

	outMu sync.Mutex
	out   io.Writer

	mu        sync.Mutex
	closed    bool
	behaviour Behaviour
	statusN   int // forced statuses left, or EveryCall
	httpN     int // HTTP failures left, or EveryCall
	loseN     int // receipts to lose, or EveryCall
	twiceN    int // receipts to send twice, or EveryCall
	messages  []Message
	sent      []Receipt
	lastID    uint64
}

// Start listens on cfg.Addr and serves the SMS API until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.APIKey == "" || cfg.APISecret == "" {
		return nil, errors.New("vonagefake: an API key and secret are required")
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("vonagefake: address %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		// An IP literal only: a name would have to be resolved, and could resolve elsewhere.
		return nil, fmt.Errorf("vonagefake: address %q: want a loopback IP address (127.0.0.1:0, [::1]:0)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("vonagefake: listen: %w", err)
	}
	s := &Server{
		apiKey:    cfg.APIKey,
		apiSecret: cfg.APISecret,
		url:       "http://" + ln.Addr().String(),
		closing:   make(chan struct{}),
		out:       cfg.Out,
	}
	dialer := &net.Dialer{Timeout: receiptTimeout, Control: loopbackOnly}
	s.receipts = &http.Client{
		Timeout: receiptTimeout,
		// Proxy is nil: a receipt goes straight to this machine, never through a proxy.
		Transport:     &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.SetBehaviour(Behaviour{})
	errorLog := io.Discard
	if cfg.Out != nil {
		errorLog = lockedWriter{s}
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          log.New(errorLog, "vonagefake: ", 0),
	}
	go func() { _ = s.srv.Serve(ln) }() // returns ErrServerClosed on Close
	return s, nil
}

// loopbackOnly refuses to connect a receipt anywhere but this machine, whatever a callback's
// host name resolved to.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("vonagefake sends receipts to loopback addresses only, not %s", host)
	}
	return nil
}

// URL is the base_url to configure the vonage adapter with.
func (s *Server) URL() string { return s.url }

// Close stops the server: waiting answers and receipts not yet sent are cut, and it returns
// once every call being answered and every receipt being sent has finished.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		_ = s.srv.Close()
		s.work.Wait()
		s.receipts.CloseIdleConnections()
	})
}

// SetBehaviour replaces how the server behaves, from the next send on, and restarts its counts.
// Receipts already planned keep the behaviour of their message's time.
func (s *Server) SetBehaviour(b Behaviour) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.NumberStatus = keyed(b.NumberStatus)
	b.Final = keyed(b.Final)
	s.behaviour = b
	s.statusN, s.httpN = b.StatusCalls, b.HTTPCalls
	s.loseN, s.twiceN = b.LoseReceipts, b.DuplicateReceipts
}

// keyed re-keys a map by numbers' one spelling; entries that are no number are dropped (they
// match no send).
func keyed[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for n, v := range m {
		if k, ok := numberKey(n); ok {
			out[k] = v
		}
	}
	return out
}

// Messages returns the sends answered so far, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// Receipts returns the receipts sent (or lost) so far, in the order they were finished.
func (s *Server) Receipts() []Receipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Receipt(nil), s.sent...)
}

// take consumes one use of a count, reporting whether the use is one it covers.
func take(left *int) bool {
	switch {
	case *left == EveryCall:
		return true
	case *left > 0:
		*left--
		return true
	}
	return false
}

// serve answers one call.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		panic(http.ErrAbortHandler) // Close is waiting; answer nothing
	}
	s.work.Add(1) // under mu, so never after Close's Wait began
	s.mu.Unlock()
	defer s.work.Done()

	switch {
	case r.URL.Path != "/sms/json":
		s.logf("answered 404 to %s %q", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		s.logf("answered 405 to %s /sms/json", r.Method)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	p, err := readParams(w, r)
	if err != nil {
		s.logf("answered 400: %v", err)
		http.Error(w, "Bad Request: "+err.Error(), http.StatusBadRequest)
		return
	}

	s.mu.Lock()
	if take(&s.httpN) {
		code := s.behaviour.HTTPStatus
		s.mu.Unlock()
		s.logf("answered HTTP %d to a send to %q", code, p.get("to"))
		http.Error(w, http.StatusText(code), code)
		return
	}
	m, status, errorText := s.decide(p)
	if status == "0" {
		s.lastID++
		m.MessageID = fmt.Sprintf("0A%014X", s.lastID)
	}
	m.Status = status
	s.messages = append(s.messages, m)
	plan := s.planReceipts(m)
	delay := s.behaviour.AnswerDelay
	s.mu.Unlock()

	if status != "0" {
		s.logf("refused a message to %q: status %s %s", m.To, status, errorText)
		entry := map[string]string{"status": status, "error-text": errorText}
		if m.To != "" {
			entry["to"] = m.To
		}
		writeAnswer(w, entry)
		return
	}
	s.logf("accepted message %s from %q to %q (client-ref %q, callback %s): %q", m.MessageID, m.From, m.To, m.ClientRef, callbackName(m.Callback), m.Text)
	s.sendReceipts(m, plan)
	if delay > 0 {
		s.logf("holding the answer for message %s for %s", m.MessageID, delay)
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return // the client gave up; the message went all the same
		case <-s.closing:
			panic(http.ErrAbortHandler)
		}
	}
	entry := map[string]string{
		"to": m.To, "message-id": m.MessageID, "status": "0",
		"remaining-balance": "15.53590000", "message-price": price, "network": network,
	}
	if m.ClientRef != "" {
		entry["client-ref"] = m.ClientRef
	}
	writeAnswer(w, entry)
}

// decide checks a send as the SMS API does and applies the behaviour's statuses: the message
// as read, and the status to answer with its error-text. s.mu is held.
func (s *Server) decide(p params) (Message, string, string) {
	m := Message{
		APIKey: p.get("api_key"), From: p.get("from"), To: strings.TrimPrefix(p.get("to"), "+"),
		Text: p.get("text"), Type: p.get("type"), ClientRef: p.get("client-ref"), Callback: p.get("callback"),
		ReportRequested: true,
	}
	if v := p.get("status-report-req"); v == "0" || strings.EqualFold(v, "false") {
		m.ReportRequested = false
	}
	refuse := func(status, text string) (Message, string, string) { return m, status, text }
	switch {
	case m.APIKey == "":
		return refuse("2", "Missing api_key")
	case p.get("api_secret") == "":
		return refuse("2", "Missing api_secret")
	case m.APIKey != s.apiKey || p.get("api_secret") != s.apiSecret:
		// The credentials sent are not repeated anywhere: they may be a real account's.
		return refuse("4", errorTexts["4"])
	case m.From == "":
		return refuse("2", "Missing from param")
	case m.To == "":
		return refuse("2", "Missing to param")
	case !number.MatchString(m.To):
		return refuse("3", "Invalid to param")
	case m.Type != "" && m.Type != "text" && m.Type != "unicode":
		return refuse("3", "Invalid type param")
	case m.Text == "":
		return refuse("2", "Missing text param")
	case utf8.RuneCountInString(m.Text) > maxText:
		return refuse("12", errorTexts["12"])
	case utf8.RuneCountInString(m.ClientRef) > maxClientRef:
		return refuse("3", "Invalid client-ref param")
	case m.Callback != "" && !loopbackURL(m.Callback):
		return refuse("23", errorTexts["23"]+" (vonagefake sends receipts to loopback URLs only)")
	}
	b := s.behaviour
	if b.Status != "" && take(&s.statusN) {
		return refuse(b.Status, errorTexts[b.Status])
	}
	if st, ok := b.NumberStatus[m.To]; ok {
		return refuse(st, errorTexts[st])
	}
	return m, "0", ""
}

// loopbackURL reports whether a callback is an http(s) URL of this machine.
func loopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// callbackName is a callback for Out: scheme, host and path, without the query that holds a
// token.
func callbackName(raw string) string {
	if raw == "" {
		return "none"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unreadable)"
	}
	return strconv.Quote(u.Scheme + "://" + u.Host + u.EscapedPath())
}

// plannedReceipt is one receipt decided when its message was created.
type plannedReceipt struct {
	dlr   DLR
	lost  bool
	twice bool
}

// receiptPlan is the receipts of one message and how they are sent.
type receiptPlan struct {
	receipts []plannedReceipt
	delay    time.Duration
	method   string
	noRetry  bool
}

// planReceipts decides the receipts of an accepted message, consuming the behaviour's receipt
// counts in message order. s.mu is held.
func (s *Server) planReceipts(m Message) receiptPlan {
	b := s.behaviour
	plan := receiptPlan{delay: b.ReceiptDelay, method: b.ReceiptMethod, noRetry: b.NoReceiptRetry}
	if plan.method == "" {
		plan.method = ReceiptPost
	}
	if m.Status != "0" || m.Callback == "" || !m.ReportRequested {
		return plan
	}
	var dlrs []DLR
	if b.First != "" {
		dlrs = append(dlrs, DLR{Status: b.First})
	}
	final, ok := b.Final[m.To]
	if !ok {
		final = DLR{Status: "delivered"}
	}
	dlrs = append(dlrs, final)
	for _, d := range dlrs {
		if d.ErrCode == "" {
			d.ErrCode = "1"
			if d.Status == "delivered" || d.Status == "accepted" || d.Status == "buffered" {
				d.ErrCode = "0"
			}
		}
		lost := take(&s.loseN)
		twice := !lost && take(&s.twiceN)
		plan.receipts = append(plan.receipts, plannedReceipt{dlr: d, lost: lost, twice: twice})
	}
	return plan
}

// sendReceipts sends a message's receipts in the background, unless the server is closing.
func (s *Server) sendReceipts(m Message, plan receiptPlan) {
	if len(plan.receipts) == 0 {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.work.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.work.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		for _, pr := range plan.receipts {
			if plan.delay > 0 {
				t := time.NewTimer(plan.delay)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			rec := Receipt{MessageID: m.MessageID, ClientRef: m.ClientRef, To: m.To, Status: pr.dlr.Status, ErrCode: pr.dlr.ErrCode, Method: plan.method}
			if pr.lost {
				rec.Lost = true
				s.record(rec)
				s.logf("lost the %s receipt of message %s on purpose", rec.Status, m.MessageID)
				continue
			}
			copies := 1
			if pr.twice {
				copies = 2
			}
			// One receipt has one time: its copies and its tries carry the same timestamps, as a
			// repeated DLR from Vonage does.
			at := time.Now().UTC()
			for range copies {
				if !s.deliverReceipt(ctx, m, pr.dlr, rec, plan, at) {
					return
				}
			}
		}
	}()
}

// deliverReceipt sends one receipt, trying again as Vonage does while the callback answers 429
// or 5xx or does not answer, on a shortened schedule (receiptRetryFirst doubling up to
// receiptRetryMax, receiptTries tries in all, where Vonage starts at 5 seconds and goes on for
// 24 hours). It reports false when the server is closing.
func (s *Server) deliverReceipt(ctx context.Context, m Message, d DLR, rec Receipt, plan receiptPlan, at time.Time) bool {
	wait := receiptRetryFirst
	for try := 1; ; try++ {
		if ctx.Err() != nil {
			return false
		}
		sent := rec
		sent.Try = try
		sent.HTTPStatus, sent.Err = s.postReceipt(ctx, m, d, plan.method, at)
		s.record(sent)
		if sent.Err != "" {
			s.logf("could not send the %s receipt of message %s to %s (try %d): %s", rec.Status, m.MessageID, callbackName(m.Callback), try, sent.Err)
		} else {
			s.logf("sent the %s receipt (err-code %s) of message %s to %s (try %d): HTTP %d", rec.Status, rec.ErrCode, m.MessageID, callbackName(m.Callback), try, sent.HTTPStatus)
		}
		again := sent.HTTPStatus == 0 || sent.HTTPStatus == http.StatusTooManyRequests || sent.HTTPStatus >= 500
		if !again || plan.noRetry || try == receiptTries {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		wait = min(2*wait, receiptRetryMax)
	}
}

// record keeps a receipt for Receipts.
func (s *Server) record(r Receipt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, r)
}

// postReceipt sends one receipt with Vonage's DLR parameters and returns the callback's HTTP
// status, or why there was none. at is the receipt's time, in scts and message-timestamp.
func (s *Server) postReceipt(ctx context.Context, m Message, d DLR, method string, now time.Time) (int, string) {
	fields := map[string]string{
		"msisdn":            m.To,
		"to":                m.From,
		"network-code":      network,
		"messageId":         m.MessageID,
		"price":             price,
		"status":            d.Status,
		"scts":              now.Format("0601021504"),
		"err-code":          d.ErrCode,
		"api-key":           s.apiKey,
		"message-timestamp": now.Format("2006-01-02 15:04:05"),
	}
	if m.ClientRef != "" {
		fields["client-ref"] = m.ClientRef
	}
	form := url.Values{}
	for k, v := range fields {
		form.Set(k, v)
	}
	var req *http.Request
	var err error
	switch method {
	case ReceiptGet:
		target := m.Callback
		if strings.Contains(target, "?") {
			target += "&" + form.Encode()
		} else {
			target += "?" + form.Encode()
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	case ReceiptJSON:
		body, _ := json.Marshal(fields) // a map of strings always encodes
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, m.Callback, strings.NewReader(string(body)))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	default:
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, m.Callback, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if err != nil {
		return 0, "the callback is not a usable URL"
	}
	req.Header.Set("User-Agent", "vonagefake")
	resp, err := s.receipts.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // *url.Error repeats the URL, token included
		}
		return 0, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	return resp.StatusCode, ""
}

// params are a send's parameters, one value each.
type params map[string]string

func (p params) get(k string) string { return p[k] }

// readParams reads a send's parameters the ways the SMS API takes them: a form (urlencoded
// body, or the query) or a JSON object.
func readParams(w http.ResponseWriter, r *http.Request) (params, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	p := params{}
	switch mediaType {
	case "application/json":
		var members map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&members); err != nil {
			return nil, errors.New("the body is not a JSON object")
		}
		for k, raw := range members {
			var str string
			if err := json.Unmarshal(raw, &str); err == nil {
				p[k] = str
				continue
			}
			var num json.Number
			if err := json.Unmarshal(raw, &num); err == nil {
				p[k] = num.String()
				continue
			}
			if string(raw) == "true" || string(raw) == "false" {
				p[k] = string(raw)
				continue
			}
			return nil, fmt.Errorf("parameter %q is not a string", k)
		}
	case "application/x-www-form-urlencoded", "":
		if err := r.ParseForm(); err != nil {
			return nil, errors.New("the body is not a form")
		}
		for k, v := range r.Form {
			p[k] = v[0]
		}
	default:
		return nil, fmt.Errorf("unsupported Content-Type %q", mediaType)
	}
	return p, nil
}

// writeAnswer writes the SMS API's answer for one part: always HTTP 200, the status inside.
func writeAnswer(w http.ResponseWriter, entry map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(map[string]any{"message-count": "1", "messages": []map[string]string{entry}})
}

// logf writes one line to Out, whole, whatever the calls in flight.
func (s *Server) logf(format string, args ...any) {
	if s.out == nil {
		return
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_, _ = fmt.Fprintf(s.out, "vonagefake: "+format+"\n", args...)
}

// lockedWriter writes net/http's own log lines to Out under the same lock as the fake's.
type lockedWriter struct{ s *Server }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.s.outMu.Lock()
	defer l.s.outMu.Unlock()
	return l.s.out.Write(p)
}
