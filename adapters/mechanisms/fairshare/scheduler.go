package fairshare

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrUnknownClass is returned by Acquire for a Class value that is not High, Normal or Low. It
// is a wiring mistake, reported rather than served under some default class.
var ErrUnknownClass = errors.New("unknown fair share class")

// Scheduler hands out worker slots to the classes by the rules of the package comment. It is
// safe for concurrent use. Waiters block on a channel of their own, so nothing spins, and the
// scheduling decision is taken under one mutex, at the moment a slot frees up.
type Scheduler struct {
	slots    int
	shares   [numClasses]int
	reserved [numClasses]int
	// weighted is set when Slots is below the number of classes with a share: nothing can be
	// reserved for all of them, so slots go by weighted fair queueing instead.
	weighted bool

	mu       sync.Mutex
	used     int
	inFlight [numClasses]int
	waiters  [numClasses]list.List // of *waiter, oldest first
	// start[i] is the virtual start time of class i's next grant and clock the start time of the
	// last grant (start-time fair queueing, weighted mode only).
	start [numClasses]float64
	clock float64
}

// waiter is one blocked Acquire.
type waiter struct {
	ready   chan struct{} // closed when the slot is granted
	granted bool          // guarded by Scheduler.mu; tells a cancelled Acquire it holds a slot
	elem    *list.Element // its place in its class's queue, for leaving on cancellation
}

// New builds a scheduler; nil Shares means DefaultShares.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Shares == nil {
		cfg.Shares = DefaultShares()
	}
	s := &Scheduler{slots: cfg.Slots}
	withShare := 0
	for i, class := range classes {
		s.shares[i] = cfg.Shares[class]
		if s.shares[i] > 0 {
			withShare++
		}
	}
	s.reserved = reserve(s.slots, s.shares)
	s.weighted = s.slots < withShare
	return s, nil
}

// Acquire blocks until class c may use a slot, or ctx is done. The returned release gives the
// slot back; call it exactly once, when the work is finished (later calls do nothing). On error
// no slot is held and release is nil.
func (s *Scheduler) Acquire(ctx context.Context, c Class) (release func(), err error) {
	i, ok := c.index()
	if !ok {
		return nil, fmt.Errorf("acquire slot for class %q: %w", c, ErrUnknownClass)
	}
	// Checked first so that a caller that is already shutting down never takes a slot.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("acquire %s slot: %w", c, err)
	}

	w := &waiter{ready: make(chan struct{})}
	s.mu.Lock()
	if s.weighted && s.waiters[i].Len() == 0 {
		// A class that starts waiting joins at the current virtual time: time spent idle is not
		// credit to be spent later in a burst.
		s.start[i] = max(s.start[i], s.clock)
	}
	w.elem = s.waiters[i].PushBack(w)
	s.dispatchLocked()
	granted := w.granted
	s.mu.Unlock()
	if granted {
		return s.releaser(i), nil
	}

	select {
	case <-w.ready:
		return s.releaser(i), nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		// Granted while ctx ended: the caller will not use the slot, so hand it on.
		s.releaseLocked(i)
	} else {
		// No dispatch is needed: the rule never leaves a slot free while anyone waits, so the
		// class's claim only mattered for the next release, which will no longer see it.
		s.waiters[i].Remove(w.elem)
	}
	return nil, fmt.Errorf("acquire %s slot: %w", c, ctx.Err())
}

// releaser returns the idempotent release function of a slot held by class i.
func (s *Scheduler) releaser(i int) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.releaseLocked(i)
		})
	}
}

// releaseLocked frees a slot of class i and hands it on.
func (s *Scheduler) releaseLocked(i int) {
	s.inFlight[i]--
	s.used--
	s.dispatchLocked()
}

// dispatchLocked grants free slots to entitled waiters until none is free or nobody waiting is
// entitled to one.
func (s *Scheduler) dispatchLocked() {
	for s.used < s.slots {
		i := s.pickLocked()
		if i < 0 {
			return
		}
		w := s.waiters[i].Remove(s.waiters[i].Front()).(*waiter)
		w.granted = true
		close(w.ready)
		s.inFlight[i]++
		s.used++
		if s.weighted && s.shares[i] > 0 {
			s.clock = s.start[i]
			s.start[i] += 1 / float64(s.shares[i])
		}
	}
}

// pickLocked returns the class whose first waiter gets the next free slot, or -1 if none may.
func (s *Scheduler) pickLocked() int {
	if s.weighted {
		return s.pickWeightedLocked()
	}
	free := s.slots - s.used
	for i := range classes {
		if s.waiters[i].Len() == 0 {
			continue
		}
		if s.inFlight[i] < s.reserved[i] || free > s.owedLocked(i) {
			return i
		}
	}
	return -1
}

// owedLocked returns the slots the waiting classes other than i are short of their
// reservations: the free slots class i must leave to them before it may borrow.
func (s *Scheduler) owedLocked(i int) int {
	owed := 0
	for j := range classes {
		if j != i && s.waiters[j].Len() > 0 {
			owed += max(0, s.reserved[j]-s.inFlight[j])
		}
	}
	return owed
}

// pickWeightedLocked returns the waiting class with a share and the smallest virtual start time
// (ties to the higher priority), or else the first waiting class without a share, or -1.
func (s *Scheduler) pickWeightedLocked() int {
	best, unweighted := -1, -1
	for i := range classes {
		if s.waiters[i].Len() == 0 {
			continue
		}
		if s.shares[i] == 0 {
			if unweighted < 0 {
				unweighted = i
			}
			continue
		}
		if best < 0 || s.start[i] < s.start[best] {
			best = i
		}
	}
	if best >= 0 {
		return best
	}
	return unweighted
}

// Reserved returns the slots reserved for each class, for documentation and metrics. Every
// class is present; all are 0 when Slots is below the number of classes with a share.
func (s *Scheduler) Reserved() map[Class]int {
	return s.perClass(&s.reserved)
}

// InFlight returns the slots each class is using now; every class is present. Compared with
// Reserved it shows which classes are borrowing.
func (s *Scheduler) InFlight() map[Class]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perClass(&s.inFlight)
}

// Waiting returns the number of blocked Acquire calls of each class; every class is present.
// Waiters of a class at its reservation mean the class is saturated; waiters of a class below it
// mean other classes are still finishing work on slots they borrowed.
func (s *Scheduler) Waiting() map[Class]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var waiting [numClasses]int
	for i := range classes {
		waiting[i] = s.waiters[i].Len()
	}
	return s.perClass(&waiting)
}

// perClass turns a per-class array into the map the accessors return.
func (s *Scheduler) perClass(counts *[numClasses]int) map[Class]int {
	m := make(map[Class]int, numClasses)
	for i, class := range classes {
		m[class] = counts[i]
	}
	return m
}
