package vonagefake

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EveryCall, as a count in a Behaviour, means every send (or every receipt).
const EveryCall = -1

// How receipts are sent (Behaviour.ReceiptMethod), as Vonage's dashboard offers them.
const (
	// ReceiptPost sends each receipt as a POST of a form (application/x-www-form-urlencoded):
	// the default.
	ReceiptPost = "post"
	// ReceiptGet sends each receipt as a GET with the parameters added to the callback's query.
	ReceiptGet = "get"
	// ReceiptJSON sends each receipt as a POST of a JSON object of strings.
	ReceiptJSON = "json"
)

// maxDelay bounds the delays a behaviour may ask for: a fake that waits longer than that is a
// typing mistake, not a test.
const maxDelay = time.Hour

// DLR is a delivery receipt's outcome: its status (delivered, expired, failed, rejected,
// accepted, buffered, unknown) and err-code ("" means the usual one: 0 for delivered, accepted
// and buffered, 1 otherwise).
type DLR struct {
	Status  string
	ErrCode string
}

// Behaviour says how the server behaves. The zero Behaviour accepts every well-formed message
// from the configured account and sends one "delivered" receipt for each message that asked
// for one, at once, as a POST form.
//
// Of the switches of the answer, the first that applies answers a send, in this order:
// HTTPStatus, then the checks of the request (credentials, parameters), then Status, then
// NumberStatus. A count is consumed only by the sends (or receipts) it covers, and SetBehaviour
// starts the counts afresh. Numbers are written as Vonage's to takes them, with or without the
// leading +.
type Behaviour struct {
	// Status is an SMS API status ("1" throttled, "5" internal error, "3" invalid parameters,
	// "6" invalid message, ...) answered, instead of accepting, to the next StatusCalls sends:
	// 0 none, EveryCall all.
	Status      string
	StatusCalls int
	// NumberStatus answers sends to these numbers with these statuses.
	NumberStatus map[string]string
	// HTTPStatus is an HTTP status (500, 503, 429, ...) answered with a plain-text body, as a
	// load balancer in front of the API would, to the next HTTPCalls sends: 0 none, EveryCall
	// all. No message is created.
	HTTPStatus int
	HTTPCalls  int
	// AnswerDelay makes the server create each accepted message (and schedule its receipts)
	// and then wait this long before answering: past the client's timeout, the message went
	// although the client never learnt it (an unknown outcome).
	AnswerDelay time.Duration

	// Final is the final receipt of messages to these numbers; others are delivered.
	Final map[string]DLR
	// First, when set (accepted or buffered), is a receipt sent before the final one.
	First string
	// ReceiptDelay is the wait before each receipt, counted from the message's creation for the
	// first one and from the previous receipt for the next.
	ReceiptDelay time.Duration
	// ReceiptMethod is ReceiptPost (the default when empty), ReceiptGet or ReceiptJSON.
	ReceiptMethod string
	// LoseReceipts is how many of the next receipts are not sent (lost on the way): 0 none,
	// EveryCall all.
	LoseReceipts int
	// DuplicateReceipts is how many of the next receipts are sent twice: 0 none, EveryCall
	// all.
	DuplicateReceipts int
	// NoReceiptRetry sends each receipt once even when the callback answers 429 or 5xx or does
	// not answer (Vonage tries again, and so does the fake without it).
	NoReceiptRetry bool
}

