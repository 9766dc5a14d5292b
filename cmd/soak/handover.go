package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/domain"
)

// With --twice every role runs in two processes; the relays take turns on the outbox offset's
// row and the projectors on each view's checkpoint row (each locks the row, FOR UPDATE, for the
// length of a batch), so when one is killed the other goes on. The soak measures how long that
// takes, for each SIGKILL of a relay or a projector, from PostgreSQL itself (every ledger process
// connects under an application_name of its own, ledger-soak/<process>):
//
//   - released: from the SIGKILL until no backend of the killed process is left. PostgreSQL
//     ends a backend whose client has gone, rolling back its transaction: from then the row it
//     held, if it held it, is the other process's to take;
//   - advanced: from the SIGKILL until the row (the status view's checkpoint; the relay's
//     offset) next moves after that, which only the other process can have done. A kill that
//     found nothing to apply (no event past the checkpoint, no outbox row past the offset) has
//     nothing to hand over and is counted apart;
//   - held: whether the other process was waiting for the killed one's lock just before the
//     kill (the killed one had the turn), read from pg_locks.
//
// relayHandovers, below, adds what a delivery sees: the longest accepted → queued time of the
// deliveries accepted in the second after a relay kill.

const (
	handoverSample = 5 * time.Millisecond
	handoverMax    = 15 * time.Second
	relayWindow    = time.Second
)

// handoverWatch measures the handovers of a --twice run.
type handoverWatch struct {
	pool *pgxpool.Pool

	mu        sync.Mutex
	measured  map[string][]handover // by role: relay, projector
	idle      map[string]int        // kills with nothing to hand over
	unmatched map[string]int        // kills after which the row did not move within handoverMax
}

// handover is one measured handover.
type handover struct {
	released, advanced time.Duration
	held               bool
}

func newHandoverWatch(pool *pgxpool.Pool) *handoverWatch {
	return &handoverWatch{pool: pool, measured: map[string][]handover{}, idle: map[string]int{}, unmatched: map[string]int{}}
}

// handoverRole is the role whose handover a kill of process name starts, or "".
func handoverRole(name string) string {
	for _, role := range []string{"relay", "projector"} {
		if name == role || name == role+"-2" {
			return role
		}
	}
	return ""
}

// other is the process of the same role as name.
func other(name string) string {
	if base, ok := strings.CutSuffix(name, "-2"); ok {
		return base
	}
	return name + "-2"
}

// handoverRow reads, for role, the row the two processes take turns on (its position) and
// whether there is work past it.
func handoverRow(role string) string {
	if role == "projector" {
		// An event past the checkpoint in the log order is work to do. The first one, in the
		// order of the events' primary key: an EXISTS is planned as a sequential scan, which
		// reads the whole table when there is none.
		return `SELECT c.position::text, (SELECT e.position FROM events e
				WHERE (e.transaction_id, e.position) > (c.transaction_id, c.position)
				ORDER BY e.transaction_id, e.position LIMIT 1) IS NOT NULL
			FROM projection_checkpoints c WHERE c.name = 'status'`
	}
	// Every outbox shard's offset (the relay's consumer group per shard): rows past one, below
	// the snapshot's xmin (what the relay may read), are work to do.
	return `SELECT string_agg(p.consumer_group || '=' || p.last_processed_transaction_id::text || '/' || coalesce(p.offset_acked, 0), ',' ORDER BY p.consumer_group),
			coalesce(bool_or(EXISTS (SELECT 1 FROM watermill_ledger_outbox o
				WHERE o.shard = CASE WHEN p.consumer_group = 'relay' THEN 0 ELSE split_part(p.consumer_group, '/', 2)::int END
				AND (o.transaction_id, o."offset") > (p.last_processed_transaction_id, coalesce(p.offset_acked, 0))
				AND o.transaction_id < pg_snapshot_xmin(pg_current_snapshot()))), false)
		FROM watermill_offsets_ledger_outbox p WHERE p.consumer_group = 'relay' OR p.consumer_group LIKE 'relay/%'`
}

