// Package limit applies backpressure at the boundary between workers and providers, so that a
// slow provider or destination cannot take every worker slot.
//
// Before an attempt the worker asks a Limiter for permission for (provider, destination host).
// A concurrency cap that refuses is waited on for a short, bounded time (Config.SlotWait): a fast
// destination frees a slot within milliseconds, and deferring its message would cost a round
// through the broker and two writes to the log for nothing. Past that wait, and at once for a
// rate limit, the answer is no: the worker re-queues the message with the suggested delay,
// without starting an attempt, instead of holding its slot while a slow destination answers. A
// slot held in waiting for long is exactly the harm the limiter exists to prevent.
//
// A rate's answer is a reservation when the caller names its attempt (AcquireFor): the next free
// token of every refusing bucket is kept for that ticket, the delay is the time until it, and the
// attempt that comes back under the same ticket takes it without asking the buckets again. A
// message deferred by a rate is then deferred once, to its slot, instead of polling a short wait
// against every other deferred message (300 Telegram chats under the bot's 30/s recorded 22
// deferrals a delivery that way).
//
// Limits are per process (each process counts its own calls), in memory, and forgotten on
// restart; they protect this process's workers and spread load, they are not a cluster-wide quota.
package limit

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/deliveryledger/ledger/commands"
)

// ConcurrencyRetryAfter is the delay Acquire suggests when a concurrency cap refuses. A slot
// frees when some call in flight ends, which cannot be predicted, so the delay is fixed. Half a
// second keeps a message for a saturated host from cycling through the broker more than twice a
// second (a slow host's calls last seconds, up to the webhook timeout), while a slot freed by a
// fast provider is not left idle for long.
const ConcurrencyRetryAfter = 500 * time.Millisecond

// minSweepSize is the number of host entries below which idle entries are left alone. Sweeping
// a small map would save little memory; 1024 idle entries cost a few hundred kilobytes.
const minSweepSize = 1024

// Limiter decides whether a provider call may start now. It is safe for concurrent use; create
// one per process and share it among the workers of all channels, so that a host's cap holds
// whichever channel calls it.
//
// Per-host state is created on first use and evicted when idle, so that recipients chosen by
// callers cannot grow it without bound. An entry is idle when it has no call in flight and a full
// bucket: it is then indistinguishable from a fresh one, and dropping it forgets nothing (evicting
// a host with a drained bucket would hand it a new full burst). Eviction runs when a new host is
// added and the map has reached a threshold: at least minSweepSize, and twice the entries that
// survived the last sweep. The threshold makes sweeps amortised O(1) per new host even when most
// entries are busy, and bounds the map at about twice the busy hosts (or minSweepSize). Hosts
// whose rule limits nothing take no entry at all.
type Limiter struct {
	now           func() time.Time
	providerRules map[string]Rule
	defaultHost   Rule
	hostRules     map[string]Rule
	// destRules are the providers' own destination rules (Config.Destinations).
	destRules map[string]Rule

	mu sync.Mutex
	// providers holds an entry per provider name seen, kept for ever: provider names come from
	// the code (one per adapter), not from callers, so there are few of them.
	providers map[string]*gate
	hosts     map[string]*gate
	// sweepAt is the size of hosts at which the next new host triggers a sweep; minSweep is its
	// floor (minSweepSize, lowered by tests).
	sweepAt  int
	minSweep int
	// slotWait is Config.SlotWait.
	slotWait time.Duration
	// holds are the slots kept for tickets (AcquireFor), by holdKey; holdSweepAt is the size at
	// which the next new hold first drops the expired ones.
	holds       map[string]*hold
	holdSweepAt int
}

// hold is the slot a rate kept for one ticket: the tokens were taken when it was reserved, so
// the attempt that comes back for it takes none again.
type hold struct {
	// at is when the slot is free: the latest of its buckets' reservations.
	at time.Time
	// took says which of the call's gates (provider, destination) gave a token.
	took [2]bool
}

// holdKeep is how long after its time a hold is kept for an attempt that has not come back: one
// that went to another process, or waited in a busy queue. Past it the slot is forgotten and
// the attempt asks the buckets again, as after a restart.
const holdKeep = time.Minute

