package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/deliveryledger/ledger/domain"
)

// CountRow is one line of the counters view.
type CountRow struct {
	Tenant  string       `db:"tenant"`
	Channel string       `db:"channel"`
	State   domain.State `db:"state"`
	// Deliveries is how many deliveries are in the state now.
	Deliveries int64 `db:"deliveries"`
	// Entered is how many times a delivery moved into the state (a deferral, queued to queued,
	// is not a move).
	Entered int64 `db:"entered"`
}

type countKey struct {
	tenant, channel string
	state           domain.State
}

func (k countKey) String() string { return k.tenant + "/" + k.channel + "/" + string(k.state) }

type countDelta struct{ deliveries, entered int64 }

// CountersProjection keeps counters_view.
type CountersProjection struct{}

// Name implements Projection.
func (CountersProjection) Name() string { return NameCounters }

// Table implements Projection.
func (CountersProjection) Table() string { return "counters_view" }

// Version implements Projection.
func (CountersProjection) Version() int { return 1 }

// Apply implements Projection. A delivery's channel is in its accepted event and the state it
// was in before the batch follows from the type of its previous event; both are read from the
// log rather than kept in a copy of every delivery.
func (CountersProjection) Apply(ctx context.Context, tx Tx, table string, batch []LoggedEvent) error {
	streams, err := groupStreams(batch)
	if err != nil {
		return err
	}
	// For each delivery: the channel, and the state it was in before the batch.
	type origin struct {
		channel string
		before  domain.State
	}
	origins := map[string]origin{}
	var ids []string
	var before []int32
	for _, s := range streams {
		first := s.events[0]
		if first.Version == 1 {
			var acc domain.Accepted
			if err := json.Unmarshal(first.Data, &acc); err != nil {
				return fmt.Errorf("delivery %s: accepted event: %w", s.id, err)
			}
			origins[s.id] = origin{channel: acc.Channel, before: domain.StateNone}
			continue
		}
		ids = append(ids, s.id)
		before = append(before, int32(first.Version-1))
	}
	if len(ids) > 0 {
		// For deliveries the batch continues: the accepted event (for the channel) and the
		// event before the batch (for the state the delivery leaves).
		known, err := tx.StreamsContextGet(ctx, ids, before)
		if err != nil {
			return fmt.Errorf("read counters context: %w", err)
		}
		type found struct {
			channel string
			types   map[int]domain.EventType
		}
		got := map[string]*found{}
		for _, e := range known {
			f := got[e.DeliveryID]
			if f == nil {
				f = &found{types: map[int]domain.EventType{}}
				got[e.DeliveryID] = f
			}
			if e.Version == 1 {
				f.channel = e.Channel
			}
			f.types[e.Version] = e.Type
		}
		var evidenceIDs []string
		var evidenceBefore []int32
		for i, id := range ids {
			f := got[id]
			if f == nil || f.channel == "" || f.types[int(before[i])] == "" {
				return fmt.Errorf("delivery %s: the log does not hold its accepted event or version %d", id, before[i])
			}
			if domain.Preserving(f.types[int(before[i])]) {
				evidenceIDs, evidenceBefore = append(evidenceIDs, id), append(evidenceBefore, before[i])
			}
		}
		if len(evidenceIDs) > 0 {
			// Where the event before the batch only adds evidence (a receipt keeps the state
			// it finds), the latest one before it that says a state. It is rare (receipts), so
			// the common case keeps its one cheap read.
			states, err := tx.StreamsStateGet(ctx, evidenceIDs, evidenceBefore, preservingTypes)
			if err != nil {
				return fmt.Errorf("read counters context: %w", err)
			}
			for id, typ := range states {
				got[id].types[0] = typ // the state the evidence kept
			}
		}
		for i, id := range ids {
			f := got[id]
			typ := f.types[int(before[i])]
			if domain.Preserving(typ) {
				typ = f.types[0]
			}
			state, err := StateAfter(typ)
			if err != nil {
				return fmt.Errorf("delivery %s: %w", id, err)
			}
			origins[id] = origin{channel: f.channel, before: state}
		}
	}
	deltas := map[countKey]*countDelta{}
	add := func(k countKey, deliveries, entered int64) {
		d := deltas[k]
		if d == nil {
			d = &countDelta{}
			deltas[k] = d
		}
		d.deliveries += deliveries
		d.entered += entered
	}
	for _, s := range streams {
		c := origins[s.id]
		state := c.before
		for _, e := range s.events {
			next, err := domain.Next(state, e.Type)
			if err != nil {
				return fmt.Errorf("delivery %s at version %d: %w", s.id, e.Version, err)
			}
			if next != state {
				add(countKey{s.tenant, c.channel, next}, 0, 1)
			}
			state = next
		}
		if state != c.before {
			if c.before != domain.StateNone {
				add(countKey{s.tenant, c.channel, c.before}, -1, 0)
			}
			add(countKey{s.tenant, c.channel, state}, 1, 0)
		}
	}
	if len(deltas) == 0 {
		return nil
	}
	keys := make([]countKey, 0, len(deltas))
	for k := range deltas {
		keys = append(keys, k)
	}
	sortCountKeys(keys)
	rows := make([]CountRow, len(keys))
	for i, k := range keys {
		rows[i] = CountRow{Tenant: k.tenant, Channel: k.channel, State: k.state,
			Deliveries: deltas[k].deliveries, Entered: deltas[k].entered}
	}
	if err := tx.CountersAdd(ctx, table, rows); err != nil {
		return fmt.Errorf("add counters: %w", err)
	}
	return nil
}

