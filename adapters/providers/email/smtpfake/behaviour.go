package smtpfake

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-smtp"
)

// Stage is a point of the SMTP transaction where the fake can answer a failure.
type Stage string

// The stages a failure can be answered at.
const (
	// StageMail answers the MAIL FROM command.
	StageMail Stage = "mail"
	// StageRcpt answers the RCPT TO command.
	StageRcpt Stage = "rcpt"
	// StageData answers the DATA command itself, before the client sends the message. go-smtp
	// answers DATA with 354 unconditionally (conn.go, handleData), so the fake answers it from
	// the connection, before go-smtp reads the command; inside a STARTTLS session the fake
	// cannot see the command and answers at end of data instead (and says so on Out).
	StageData Stage = "data"
	// StageDataEnd answers the final "." of the message, after reading it whole.
	StageDataEnd Stage = "data-end"
)

// NoEnhancedCode, as Behaviour.EnhancedCode, answers the failure without an enhanced status
// code: "550 User unknown" rather than "550 5.0.0 User unknown".
const NoEnhancedCode = "none"

// dropDuringDataBytes is how much of the message drop-during-data reads before the reset.
const dropDuringDataBytes = 4 << 10

// Behaviour is how the fake misbehaves. The zero Behaviour accepts every message. Its flag
// form (ParseBehaviour, String) is a comma-separated list of items:
//
//	fail=STAGE:CODE[:ENHANCED]  answer CODE (4xx or 5xx) at STAGE: mail, rcpt, data (the DATA
//	                            command) or data-end (after the final "."); ENHANCED is the
//	                            RFC 3463 code, by default CODE's class with .0.0 (4.0.0);
//	                            "none" sends the reply without one ("550 User unknown")
//	drop-during-data            read the first 4 KiB of the message, then reset the connection
//	                            (a client still writing fails at once; a shorter message is
//	                            read whole before the reset)
//	drop-after-data             read the whole message, then drop the connection without a
//	                            reply (the client cannot know whether it was queued)
//	delay=DURATION              wait before answering end of data (a Go duration: 500ms, 45s)
//	times=N                     misbehave for the first N messages only, then accept
//	                            (default: every message)
//
// For example "fail=rcpt:451,times=1", "fail=data-end:550:5.7.1", "drop-after-data" or
// "delay=45s". The empty string is the zero Behaviour.
type Behaviour struct {
	// FailAt is the stage a failure is answered at; empty means none.
	FailAt Stage
	// Code is the failure's reply code, 400 to 599.
	Code int
	// EnhancedCode is the failure's enhanced status code ("4.7.1"); empty means Code's class
	// with .0.0, NoEnhancedCode a reply without one, as servers write some of theirs although
	// they offer ENHANCEDSTATUSCODES.
	EnhancedCode string
	// Text is the failure's reply text; empty means one that names the behaviour.
	Text string
	// DropDuringData resets the connection after reading the start of the message.
	DropDuringData bool
	// DropAfterData drops the connection after reading the whole message, without a reply.
	DropAfterData bool
	// Delay is waited before answering end of data.
	Delay time.Duration
	// Times is how many messages (transactions, counted from their MAIL FROM) misbehave;
	// zero means all of them.
	Times int
}

// IsZero reports whether b accepts every message.
func (b Behaviour) IsZero() bool {
	return b.FailAt == "" && !b.DropDuringData && !b.DropAfterData && b.Delay == 0
}

// Validate reports every contradiction of b at once. A part that could never take effect is
// one (a drop after a failure at RCPT), so that a test cannot believe it tested something.
func (b Behaviour) Validate() error {
	var problems []error
	switch b.FailAt {
	case "":
		if b.Code != 0 || b.EnhancedCode != "" || b.Text != "" {
			problems = append(problems, errors.New("a reply code, enhanced code or text without a stage to fail at"))
		}
	case StageMail, StageRcpt, StageData, StageDataEnd:
		if b.Code < 400 || b.Code > 599 {
			problems = append(problems, fmt.Errorf("fail=%s: code %d is not a failure (4xx or 5xx)", b.FailAt, b.Code))
		} else if b.EnhancedCode != "" && b.EnhancedCode != NoEnhancedCode && !validEnhanced(b.Code, b.EnhancedCode) {
			problems = append(problems, fmt.Errorf("fail=%s: enhanced code %q is not %d.x.y", b.FailAt, b.EnhancedCode, b.Code/100))
		}
		if strings.ContainsAny(b.Text, "\r\n") {
			problems = append(problems, errors.New("the reply text must be one line"))
		}
	default:
		problems = append(problems, fmt.Errorf("fail: unknown stage %q (want mail, rcpt, data or data-end)", b.FailAt))
	}
	early := b.FailAt == StageMail || b.FailAt == StageRcpt || b.FailAt == StageData
	if early && (b.DropDuringData || b.DropAfterData || b.Delay != 0) {
		problems = append(problems, fmt.Errorf("fail=%s ends the transaction before the message: a drop or delay would never happen", b.FailAt))
	}
	if b.DropDuringData && b.DropAfterData {
		problems = append(problems, errors.New("drop-during-data and drop-after-data exclude each other"))
	}
	if (b.DropDuringData || b.DropAfterData) && b.FailAt == StageDataEnd {
		problems = append(problems, errors.New("a dropped connection cannot also answer end of data"))
	}
	if b.DropDuringData && b.Delay != 0 {
		problems = append(problems, errors.New("drop-during-data never reaches end of data: delay would never happen"))
	}
	if b.Delay < 0 {
		problems = append(problems, fmt.Errorf("delay must not be negative, got %s", b.Delay))
	}
	if b.Times < 0 {
		problems = append(problems, fmt.Errorf("times must not be negative, got %d", b.Times))
	}
	if b.Times != 0 && b.IsZero() {
		problems = append(problems, errors.New("times without anything to do that many times"))
	}
	return errors.Join(problems...)
}