// holdEarly is how early an attempt may take its slot. The deferral's until is the slot's wait
// added to the attempt's own clock, read a moment after the limiter's and truncated to the
// microsecond, so an attempt that starts at its until may find the slot a hair in the future;
// it proceeds rather than be deferred again for that.
const holdEarly = 20 * time.Millisecond

// gate holds the counters of one provider or one host.
type gate struct {
	// name says which rule refused, in the reason ("host example.com").
	name     string
	rule     Rule
	inFlight int
	// bucket is nil when the rule has no rate, so that unlimited rules cost no token arithmetic.
	bucket *rate.Limiter
	// waiters wait for a slot, first come first served (see Acquire).
	waiters []*waiter
}

func newGate(name string, r Rule) *gate {
	g := &gate{name: name, rule: r}
	if r.Rate > 0 {
		g.bucket = rate.NewLimiter(rate.Limit(r.Rate), r.Burst)
	}
	return g
}

// saturated reports whether the concurrency cap refuses another call.
func (g *gate) saturated() bool {
	return g.rule.Concurrency > 0 && g.inFlight >= g.rule.Concurrency
}

// idle reports whether the gate is in the state a fresh one would be in, so it can be dropped.
func (g *gate) idle(now time.Time) bool {
	return g.inFlight == 0 && (g.bucket == nil || g.bucket.TokensAt(now) >= float64(g.bucket.Burst()))
}

// New builds a Limiter for cfg, which must be valid. now is the clock used for the token
// buckets; nil means time.Now. Tests inject a clock so that they never sleep.
func New(cfg Config, now func() time.Time) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("limit config: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	l := &Limiter{
		now:           now,
		providerRules: make(map[string]Rule, len(cfg.Providers)),
		defaultHost:   cfg.DefaultHost.withDefaults(),
		hostRules:     make(map[string]Rule, len(cfg.Hosts)),
		destRules:     make(map[string]Rule, len(cfg.Destinations)),
		providers:     make(map[string]*gate),
		hosts:         make(map[string]*gate),
		sweepAt:       minSweepSize,
		minSweep:      minSweepSize,
		slotWait:      cfg.SlotWait,
		holds:         make(map[string]*hold),
		holdSweepAt:   minSweepSize,
	}
	// Copy the maps so that a caller changing its Config later cannot race with Acquire.
	for name, r := range cfg.Providers {
		l.providerRules[name] = r.withDefaults()
	}
	for host, r := range cfg.Hosts {
		l.hostRules[canonicalHost(host)] = r.withDefaults()
	}
	for provider, r := range cfg.Destinations {
		l.destRules[provider] = r.withDefaults()
	}
	return l, nil
}

var _ commands.Limiter = (*Limiter)(nil)

// Acquire asks whether a call of provider to host may start now; host is what HostOf returns
// for the recipient, and "" applies the provider's rule only. When a concurrency cap refuses, it
// waits up to Config.SlotWait for one of the cap's calls to end and asks again; it never waits
// for a rate.
//
// When ok is true the call counts as in flight until release is called, which the caller must
// do exactly once when the call ends, whatever its outcome (calling it again does nothing, so a
// deferred release next to an explicit one is harmless). When ok is false nothing was taken:
// no slot and no token, from the provider or the host. retryAfter is then the suggested delay
// before asking again (ConcurrencyRetryAfter for a concurrency cap; for a rate, the time until
// every refusing bucket holds a token), and reason names the rule that refused, for logs and the
// deferral record ("host example.com concurrency 8", "provider webhook rate 50/s").
func (l *Limiter) Acquire(provider, host string) (release func(), ok bool, retryAfter time.Duration, reason string) {
	return l.AcquireFor("", provider, host)
}

