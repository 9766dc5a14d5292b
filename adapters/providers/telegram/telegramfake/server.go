// Package telegramfake is a Telegram Bot API server for tests and for `ledger sink`: it speaks
// sendMessage as the real API does (paths, bodies, answers and errors), keeps what it was sent,
// and misbehaves on demand (flood control, server errors, unknown or blocking chats, a hang
// after reading the request), so that the telegram adapter is tested against the protocol
// rather than against its own idea of it.
package telegramfake

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	// maxBody bounds a request body, like the real API's limit on parameters of text methods
	// (it answers 413 beyond it).
	maxBody = 1 << 20
	// maxTextLength is Telegram's limit on a message's text, in characters.
	maxTextLength = 4096
	// readHeaderTimeout keeps a client that never finishes its headers from holding a
	// goroutine for ever.
	readHeaderTimeout = 10 * time.Second
)

// Config configures a Server.
type Config struct {
	// Addr is the loopback address to listen on, "127.0.0.1:0" (the default) for any free
	// port. Only loopback addresses are taken: the fake accepts one token and no one else's
	// messages.
	Addr string
	// Token is the one bot token the server accepts; a call with any other is answered 401
	// {"ok":false,"error_code":401,"description":"Unauthorized"}, as the real API does.
	// Required.
	Token string
	// Out receives one line per message sent and per failure answered, for `ledger sink`'s
	// operator; nil is silent. Lines never contain a token, and what clients sent is quoted.
	Out io.Writer
}

// Message is one message the server sent.
type Message struct {
	// ChatID is chat_id as the request sent it: an int64 for a JSON number, a string for a
	// JSON string or a form field.
	ChatID any
	// Text is the message's text as sent.
	Text string
	// ParseMode is the parse_mode sent, "" without one.
	ParseMode string
	// MessageID is the id the server answered with: 1, 2, 3... in the order it sent them.
	MessageID int64
}

// Server is a running fake Bot API.
type Server struct {
	token string
	botID int64
	url   string
	srv   *http.Server
	// closing is closed by Close, so that hanging handlers return.
	closing   chan struct{}
	closeOnce sync.Once
	// handlers counts the calls being answered; Close waits for them, so that nothing is
	// written to Out after it returns.
	handlers sync.WaitGroup

	outMu sync.Mutex
	out   io.Writer

	mu         sync.Mutex
	closed     bool
	behaviour  Behaviour
	tooMany    int // 429s left to answer, or EveryCall
	errors500  int // 500s left to answer, or EveryCall
	notFound   map[string]bool
	blocked    map[string]bool
	refusals   map[string]Refusal
	messages   []Message
	lastSentID int64
}

// Start listens on cfg.Addr and serves the Bot API until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Token == "" {
		return nil, errors.New("telegramfake: a token is required")
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("telegramfake: address %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		// An IP literal only: a name would have to be resolved, and could resolve elsewhere.
		return nil, fmt.Errorf("telegramfake: address %q: want a loopback IP address (127.0.0.1:0, [::1]:0)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("telegramfake: listen: %w", err)
	}
	s := &Server{
		token:   cfg.Token,
		url:     "http://" + ln.Addr().String(),
		closing: make(chan struct{}),
		out:     cfg.Out,
	}
	if id, _, ok := strings.Cut(cfg.Token, ":"); ok {
		s.botID, _ = strconv.ParseInt(id, 10, 64)
	}
	s.SetBehaviour(Behaviour{})
	errorLog := io.Discard
	if cfg.Out != nil {
		errorLog = lockedWriter{s}
	}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serve),
		ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog:          log.New(errorLog, "telegramfake: ", 0),
	}
	go func() { _ = s.srv.Serve(ln) }() // returns ErrServerClosed on Close
	return s, nil
}

// URL is the base_url to configure the telegram adapter with.
func (s *Server) URL() string { return s.url }

// Close stops the server: hanging calls are cut, and it returns once every call being
// answered has finished.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		_ = s.srv.Close()
		s.handlers.Wait()
	})
}

