package limit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Defaults used by DefaultConfig. A provider's own default comes with its channel
// (commands.Channel.ProviderLimit), which the wiring puts in Config.Providers.
const (
	// DefaultHostConcurrency caps the calls in flight to one destination host. It is the whole
	// point of the package: a receiver that hangs until the provider's timeout holds at most this
	// many worker slots, and the others keep delivering to healthy hosts. It is half the default
	// worker slots of a channel (128). At 8, one fast receiver got at most 430-800 deliveries a
	// second from one process on two cores, because every freed slot waits for its next waiter
	// to be scheduled, while without a cap the same process delivered 900-1,100.
	DefaultHostConcurrency = 64
	// DefaultHostRate is zero (no rate limit per host) on purpose. What rate a receiver accepts is
	// a contract we cannot guess; a global default would throttle healthy high-volume receivers,
	// while the concurrency cap already bounds what a slow host costs us (a host answering in d
	// seconds gets at most DefaultHostConcurrency/d calls per second). Operators set rates per host
	// in Config.Hosts when a receiver publishes one.
	DefaultHostRate = 0
	// DefaultSlotWait is how long Acquire waits for a slot of a full concurrency cap. A call to a
	// fast destination ends within milliseconds, so its messages wait instead of being deferred;
	// a slow one's calls last seconds, so a waiter gives up after a tenth of a second and the
	// message is deferred, the worker slot it held in waiting given back.
	DefaultSlotWait = 100 * time.Millisecond
)

// Rule limits one provider or one destination host. The zero Rule limits nothing, which is how
// Hosts exempts a trusted host from DefaultHost.
type Rule struct {
	// Concurrency is the most calls in flight at once; 0 means unlimited. It is what protects
	// worker slots from a slow destination.
	Concurrency int
	// Rate is the token bucket's refill per second; 0 means unlimited. It protects a destination
	// that publishes a request rate, whatever its latency.
	Rate float64
	// Burst is the bucket size, the calls that may start back to back after an idle period. Zero
	// means max(1, ceil(Rate)), one second's worth, when Rate > 0. It must be zero when Rate is
	// zero, because a burst without a rate limits nothing and is most likely a typo.
	Burst int
}

// limits reports whether the rule can refuse anything; a rule that cannot needs no state.
func (r Rule) limits() bool {
	return r.Concurrency > 0 || r.Rate > 0
}

// withDefaults fills in the burst the way the Burst field documents.
func (r Rule) withDefaults() Rule {
	if r.Rate > 0 && r.Burst == 0 {
		r.Burst = max(1, int(math.Ceil(r.Rate)))
	}
	return r
}

// validate returns every problem of the rule, each prefixed by what names it, so that an
// operator sees which of many rules is wrong.
func (r Rule) validate(name string) []error {
	var problems []error
	if r.Concurrency < 0 {
		problems = append(problems, fmt.Errorf("%s: concurrency must not be negative, got %d", name, r.Concurrency))
	}
	switch {
	case math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0):
		// Infinity is not "unlimited" here: zero is, and accepting both would give two spellings.
		problems = append(problems, fmt.Errorf("%s: rate must be a finite number, got %v", name, r.Rate))
	case r.Rate < 0:
		problems = append(problems, fmt.Errorf("%s: rate must not be negative, got %v", name, r.Rate))
	case r.Rate > 0 && math.Ceil(r.Rate) > math.MaxInt32:
		// The default burst is ceil(Rate) tokens; beyond this the conversion to int is unsafe and
		// the rate is meaningless anyway.
		problems = append(problems, fmt.Errorf("%s: rate %v is too large", name, r.Rate))
	}
	if r.Burst < 0 {
		problems = append(problems, fmt.Errorf("%s: burst must not be negative, got %d", name, r.Burst))
	}
	if r.Burst > 0 && r.Rate == 0 {
		problems = append(problems, fmt.Errorf("%s: burst %d has no effect without a rate", name, r.Burst))
	}
	return problems
}

// Config sets the limits a Limiter enforces. A call must pass both its provider's rule and its
// destination host's rule. The limits are per process: each ledger process counts only its own
// calls, so the cluster-wide figure is the per-process one times the number of processes.
type Config struct {
	// Providers holds a rule per provider name. A provider without an entry is unlimited, but
	// its calls are still counted for InFlight.
	Providers map[string]Rule
	// DefaultHost applies to every destination host without an entry in Hosts, for providers
	// without a rule in Destinations. Each host gets its own counters and bucket: the rule is a
	// template, not a shared budget, and one host's entry is shared by every such provider, so
	// its cap holds whichever channel calls it.
	DefaultHost Rule
	// Destinations holds, per provider, the rule of each of its destinations, in place of
	// DefaultHost: a Telegram bot may send one message a second to each chat. A provider's
	// destinations then have entries of their own, not shared with other providers.
	Destinations map[string]Rule
	// Hosts overrides DefaultHost for the hosts it names. Keys are written the way HostOf returns
	// hosts (lowercase, non-default port kept: "api.example.com", "example.com:8443"); New
	// lowercases them so that a capital letter does not silently disable an override. It is the
	// parsed form of an environment variable (see ParseHostRules).
	Hosts map[string]Rule
	// SlotWait is how long Acquire waits for a slot when a concurrency cap refuses, before it
	// refuses; 0 refuses at once.
	SlotWait time.Duration
}

