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

// With --twice every role runs in two processes; the relays take turns on each outbox shard's
// offset and the projectors on each view's checkpoint, so when one is killed the other goes on.
// The soak measures how long that takes:
//
//   - relay: for each kill of a relay, the longest accepted → queued time of the deliveries
//     accepted in the second after it (their messages must wait for the other relay);
//   - projector: for each kill of a projector while the status view had events to apply, the
//     time until its checkpoint moved again (sampled every checkpointSample).

const (
	checkpointSample = 50 * time.Millisecond
	relayWindow      = time.Second
)

// checkpointSampler records the status view's checkpoint and the log's head over time.
type checkpointSampler struct {
	mu      sync.Mutex
	samples []cpSample
}

type cpSample struct {
	at         time.Time
	checkpoint int64
	head       int64
}

func (s *checkpointSampler) run(ctx context.Context, pool *pgxpool.Pool) {
	t := time.NewTicker(checkpointSample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var c, h int64
		err := pool.QueryRow(ctx, `SELECT (SELECT position FROM projection_checkpoints WHERE name = 'status'),
			(SELECT coalesce(max(position), 0) FROM events)`).Scan(&c, &h)
		if err != nil {
			continue // the database is being disturbed: a gap in the samples
		}
		s.mu.Lock()
		s.samples = append(s.samples, cpSample{at: time.Now(), checkpoint: c, head: h})
		s.mu.Unlock()
	}
}

func (s *checkpointSampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.samples)
}

// projectorHandovers returns, for each projector kill that found events to apply, how long the
// checkpoint stood still after it.
func (s *checkpointSampler) projectorHandovers(incidents []incident) []time.Duration {
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	var out []time.Duration
	for _, in := range incidents {
		if in.Kind != "kill" || !strings.HasPrefix(in.Target, "projector") {
			continue
		}
		i, _ := slices.BinarySearchFunc(samples, in.At, func(x cpSample, t time.Time) int { return x.at.Compare(t) })
		if i == 0 || i >= len(samples) {
			continue
		}
		before := samples[i-1]
		if before.head <= before.checkpoint {
			continue // nothing to apply: no handover to wait for
		}
		for _, x := range samples[i:] {
			if x.checkpoint > before.checkpoint {
				out = append(out, x.at.Sub(in.At))
				break
			}
		}
	}
	return out
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
