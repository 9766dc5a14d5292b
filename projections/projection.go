// Package projections holds the ledger's read models and the machinery that keeps them: the
// projector (Runner) that follows the events log in gap-safe order and applies it in checkpointed
// batches, Rebuild that builds a new version of a view beside the live one and switches to it
// atomically, Verify that compares a view with a fresh fold of the log, and Reader that answers
// the read API from the views.
//
// Three projections exist, each with its own table and checkpoint:
//
//	status    status_view    one row per delivery: its latest state and what led there
//	dlq       dlq_view       dead and unknown deliveries, with the evidence a replay decision needs
//	counters  counters_view  deliveries per tenant, channel and state
//
// Everything here is derived: the events table is the only truth, and invariant 5 of docs/design.md
// (a rebuilt view equals the live one) is what Verify checks.
package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/deliveryledger/ledger/domain"
)

// Names of the projections, as the command line and projection_checkpoints spell them.
const (
	NameStatus   = "status"
	NameDLQ      = "dlq"
	NameCounters = "counters"
)

// Projection is one read model: a table derived from the log.
//
// Apply must be a pure function of the events it is given and of the log before them: the runner
// calls it inside the transaction that also moves the projection's checkpoint, so a batch is
// applied entirely or not at all, and a failing Apply (which must fail rather than skip an event
// it cannot fold) rolls back its rows with the checkpoint. Apply writes to the table it is told,
// not to a fixed name, because Rebuild points it at a shadow table.
type Projection interface {
	// Name is the projection's name on the command line and in projection_checkpoints.
	Name() string
	// Table is the live table that holds the projection's rows.
	Table() string
	// Version numbers the projection's code. Raise it when a change means that rows built by
	// the older code are wrong or incomplete; a view built by an older version needs a rebuild.
	Version() int
	// Apply folds a batch of events, in log order, into table within tx.
	Apply(ctx context.Context, tx Tx, table string, batch []LoggedEvent) error
	// Verify folds every stream up to the position upTo afresh and reports each difference with
	// the rows of table. snap is a read-only snapshot in which the rows are exactly those at upTo.
	Verify(ctx context.Context, snap Snapshot, table string, upTo LogPosition, report func(Difference)) error
}

// seeder is a Projection whose view does not follow from the log alone (the whole-life counters,
// once partitions left for the archive): a rebuild writes Seed's rows into its fresh shadow, in
// the transaction that starts it, before the catch-up folds the log on top.
type seeder interface {
	Seed(ctx context.Context, tx Tx, table string) error
}

// All returns the projections the projector runs, in a fixed order.
func All() []Projection {
	return []Projection{StatusProjection{}, DLQProjection{}, CountersProjection{}}
}

// ErrUnknownProjection is returned for a name that is not one of All's.
var ErrUnknownProjection = errors.New("unknown projection")

// ByName returns the projection with that name.
func ByName(name string) (Projection, error) {
	var names []string
	for _, p := range All() {
		if p.Name() == name {
			return p, nil
		}
		names = append(names, p.Name())
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownProjection, name, strings.Join(names, ", "))
}

// Difference is one way a view differs from a fresh fold of the log.
type Difference struct {
	// Key names the row: a delivery id, or tenant/channel/state for counters.
	Key string
	// Column is the differing column; empty when the whole row is missing or extra.
	Column string
	// Live and Expected render the two values ("(no row)" when a row is missing).
	Live, Expected string
}

// String renders the difference as verify prints it.
func (d Difference) String() string {
	if d.Column == "" {
		return fmt.Sprintf("%s: live %s, expected %s", d.Key, d.Live, d.Expected)
	}
	return fmt.Sprintf("%s: %s: live %s, expected %s", d.Key, d.Column, d.Live, d.Expected)
}

// noRow renders a missing row in a Difference.
const noRow = "(no row)"

// entryStates maps each event type to the one state it leads to. The transition table happens to
// send every event type to a single state whatever the state before; the projections rely on it
// to know a delivery's state from the type of its latest event alone, without keeping a copy of
// every delivery. leavesDLQ lists the types that move a delivery out of dead or unknown.
var entryStates, leavesDLQ = func() (map[domain.EventType]domain.State, map[domain.EventType]bool) {
	entry := map[domain.EventType]domain.State{}
	leaves := map[domain.EventType]bool{}
	ambiguous := map[domain.EventType]bool{}
	from := append([]domain.State{domain.StateNone}, domain.States...)
	for _, t := range domain.EventTypes {
		for _, s := range from {
			to, err := domain.Next(s, t)
			if err != nil {
				continue
			}
			if prev, ok := entry[t]; ok && prev != to {
				ambiguous[t] = true
			}
			entry[t] = to
			if inDLQ(s) && !inDLQ(to) {
				leaves[t] = true
			}
		}
	}
	for t := range ambiguous {
		delete(entry, t)
	}
	return entry, leaves
}()

// StateAfter returns the state an event of type t leads to, whatever the state before it. A
// preserving event (domain.Preserving) leads to the state before it: StateAfter refuses it,
// and its callers look further back.
func StateAfter(t domain.EventType) (domain.State, error) {
	s, ok := entryStates[t]
	if !ok {
		return "", fmt.Errorf("event type %q does not lead to a single state; the projections cannot follow it", t)
	}
	return s, nil
}

// lastChanging returns the latest event of a stream that is not preserving (one whose type
// says the state it leads to), or nil when every event only adds evidence.
func lastChanging(events []domain.Event) *domain.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if !domain.Preserving(events[i].Type) {
			return &events[i]
		}
	}
	return nil
}

// preservingTypes are the types of the events that keep a delivery's state, for the read of the
// latest event that says the state.
var preservingTypes = func() []string {
	out := []string{} // never NULL: "<> ALL(NULL)" would match nothing
	for _, t := range domain.EventTypes {
		if domain.Preserving(t) {
			out = append(out, string(t))
		}
	}
	return out
}()

// inDLQ reports whether a delivery in state s belongs in the DLQ view.
func inDLQ(s domain.State) bool { return s == domain.StateDead || s == domain.StateUnknown }

// stream is one delivery's events within a batch, in version order.
type stream struct {
	id     string
	tenant string
	events []domain.Event
}

// groupStreams splits a batch into per-delivery streams, in the order of each delivery's first
// event, and checks that each stream's versions follow one another: the log order keeps a
// stream's versions in order, and a gap means an event is missing.
func groupStreams(batch []LoggedEvent) ([]*stream, error) {
	byID := map[string]*stream{}
	var out []*stream
	for _, le := range batch {
		s := byID[le.DeliveryID]
		if s == nil {
			s = &stream{id: le.DeliveryID, tenant: le.Tenant}
			byID[le.DeliveryID] = s
			out = append(out, s)
		} else if last := s.events[len(s.events)-1]; le.Version != last.Version+1 {
			return nil, fmt.Errorf("delivery %s: event version %d at %s follows version %d",
				le.DeliveryID, le.Version, le.At, last.Version)
		}
		s.events = append(s.events, le.Event)
	}
	return out, nil
}
