package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// Partition is one time partition of the history: the deliveries accepted in [From, To) (a zero
// From: everything before To).
type Partition struct {
	Name     string
	From, To time.Time
	// Detached: a pass took it out of the history and did not finish (a crash, a failed check).
	Detached bool
}

// TenantCount is what a partition holds of one tenant.
type TenantCount struct {
	Tenant     string
	Deliveries int64
	// Open counts the deliveries not in a terminal state (retrying, unknown, awaiting a
	// receipt, scheduled...): any of them holds the partition.
	Open int64
}

// Counter is what left with a segment of one (tenant, channel, state): the deliveries that
// ended in it and the transitions into it, so whole-life counters stay right without the rows.
type Counter struct {
	Tenant     string `json:"tenant"`
	Channel    string `json:"channel"`
	State      string `json:"state"`
	Deliveries int64  `json:"deliveries"`
	Entered    int64  `json:"entered"`
}

// Store is what the pass needs of the hot store (postgres.RetentionStore).
type Store interface {
	// Partitions lists the history's partitions, oldest first, those a pass detached included.
	Partitions(ctx context.Context) ([]Partition, error)
	// Tenants counts a partition's deliveries per tenant; terminal names the event types that
	// end a delivery.
	Tenants(ctx context.Context, p Partition, terminal []domain.EventType) ([]TenantCount, error)
	// Begin records that p is leaving (its segment 'archiving', with its tenants): from then
	// on a read of one of its deliveries answers archived. It fails with ErrRebuilding while a
	// rebuild of the counters is in progress.
	Begin(ctx context.Context, p Partition, tenants []string) error
	// Detach takes p out of the history, waiting for the transactions that may use it: no write
	// enters it after. A partition already detached is left as it is.
	Detach(ctx context.Context, p Partition) error
	// Reattach puts a detached p back and removes its segment row: it may not leave yet.
	Reattach(ctx context.Context, p Partition) error
	// Events calls emit for each event of the detached p, in log order, with its payload.
	Events(ctx context.Context, p Partition, emit func(projections.LoggedEvent) error) error
	// Counters sums what leaves with p per (tenant, channel, state): states gives the state an
	// event type leads to; an event of a type in keeping (a deferral, a failover...) leaves the
	// delivery in its state and is no transition into it, as the counters view counts.
	Counters(ctx context.Context, p Partition, states func(domain.EventType) (domain.State, bool), keeping []domain.EventType) ([]Counter, error)
	// Exclusive runs fn while no other process runs a pass (an advisory lock), and reports
	// false without running it when another holds the lock: two passes must not write one
	// segment at once.
	Exclusive(ctx context.Context, fn func() error) (bool, error)
	// ExpirePayloads deletes the bodies (keeping SHA-256 and size) of up to limit payloads
	// accepted before before, of tenant (all tenants but except when tenant is ""), whose
	// deliveries are all terminal, and returns how many.
	ExpirePayloads(ctx context.Context, tenant string, except []string, before time.Time, limit int) (int64, error)
	// Applied reports whether every projection (status, dlq, counters) has applied every event
	// of the detached p.
	Applied(ctx context.Context, p Partition) (bool, error)
	// DropEmpty drops p, detached and found empty, and forgets its segment row.
	DropEmpty(ctx context.Context, p Partition) error
	// Finish records p's segment archived with its manifest and counters and drops p, then the
	// partitions of the tables that follow the history (views, payloads, accept answers) that
	// no partition of the history overlaps any more.
	Finish(ctx context.Context, p Partition, a Archived, counters []Counter) error
}

// Segment is what the archive is asked to keep: the events of one partition, of the deliveries
// accepted in [From, To).
type Segment struct {
	ID       string
	From, To time.Time
}

// Archived is what the archive holds of a segment, written and checked.
type Archived struct {
	Events, Deliveries, Bytes int64
	File                      string
	// Manifest is the archive's own description of the segment, kept with the segment's row.
	Manifest json.RawMessage
}