// AcquireFor is Acquire for the attempt ticket names (a delivery's attempt). When a rate
// refuses, the next free token of every bucket the call needs is kept for ticket and retryAfter
// is the time until the slot: the same ticket asking again from that time on (or holdEarly
// before) takes it without asking the buckets, so an attempt a rate deferred once is not
// deferred by it again. A concurrency cap is asked anew every time, slot kept or not. A slot
// not taken within holdKeep after its time is forgotten, its tokens spent. An empty ticket keeps
// nothing: a refusal then takes no token, as Acquire documents.
func (l *Limiter) AcquireFor(ticket, provider, host string) (release func(), ok bool, retryAfter time.Duration, reason string) {
	var deadline time.Time
	var held *gate
	for {
		release, ok, retryAfter, reason, w := l.try(ticket, provider, host, held, l.slotWait > 0)
		if w == nil {
			return release, ok, retryAfter, reason
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(l.slotWait)
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-w.granted:
			held = w.gate
		case <-t.C:
			l.giveUp(w)
			return nil, false, retryAfter, reason
		}
		t.Stop()
	}
}

// waiter is an Acquire waiting for a slot of gate. A call that ends hands its slot to the first
// waiter, closing granted, rather than free it: a waiter is not overtaken by a newcomer, so a
// wait ends in the order it began, and the herd of waiters is not woken for one slot.
type waiter struct {
	gate    *gate
	granted chan struct{}
	given   bool // a slot was handed over; under Limiter.mu
}

// try is one AcquireFor without waiting. held is a gate whose slot the caller was handed while
// it waited. When a concurrency cap refuses and wait is set, the caller is queued on its gate
// and w is what to wait on; held's slot is handed on if the call cannot start after all.
func (l *Limiter) try(ticket, provider, host string, held *gate, wait bool) (release func(), ok bool, retryAfter time.Duration, reason string, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	gates := [2]*gate{l.providerGate(provider), l.hostGate(provider, host, now)}

	// Concurrency first: checking it takes nothing, so a refusal needs nothing undone. A gate
	// others wait on is full for a newcomer too.
	for _, g := range gates {
		if g != nil && g != held && (g.saturated() || len(g.waiters) > 0) {
			if held != nil {
				l.free(held)
			}
			if wait {
				w = &waiter{gate: g, granted: make(chan struct{})}
				g.waiters = append(g.waiters, w)
			}
			return nil, false, ConcurrencyRetryAfter, g.name + " concurrency " + strconv.Itoa(g.rule.Concurrency), w
		}
	}

	// A slot kept for this ticket: its tokens are taken, and it is the caller's from its time.
	key := holdKey(ticket, provider, host)
	kept := l.holds[key]
	if kept != nil && now.After(kept.at.Add(holdKeep)) {
		delete(l.holds, key)
		kept = nil
	}
	if kept != nil {
		if early := kept.at.Sub(now); early > holdEarly {
			if held != nil {
				l.free(held)
			}
			return nil, false, early, "slot kept until " + kept.at.UTC().Format(time.RFC3339Nano), nil
		}
	}

	// Then tokens: reserve one in every bucket, and if any of them would make us wait, cancel them
	// all, or keep them for the ticket. A reservation (rather than a look at the token count)
	// gives the exact wait, and the cancellation gives the token back, so a refused call without
	// a ticket costs no bucket anything. The mutex makes the pair atomic: no other reservation
	// can slip in between and keep our token.
	var reserved [2]*rate.Reservation
	for i, g := range gates {
		if g == nil || g.bucket == nil || (kept != nil && kept.took[i]) {
			continue
		}
		// Burst is at least 1 (see Rule.withDefaults), so the reservation is always OK.
		r := g.bucket.ReserveN(now, 1)
		reserved[i] = r
		if d := r.DelayFrom(now); d > retryAfter {
			// Report the longest wait: both rules must pass, so asking sooner is futile.
			retryAfter = d
			reason = g.name + " rate " + strconv.FormatFloat(g.rule.Rate, 'g', -1, 64) + "/s"
		}
	}
	if retryAfter > 0 {
		if ticket != "" {
			l.keep(key, kept, reserved, now.Add(retryAfter), now)
		} else {
			for _, r := range reserved {
				if r != nil {
					r.CancelAt(now)
				}
			}
		}
		if held != nil {
			l.free(held)
		}
		return nil, false, retryAfter, reason, nil
	}
	if kept != nil {
		delete(l.holds, key)
	}

	for _, g := range gates {
		if g != nil && g != held {
			g.inFlight++
		}
	}
	return l.releaser(gates), true, 0, "", nil
}

