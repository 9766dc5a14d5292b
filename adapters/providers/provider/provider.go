// Package provider is the kit every provider adapter stands on.
//
// It is how a provider type describes itself to the configuration file: its name, the channel
// it serves, the keys its block takes (which are required, which are secrets read from the
// environment), how it checks them and how it builds its Sender and its channel. Each provider
// adapter (webhook, email, telegram, twilio, vonage) declares its own Type; the wiring registers
// each with one line, and the file parser walks the registered types without knowing any of
// them (docs/design.md, "How to add a provider").
//
// It is also the transport boundary of the Sender contract (commands.Sender), written once: one
// HTTP exchange that records whether the request was fully written and reads the answer to a
// bound (Exchange), and one verdict on a call that got no answer (Unanswered): unknown once the
// request was written, transient and NotSent before, a provider fault unless the caller went
// away. Beside them, the checks of a provider's name and base URL, and making a peer's text safe
// for the history. Package providertest is the contract's conformance suite.
package provider

import (
	"fmt"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/commands"
)

// Type is one provider type: what a block `{type: NAME, ...}` of the file's providers takes.
type Type struct {
	// Name is the type as the file's type key gives it ("smtp").
	Name string
	// Channel is the name of the channel the type's providers serve (email.Name).
	Channel string
	// Unit builds that channel from its providers, in failover order (email.Channel). Every type
	// of one channel gives the same one.
	Unit func(providers ...commands.Sender) commands.Channel
	// Keys are the keys the type's block takes beside the ones every provider takes (type,
	// timeout, breaker).
	Keys []Key
	// ReceiversDeduplicate is true when the channel's receivers can drop a repeat of the
	// delivery's id that every attempt carries (webhook-id, Message-ID), so that a channel of
	// such providers may take `unknown: retry`. It is a property of the receivers, not of the
	// provider: commands.Sender.Deduplicates says whether the provider itself does.
	ReceiversDeduplicate bool
	// Check validates a block whose keys the parser has read, without building anything, so
	// that every provider of the file is checked, used by a channel or not. A refusal of a key
	// is a *KeyError naming it as the file writes it; Settings.Warn records what runs but
	// deserves a word at start.
	Check func(*Settings) error
	// New builds the provider's Sender from a block Check took.
	New func(*Settings) (commands.Sender, error)
}

// Kind is how a key's value is read.
type Kind int

// Kinds of values.
const (
	// String is any string; with Key.Choices, one of them.
	String Kind = iota
	// Int is a whole number from Key.Min to Key.Max.
	Int
	// Number is a positive, finite number (NaN and Inf are refused: they pass every bound).
	Number
	// Duration is a positive Go duration (10s, 1m30s).
	Duration
	// URL is an absolute http or https URL with a host and, when it gives one, a port from 1 to
	// 65535.
	URL
	// Secret is the name of the environment variable holding a secret (the key ends in _env):
	// secrets are never written in the file, which ends up in version control and backups.
	// Settings give the variable's value. A value that is no variable's name
	// ([A-Za-z_][A-Za-z0-9_]*) is refused without being repeated: it may be the secret itself.
	Secret
)

// Key is one key of a provider type's block.
type Key struct {
	// Name is the key as the file writes it ("token_env").
	Name string
	Kind Kind
	// Required refuses a block without the key.
	Required bool
	// Choices are the values a String takes, the first the default.
	Choices []string
	// Min and Max bound an Int.
	Min, Max int
	// Help says what the key is, in a refusal ("required: Help").
	Help string
}