// Archive is where leaving partitions go (archive.ForRetention, over an archive.Store).
type Archive interface {
	// Keep writes the segment's events (events calls emit once per event, in log order), reads
	// them back and checks them against the events given, and says what it holds. A segment
	// kept before (a pass that stopped before its drop) is answered as it is.
	Keep(ctx context.Context, seg Segment, events func(emit func(projections.LoggedEvent) error) error) (Archived, error)
	// Compare reads segment id beside the events read again, and fails at the first that differs.
	Compare(ctx context.Context, id string, events func(emit func(projections.LoggedEvent) error) error) error
	// Discard sets segment id aside, so that the next Keep of its id writes it afresh.
	Discard(ctx context.Context, id string) error
}

// Observer hears what a pass did, for metrics.
type Observer interface {
	// Archived: a partition left, with so many events.
	Archived(events int64)
	// Held counts the partitions that are past their keep and may not leave, and how many of
	// them are held past twice their keep.
	Held(held, overdue int)
	// Failed: a partition's archive check failed; it stays.
	Failed()
}

// Pass moves partitions whose deliveries are all terminal and older than their tenants' keep
// from the hot store to the archive: it records the segment, detaches the partition, counts it
// again (a write may have entered it before the detach), has the archive write it, read it back
// and check it against the rows, and only then drops it. Anything else leaves the partition
// where it is, attached again, and is tried at the next round.
type Pass struct {
	Store    Store
	Archive  Archive
	Config   Config
	Observer Observer
	Logger   *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Share is the part of its time the pass works while it reads a partition's events (for
	// the archive and for the check against the rows): after each chunk of events it rests
	// long enough that its work is this share of the time. Zero: DefaultShare; 1: no rest.
	Share float64
}

// DefaultShare: the pass reads a partition at a quarter of its full speed. It shares the
// machine with the accepts, and its read (PostgreSQL's scan and encoding, the pass's decoding,
// JSON lines and zstd) takes a core of each side while it runs: at full speed, on two cores at
// 200 accepts a second, the accept's p99 doubled in the seconds a partition left (retention
// benchmark, 2026-12-02). A partition of a day then takes minutes to leave instead of one.
const DefaultShare = 0.25

// paceChunk is how many events the pass reads between rests.
const paceChunk = 256

// pacer rests between chunks of events so that the work on them is a share of the time.
type pacer struct {
	share float64
	now   func() time.Time
	sleep func(context.Context, time.Duration) error
}

// newPacer is a pacer at share (zero: DefaultShare) on the wall clock.
func newPacer(share float64) pacer {
	if share <= 0 {
		share = DefaultShare
	}
	return pacer{share: share, now: time.Now, sleep: func(ctx context.Context, d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}}
}

// wrap returns emit paced: after each paceChunk events it sleeps (1/share - 1) times what the
// chunk took, so that the events take at least 1/share of the time their work took. The sleep
// also stalls the database's side of the read, whose sends wait on the socket meanwhile.
func (p pacer) wrap(ctx context.Context, emit func(projections.LoggedEvent) error) func(projections.LoggedEvent) error {
	if p.share >= 1 {
		return emit
	}
	n, start := 0, p.now()
	return func(e projections.LoggedEvent) error {
		if err := emit(e); err != nil {
			return err
		}
		if n++; n%paceChunk != 0 {
			return nil
		}
		if err := p.sleep(ctx, time.Duration(float64(p.now().Sub(start))*(1/p.share-1))); err != nil {
			return err
		}
		start = p.now()
		return nil
	}
}

// ErrCheckFailed: what the archive holds is not what the partition held; nothing was dropped.
var ErrCheckFailed = errors.New("archive check failed")

// ErrRebuilding: a rebuild of the whole-life counters is in progress (or was left unfinished);
// no partition leaves until its switch, or the rebuild would lose what left under it.
var ErrRebuilding = errors.New("a rebuild of the counters is in progress")

// Round runs one pass over the partitions, unless another process is running one, and returns
// how many left.
func (p *Pass) Round(ctx context.Context) (int, error) {
	left := 0
	_, err := p.Store.Exclusive(ctx, func() error {
		errs := []error{p.expirePayloads(ctx)}
		if p.Config.Keep > 0 {
			n, err := p.round(ctx)
			left, errs = n, append(errs, err)
		}
		return errors.Join(errs...)
	})
	return left, err
}

// payloadBatch bounds one expiry statement: a round loops until a batch comes back short.
const payloadBatch = 1000

