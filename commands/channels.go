package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/deliveryledger/ledger/domain"
)

// Channel is one delivery channel as the use cases know it: its providers, how its recipients and
// payloads are checked at acceptance, what its calls are limited under. Each channel's adapter
// package builds its own (webhook.Channel); the wiring registers every channel once, in a
// Channels registry, and everything else (the accept checks, the attempt, the limits, the queue
// names) finds it there by name.
type Channel struct {
	// Name is the channel's name in requests, in the history, in metrics and in queue names.
	Name string
	// Providers are the channel's providers in failover order. An attempt goes to the first
	// whose breaker admits it, and moves on to the next only when a call did not reach its
	// provider (Outcome.NotSent); never after an unknown outcome (docs/design.md, "Channels and
	// providers").
	Providers []Sender
	// Check validates a recipient, and the notification's payload as this channel reads it, at
	// acceptance: what no provider could ever deliver is refused at the door. A refusal is an
	// *InvalidField naming what is wrong.
	Check Check
	// Destination names what a recipient's calls are limited under (a URL's host, a mail
	// domain, a chat), for the per-destination limits. Nil or "" means the provider's limits
	// only.
	Destination func(recipient string) string
	// Normalize gives a recipient's normal form on the channel: the one spelling of every
	// spelling that reaches the same recipient (Ann <A@Example.COM> and a@example.com), which
	// decides an accept's repeated recipients and keys what is kept per recipient. It is total on
	// what Check accepts and returns anything it cannot read as it is; it never changes where a
	// delivery goes (the delivery keeps the recipient as given). Nil means the recipient as given
	// is its normal form.
	Normalize func(recipient string) string
	// ProviderLimit is the default limit of each of the channel's providers, in one process.
	ProviderLimit Limit
	// DestinationLimit, when it limits anything, is the default limit of each destination of
	// each of the channel's providers (one chat of a Telegram bot); the zero Limit leaves the
	// destinations to the process-wide per-host rule.
	DestinationLimit Limit
}

// Check validates one recipient of a channel and the payload it would be sent.
type Check func(recipient string, payload json.RawMessage) error

// Limit is a concurrency cap and a token bucket. The zero Limit limits nothing. The limit
// adapter enforces it (its Rule has the same fields).
type Limit struct {
	// Concurrency is the most calls in flight at once; 0 means unlimited.
	Concurrency int
	// Rate is the bucket's refill per second; 0 means unlimited.
	Rate float64
	// Burst is the bucket size; 0 means one second's worth of Rate.
	Burst int
}

// InvalidField is a value a channel refuses at acceptance. Field is "recipient" or a payload
// member ("payload.subject"); the HTTP layer puts the recipient's place in the body before a
// recipient field ("recipients[2].recipient").
type InvalidField struct {
	Field  string
	Reason string
}

// Error names the field and the reason.
func (e *InvalidField) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes every refusal a domain.ErrInvalidDelivery.
func (e *InvalidField) Unwrap() error { return domain.ErrInvalidDelivery }

// Channels is the registry of the channels one ledger serves, built once by the wiring.
type Channels struct {
	byName map[string]*Channel
	names  []string
}

// channelName is what a channel name may be: it is part of queue names and metric labels.
var channelName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// NewChannels registers channels, refusing every problem at once: a name that is empty, badly
// formed or given twice, a channel without providers or without a check.
func NewChannels(channels ...Channel) (*Channels, error) {
	c := &Channels{byName: make(map[string]*Channel, len(channels))}
	var problems []error
	if len(channels) == 0 {
		problems = append(problems, errors.New("no channels: every accept request would be refused"))
	}
	for _, ch := range channels {
		switch {
		case !channelName.MatchString(ch.Name):
			problems = append(problems, fmt.Errorf("channel name %q: want lowercase letters, digits, - or _, starting with a letter", ch.Name))
			continue
		case c.byName[ch.Name] != nil:
			problems = append(problems, fmt.Errorf("channel %q is registered twice", ch.Name))
			continue
		}
		if len(ch.Providers) == 0 {
			problems = append(problems, fmt.Errorf("channel %q has no provider", ch.Name))
		}
		for i, p := range ch.Providers {
			if p == nil {
				problems = append(problems, fmt.Errorf("channel %q: provider %d is nil", ch.Name, i+1))
			}
		}
		if ch.Check == nil {
			problems = append(problems, fmt.Errorf("channel %q has no recipient check", ch.Name))
		}
		ch.Providers = slices.Clone(ch.Providers)
		c.byName[ch.Name] = &ch
		c.names = append(c.names, ch.Name)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	slices.Sort(c.names)
	return c, nil
}

// Lookup returns the channel of that name.
func (c *Channels) Lookup(name string) (*Channel, bool) {
	ch, ok := c.byName[name]
	return ch, ok
}

// Names returns the registered channel names, sorted.
func (c *Channels) Names() []string { return slices.Clone(c.names) }

// Checks returns each channel's acceptance check, by name.
func (c *Channels) Checks() map[string]Check {
	out := make(map[string]Check, len(c.byName))
	for name, ch := range c.byName {
		out[name] = ch.Check
	}
	return out
}

// Normalize gives recipient's normal form on the named channel (Channel.Normalize): the
// recipient as given for a channel that is not registered or has no Normalize.
func (c *Channels) Normalize(channel, recipient string) string {
	ch, ok := c.byName[channel]
	if !ok || ch.Normalize == nil {
		return recipient
	}
	return ch.Normalize(recipient)
}

// destination names what a recipient of the channel is limited under ("" when the channel has
// no per-destination limits).
func (ch *Channel) destination(recipient string) string {
	if ch.Destination == nil {
		return ""
	}
	return ch.Destination(recipient)
}