// Keys every provider with receipts takes (the SMS types): what counts as delivered and how long
// the wiring waits for a receipt before it looks the message up and gives up.
var (
	DeliveredOn = Key{Name: "delivered_on", Kind: String, Choices: []string{"receipt", "accept"},
		Help: "receipt (delivered when a receipt or a lookup says so) or accept (delivered when the provider takes the message)"}
	ReceiptTimeout = Key{Name: "receipt_timeout", Kind: Duration}
	ReceiptMaxWait = Key{Name: "receipt_max_wait", Kind: Duration}
	// LookupRate bounds the lookups a second of a provider that can be asked about a message.
	LookupRate = Key{Name: "lookup_rate", Kind: Number, Help: "lookups a second"}
)

// Settings are one provider block as the parser read it: every key given, with its value, the
// secrets already read from the environment.
type Settings struct {
	// Name is the provider's name, its key under providers.
	Name string
	// Timeout is the block's timeout (one call); zero leaves the type's default.
	Timeout time.Duration
	// PublicURL is the file's public_url, the base of the receipts' URLs; "" without one.
	PublicURL string
	// InFlight is the most calls the process makes at once (its worker slots), when the wiring
	// builds; zero when the file is only checked.
	InFlight int
	// Values holds each key given: a string, an int, a float64 or a time.Duration by its Kind.
	Values map[string]any
	// Warnings collects what Warn says.
	Warnings []string
}

// String is a String, URL or Secret key's value, "" when the key is not given.
func (s *Settings) String(key string) string { v, _ := s.Values[key].(string); return v }

// Int is an Int key's value, 0 when not given.
func (s *Settings) Int(key string) int { v, _ := s.Values[key].(int); return v }

// Number is a Number key's value, 0 when not given.
func (s *Settings) Number(key string) float64 { v, _ := s.Values[key].(float64); return v }

// Duration is a Duration key's value, 0 when not given.
func (s *Settings) Duration(key string) time.Duration {
	v, _ := s.Values[key].(time.Duration)
	return v
}

// Has reports whether the block gives key.
func (s *Settings) Has(key string) bool { _, ok := s.Values[key]; return ok }

// Warn records a warning about the provider, said by `ledger config check` and at start.
func (s *Settings) Warn(format string, args ...any) {
	s.Warnings = append(s.Warnings, "provider "+s.Name+": "+fmt.Sprintf(format, args...))
}

// ReceiptURL is where the provider posts its receipts, {public_url}/v1/receipts/{name}; "" when
// the file has no public_url.
func (s *Settings) ReceiptURL() string {
	if s.PublicURL == "" {
		return ""
	}
	return strings.TrimSuffix(s.PublicURL, "/") + "/v1/receipts/" + s.Name
}

// KeyError is a refusal of one key of a provider's block, so that the parser can say the file's
// line and the key as the file writes it. Its message is the adapter's own.
type KeyError struct {
	// Key is the key as the file writes it ("token_env"); "" blames the block as a whole.
	Key string
	// Root is true when Key is a key of the file's top level (public_url), not of the block.
	Root bool
	Err  error
}

// Error is the adapter's message.
func (e *KeyError) Error() string { return e.Err.Error() }

// Unwrap gives the adapter's error.
func (e *KeyError) Unwrap() error { return e.Err }

// Keyed blames err on key; a nil err stays nil.
func Keyed(key string, err error) error {
	if err == nil {
		return nil
	}
	return &KeyError{Key: key, Err: err}
}

// Errorf is Keyed(key, fmt.Errorf(format, args...)).
func Errorf(key, format string, args ...any) error {
	return &KeyError{Key: key, Err: fmt.Errorf(format, args...)}
}

// Problems lists the problems of err, a join of them (Validate's answer), one by one, each a
// *KeyError when a key is to blame.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, Problems(e)...)
	}
	return out
}

// Built is a Type's New made of an adapter's constructor (`provider.Built(New(config(s)))`): a
// Sender of the adapter's own type, or nil with the error. It exists so that a failed
// constructor's typed nil pointer never becomes a non-nil commands.Sender.
func Built[S commands.Sender](sender S, err error) (commands.Sender, error) {
	if err != nil {
		return nil, err
	}
	return sender, nil
}
