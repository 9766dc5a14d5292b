package httpapi

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// deliveryRequest is the body of POST /v1/deliveries.
type deliveryRequest struct {
	Channel     string          `json:"channel"`
	Recipient   string          `json:"recipient"`
	Payload     json.RawMessage `json:"payload"`
	Priority    string          `json:"priority"`
	MaxAttempts *int            `json:"max_attempts"`
	Window      *windowRequest  `json:"window"`
	SendAt      *string         `json:"send_at"`
	Category    string          `json:"category"`
}

// notificationRequest is the body of POST /v1/notifications.
type notificationRequest struct {
	Payload     json.RawMessage    `json:"payload"`
	Recipients  []recipientRequest `json:"recipients"`
	Priority    string             `json:"priority"`
	MaxAttempts *int               `json:"max_attempts"`
	Window      *windowRequest     `json:"window"`
	SendAt      *string            `json:"send_at"`
	Category    string             `json:"category"`
}

type recipientRequest struct {
	Channel   string         `json:"channel"`
	Recipient string         `json:"recipient"`
	Window    *windowRequest `json:"window"`
}

// deliveryAccepted is the 202 answer of POST /v1/deliveries.
type deliveryAccepted struct {
	ID             string       `json:"id"`
	NotificationID string       `json:"notification_id"`
	State          domain.State `json:"state"`
	Channel        string       `json:"channel"`
	Recipient      string       `json:"recipient"`
	AcceptedAt     time.Time    `json:"accepted_at"`
	// Suppression says what suppressed the delivery (state suppressed).
	Suppression *domain.Suppressed `json:"suppression,omitempty"`
}

// notificationAccepted is the 202 answer of POST /v1/notifications.
type notificationAccepted struct {
	ID         string             `json:"id"`
	Deliveries []acceptedDelivery `json:"deliveries"`
	AcceptedAt time.Time          `json:"accepted_at"`
}

type acceptedDelivery struct {
	ID          string             `json:"id"`
	Channel     string             `json:"channel"`
	Recipient   string             `json:"recipient"`
	State       domain.State       `json:"state"`
	Suppression *domain.Suppressed `json:"suppression,omitempty"`
}

func newNotificationAccepted(res commands.AcceptResult) notificationAccepted {
	out := notificationAccepted{ID: res.NotificationID, AcceptedAt: storedPrecision(res.AcceptedAt),
		Deliveries: make([]acceptedDelivery, len(res.Deliveries))}
	for i, d := range res.Deliveries {
		out.Deliveries[i] = acceptedDelivery{ID: d.ID, Channel: d.Channel, Recipient: d.Recipient, State: deliveryState(res, d),
			Suppression: d.Suppression}
	}
	return out
}