// expirePayloads deletes the bodies of the payloads past their tenant's payloads period.
func (p *Pass) expirePayloads(ctx context.Context) error {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	type rule struct {
		tenant string
		except []string
		keep   time.Duration
	}
	var rules []rule
	var own []string
	for t, tp := range p.Config.Tenants {
		if tp.Payloads > 0 {
			rules = append(rules, rule{tenant: t, keep: tp.Payloads})
			own = append(own, t)
		}
	}
	slices.Sort(own)
	if p.Config.Payloads > 0 {
		rules = append(rules, rule{except: own, keep: p.Config.Payloads})
	}
	for _, r := range rules {
		for {
			n, err := p.Store.ExpirePayloads(ctx, r.tenant, r.except, now().Add(-r.keep), payloadBatch)
			if err != nil {
				return fmt.Errorf("expire payloads: %w", err)
			}
			if n > 0 && p.Logger != nil {
				p.Logger.Info("payload bodies expired", "tenant", r.tenant, "payloads", n)
			}
			if n < payloadBatch || ctx.Err() != nil {
				break
			}
		}
	}
	return nil
}

// Active reports whether the configuration asks the pass for anything.
func (c Config) Active() bool {
	if c.Keep > 0 || c.Payloads > 0 {
		return true
	}
	for _, t := range c.Tenants {
		if t.Payloads > 0 {
			return true
		}
	}
	return false
}

func (p *Pass) round(ctx context.Context) (int, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	parts, err := p.Store.Partitions(ctx)
	if err != nil {
		return 0, err
	}
	terminal := terminalTypes()
	left, held, overdue := 0, 0, 0
	var errs []error
	for _, part := range parts {
		if part.To.Add(p.shortestKeep()).After(now()) {
			break // oldest first: nothing later is older than any keep either
		}
		counts, err := p.Store.Tenants(ctx, part, terminal)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ok, pastTwice := p.judge(part, counts, now())
		if !ok {
			held++
			if pastTwice {
				overdue++
			}
			continue
		}
		moved, err := p.leave(ctx, part, counts, terminal, now())
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("partition %s: %w", part.Name, err))
			if errors.Is(err, ErrCheckFailed) && p.Observer != nil {
				p.Observer.Failed()
			}
		case moved:
			left++
		default:
			held++
		}
	}
	if p.Observer != nil {
		p.Observer.Held(held, overdue)
	}
	return left, errors.Join(errs...)
}

// shortestKeep is the least keep of any tenant: a partition younger than it cannot leave.
func (p *Pass) shortestKeep() time.Duration {
	k := p.Config.Keep
	for _, t := range p.Config.Tenants {
		if t.Keep > 0 {
			k = min(k, t.Keep)
		}
	}
	return k
}

// judge says whether a partition of these counts may leave at now, and whether one held is
// held past twice its keep.
func (p *Pass) judge(part Partition, counts []TenantCount, now time.Time) (ok, pastTwice bool) {
	ok = true
	for _, c := range counts {
		keep := p.Config.KeepOf(c.Tenant)
		if part.To.Add(keep).After(now) {
			ok = false // a tenant that keeps longer holds the shared partition; not overdue
			continue
		}
		if c.Open > 0 {
			ok = false
			pastTwice = pastTwice || !part.To.Add(2*keep).After(now)
		}
	}
	return ok, pastTwice
}

// leave moves one partition, counted as counts, to the archive, or puts it back. It reports
// whether it left.
func (p *Pass) leave(ctx context.Context, part Partition, counts []TenantCount, terminal []domain.EventType, now time.Time) (bool, error) {
	tenants := make([]string, 0, len(counts))
	for _, c := range counts {
		tenants = append(tenants, c.Tenant)
	}
	slices.Sort(tenants)
	if err := p.Store.Begin(ctx, part, tenants); err != nil {
		if errors.Is(err, ErrRebuilding) {
			if p.Logger != nil {
				p.Logger.Warn("partition held while the counters are rebuilt (resume or restart a rebuild left unfinished)",
					"partition", part.Name)
			}
			return false, nil
		}
		return false, err
	}
	if err := p.Store.Detach(ctx, part); err != nil {
		return false, err
	}
	left, err := p.archive(ctx, part, terminal, now)
	if err != nil || !left {
		// Whatever stopped it, the partition goes back where writes find it.
		if rerr := p.Store.Reattach(ctx, part); rerr != nil {
			return false, errors.Join(err, fmt.Errorf("attach again: %w", rerr))
		}
	}
	return left, err
}