func sortCountKeys(keys []countKey) {
	less := func(a, b countKey) int {
		if c := strings.Compare(a.tenant, b.tenant); c != 0 {
			return c
		}
		if c := strings.Compare(a.channel, b.channel); c != 0 {
			return c
		}
		return strings.Compare(string(a.state), string(b.state))
	}
	slices.SortFunc(keys, less)
}

// Seed implements seeder: a rebuild's shadow starts from the counts of the archived segments,
// whose events the log no longer holds, so the rebuilt counters stay whole-life.
func (CountersProjection) Seed(ctx context.Context, tx Tx, table string) error {
	rows, err := tx.ArchivedCounters(ctx)
	if err != nil {
		return fmt.Errorf("read archived counters: %w", err)
	}
	if len(rows) == 0 {
		return nil
	}
	if err := tx.CountersAdd(ctx, table, rows); err != nil {
		return fmt.Errorf("seed counters: %w", err)
	}
	return nil
}

// Verify implements Projection: it folds every stream into counts, adds what the archived
// segments took with them, then compares the sums with the view's rows.
func (CountersProjection) Verify(ctx context.Context, snap Snapshot, table string, upTo LogPosition, report func(Difference)) error {
	streams, err := openStreams(ctx, snap, upTo)
	if err != nil {
		return err
	}
	want := map[countKey]*countDelta{}
	bump := func(k countKey, deliveries, entered int64) {
		d := want[k]
		if d == nil {
			d = &countDelta{}
			want[k] = d
		}
		d.deliveries += deliveries
		d.entered += entered
	}
	// The counters are whole-life: what left for the archive stays counted.
	archived, err := snap.ArchivedCounters(ctx)
	if err != nil {
		return fmt.Errorf("read archived counters: %w", err)
	}
	for _, r := range archived {
		bump(countKey{r.Tenant, r.Channel, r.State}, r.Deliveries, r.Entered)
	}
	for {
		s, err := streams.next(ctx)
		if err != nil {
			return err
		}
		if s == nil {
			break
		}
		var channel string
		var state domain.State
		for _, e := range s.events {
			next, err := domain.Next(state, e.Type)
			if err != nil {
				return fmt.Errorf("delivery %s at version %d: %w", s.id, e.Version, err)
			}
			if e.Type == domain.EventAccepted {
				var acc domain.Accepted
				if err := json.Unmarshal(e.Data, &acc); err != nil {
					return fmt.Errorf("delivery %s: accepted event: %w", s.id, err)
				}
				channel = acc.Channel
			}
			if next != state {
				bump(countKey{s.tenant, channel, next}, 0, 1)
			}
			state = next
		}
		bump(countKey{s.tenant, channel, state}, 1, 0)
	}
	live, err := snap.CountersList(ctx, table)
	if err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	seen := map[countKey]bool{}
	for _, r := range live {
		k := countKey{r.Tenant, r.Channel, r.State}
		seen[k] = true
		w := want[k]
		if w == nil {
			w = &countDelta{}
		}
		if r.Deliveries != w.deliveries {
			report(Difference{Key: k.String(), Column: "deliveries", Live: fmt.Sprint(r.Deliveries), Expected: fmt.Sprint(w.deliveries)})
		}
		if r.Entered != w.entered {
			report(Difference{Key: k.String(), Column: "entered", Live: fmt.Sprint(r.Entered), Expected: fmt.Sprint(w.entered)})
		}
	}
	missing := make([]countKey, 0)
	for k := range want {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	sortCountKeys(missing)
	for _, k := range missing {
		report(Difference{Key: k.String(), Live: noRow, Expected: fmt.Sprintf("deliveries %d, entered %d", want[k].deliveries, want[k].entered)})
	}
	return nil
}