// storedPrecision rounds an acceptance time down to what PostgreSQL keeps (microseconds), so
// the 202 answer shows the accepted_at that the status and audit endpoints will show later. The
// accept command answers with its clock's full precision.
func storedPrecision(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// acceptDelivery is POST /v1/deliveries: a notification with exactly one recipient.
func (s *server) acceptDelivery(w http.ResponseWriter, r *http.Request, tenant string) error {
	key, body, err := s.readAccept(w, r)
	if err != nil {
		return err
	}
	var req deliveryRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	cmd, err := acceptCommand(req.Payload, req.Priority, req.MaxAttempts)
	if err != nil {
		return err
	}
	cmd.Category = req.Category
	if cmd.SendAt, err = parseSendAt(req.SendAt); err != nil {
		return err
	}
	if err := s.checkRecipient("", req.Channel, req.Recipient, cmd.Payload); err != nil {
		return err
	}
	if err := checkWindow("", req.Window.get()); err != nil {
		return err
	}
	cmd.Recipients = []commands.Recipient{{Channel: req.Channel, Recipient: req.Recipient, Window: req.Window.get()}}
	res, err := s.accept(r, tenant, key, body, cmd, req.MaxAttempts != nil)
	if err != nil {
		return fanOutField(err, "payload")
	}
	if len(res.Deliveries) != 1 {
		return fmt.Errorf("accept answered %d deliveries for one recipient", len(res.Deliveries))
	}
	d := res.Deliveries[0]
	w.Header().Set("Location", "/v1/deliveries/"+d.ID)
	s.writeAccepted(w, r, res.Replayed, deliveryAccepted{ID: d.ID, NotificationID: res.NotificationID,
		State: deliveryState(res, d), Channel: d.Channel, Recipient: d.Recipient, AcceptedAt: storedPrecision(res.AcceptedAt),
		Suppression: d.Suppression})
	return nil
}

// acceptNotification is POST /v1/notifications: one payload fanned out to several recipients,
// recorded all or nothing.
func (s *server) acceptNotification(w http.ResponseWriter, r *http.Request, tenant string) error {
	key, body, err := s.readAccept(w, r)
	if err != nil {
		return err
	}
	var req notificationRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	cmd, err := acceptCommand(req.Payload, req.Priority, req.MaxAttempts)
	if err != nil {
		return err
	}
	cmd.Category = req.Category
	if cmd.SendAt, err = parseSendAt(req.SendAt); err != nil {
		return err
	}
	switch {
	case len(req.Recipients) == 0:
		return invalid("recipients", "at least one recipient is required")
	case len(req.Recipients) > maxRecipients:
		return invalid("recipients", "at most %d recipients per notification, got %d", maxRecipients, len(req.Recipients))
	}
	if err := checkWindow("", req.Window.get()); err != nil {
		return err
	}
	// Two spellings of one recipient (Ann <a@example.com> and a@example.com) would send it the
	// notification twice: recipients are compared in their channel's normal form, and a repeat
	// is refused rather than silently merged, since the caller meant something by each entry.
	// The delivery still goes to the recipient as given.
	seen := make(map[[2]string]int, len(req.Recipients))
	for i, rr := range req.Recipients {
		prefix := fmt.Sprintf("recipients[%d]", i)
		if err := s.checkRecipient(prefix+".", rr.Channel, rr.Recipient, cmd.Payload); err != nil {
			return err
		}
		normal := s.cfg.Normalize(rr.Channel, rr.Recipient)
		pair := [2]string{rr.Channel, normal}
		if first, dup := seen[pair]; dup {
			return invalid(prefix, "repeats recipients[%d]: both are %s recipient %q in normal form", first, rr.Channel, normal)
		}
		seen[pair] = i
		if err := checkWindow(prefix+".", rr.Window.get()); err != nil {
			return err
		}
		cmd.Recipients = append(cmd.Recipients, commands.Recipient{Channel: rr.Channel, Recipient: rr.Recipient,
			Window: cmp.Or(rr.Window.get(), req.Window.get())})
	}
	res, err := s.accept(r, tenant, key, body, cmd, req.MaxAttempts != nil)
	if err != nil {
		return fanOutField(err, "recipients")
	}
	s.writeAccepted(w, r, res.Replayed, newNotificationAccepted(res))
	return nil
}

// readAccept checks the headers of an accept request and reads its body, bounded.
func (s *server) readAccept(w http.ResponseWriter, r *http.Request) (key string, body []byte, err error) {
	if len(r.Header.Values(headerIdempotencyKey)) > 1 {
		// Two keys: which one identifies the request is anyone's guess (a proxy may keep
		// either), so neither does.
		return "", nil, invalid(headerIdempotencyKey, "send the header once")
	}
	key = r.Header.Get(headerIdempotencyKey)
	if key == "" {
		return "", nil, invalid(headerIdempotencyKey, "the %s header is required on accept requests, so a retry cannot accept twice", headerIdempotencyKey)
	}
	if err := checkIdempotencyKey(key); err != nil {
		return "", nil, err
	}
	body, err = s.readBody(w, r)
	if err != nil {
		return "", nil, err
	}
	return key, body, nil
}

// checkIdempotencyKey checks the value of an Idempotency-Key header.
func checkIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKeyLen {
		return invalid(headerIdempotencyKey, "at most %d characters, got %d", maxIdempotencyKeyLen, len(key))
	}
	if err := storableText(key); err != nil {
		return invalid(headerIdempotencyKey, "%v", err)
	}
	return nil
}

// readBody reads a JSON request body, up to Config.MaxBodyBytes.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
		return nil, &requestError{kind: errUnsupportedMediaType, field: "Content-Type",
			detail: fmt.Sprintf("send application/json, not %q", ct)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, invalid("", "reading the request body: %v", err)
	}
	return body, nil
}

// isJSON accepts application/json and the structured +json types (application/merge+json and
// the like), with any parameters.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// acceptCommand validates the members both accept bodies share.
func acceptCommand(payload json.RawMessage, priority string, maxAttempts *int) (commands.AcceptNotification, error) {
	var cmd commands.AcceptNotification
	p := bytes.TrimSpace(payload)
	switch {
	case len(p) == 0:
		return cmd, invalid("payload", "is required")
	case p[0] != '{':
		// Workers and receivers address payload members by name; a bare value cannot grow
		// new members later without breaking them.
		return cmd, invalid("payload", "must be a JSON object")
	}
	if err := storableJSON(p); err != nil {
		return cmd, invalid("payload", "%v", err)
	}
	cmd.Payload = p
	cmd.Priority = domain.PriorityNormal
	if priority != "" {
		cmd.Priority = domain.Priority(priority)
		if !cmd.Priority.Valid() {
			return cmd, invalid("priority", "must be high, normal or low, got %q", priority)
		}
	}
	if maxAttempts != nil {
		if *maxAttempts < 1 {
			return cmd, invalid("max_attempts", "must be at least 1, got %d", *maxAttempts)
		}
		cmd.MaxAttempts = *maxAttempts
	}
	return cmd, nil
}

