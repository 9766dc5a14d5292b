// Package breaker keeps a circuit breaker per provider (github.com/sony/gobreaker/v2) and
// implements commands.Breakers: an attempt asks it before each call, and tells it afterwards
// whether the call counted against the provider's health.
package breaker

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/deliveryledger/ledger/commands"
)

// Settings are one provider's breaker thresholds. The zero value of a field takes its default.
type Settings struct {
	// Failures is the number of consecutive failures that opens the circuit (default 5).
	Failures int
	// ErrorRate opens the circuit when at least MinRequests calls in the Window failed at this
	// rate or more (default 0.5); MinRequests defaults to 20, Window to 1 minute.
	ErrorRate   float64
	MinRequests int
	Window      time.Duration
	// Cooldown is how long the circuit stays open before it lets a probe through (default 30 s).
	Cooldown time.Duration
	// Probes is how many calls a half-open circuit lets through; that many successes close it,
	// one failure opens it again (default 1).
	Probes int
}

// Defaults of Settings.
const (
	DefaultFailures    = 5
	DefaultErrorRate   = 0.5
	DefaultMinRequests = 20
	DefaultWindow      = time.Minute
	DefaultCooldown    = 30 * time.Second
	DefaultProbes      = 1
)

// WithDefaults fills every zero field with its default.
func (s Settings) WithDefaults() Settings {
	if s.Failures == 0 {
		s.Failures = DefaultFailures
	}
	if s.ErrorRate == 0 {
		s.ErrorRate = DefaultErrorRate
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Window == 0 {
		s.Window = DefaultWindow
	}
	if s.Cooldown == 0 {
		s.Cooldown = DefaultCooldown
	}
	if s.Probes == 0 {
		s.Probes = DefaultProbes
	}
	return s
}

// Validate reports every setting out of range, naming it as the configuration file does.
func (s Settings) Validate() error {
	var problems []error
	if s.Failures < 0 {
		problems = append(problems, fmt.Errorf("breaker.failures: %d is negative", s.Failures))
	}
	if s.ErrorRate < 0 || s.ErrorRate > 1 {
		problems = append(problems, fmt.Errorf("breaker.error_rate: %g is not between 0 and 1", s.ErrorRate))
	}
	if s.MinRequests < 0 {
		problems = append(problems, fmt.Errorf("breaker.min_requests: %d is negative", s.MinRequests))
	}
	if s.Window < 0 {
		problems = append(problems, fmt.Errorf("breaker.window: %s is negative", s.Window))
	}
	if s.Cooldown < 0 {
		problems = append(problems, fmt.Errorf("breaker.cooldown: %s is negative", s.Cooldown))
	}
	if s.Probes < 0 {
		problems = append(problems, fmt.Errorf("breaker.probes: %d is negative", s.Probes))
	}
	return errors.Join(problems...)
}

// State is a breaker's state as the ledger spells it.
type State string

// States of a breaker.
const (
	Closed   State = "closed"
	HalfOpen State = "half_open"
	Open     State = "open"
)

// Gauge is a state's value in ledger_provider_circuit_state: 0 closed, 1 half open, 2 open.
func (s State) Gauge() int {
	switch s {
	case HalfOpen:
		return 1
	case Open:
		return 2
	}
	return 0
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return HalfOpen
	case gobreaker.StateOpen:
		return Open
	}
	return Closed
}

// Provider is a provider to keep a breaker for.
type Provider struct {
	Name     string
	Channel  string
	Settings Settings
}

// Health is one breaker's state and counts: of its current window while closed, of the window
// that opened it while open or half open.
type Health struct {
	Provider, Channel  string
	State              State
	Requests, Failures int64
}

// Registry holds the breakers of one process.
type Registry struct {
	byName map[string]*entry
	// onChange, when set, is told every state change.
	onChange func(provider string, to State)
}

