// Command ledger is the delivery ledger: it accepts notifications over HTTP, relays them to
// RabbitMQ through a transactional outbox, delivers them with workers and records every state
// transition in PostgreSQL. Run `ledger --help` for the commands and their settings.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	// Delivery windows name IANA zones: every process reads them from the same embedded
	// database, so one without /usr/share/zoneinfo (a distroless image) neither refuses a zone
	// its neighbours accept nor attempts a held delivery early.
	_ "time/tzdata"
)

// defaultGCPercent is the garbage collector's target unless GOGC is set. The ledger's live heap is
// small (tens of megabytes: connections, in-flight requests and batches) while it allocates fast
// (every request, event and message is encoded and decoded), so at Go's default of 100 it
// collected several times a second; 300 trades some resident memory for fewer collections
// (figures: docs/benchmarks.md, "Figures once kept in code comments").
const defaultGCPercent = 300

// defaultMemoryLimit is the Go runtime's soft memory limit unless GOMEMLIMIT is set. At GOGC 300
// the heap may grow to four times what is live before a collection, and under a burst (many
// clients, thousands of messages in flight) it would grow past what a small host gives. Near the limit the
// collector runs more often instead, which costs CPU only when the heap is that large; below it
// GOGC alone decides, as before. A process whose live heap exceeds the limit keeps working (the
// limit is soft) and collects often: raise GOMEMLIMIT for a larger deployment.
const defaultMemoryLimit = 80 << 20

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