// checkRecipient validates one (channel, recipient) pair with the payload; prefix locates the
// recipient in the body. A channel's refusal of a recipient field is named at its place in the
// body; a payload member is named as it is, since the payload is the notification's own.
func (s *server) checkRecipient(prefix, channel, recipient string, payload json.RawMessage) error {
	check, ok := s.cfg.Channels[channel]
	switch {
	case channel == "":
		return invalid(prefix+"channel", "is required; one of: %s", s.channels)
	case !ok:
		return invalid(prefix+"channel", "unknown channel %q; one of: %s", channel, s.channels)
	case recipient == "":
		return invalid(prefix+"recipient", "is required")
	}
	err := check(recipient, payload)
	var field *commands.InvalidField
	switch {
	case err == nil:
		return nil
	case errors.As(err, &field) && strings.HasPrefix(field.Field, "payload"):
		return invalid(field.Field, "%s", field.Reason)
	case errors.As(err, &field):
		return invalid(prefix+field.Field, "%s", field.Reason)
	}
	return invalid(prefix+"recipient", "%v", err)
}

// accept runs the accept command under the request's fingerprint.
func (s *server) accept(r *http.Request, tenant, key string, body []byte, cmd commands.AcceptNotification, hasMaxAttempts bool) (commands.AcceptResult, error) {
	cmd.Tenant, cmd.RequestKey, cmd.RequestHash = tenant, key, requestHash(r.Method, r.URL.Path, body)
	if s.deps.PaceAccept != nil {
		s.deps.PaceAccept(r.Context())
	}
	res, err := s.deps.Accept.Handle(r.Context(), cmd)
	var field *commands.InvalidField
	if errors.As(err, &field) && (field.Field == "send_at" || field.Field == "category") {
		return res, invalid(field.Field, "%s", field.Reason)
	}
	if err != nil && hasMaxAttempts && errors.Is(err, domain.ErrInvalidDelivery) {
		// Every other rule of the aggregate was checked above; the one the handler adds is the
		// server's maximum number of attempts, so this is the member at fault.
		return res, invalid("max_attempts", "%v", err)
	}
	return res, err
}

// fanOutField names the member at fault when a request would write too much.
func fanOutField(err error, field string) error {
	if errors.Is(err, commands.ErrFanOutTooLarge) {
		return &requestError{kind: err, field: field, detail: err.Error()}
	}
	return err
}

// requestHash fingerprints an accept request for the Idempotency-Key contract. It covers method
// and path as well as the raw body bytes, so the same key sent to the other accept endpoint is a
// different request (422), not a replay of the first.
func requestHash(method, path string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(method + path + "\n"))
	h.Write(body)
	return h.Sum(nil)
}

// writeAccepted answers 202: the work is recorded, not done. A replay says so in a header and
// otherwise gives the first answer unchanged.
func (s *server) writeAccepted(w http.ResponseWriter, r *http.Request, replayed bool, v any) {
	if replayed {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	s.writeJSON(w, r, http.StatusAccepted, v)
}

// decodeJSON decodes exactly one JSON object into v, refusing unknown members: a misspelt
// optional member ("max_attempt") would otherwise be dropped without a word.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("", "the body must hold one JSON object and nothing after it")
	}
	return checkStrings(v)
}

// jsonProblem turns a decoding error into a 400 that names the member when it can.
func jsonProblem(err error) error {
	var named *requestError
	if errors.As(err, &named) {
		return err // a member's own decoder named it (windowRequest)
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("", "the request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syntax):
		return invalid("", "malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalid("", "the body must be a JSON object, not %s", typ.Value)
		}
		return invalid(typ.Field, "must be %s, not %s", jsonKind(typ.Type), typ.Value)
	}
	// encoding/json reports an unknown member only as text.
	if quoted, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(quoted); uerr == nil {
			return invalid(name, "unknown member %q", name)
		}
	}
	return invalid("", "malformed JSON: %v", err)
}

// jsonKind names a Go type the way the API's documentation does.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.String()
}

// writeJSON answers with v as JSON. v is built from our own types, so a marshal failure is a
// programming error answered with 500.
func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		w.Header().Del("Location")
		w.Header().Del(headerIdempotentReplayed)
		s.writeProblem(w, r, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