// ParseBehaviour parses the flag form of a Behaviour (see Behaviour), as `ledger sink` takes
// it. Every problem is reported at once.
func ParseBehaviour(s string) (Behaviour, error) {
	var (
		b        Behaviour
		problems []error
		seen     = map[string]bool{}
	)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, value, hasValue := strings.Cut(item, "=")
		if seen[key] {
			problems = append(problems, fmt.Errorf("%s is given twice", key))
			continue
		}
		seen[key] = true
		switch key {
		case "fail":
			parts := strings.Split(value, ":")
			if !hasValue || len(parts) < 2 || len(parts) > 3 {
				problems = append(problems, fmt.Errorf("fail=%s: want fail=STAGE:CODE[:ENHANCED], e.g. fail=rcpt:451", value))
				continue
			}
			b.FailAt = Stage(parts[0])
			code, err := strconv.Atoi(parts[1])
			if err != nil {
				problems = append(problems, fmt.Errorf("fail=%s: code %q is not a number", value, parts[1]))
				continue
			}
			b.Code = code
			if len(parts) == 3 {
				b.EnhancedCode = parts[2]
			}
		case "drop-during-data", "drop-after-data":
			if hasValue {
				problems = append(problems, fmt.Errorf("%s takes no value", key))
				continue
			}
			b.DropDuringData = b.DropDuringData || key == "drop-during-data"
			b.DropAfterData = b.DropAfterData || key == "drop-after-data"
		case "delay":
			d, err := time.ParseDuration(value)
			if err != nil || !hasValue {
				problems = append(problems, fmt.Errorf("delay=%s: want a duration such as 500ms or 45s", value))
				continue
			}
			b.Delay = d
		case "times":
			n, err := strconv.Atoi(value)
			if err != nil || !hasValue || n < 1 {
				problems = append(problems, fmt.Errorf("times=%s: want a count of at least 1", value))
				continue
			}
			b.Times = n
		default:
			problems = append(problems, fmt.Errorf("unknown item %q (want fail=, drop-during-data, drop-after-data, delay= or times=)", item))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return Behaviour{}, fmt.Errorf("parse behaviour %q: %w", s, err)
	}
	if err := b.Validate(); err != nil {
		return Behaviour{}, fmt.Errorf("parse behaviour %q: %w", s, err)
	}
	return b, nil
}

// String is b's flag form, which ParseBehaviour reads back (the reply text is not part of
// it).
func (b Behaviour) String() string {
	var items []string
	if b.FailAt != "" {
		item := fmt.Sprintf("fail=%s:%d", b.FailAt, b.Code)
		if b.EnhancedCode != "" {
			item += ":" + b.EnhancedCode
		}
		items = append(items, item)
	}
	if b.DropDuringData {
		items = append(items, "drop-during-data")
	}
	if b.DropAfterData {
		items = append(items, "drop-after-data")
	}
	if b.Delay != 0 {
		items = append(items, "delay="+b.Delay.String())
	}
	if b.Times != 0 {
		items = append(items, "times="+strconv.Itoa(b.Times))
	}
	return strings.Join(items, ",")
}

// enhanced returns the failure's enhanced code as go-smtp takes it (smtp.NoEnhancedCode for
// none).
func (b Behaviour) enhanced() smtp.EnhancedCode {
	switch b.EnhancedCode {
	case "":
		return smtp.EnhancedCode{b.Code / 100, 0, 0}
	case NoEnhancedCode:
		return smtp.NoEnhancedCode
	}
	var e smtp.EnhancedCode
	for i, part := range strings.Split(b.EnhancedCode, ".") {
		e[i], _ = strconv.Atoi(part) // Validate checked the form
	}
	return e
}

// codes returns the failure's reply code and, unless there is none, its enhanced code: "550
// 5.1.1", "550".
func (b Behaviour) codes() string {
	if e := b.enhanced(); e != smtp.NoEnhancedCode {
		return fmt.Sprintf("%d %d.%d.%d", b.Code, e[0], e[1], e[2])
	}
	return strconv.Itoa(b.Code)
}

// reply returns the failure's reply line as the client reads it, without its CRLF.
func (b Behaviour) reply() string { return b.codes() + " " + b.text() }

// text returns the failure's reply text.
func (b Behaviour) text() string {
	if b.Text != "" {
		return b.Text
	}
	return fmt.Sprintf("smtpfake fails %s as told (%s)", b.FailAt, b)
}

// validEnhanced reports whether e is an enhanced status code of code's class: "4.7.1".
func validEnhanced(code int, e string) bool {
	parts := strings.Split(e, ".")
	if len(parts) != 3 || parts[0] != strconv.Itoa(code/100) {
		return false
	}
	for _, p := range parts[1:] {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 999 || len(p) > 3 {
			return false
		}
	}
	return true
}
