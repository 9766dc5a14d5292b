// Package retention keeps the ledger's size: it decides when a time partition of the history
// may leave the hot store, has the archive write and check it, and only then drops it. A
// delivery leaves whole (every row of it sits in the partition of its accept time), and only
// once it is terminal and older than its tenant's keep: until then its history stays hot.
package retention

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is the configuration file's retention block:
//
//	retention: {keep: 30d, payloads: 7d, partition: 1d, archive_dir: /var/lib/ledger/archive,
//	            tenants: {t1: {keep: 90d}}}
//
// Nothing leaves the hot store while Keep is zero (the default).
type Config struct {
	// Keep is how long a terminal delivery's history stays in the hot store, counted from its
	// accept; zero keeps everything. It is also the idempotency window: an Idempotency-Key
	// repeated after it is a new request.
	Keep time.Duration
	// Payloads is how long a notification's payload body is kept; after it only its SHA-256
	// and size stay. Zero keeps bodies as long as the history.
	Payloads time.Duration
	// Partition is the time one partition covers (DefaultPartition when zero).
	Partition time.Duration
	// ArchiveDir is where leaving partitions are archived; required with Keep.
	ArchiveDir string
	// Tenants overrides Keep and Payloads per tenant.
	Tenants map[string]TenantPolicy
}

// TenantPolicy is one tenant's retention; a zero field takes the block's.
type TenantPolicy struct {
	Keep     time.Duration
	Payloads time.Duration
}

// DefaultPartition is the width of a partition when the configuration names none.
const DefaultPartition = 24 * time.Hour

// Validate reports every problem of c, each naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.Keep < 0 || c.Payloads < 0 || c.Partition < 0 {
		errs = append(errs, errors.New("retention: durations must be positive"))
	}
	if c.Partition != 0 && (c.Partition < time.Second || c.Partition%time.Millisecond != 0) {
		errs = append(errs, fmt.Errorf("retention.partition: %s: want at least 1s, in whole milliseconds", c.Partition))
	}
	if c.Keep > 0 && c.ArchiveDir == "" {
		errs = append(errs, errors.New("retention.archive_dir: required with keep: a partition is archived and checked before it is dropped"))
	}
	if c.Keep > 0 && c.Keep < c.PartitionWidth() {
		errs = append(errs, fmt.Errorf("retention.keep: %s is shorter than a partition (%s)", FormatDuration(c.Keep), FormatDuration(c.PartitionWidth())))
	}
	if c.Payloads > 0 && c.Keep > 0 && c.Payloads > c.Keep {
		errs = append(errs, fmt.Errorf("retention.payloads: %s is longer than keep (%s): the payload leaves with its history", FormatDuration(c.Payloads), FormatDuration(c.Keep)))
	}
	names := make([]string, 0, len(c.Tenants))
	for t := range c.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		p := c.Tenants[t]
		if p.Keep < 0 || p.Payloads < 0 {
			errs = append(errs, fmt.Errorf("retention.tenants.%s: durations must be positive", t))
		}
		if p.Keep > 0 && c.Keep == 0 {
			errs = append(errs, fmt.Errorf("retention.tenants.%s.keep: set retention.keep too: without it nothing leaves the hot store", t))
		}
		if p.Keep > 0 && p.Keep < c.PartitionWidth() {
			errs = append(errs, fmt.Errorf("retention.tenants.%s.keep: %s is shorter than a partition (%s)", t, FormatDuration(p.Keep), FormatDuration(c.PartitionWidth())))
		}
	}
	return errors.Join(errs...)
}

// PartitionWidth is Partition, or DefaultPartition when it is zero.
func (c Config) PartitionWidth() time.Duration {
	if c.Partition > 0 {
		return c.Partition
	}
	return DefaultPartition
}

// KeepOf is how long tenant's terminal deliveries stay hot; zero: for ever.
func (c Config) KeepOf(tenant string) time.Duration {
	if c.Keep == 0 {
		return 0
	}
	if p, ok := c.Tenants[tenant]; ok && p.Keep > 0 {
		return p.Keep
	}
	return c.Keep
}

// PayloadsOf is how long tenant's payload bodies are kept; zero: as long as the history.
func (c Config) PayloadsOf(tenant string) time.Duration {
	if p, ok := c.Tenants[tenant]; ok && p.Payloads > 0 {
		return p.Payloads
	}
	return c.Payloads
}

// ParseDuration reads a retention duration: Go's (90s, 36h, 1h30m) or a whole number of days
// (30d), or days followed by a Go duration (1d12h).
func ParseDuration(s string) (time.Duration, error) {
	days, rest, found := strings.Cut(s, "d")
	if !found {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 || n > 100*366 {
		return 0, fmt.Errorf("invalid duration %q: want a number of days such as 30d, or a duration such as 36h", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return d, nil
	}
	more, err := time.ParseDuration(rest)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a number of days such as 30d, or a duration such as 36h", s)
	}
	return d + more, nil
}

// FormatDuration writes d as the configuration spells it: whole days as 30d.
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.Itoa(int(d/day)) + "d"
	}
	return d.String()
}