// SetBehaviour replaces how the server behaves, from the next call on, and restarts the counts
// of calls answered 429 and 500.
func (s *Server) SetBehaviour(b Behaviour) {
	notFound, blocked := chatSet(b.ChatNotFound), chatSet(b.Blocked)
	refusals := make(map[string]Refusal, len(b.Refusals))
	for _, r := range b.Refusals {
		if k, ok := chatKey(r.Chat); ok {
			refusals[k] = r
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behaviour = b
	s.tooMany, s.errors500 = b.TooManyRequests, b.ServerErrors
	s.notFound, s.blocked, s.refusals = notFound, blocked, refusals
}

// chatSet keys chats by their one spelling; entries that are no chat are ignored (they match
// no call).
func chatSet(chats []string) map[string]bool {
	set := make(map[string]bool, len(chats))
	for _, c := range chats {
		if k, ok := chatKey(c); ok {
			set[k] = true
		}
	}
	return set
}

// Messages returns the messages sent so far, in the order they were sent.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// request is a sendMessage call as the server read it.
type request struct {
	chatID    any    // int64 or string, as sent
	chat      string // chatKey of chatID
	text      string
	parseMode string
}

// apiError is an answer that is not ok, in the Bot API's shape.
type apiError struct {
	code        int
	description string
	retryAfter  *int
}

// serve answers one call.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		panic(http.ErrAbortHandler) // Close is waiting; answer nothing
	}
	s.handlers.Add(1) // under mu, so never after Close's Wait began
	s.mu.Unlock()
	defer s.handlers.Done()

	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, method, ok2 := strings.Cut(rest, "/")
	switch {
	case !ok || !ok2:
		s.fail(w, nil, apiError{code: http.StatusNotFound, description: "Not Found"})
		return
	case token != s.token:
		// The token sent is not repeated anywhere: it may be a real bot's.
		s.fail(w, nil, apiError{code: http.StatusUnauthorized, description: "Unauthorized"})
		return
	case !strings.EqualFold(method, "sendMessage"):
		// Method names are case-insensitive in the real API.
		s.fail(w, nil, apiError{code: http.StatusNotFound, description: "Not Found: method not found"})
		return
	}

	req, failure := readRequest(w, r)
	if failure != nil {
		s.fail(w, nil, *failure)
		return
	}

	s.mu.Lock()
	b := s.behaviour
	var answer *apiError
	switch {
	case b.HangAfterRead:
	case take(&s.errors500):
		answer = &apiError{code: http.StatusInternalServerError, description: "Internal Server Error"}
	case take(&s.tooMany):
		secs := b.RetryAfter
		answer = &apiError{code: http.StatusTooManyRequests, description: fmt.Sprintf("Too Many Requests: retry after %d", secs), retryAfter: &secs}
	case s.notFound[req.chat]:
		answer = &apiError{code: http.StatusBadRequest, description: "Bad Request: chat not found"}
	case s.blocked[req.chat]:
		answer = &apiError{code: http.StatusForbidden, description: "Forbidden: bot was blocked by the user"}
	case s.refusals[req.chat].Code != 0:
		r := s.refusals[req.chat]
		answer = &apiError{code: r.Code, description: r.Description}
	}
	var sent Message
	if !b.HangAfterRead && answer == nil {
		s.lastSentID++
		sent = Message{ChatID: req.chatID, Text: req.text, ParseMode: req.parseMode, MessageID: s.lastSentID}
		s.messages = append(s.messages, sent)
	}
	s.mu.Unlock()

	switch {
	case b.HangAfterRead:
		s.logf("read a message for chat %q, hanging until the client gives up", req.chat)
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		// Returning normally would send an empty 200; cut the connection instead.
		panic(http.ErrAbortHandler)
	case answer != nil:
		s.fail(w, &req, *answer)
	default:
		s.logf("sent message %d to chat %q (parse_mode %q): %q", sent.MessageID, req.chat, req.parseMode, req.text)
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "result": s.result(req, sent)})
	}
}

// take consumes one call of a count, reporting whether the call is one it covers.
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

// result is the Message object the real API answers sendMessage with (the members a client
// may read).
func (s *Server) result(req request, sent Message) map[string]any {
	chat := map[string]any{"id": chatNumber(req.chat)}
	switch {
	case strings.HasPrefix(req.chat, "@"):
		chat["type"], chat["username"] = "channel", strings.TrimPrefix(req.chat, "@")
	case strings.HasPrefix(req.chat, "-100"):
		chat["type"] = "supergroup"
	case strings.HasPrefix(req.chat, "-"):
		chat["type"] = "group"
	default:
		chat["type"] = "private"
	}
	return map[string]any{
		"message_id": sent.MessageID,
		"from":       map[string]any{"id": s.botID, "is_bot": true, "first_name": "telegramfake"},
		"chat":       chat,
		"date":       time.Now().Unix(),
		"text":       sent.Text,
	}
}