// archive has a detached partition written to the archive, checked and dropped; it reports
// false, nil when the partition may not leave after all.
func (p *Pass) archive(ctx context.Context, part Partition, terminal []domain.EventType, now time.Time) (bool, error) {
	// Counted again on the detached table: nothing can enter it now, and a replay or a late
	// receipt may have entered it before the detach.
	counts, err := p.Store.Tenants(ctx, part, terminal)
	if err != nil {
		return false, err
	}
	if ok, _ := p.judge(part, counts, now); !ok {
		return false, nil
	}
	if len(counts) == 0 {
		// Nothing to archive (no delivery was accepted in its time): it leaves without a
		// segment, and a read of an id in its range stays not found.
		return true, p.Store.DropEmpty(ctx, part)
	}
	// The views must have applied every event that leaves: the log will not give them again.
	applied, err := p.Store.Applied(ctx, part)
	if err != nil || !applied {
		if err == nil && p.Logger != nil {
			p.Logger.Info("partition held: the projections have not applied all its events yet", "partition", part.Name)
		}
		return false, err
	}
	read := func(emit func(projections.LoggedEvent) error) error {
		return p.Store.Events(ctx, part, newPacer(p.Share).wrap(ctx, emit))
	}
	started := time.Now()
	m, err := p.Archive.Keep(ctx, Segment{ID: part.Name, From: part.From, To: part.To}, read)
	kept := time.Now()
	if err == nil {
		// The archive checked what it read back against the events as it was given them; read
		// the rows again, beside the archive, line by line.
		err = p.Archive.Compare(ctx, part.Name, read)
	}
	checked := time.Now()
	if err != nil {
		// The partition goes back to the hot store, where a late receipt or a replay may add
		// to it: a segment kept now would never match it again, and Keep answers a kept one as
		// it is. The next pass writes it afresh.
		if derr := p.Archive.Discard(ctx, part.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("discard the segment: %w", derr))
		}
		return false, fmt.Errorf("%w: %w", ErrCheckFailed, err)
	}
	counters, err := p.Store.Counters(ctx, part, func(t domain.EventType) (domain.State, bool) {
		s, err := projections.StateAfter(t)
		return s, err == nil
	}, keepingTypes())
	if err != nil {
		return false, err
	}
	if err := p.Store.Finish(ctx, part, m, counters); err != nil {
		return false, err
	}
	if p.Observer != nil {
		p.Observer.Archived(m.Events)
	}
	if p.Logger != nil {
		p.Logger.Info("partition archived and dropped", "partition", part.Name, "events", m.Events,
			"deliveries", m.Deliveries, "bytes", m.Bytes, "file", m.File,
			"kept_in", kept.Sub(started).Round(time.Millisecond), "checked_in", checked.Sub(kept).Round(time.Millisecond),
			"took", time.Since(started).Round(time.Millisecond))
	}
	return true, nil
}

// terminalTypes are the event types after which a delivery is terminal.
func terminalTypes() []domain.EventType {
	var out []domain.EventType
	for _, t := range domain.EventTypes {
		if s, err := projections.StateAfter(t); err == nil && !domain.Preserving(t) && s.Terminal() {
			out = append(out, t)
		}
	}
	return out
}

// keepingTypes are the event types that leave a delivery in the state it is in, from every state
// that allows them (a deferral keeps it queued, a failover or a provider's acceptance processing,
// a receipt where it is): the counters view counts no transition for them.
func keepingTypes() []domain.EventType {
	from := append([]domain.State{domain.StateNone}, domain.States...)
	var out []domain.EventType
	for _, t := range domain.EventTypes {
		allowed, keeps := false, true
		for _, s := range from {
			to, err := domain.Next(s, t)
			if err != nil {
				continue
			}
			allowed = true
			keeps = keeps && to == s
		}
		if allowed && keeps {
			out = append(out, t)
		}
	}
	return out
}

// Run runs a round at each interval until ctx ends.
func (p *Pass) Run(ctx context.Context, interval time.Duration) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if _, err := p.Round(ctx); err != nil && ctx.Err() == nil && p.Logger != nil {
			p.Logger.Error("retention round failed; the partitions stay", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
