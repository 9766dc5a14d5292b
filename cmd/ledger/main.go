// Command ledger is the delivery ledger: it accepts notifications over HTTP, relays them to
// RabbitMQ through a transactional outbox, delivers them with workers and records every state
// transition in PostgreSQL. Run `ledger --help` for the commands and their settings.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
