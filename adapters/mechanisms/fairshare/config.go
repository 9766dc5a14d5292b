package fairshare

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/deliveryledger/ledger/domain"
)

// Class is a priority class. Its value is the name used in configuration (ParseShares) and as a
// metrics label, so a value must never change once deployed.
type Class string

// The classes, highest priority first.
const (
	// High is served first among waiters that are entitled to a slot at the same time, and it
	// reserves the largest share by default.
	High Class = "high"
	// Normal is served after High and before Low.
	Normal Class = "normal"
	// Low is served last; its reservation is what keeps it from starving behind the others.
	Low Class = "low"
)

// numClasses sizes the per-class arrays; the index of a class is its place in classes.
const numClasses = 3

// classes lists the classes in priority order, the order in which entitled waiters are served.
var classes = [numClasses]Class{High, Normal, Low}

// Classes returns the classes in priority order, so that wiring can start one consumer per class
// and metrics can list every class even before it has traffic. The slice is a copy: changing it
// cannot reorder the scheduler's priorities.
func Classes() []Class {
	return slices.Clone(classes[:])
}

// ClassOf is the class of a delivery priority; an unknown priority is Normal, the default.
func ClassOf(p domain.Priority) Class {
	switch p {
	case domain.PriorityHigh:
		return High
	case domain.PriorityLow:
		return Low
	}
	return Normal
}

// String returns the class's name, as ParseShares reads it.
func (c Class) String() string {
	return string(c)
}

// index returns the class's place in classes; ok is false for a value that is not a class.
func (c Class) index() (i int, ok bool) {
	i = slices.Index(classes[:], c)
	return i, i >= 0
}

// Default shares, in percent of the slots. High gets most of the capacity because it is served
// first anyway; normal and low keep enough to make progress during a sustained high burst.
const (
	// DefaultHighShare is the default share of High.
	DefaultHighShare = 60
	// DefaultNormalShare is the default share of Normal.
	DefaultNormalShare = 30
	// DefaultLowShare is the default share of Low.
	DefaultLowShare = 10
)

// DefaultShares returns the default shares, high 60, normal 30, low 10, as a new map the caller
// may modify.
func DefaultShares() map[Class]int {
	return map[Class]int{High: DefaultHighShare, Normal: DefaultNormalShare, Low: DefaultLowShare}
}

// Config configures a Scheduler.
type Config struct {
	// Slots is the total number of worker slots, the process's delivery concurrency; at least 1.
	// It has no default here because it must match the concurrency the worker is run with.
	Slots int
	// Shares gives each class its percentage of Slots (see the package comment for how that
	// becomes whole slots). The values must be >= 0 and sum to 100; a class missing from the map
	// has share 0. Nil means DefaultShares. It is the parsed form of a setting such as
	// "high=60,normal=30,low=10" (see ParseShares).
	Shares map[Class]int
}

// Validate reports every problem of the configuration at once, so an operator fixes them in one
// round instead of one per restart.
func (c Config) Validate() error {
	var problems []error
	if c.Slots < 1 {
		problems = append(problems, fmt.Errorf("fair share slots must be at least 1, got %d", c.Slots))
	}
	if c.Shares == nil {
		return errors.Join(problems...)
	}
	sum := 0
	// Sorted so that the message is the same on every run.
	for _, class := range slices.Sorted(maps.Keys(c.Shares)) {
		share := c.Shares[class]
		if _, ok := class.index(); !ok {
			problems = append(problems, fmt.Errorf("fair share class %q is unknown (want high, normal or low)", class))
			continue
		}
		if share < 0 {
			problems = append(problems, fmt.Errorf("fair share of %s must not be negative, got %d", class, share))
		}
		sum += share
	}
	if sum != 100 {
		problems = append(problems, fmt.Errorf("fair shares must sum to 100, got %d", sum))
	}
	return errors.Join(problems...)
}

// ParseShares parses shares written as "high=60,normal=30,low=10", the format of the setting
// that configures them. Class names are case-insensitive and spaces around items are ignored;
// empty items are skipped so that a trailing comma is harmless. An empty string gives nil, which
// Config reads as DefaultShares, so that an unset setting means the defaults. ParseShares checks
// the syntax only (every problem at once); Config.Validate checks the values.
func ParseShares(s string) (map[Class]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var problems []error
	shares := make(map[Class]int)
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			problems = append(problems, fmt.Errorf("fair share %q is not class=percent", item))
			continue
		}
		class := Class(strings.ToLower(strings.TrimSpace(name)))
		if _, known := class.index(); !known {
			problems = append(problems, fmt.Errorf("fair share %q: unknown class %q (want high, normal or low)", item, class))
			continue
		}
		share, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			problems = append(problems, fmt.Errorf("fair share %q: percent is not an integer", item))
			continue
		}
		if _, dup := shares[class]; dup {
			// Refused rather than letting the last one win: one of the two is a mistake.
			problems = append(problems, fmt.Errorf("fair share of %s is given twice", class))
			continue
		}
		shares[class] = share
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return shares, nil
}

// reserve turns shares (indexed like classes, valid) into reserved slots by the rules of the
// package comment. It returns all zeros when slots cannot give every class with a share at least
// one slot; the scheduler then shares the slots by weight instead.
func reserve(slots int, shares [numClasses]int) [numClasses]int {
	var reserved [numClasses]int
	var withShare []int // indexes of the classes with a share, highest share first
	for i, share := range shares {
		if share > 0 {
			withShare = append(withShare, i)
		}
	}
	if slots < len(withShare) {
		return reserved
	}
	// Stable: among equal shares the higher priority (lower index) stays first.
	slices.SortStableFunc(withShare, func(a, b int) int { return cmp.Compare(shares[b], shares[a]) })

	total := 0
	for _, i := range withShare {
		reserved[i] = max(slots*shares[i]/100, 1)
		total += reserved[i]
	}
	for j := 0; total < slots; j = (j + 1) % len(withShare) {
		reserved[withShare[j]]++
		total++
	}
	for total > slots {
		// The minimums went over: take back from the largest reservation. With three classes
		// the largest cannot tie here (the scan would charge the lower priority if it did), and
		// slots >= len(withShare) means it is above 1, so no class with a share drops to 0.
		largest := numClasses - 1
		for i := numClasses - 2; i >= 0; i-- {
			if reserved[i] > reserved[largest] {
				largest = i
			}
		}
		reserved[largest]--
		total--
	}
	return reserved
}
