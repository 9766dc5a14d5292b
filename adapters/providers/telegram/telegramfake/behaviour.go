package telegramfake

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// EveryCall, as a count of calls in a Behaviour, means every call.
const EveryCall = -1

// Behaviour says how the server misbehaves. The zero Behaviour sends every well-formed message.
// When several switches apply to one call, the first in this order answers it: HangAfterRead,
// ServerErrors, TooManyRequests, ChatNotFound, Blocked, Refusals. A count is consumed only by the calls
// it answers, and SetBehaviour starts the counts afresh.
type Behaviour struct {
	// TooManyRequests is how many of the next calls are answered 429 "Too Many Requests:
	// retry after N" with parameters.retry_after = RetryAfter: 0 none, EveryCall all.
	TooManyRequests int
	// RetryAfter is the retry_after of those answers, in seconds.
	RetryAfter int
	// ServerErrors is how many of the next calls are answered 500 "Internal Server Error": 0
	// none, EveryCall all.
	ServerErrors int
	// ChatNotFound lists chats (ids, or @usernames in any case) answered 400 "Bad Request:
	// chat not found".
	ChatNotFound []string
	// Blocked lists chats answered 403 "Forbidden: bot was blocked by the user".
	Blocked []string
	// Refusals answers chats with other refusals of the Bot API, each its own error_code and
	// description ("Forbidden: user is deactivated", "Bad Request: message is too long"). It has
	// no flag form.
	Refusals []Refusal
	// HangAfterRead makes the server read each request whole and then answer nothing until
	// the client gives up (or the server closes): the "timeout after the request was written"
	// case, whose outcome is unknown.
	HangAfterRead bool
}

// Refusal is a Bot API refusal of the messages to one chat: {"ok":false,"error_code":Code,
// "description":Description} with Code as the HTTP status, as the real API answers.
type Refusal struct {
	// Chat is a chat id or @username, as in Behaviour's lists.
	Chat string
	// Code is the error_code, a 4xx.
	Code int
	// Description is Telegram's words ("Forbidden: bot was kicked from the group chat").
	Description string
}

// ParseBehaviour reads a Behaviour from a flag value (`ledger sink`): switches separated by
// semicolons, spaces around them ignored; the empty string is the zero Behaviour. Switches:
//
//	429=<retry_after>[:<calls>]   answer 429 with that retry_after (seconds) to the next <calls>
//	                              calls, or to every call without :<calls>
//	500[=<calls>]                 answer 500 to the next <calls> calls, or to every call
//	chat-not-found=<chat>,...     answer 400 "Bad Request: chat not found" for these chats
//	blocked=<chat>,...            answer 403 "Forbidden: bot was blocked by the user"
//	hang-after-read               read each request, then hang until the client gives up
//
// A chat is a chat id (-100123) or @username. For example
// "429=2:3; chat-not-found=-100123,@gone; blocked=42". Every problem is reported at once; a
// switch given twice is one of them.
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
		switch name {
		case "429":
			b.RetryAfter, b.TooManyRequests, err = parseTooMany(value, hasValue)
		case "500":
			b.ServerErrors, err = parseCalls(value, hasValue)
		case "chat-not-found":
			b.ChatNotFound, err = parseChats(value)
		case "blocked":
			b.Blocked, err = parseChats(value)
		case "hang-after-read":
			if hasValue {
				err = errors.New("takes no value")
			}
			b.HangAfterRead = true
		default:
			err = errors.New("unknown behaviour (want 429, 500, chat-not-found, blocked or hang-after-read)")
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

// parseTooMany reads "<retry_after>[:<calls>]".
func parseTooMany(value string, hasValue bool) (retryAfter, calls int, err error) {
	if !hasValue || value == "" {
		return 0, 0, errors.New("want 429=<retry_after seconds>[:<calls>]")
	}
	secs, n, hasCalls := strings.Cut(value, ":")
	retryAfter, err = strconv.Atoi(secs)
	if err != nil || retryAfter < 0 {
		return 0, 0, fmt.Errorf("retry_after %q is not a number of seconds", secs)
	}
	if !hasCalls {
		return retryAfter, EveryCall, nil
	}
	calls, err = positive(n)
	return retryAfter, calls, err
}

// parseCalls reads the optional "=<calls>" of a switch that is on for every call without it.
func parseCalls(value string, hasValue bool) (int, error) {
	if !hasValue {
		return EveryCall, nil
	}
	return positive(value)
}

// positive reads a count of calls.
func positive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("calls %q is not a positive number", s)
	}
	return n, nil
}

// parseChats reads a comma-separated list of chats.
func parseChats(value string) ([]string, error) {
	var chats []string
	for c := range strings.SplitSeq(value, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if _, ok := chatKey(c); !ok {
			return nil, fmt.Errorf("%q is not a chat id or @username", c)
		}
		chats = append(chats, c)
	}
	if len(chats) == 0 {
		return nil, errors.New("want a comma-separated list of chat ids or @usernames")
	}
	return chats, nil
}

var (
	// username is a public chat's username as Telegram allows it: the fake sends to no other.
	username = regexp.MustCompile(`^@[A-Za-z][A-Za-z0-9_]{4,31}$`)
	// usernameLike is what a behaviour's list takes as a username: looser, so that a chat
	// that cannot exist ("@gone") can be named as the one that is not found.
	usernameLike = regexp.MustCompile(`^@[A-Za-z0-9_]+$`)
)

// chatKey is a chat's one spelling (a canonical id, a lowercase @username), so that a behaviour
// given as @Gone applies to calls for @gone, as Telegram's usernames are case-insensitive. ok
// is false for what is neither an id nor a username.
func chatKey(chat string) (string, bool) {
	if strings.HasPrefix(chat, "@") {
		if !usernameLike.MatchString(chat) {
			return "", false
		}
		return strings.ToLower(chat), true
	}
	id, err := strconv.ParseInt(chat, 10, 64)
	if err != nil || id == 0 {
		return "", false
	}
	return strconv.FormatInt(id, 10), true
}