type entry struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	channel  string
	cooldown time.Duration
	// openedAt is when the circuit last opened, in Unix nanoseconds; tripRequests and
	// tripFailures are the counts that opened it (gobreaker clears its counts on the change).
	openedAt                   atomic.Int64
	tripRequests, tripFailures atomic.Int64
}

// Errors a call reports to gobreaker: a fault counts as a failure, an ignored call not at all.
var (
	errFault  = errors.New("the call counted against the provider")
	errIgnore = errors.New("no call was made")
)

// New builds a breaker for each provider. onChange, when set, is told every state change (for
// the metric and logs); it runs with the breaker's lock held and must not call back.
func New(providers []Provider, onChange func(provider string, to State)) (*Registry, error) {
	r := &Registry{byName: map[string]*entry{}, onChange: onChange}
	var problems []error
	for _, p := range providers {
		if err := p.Settings.Validate(); err != nil {
			problems = append(problems, fmt.Errorf("provider %s: %w", p.Name, err))
			continue
		}
		if r.byName[p.Name] != nil {
			continue // a provider shared by two channels has one breaker
		}
		s := p.Settings.WithDefaults()
		e := &entry{channel: p.Channel, cooldown: s.Cooldown}
		e.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
			Name:         p.Name,
			MaxRequests:  uint32(s.Probes),
			Interval:     s.Window,
			BucketPeriod: s.Window / 6,
			Timeout:      s.Cooldown,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				trip := c.ConsecutiveFailures >= uint32(s.Failures) ||
					(c.Requests >= uint32(s.MinRequests) && float64(c.TotalFailures) >= s.ErrorRate*float64(c.Requests))
				if trip {
					e.tripRequests.Store(int64(c.Requests))
					e.tripFailures.Store(int64(c.TotalFailures))
				}
				return trip
			},
			IsExcluded: func(err error) bool { return errors.Is(err, errIgnore) },
			OnStateChange: func(name string, _, to gobreaker.State) {
				if to == gobreaker.StateOpen {
					e.openedAt.Store(time.Now().UnixNano())
				}
				if r.onChange != nil {
					r.onChange(name, stateOf(to))
				}
			},
		})
		r.byName[p.Name] = e
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return r, nil
}

// Allow implements commands.Breakers. A provider without a breaker is always admitted.
func (r *Registry) Allow(provider string) (func(commands.BreakerResult), time.Duration, bool) {
	e := r.byName[provider]
	if e == nil {
		return func(commands.BreakerResult) {}, 0, true
	}
	done, err := e.cb.Allow()
	if err != nil {
		wait := time.Until(time.Unix(0, e.openedAt.Load()).Add(e.cooldown))
		if wait < 50*time.Millisecond {
			wait = 50 * time.Millisecond // half open with its probe out: ask again soon
		}
		return nil, wait, false
	}
	var once sync.Once
	return func(res commands.BreakerResult) {
		once.Do(func() {
			switch res {
			case commands.BreakerSuccess:
				done(nil)
			case commands.BreakerFault:
				done(errFault)
			default:
				done(errIgnore)
			}
		})
	}, 0, true
}

// State returns a provider's breaker state (closed for a provider without one).
func (r *Registry) State(provider string) State {
	e := r.byName[provider]
	if e == nil {
		return Closed
	}
	return stateOf(e.cb.State())
}

// Snapshot returns every breaker's state and counts, by provider name.
func (r *Registry) Snapshot() []Health {
	out := make([]Health, 0, len(r.byName))
	for name, e := range r.byName {
		state := stateOf(e.cb.State())
		c := e.cb.Counts()
		h := Health{Provider: name, Channel: e.channel, State: state, Requests: int64(c.Requests), Failures: int64(c.TotalFailures)}
		if state != Closed {
			h.Requests, h.Failures = e.tripRequests.Load(), e.tripFailures.Load()
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b Health) int {
		if a.Provider < b.Provider {
			return -1
		}
		if a.Provider > b.Provider {
			return 1
		}
		return 0
	})
	return out
}

var _ commands.Breakers = (*Registry)(nil)