// DefaultConfig returns the limits a process runs with unless configured otherwise: every
// destination host capped at DefaultHostConcurrency calls in flight with no rate limit (see the
// constants for why), and an empty Providers map for the providers' own defaults.
func DefaultConfig() Config {
	return Config{
		Providers:    map[string]Rule{},
		DefaultHost:  Rule{Concurrency: DefaultHostConcurrency, Rate: DefaultHostRate},
		Destinations: map[string]Rule{},
		SlotWait:     DefaultSlotWait,
	}
}

// Validate reports every problem of the configuration at once, so an operator fixes them in one
// round instead of one per restart.
func (c Config) Validate() error {
	var problems []error
	for name, r := range c.Providers {
		if name == "" {
			problems = append(problems, errors.New("provider rule with an empty provider name"))
		}
		problems = append(problems, r.validate(fmt.Sprintf("provider %q", name))...)
	}
	if c.SlotWait < 0 {
		problems = append(problems, fmt.Errorf("slot wait must not be negative, got %s", c.SlotWait))
	}
	problems = append(problems, c.DefaultHost.validate("default host")...)
	for name, r := range c.Destinations {
		if name == "" {
			problems = append(problems, errors.New("destination rule with an empty provider name"))
		}
		problems = append(problems, r.validate(fmt.Sprintf("destinations of provider %q", name))...)
	}
	seen := make(map[string]string, len(c.Hosts))
	for host, r := range c.Hosts {
		key := canonicalHost(host)
		if key == "" {
			problems = append(problems, fmt.Errorf("host rule with an empty host %q", host))
		}
		if other, dup := seen[key]; dup {
			// Two keys that differ only in case or a trailing dot name one host; which rule would
			// win depends on map order, so refuse rather than guess.
			problems = append(problems, fmt.Errorf("host rules %q and %q name the same host", other, host))
		}
		seen[key] = host
		problems = append(problems, r.validate(fmt.Sprintf("host %q", host))...)
	}
	return errors.Join(problems...)
}

// ParseHostRules parses per-host rules from one string, the format of an environment variable:
// comma-separated items "host=concurrency:rate:burst", where rate and burst may be left out
// ("host=4") and an empty field means zero ("host=:5" is a rate of 5/s with no concurrency cap;
// "host=0" exempts host from DefaultHost). Empty items are skipped so that a trailing comma is
// harmless; an empty string gives nil. Every bad item is reported, joined into one error.
func ParseHostRules(s string) (map[string]Rule, error) {
	var (
		rules    map[string]Rule
		problems []error
	)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		host, spec, found := strings.Cut(item, "=")
		host = canonicalHost(strings.TrimSpace(host))
		if !found {
			problems = append(problems, fmt.Errorf("host rule %q: want host=concurrency[:rate[:burst]]", item))
			continue
		}
		if host == "" {
			problems = append(problems, fmt.Errorf("host rule %q: empty host", item))
			continue
		}
		r, err := parseRule(spec)
		if err != nil {
			problems = append(problems, fmt.Errorf("host rule %q: %w", item, err))
			continue
		}
		if errs := r.validate(fmt.Sprintf("host rule %q", item)); len(errs) > 0 {
			problems = append(problems, errs...)
			continue
		}
		if _, dup := rules[host]; dup {
			problems = append(problems, fmt.Errorf("host rule %q: host %s given twice", item, host))
			continue
		}
		if rules == nil {
			rules = make(map[string]Rule)
		}
		rules[host] = r
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return rules, nil
}

// parseRule parses "concurrency[:rate[:burst]]"; it checks syntax only, validate checks values.
func parseRule(spec string) (Rule, error) {
	fields := strings.Split(spec, ":")
	if len(fields) > 3 {
		return Rule{}, fmt.Errorf("%d fields, want at most 3 (concurrency:rate:burst)", len(fields))
	}
	if strings.TrimSpace(spec) == "" {
		return Rule{}, errors.New("empty rule, want concurrency[:rate[:burst]] (0 for no limit)")
	}
	var (
		r   Rule
		err error
	)
	for i, f := range fields {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		switch i {
		case 0:
			if r.Concurrency, err = strconv.Atoi(f); err != nil {
				return Rule{}, fmt.Errorf("concurrency %q is not an integer", f)
			}
		case 1:
			if r.Rate, err = strconv.ParseFloat(f, 64); err != nil {
				return Rule{}, fmt.Errorf("rate %q is not a number", f)
			}
		case 2:
			if r.Burst, err = strconv.Atoi(f); err != nil {
				return Rule{}, fmt.Errorf("burst %q is not an integer", f)
			}
		}
	}
	return r, nil
}