// holdKey names the slot of one ticket's call of provider to host; "" for no ticket.
func holdKey(ticket, provider, host string) string {
	if ticket == "" {
		return ""
	}
	return ticket + "\x00" + provider + "\x00" + host
}

// keep records the reservations of a refused call as the ticket's slot, free at at (adding to
// the tokens a slot kept before already holds). A new hold may first drop the expired ones,
// amortised as the host sweep is. The caller holds l.mu.
func (l *Limiter) keep(key string, kept *hold, reserved [2]*rate.Reservation, at, now time.Time) {
	if kept == nil {
		if len(l.holds) >= l.holdSweepAt {
			for k, h := range l.holds {
				if now.After(h.at.Add(holdKeep)) {
					delete(l.holds, k)
				}
			}
			l.holdSweepAt = max(l.minSweep, 2*len(l.holds))
		}
		kept = &hold{}
		l.holds[key] = kept
	}
	for i, r := range reserved {
		if r != nil {
			kept.took[i] = true
		}
	}
	if at.After(kept.at) {
		kept.at = at
	}
}

// free ends one call of g: its slot goes to the first waiter, if any. The caller holds l.mu.
func (l *Limiter) free(g *gate) {
	if len(g.waiters) > 0 {
		w := g.waiters[0]
		g.waiters = g.waiters[1:]
		w.given = true
		close(w.granted)
		return
	}
	g.inFlight--
}

// giveUp takes a waiter whose wait is over off its queue, or, if a slot was handed to it as the
// wait ended, hands the slot on.
func (l *Limiter) giveUp(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.given {
		l.free(w.gate)
		return
	}
	w.gate.waiters = slices.DeleteFunc(w.gate.waiters, func(x *waiter) bool { return x == w })
}

// releaser returns the release function for one granted call. The gates are held by pointer:
// a host entry with a call in flight is never evicted, so the pointer stays the map's entry.
func (l *Limiter) releaser(gates [2]*gate) func() {
	var released atomic.Bool
	return func() {
		if !released.CompareAndSwap(false, true) {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, g := range gates {
			if g != nil {
				l.free(g)
			}
		}
	}
}

// InFlight returns the calls of provider currently in flight in this process, for metrics. A
// provider never seen reports zero.
func (l *Limiter) InFlight(provider string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.providers[provider]; g != nil {
		return g.inFlight
	}
	return 0
}

// providerGate returns the provider's entry, creating it on first use. Every provider gets one,
// limited or not, so that InFlight can count its calls. The caller holds l.mu.
func (l *Limiter) providerGate(provider string) *gate {
	g := l.providers[provider]
	if g == nil {
		g = newGate("provider "+provider, l.providerRules[provider])
		l.providers[provider] = g
	}
	return g
}

// hostGate returns the destination's entry, creating it on first use, or nil when no rule
// limits it. A destination of a provider with its own destination rule has an entry of its own
// (keyed by provider and destination); any other is shared by every provider that calls it.
// Adding an entry may first sweep idle ones (see Limiter). The caller holds l.mu.
func (l *Limiter) hostGate(provider, host string, now time.Time) *gate {
	if host == "" {
		return nil
	}
	own, hasOwn := l.destRules[provider]
	key, name := host, "host "+host
	if hasOwn {
		key, name = provider+"\x00"+host, "provider "+provider+" destination "+host
	}
	if g := l.hosts[key]; g != nil {
		return g
	}
	r, ok := l.hostRules[host]
	switch {
	case ok:
	case hasOwn:
		r = own
	default:
		r = l.defaultHost
	}
	if !r.limits() {
		return nil
	}
	if len(l.hosts) >= l.sweepAt {
		l.sweep(now)
	}
	g := newGate(name, r)
	l.hosts[key] = g
	return g
}

// sweep drops idle host entries and sets the size of the next sweep. The caller holds l.mu.
func (l *Limiter) sweep(now time.Time) {
	for host, g := range l.hosts {
		if g.idle(now) {
			delete(l.hosts, host)
		}
	}
	l.sweepAt = max(l.minSweep, 2*len(l.hosts))
}
