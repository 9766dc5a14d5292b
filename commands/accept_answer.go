package commands

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/deliveryledger/ledger/domain"
)

// The answer an accept stores under its Idempotency-Key (AcceptRecord.Response, the
// accept_requests row of the key) is kept for the tenant's whole idempotency window, one row per
// request: as jsonb a single webhook delivery's answer took 273 bytes (a 24-character URL), its
// field names, two 36-character UUIDs and an RFC 3339 time spelled out, more than half of the
// row. The compact form keeps the same facts in 87:
//
//	byte     acceptAnswerCompact (a format byte; JSON starts with '{')
//	16       notification id
//	8        accepted_at, Unix nanoseconds, big-endian
//	byte     flags: acceptAnswerSendAt
//	8        send_at, Unix nanoseconds, when flagged
//	uvarint  number of deliveries, then for each:
//	16       delivery id
//	string   channel, recipient, state (each a uvarint length, then its bytes)
//	string   the JSON of its suppression, empty for none: suppressed answers are rare, and the
//	         struct's optional members are what JSON's omitempty already encodes well
//
// Every answer stored before this form is JSON, and stays: DecodeAcceptAnswer reads both.
const (
	acceptAnswerCompact byte = 0x01
	acceptAnswerSendAt  byte = 1 << 0
)

// acceptAnswerJSON is the first byte of an answer stored as JSON: an object.
const acceptAnswerJSON byte = '{'

// errAcceptAnswerShort: a compact answer ends within a field.
var errAcceptAnswerShort = errors.New("truncated")

// EncodeAcceptAnswer gives the form of res to store: compact (see above) when every field fits
// it, else JSON, which DecodeAcceptAnswer reads as well. The accept's own ids are canonical
// UUIDs and its times lie well within int64 nanoseconds, so only an answer that did not come from
// AcceptHandler takes JSON. The times are stored as instants: they decode in UTC.
func EncodeAcceptAnswer(res AcceptResult) ([]byte, error) {
	b, ok, err := appendCompactAnswer(make([]byte, 0, 64+80*len(res.Deliveries)), res)
	if err != nil {
		return nil, fmt.Errorf("encode accept answer: %w", err)
	}
	if ok {
		return b, nil
	}
	b, err = json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode accept answer: %w", err)
	}
	return b, nil
}

// appendCompactAnswer appends the compact form of res to b, or reports false when a field does
// not fit it: an id that is not a UUID in its canonical spelling (it would come back spelled
// otherwise), a time out of int64 nanoseconds' range (1678-2262).
func appendCompactAnswer(b []byte, res AcceptResult) ([]byte, bool, error) {
	b = append(b, acceptAnswerCompact)
	var ok bool
	if b, ok = appendUUID(b, res.NotificationID); !ok {
		return nil, false, nil
	}
	if b, ok = appendNanos(b, res.AcceptedAt); !ok {
		return nil, false, nil
	}
	if res.SendAt == nil {
		b = append(b, 0)
	} else if b, ok = appendNanos(append(b, acceptAnswerSendAt), *res.SendAt); !ok {
		return nil, false, nil
	}
	b = binary.AppendUvarint(b, uint64(len(res.Deliveries)))
	for _, d := range res.Deliveries {
		if b, ok = appendUUID(b, d.ID); !ok {
			return nil, false, nil
		}
		b = appendString(b, d.Channel)
		b = appendString(b, d.Recipient)
		b = appendString(b, string(d.State))
		if d.Suppression == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		s, err := json.Marshal(d.Suppression)
		if err != nil {
			return nil, false, err
		}
		b = appendString(b, string(s))
	}
	return b, true, nil
}

func appendUUID(b []byte, s string) ([]byte, bool) {
	id, err := uuid.Parse(s)
	if err != nil || id.String() != s {
		return b, false
	}
	return append(b, id[:]...), true
}

func appendNanos(b []byte, t time.Time) ([]byte, bool) {
	n := t.UnixNano()
	if !time.Unix(0, n).Equal(t) {
		return b, false
	}
	return binary.BigEndian.AppendUint64(b, uint64(n)), true
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// DecodeAcceptAnswer reads a stored answer, in the compact form or in the JSON of the answers
// stored before it.
func DecodeAcceptAnswer(stored []byte) (AcceptResult, error) {
	if len(stored) == 0 {
		return AcceptResult{}, errors.New("decode accept answer: empty")
	}
	switch stored[0] {
	case acceptAnswerJSON:
		var res AcceptResult
		if err := json.Unmarshal(stored, &res); err != nil {
			return AcceptResult{}, fmt.Errorf("decode accept answer: %w", err)
		}
		return res, nil
	case acceptAnswerCompact:
		r := answerReader{b: stored[1:]}
		res := r.result()
		if r.err == nil && len(r.b) > 0 {
			r.err = fmt.Errorf("%d bytes after the answer", len(r.b))
		}
		if r.err != nil {
			return AcceptResult{}, fmt.Errorf("decode accept answer: %w", r.err)
		}
		return res, nil
	}
	return AcceptResult{}, fmt.Errorf("decode accept answer: unknown format 0x%02x", stored[0])
}

// answerReader reads the fields of a compact answer in turn; the first failure sticks, and the
// fields read after it are zero.
type answerReader struct {
	b   []byte
	err error
}

func (r *answerReader) result() AcceptResult {
	res := AcceptResult{NotificationID: r.uuid(), AcceptedAt: r.time()}
	flags := r.byte()
	if flags&^acceptAnswerSendAt != 0 {
		r.fail(fmt.Errorf("unknown flags 0x%02x", flags))
	}
	if flags&acceptAnswerSendAt != 0 {
		sendAt := r.time()
		res.SendAt = &sendAt
	}
	n := r.uvarint()
	// A delivery takes 20 bytes at least (its id and four lengths): a count beyond what is
	// left is a broken answer, not a reason to allocate.
	if r.err == nil && n > uint64(len(r.b)/20) {
		r.fail(fmt.Errorf("%d deliveries in %d bytes", n, len(r.b)))
	}
	for range n {
		if r.err != nil {
			break
		}
		d := AcceptedDelivery{ID: r.uuid(), Channel: r.string(), Recipient: r.string(), State: domain.State(r.string())}
		if s := r.string(); s != "" && r.err == nil {
			d.Suppression = &domain.Suppressed{}
			if err := json.Unmarshal([]byte(s), d.Suppression); err != nil {
				r.fail(fmt.Errorf("suppression of delivery %s: %w", d.ID, err))
			}
		}
		res.Deliveries = append(res.Deliveries, d)
	}
	return res
}

func (r *answerReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *answerReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail(errAcceptAnswerShort)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *answerReader) byte() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *answerReader) uuid() string {
	b := r.take(16)
	if b == nil {
		return ""
	}
	return uuid.UUID(b).String()
}

func (r *answerReader) time() time.Time {
	b := r.take(8)
	if b == nil {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b))).UTC()
}

func (r *answerReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	n, size := binary.Uvarint(r.b)
	if size <= 0 {
		r.fail(errAcceptAnswerShort)
		return 0
	}
	r.b = r.b[size:]
	return n
}

func (r *answerReader) string() string {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.fail(errAcceptAnswerShort)
	}
	return string(r.take(int(n)))
}
