package twiliofake

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// EveryCall, as ErrorRule.Calls, means every create the rule covers.
const EveryCall = -1

// Behaviour says how the server misbehaves. The zero Behaviour creates every well-formed message
// and takes it through sent to delivered at once, posting a signed callback for each step to the
// message's StatusCallback. SetBehaviour applies a Behaviour from the next call on and starts
// its counts afresh; a message already created keeps the final status, hold and delays it was
// created with.
type Behaviour struct {
	// Errors answer creates with an error instead of creating the message: the first rule that
	// covers a create answers it, and a count is consumed only by the creates it answers.
	Errors []ErrorRule
	// CreateDelay creates the message, then holds the answer this long (or until the client
	// gives up): the "timeout after the request was written" case, in which the message exists
	// and the client does not know its sid.
	CreateDelay time.Duration
	// Final says where messages end up; the first rule that covers a message's To decides, and
	// a message no rule covers is delivered.
	Final []FinalRule
	// Hold keeps created messages queued until Release: for tests that look at a message before
	// it moves on.
	Hold bool
	// StatusDelay is the wait before each status transition (queued to sent, sent to final).
	StatusDelay time.Duration
	// CallbackDelay is the wait between a transition and its callback, so that a lookup may see
	// a status before its callback arrives, as with Twilio.
	CallbackDelay time.Duration
	// LoseEvery loses every n-th callback (counted across messages, from SetBehaviour on): it
	// is not posted. 0 loses none.
	LoseEvery int
	// LoseFor loses every callback of messages to these numbers.
	LoseFor []string
	// DuplicateEvery posts every n-th callback twice: 1 every callback, 0 none.
	DuplicateEvery int
}

// ErrorRule answers creates with one of Twilio's errors.
type ErrorRule struct {
	// Code is Twilio's error code: 21211 invalid 'To' number, 21408 region not enabled, 21610
	// unsubscribed recipient, 21614 not a mobile number, 20429 too many requests, 20500
	// internal error, 20003 authenticate, or any other.
	Code int
	// Status is the HTTP status; 0 means the code's own (400 for 21xxx, 429 for 20429, 500 for
	// 20500, 401 for 20003).
	Status int
	// Message is the error's message; "" means Twilio's for the code.
	Message string
	// Calls is how many creates the rule answers: 0 or EveryCall every one it covers, n the
	// next n.
	Calls int
	// To lists the numbers the rule covers; empty covers every number.
	To []string
}

// FinalRule sends messages to a final status other than delivered.
type FinalRule struct {
	// Status is "undelivered" (the carrier could not deliver it) or "failed" (Twilio could not
	// send it: no sent step).
	Status string
	// Code is the message's error_code (30003 unreachable handset, 30005 unknown handset, 30006
	// landline, 30007 filtered...).
	Code int
	// To lists the numbers the rule covers; empty covers every message.
	To []string
}