// chatNumber is the numeric id of a chat key: the id itself, or for @username a stable
// channel-like id, as the real API answers with the channel's id.
func chatNumber(key string) int64 {
	if id, err := strconv.ParseInt(key, 10, 64); err == nil {
		return id
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return -1000000000000 - int64(h.Sum64()%1000000000000)
}

// readRequest reads a sendMessage call's parameters the ways the real API takes them: a JSON
// body, or form fields (urlencoded or multipart body, or the query string).
func readRequest(w http.ResponseWriter, r *http.Request) (request, *apiError) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var (
		req       request
		hasChatID bool
	)
	switch mediaType {
	case "application/json":
		var members map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&members); err != nil {
			return request{}, readFailure(err, "Bad Request: can't parse JSON object")
		}
		if raw, ok := members["chat_id"]; ok && string(raw) != "null" {
			hasChatID = true
			var asString string
			if err := json.Unmarshal(raw, &asString); err == nil {
				req.chatID = asString
			} else if id, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
				req.chatID = id
			} else {
				return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: chat not found"}
			}
		}
		if raw, ok := members["text"]; ok && json.Unmarshal(raw, &req.text) != nil {
			return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: field \"text\" must be of type String"}
		}
		if raw, ok := members["parse_mode"]; ok && json.Unmarshal(raw, &req.parseMode) != nil {
			return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: field \"parse_mode\" must be of type String"}
		}
	case "multipart/form-data", "application/x-www-form-urlencoded", "":
		var err error
		if mediaType == "multipart/form-data" {
			err = r.ParseMultipartForm(maxBody)
		} else {
			err = r.ParseForm()
		}
		if err != nil {
			return request{}, readFailure(err, "Bad Request: can't parse request body")
		}
		if v := r.Form["chat_id"]; len(v) > 0 {
			hasChatID, req.chatID = true, v[0]
		}
		req.text, req.parseMode = r.FormValue("text"), r.FormValue("parse_mode")
	default:
		return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: unsupported Content-Type " + strconv.Quote(mediaType)}
	}

	if !hasChatID {
		return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: chat_id is empty"}
	}
	var ok bool
	switch id := req.chatID.(type) {
	case int64:
		req.chat, ok = chatKey(strconv.FormatInt(id, 10))
	case string:
		req.chat, ok = chatKey(id)
	}
	switch {
	case !ok, strings.HasPrefix(req.chat, "@") && !username.MatchString(req.chat):
		// No chat has that name: the real API answers so for any username it does not know.
		return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: chat not found"}
	case strings.TrimSpace(req.text) == "":
		return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: message text is empty"}
	case utf8.RuneCountInString(req.text) > maxTextLength:
		return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: message is too long"}
	}
	switch strings.ToLower(req.parseMode) {
	case "", "html", "markdownv2", "markdown":
	default:
		return request{}, &apiError{code: http.StatusBadRequest, description: "Bad Request: unsupported parse_mode"}
	}
	return req, nil
}

// readFailure answers a body that could not be read: too large (413, as the real API does), or
// not what its Content-Type says (400 with what went wrong).
func readFailure(err error, description string) *apiError {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &apiError{code: http.StatusRequestEntityTooLarge, description: "Request Entity Too Large"}
	}
	return &apiError{code: http.StatusBadRequest, description: description}
}

// fail answers a call with an error in the Bot API's shape, and says so on Out.
func (s *Server) fail(w http.ResponseWriter, req *request, e apiError) {
	body := map[string]any{"ok": false, "error_code": e.code, "description": e.description}
	if e.retryAfter != nil {
		body["parameters"] = map[string]any{"retry_after": *e.retryAfter}
		w.Header().Set("Retry-After", strconv.Itoa(*e.retryAfter))
	}
	if req != nil {
		s.logf("answered %d to chat %q: %s", e.code, req.chat, e.description)
	} else {
		s.logf("answered %d: %s", e.code, e.description)
	}
	writeJSON(w, e.code, body)
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
	_, _ = fmt.Fprintf(s.out, "telegramfake: "+format+"\n", args...)
}

// lockedWriter writes net/http's own log lines to Out under the same lock as the fake's.
type lockedWriter struct{ s *Server }

func (l lockedWriter) Write(p []byte) (int, error) {
	l.s.outMu.Lock()
	defer l.s.outMu.Unlock()
	return l.s.out.Write(p)
}