// ParseBehaviour reads a Behaviour from a flag value (`ledger sink`): switches separated by
// semicolons, spaces around them ignored; the empty string is the zero Behaviour. Switches:
//
//	status=<code>[:<sends>]            answer SMS API status <code> (1 throttled, 5 internal
//	                                   error, 3, 6, 29, ...) to the next <sends> sends, or to
//	                                   every send without :<sends>
//	status-for=<number>:<code>,...     answer status <code> to sends to these numbers
//	http=<code>[:<sends>]              answer HTTP <code> (500, 503, 429...) without the SMS
//	                                   API's body, to the next <sends> sends or every send
//	delay=<duration>                   create the message, then wait before answering
//	dlr=<number>:<status>[:<err-code>],...
//	                                   the final receipt of messages to these numbers
//	                                   (delivered otherwise), e.g. 447700900001:failed:3
//	dlr-first=accepted|buffered        send a receipt of that status before the final one
//	dlr-delay=<duration>               wait before each receipt
//	dlr-method=post|get|json           send receipts as a POST form (the default), a GET, or
//	                                   a POST of JSON
//	dlr-lose=<receipts>|all            do not send the next <receipts> receipts, or any
//	dlr-twice=<receipts>|all           send the next <receipts> receipts twice, or every one
//	dlr-no-retry                       do not send a receipt again when the callback answers
//	                                   429 or 5xx or does not answer
//
// A duration is Go's (250ms, 2s), at most an hour. For example
// "status=1:2; dlr=447700900001:failed:3,447700900002:expired; dlr-delay=100ms". Every problem
// is reported at once; a switch given twice is one of them.
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
		if seen[name] {
			problems = append(problems, fmt.Errorf("behaviour %q is given twice", name))
			continue
		}
		seen[name] = true
		var err error
		if name == "dlr-no-retry" {
			if hasValue {
				err = errors.New("takes no value")
			}
			b.NoReceiptRetry = true
		} else if !hasValue && slices.Contains(switches, name) {
			err = errors.New("wants a value (" + name + "=...)")
		} else {
			switch name {
			case "status":
				b.Status, b.StatusCalls, err = parseCodeCalls(value, parseStatus)
			case "status-for":
				b.NumberStatus, err = parseNumberStatus(value)
			case "http":
				var code string
				code, b.HTTPCalls, err = parseCodeCalls(value, parseHTTP)
				b.HTTPStatus, _ = strconv.Atoi(code)
			case "delay":
				b.AnswerDelay, err = parseDelay(value)
			case "dlr":
				b.Final, err = parseFinal(value)
			case "dlr-first":
				if value != "accepted" && value != "buffered" {
					err = errors.New("want accepted or buffered")
				}
				b.First = value
			case "dlr-delay":
				b.ReceiptDelay, err = parseDelay(value)
			case "dlr-method":
				if value != ReceiptPost && value != ReceiptGet && value != ReceiptJSON {
					err = errors.New("want post, get or json")
				}
				b.ReceiptMethod = value
			case "dlr-lose":
				b.LoseReceipts, err = parseCount(value)
			case "dlr-twice":
				b.DuplicateReceipts, err = parseCount(value)
			default:
				err = errors.New("unknown behaviour (want one of " + strings.Join(switches, ", ") + " or dlr-no-retry)")
			}
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

// switches are the names ParseBehaviour takes; each wants a value.
var switches = []string{"status", "status-for", "http", "delay", "dlr", "dlr-first", "dlr-delay", "dlr-method", "dlr-lose", "dlr-twice"}

// parseCodeCalls reads "<code>[:<sends>]", the code checked by check.
func parseCodeCalls(value string, check func(string) error) (string, int, error) {
	code, n, hasCalls := strings.Cut(value, ":")
	code = strings.TrimSpace(code)
	if err := check(code); err != nil {
		return "", 0, err
	}
	if !hasCalls {
		return code, EveryCall, nil
	}
	calls, err := positive(strings.TrimSpace(n))
	return code, calls, err
}

// parseStatus checks an SMS API status the fake can answer.
func parseStatus(code string) error {
	if _, ok := errorTexts[code]; !ok {
		return fmt.Errorf("status %q is not one the fake answers (want one of %s)", code, strings.Join(knownStatuses(), ", "))
	}
	return nil
}

// knownStatuses lists the statuses of errorTexts in numeric order.
func knownStatuses() []string {
	codes := slices.Collect(maps.Keys(errorTexts))
	slices.SortFunc(codes, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	return codes
}

// parseHTTP checks an HTTP status that is not a success.
func parseHTTP(code string) error {
	n, err := strconv.Atoi(code)
	if err != nil || n < 300 || n > 599 {
		return fmt.Errorf("HTTP status %q: want 300 to 599", code)
	}
	return nil
}

// parseDelay reads a non-negative duration of at most maxDelay.
func parseDelay(value string) (time.Duration, error) {
	d, err := time.ParseDuration(value)
	if err != nil || d < 0 || d > maxDelay {
		return 0, fmt.Errorf("%q is not a duration from 0 to %s (250ms, 2s)", value, maxDelay)
	}
	return d, nil
}

// parseCount reads a count of receipts, or all.
func parseCount(value string) (int, error) {
	if value == "all" {
		return EveryCall, nil
	}
	return positive(value)
}

// positive reads a count of at least one.
func positive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("count %q is not a positive number", s)
	}
	return n, nil
}

// number is a destination as the fake takes it: 7 to 15 digits, as Vonage's to.
var number = regexp.MustCompile(`^[0-9]{7,15}$`)

// numberKey is a number's one spelling, without the leading +.
func numberKey(n string) (string, bool) {
	n = strings.TrimPrefix(strings.TrimSpace(n), "+")
	return n, number.MatchString(n)
}

// parseNumberStatus reads "<number>:<code>,...".
func parseNumberStatus(value string) (map[string]string, error) {
	out := map[string]string{}
	for item := range strings.SplitSeq(value, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		n, code, ok := strings.Cut(item, ":")
		key, valid := numberKey(n)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want <number>:<status>", item)
		case !valid:
			return nil, fmt.Errorf("%q is not a number of 7 to 15 digits", n)
		}
		if err := parseStatus(strings.TrimSpace(code)); err != nil {
			return nil, err
		}
		out[key] = strings.TrimSpace(code)
	}
	if len(out) == 0 {
		return nil, errors.New("want a comma-separated list of <number>:<status>")
	}
	return out, nil
}

// receiptStatuses are the statuses of Vonage's delivery receipts.
var receiptStatuses = []string{"delivered", "expired", "failed", "rejected", "accepted", "buffered", "unknown"}

// parseFinal reads "<number>:<status>[:<err-code>],...".
func parseFinal(value string) (map[string]DLR, error) {
	out := map[string]DLR{}
	for item := range strings.SplitSeq(value, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		parts := strings.Split(item, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("%q: want <number>:<status>[:<err-code>]", item)
		}
		key, valid := numberKey(parts[0])
		if !valid {
			return nil, fmt.Errorf("%q is not a number of 7 to 15 digits", parts[0])
		}
		d := DLR{Status: strings.TrimSpace(parts[1])}
		if !slices.Contains(receiptStatuses, d.Status) {
			return nil, fmt.Errorf("receipt status %q: want one of %s", d.Status, strings.Join(receiptStatuses, ", "))
		}
		if len(parts) == 3 {
			d.ErrCode = strings.TrimSpace(parts[2])
			if n, err := strconv.Atoi(d.ErrCode); err != nil || n < 0 || n > 999 {
				return nil, fmt.Errorf("err-code %q: want a number from 0 to 999", d.ErrCode)
			}
		}
		out[key] = d
	}
	if len(out) == 0 {
		return nil, errors.New("want a comma-separated list of <number>:<status>[:<err-code>]")
	}
	return out, nil
}