// ParseBehaviour reads a Behaviour from a flag value (`ledger sink`): switches separated by
// semicolons, spaces around them ignored; the empty string is the zero Behaviour. Switches:
//
//	error=<code>[:<status>][*<calls>][@<number>,...]
//	                             answer creates with Twilio's error <code> (HTTP <status>, by
//	                             default the code's own), for the next <calls> creates or every
//	                             one, to these numbers or to any; may be given several times
//	delay-create=<duration>      create the message, then answer only after <duration>
//	undelivered=<code>[@<number>,...]
//	failed=<code>[@<number>,...] end these numbers' messages (or every message) undelivered or
//	                             failed with error_code <code>, instead of delivered; may be
//	                             given several times
//	hold                         keep created messages queued until released
//	status-delay=<duration>      wait before each status transition
//	callback-delay=<duration>    wait between a transition and its callback
//	lose-callbacks=<n>           lose every n-th callback
//	lose-callbacks-for=<number>,...
//	                             lose every callback of messages to these numbers
//	duplicate-callbacks[=<n>]    post every callback (or every n-th) twice
//
// Numbers are in E.164 form; durations as Go writes them (250ms, 2s). For example
// "error=21211@+15005550001; error=20429*2; undelivered=30003@+15005550006;
// callback-delay=200ms; lose-callbacks=3". Every problem is reported at once; a switch other
// than error, undelivered and failed given twice is one of them.
func ParseBehaviour(s string) (Behaviour, error) {
	var (
		b        Behaviour
		problems []error
		seen     = map[string]bool{}
	)
	for item := range strings.SplitSeq(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, hasValue := strings.Cut(item, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		repeatable := name == "error" || name == "undelivered" || name == "failed"
		if seen[name] && !repeatable {
			problems = append(problems, fmt.Errorf("behaviour %q is given twice", name))
			continue
		}
		seen[name] = true
		var err error
		switch name {
		case "error":
			var r ErrorRule
			r, err = parseErrorRule(value)
			b.Errors = append(b.Errors, r)
		case "undelivered", "failed":
			var r FinalRule
			r, err = parseFinalRule(name, value)
			b.Final = append(b.Final, r)
		case "delay-create":
			b.CreateDelay, err = parseDuration(value, hasValue)
		case "status-delay":
			b.StatusDelay, err = parseDuration(value, hasValue)
		case "callback-delay":
			b.CallbackDelay, err = parseDuration(value, hasValue)
		case "hold":
			if hasValue {
				err = errors.New("takes no value")
			}
			b.Hold = true
		case "lose-callbacks":
			b.LoseEvery, err = positive(value)
		case "lose-callbacks-for":
			b.LoseFor, err = parseNumbers(value)
		case "duplicate-callbacks":
			b.DuplicateEvery = 1
			if hasValue {
				b.DuplicateEvery, err = positive(value)
			}
		default:
			err = errors.New("unknown behaviour (want error, delay-create, undelivered, failed, hold, status-delay, callback-delay, lose-callbacks, lose-callbacks-for or duplicate-callbacks)")
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("behaviour %q: %w", item, err))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return Behaviour{}, err
	}
	return b, nil
}

// errorRule is "<code>[:<status>][*<calls>][@<numbers>]".
var errorRule = regexp.MustCompile(`^([0-9]+)(?::([0-9]{3}))?(?:\*([0-9]+))?(?:@(.+))?$`)

// parseErrorRule reads an error switch's value.
func parseErrorRule(value string) (ErrorRule, error) {
	m := errorRule.FindStringSubmatch(value)
	if m == nil {
		return ErrorRule{}, errors.New("want error=<code>[:<http status>][*<calls>][@<number>,...], e.g. error=21211@+15005550001")
	}
	var r ErrorRule
	r.Code, _ = strconv.Atoi(m[1])
	if m[2] != "" {
		r.Status, _ = strconv.Atoi(m[2])
		if r.Status < 400 || r.Status > 599 {
			return ErrorRule{}, fmt.Errorf("HTTP status %d is not an error status", r.Status)
		}
	}
	if m[3] != "" {
		n, err := positive(m[3])
		if err != nil {
			return ErrorRule{}, err
		}
		r.Calls = n
	}
	if m[4] != "" {
		numbers, err := parseNumbers(m[4])
		if err != nil {
			return ErrorRule{}, err
		}
		r.To = numbers
	}
	return r, nil
}

// parseFinalRule reads an undelivered or failed switch's value, "<code>[@<numbers>]".
func parseFinalRule(status, value string) (FinalRule, error) {
	code, numbers, hasNumbers := strings.Cut(value, "@")
	n, err := strconv.Atoi(code)
	if err != nil || n <= 0 {
		return FinalRule{}, fmt.Errorf("want %s=<error code>[@<number>,...], e.g. %s=30003@+15005550006", status, status)
	}
	r := FinalRule{Status: status, Code: n}
	if hasNumbers {
		if r.To, err = parseNumbers(numbers); err != nil {
			return FinalRule{}, err
		}
	}
	return r, nil
}

// parseDuration reads a switch's duration.
func parseDuration(value string, hasValue bool) (time.Duration, error) {
	if !hasValue {
		return 0, errors.New("want a duration, e.g. 500ms")
	}
	d, err := time.ParseDuration(value)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (500ms, 2s)", value)
	}
	return d, nil
}

// positive reads a count.
func positive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a positive number", s)
	}
	return n, nil
}

// parseNumbers reads a comma-separated list of numbers in E.164 form.
func parseNumbers(value string) ([]string, error) {
	var numbers []string
	for n := range strings.SplitSeq(value, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !e164.MatchString(n) {
			return nil, fmt.Errorf("%q is not a number in E.164 form (+15005550006)", n)
		}
		numbers = append(numbers, n)
	}
	if len(numbers) == 0 {
		return nil, errors.New("want a comma-separated list of numbers in E.164 form")
	}
	return numbers, nil
}