// waiting reports whether process name has a backend waiting for a lock.
func (w *handoverWatch) waiting(ctx context.Context, name string) bool {
	var n int
	err := w.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE NOT l.granted AND a.application_name = $1`, ledgerApplication+"/"+name).Scan(&n)
	return err == nil && n > 0
}

// before is called just before process name is killed: it reads whether the other process
// waits for the killed one's lock.
func (w *handoverWatch) before(ctx context.Context, name string) bool {
	if handoverRole(name) == "" {
		return false
	}
	return w.waiting(ctx, other(name))
}

// killed measures the handover after process name was killed at at (run it in a goroutine).
func (w *handoverWatch) killed(ctx context.Context, name string, at time.Time, held bool) {
	role := handoverRole(name)
	if role == "" {
		return
	}
	app := ledgerApplication + "/" + name
	var h handover
	h.held = held
	var from string
	var pending bool
	for deadline := at.Add(handoverMax); ; {
		if time.Now().After(deadline) || ctx.Err() != nil {
			w.count(w.unmatched, role)
			return
		}
		time.Sleep(handoverSample)
		if h.released == 0 {
			var left int
			if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&left); err != nil || left > 0 {
				continue
			}
			h.released = time.Since(at)
			// Nothing the killed process committed can come after this: the row's position
			// now is the one the other process moves on from.
			if err := w.pool.QueryRow(ctx, handoverRow(role)).Scan(&from, &pending); err != nil {
				h.released = 0 // the database is being disturbed: try again
				continue
			}
			if !pending {
				w.count(w.idle, role)
				return
			}
			continue
		}
		var now string
		if err := w.pool.QueryRow(ctx, handoverRow(role)).Scan(&now, new(bool)); err != nil {
			continue
		}
		if now != from {
			h.advanced = time.Since(at)
			w.mu.Lock()
			w.measured[role] = append(w.measured[role], h)
			w.mu.Unlock()
			return
		}
	}
}

func (w *handoverWatch) count(m map[string]int, role string) {
	w.mu.Lock()
	m[role]++
	w.mu.Unlock()
}

// describe renders the handovers of role.
func (w *handoverWatch) describe(role string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var released, advanced, heldAdvanced []time.Duration
	for _, h := range w.measured[role] {
		released, advanced = append(released, h.released), append(advanced, h.advanced)
		if h.held {
			heldAdvanced = append(heldAdvanced, h.advanced)
		}
	}
	return fmt.Sprintf("backends gone %s; row moved by the other %s (of which the killed one had the turn: %s); nothing to hand over %d, row still after %s %d",
		describeDurations(released), describeDurations(advanced), describeDurations(heldAdvanced), w.idle[role], handoverMax, w.unmatched[role])
}

// relayHandovers returns, for each relay kill, the longest accepted → queued time of the
// deliveries accepted within relayWindow after it, and the median of that time over the run.
func relayHandovers(incidents []incident, streams map[string][]domain.Event) (after []time.Duration, median time.Duration) {
	type span struct{ accepted, queued time.Time }
	var all []span
	for _, events := range streams {
		var s span
		for _, e := range events {
			switch {
			case e.Type == domain.EventAccepted:
				s.accepted = e.RecordedAt
			case e.Type == domain.EventQueued && s.queued.IsZero():
				s.queued = e.RecordedAt
			}
		}
		if !s.accepted.IsZero() && !s.queued.IsZero() {
			all = append(all, s)
		}
	}
	if len(all) == 0 {
		return nil, 0
	}
	lat := make([]time.Duration, len(all))
	for i, s := range all {
		lat[i] = s.queued.Sub(s.accepted)
	}
	slices.Sort(lat)
	median = lat[len(lat)/2]
	for _, in := range incidents {
		if in.Kind != "kill" || !strings.HasPrefix(in.Target, "relay") {
			continue
		}
		var worst time.Duration
		for _, s := range all {
			if !s.accepted.Before(in.At) && s.accepted.Before(in.At.Add(relayWindow)) {
				worst = max(worst, s.queued.Sub(s.accepted))
			}
		}
		if worst > 0 {
			after = append(after, worst)
		}
	}
	return after, median
}

// describeDurations renders durations as "n=.. median .. max ..".
func describeDurations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("n=%d median %s p90 %s max %s", len(s), s[len(s)/2].Round(time.Millisecond),
		s[len(s)*9/10].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
