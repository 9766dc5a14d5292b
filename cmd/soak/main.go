// Command soak is the ledger's crash soak: it runs every role of a built `ledger` binary as its
// own process, sends thousands of deliveries through the API (webhooks, and a share of SMS over a
// Twilio and a Vonage fake that lose, delay and repeat receipts) while it kills those processes
// with SIGKILL and restarts them, restarts RabbitMQ once, terminates the database connections
// once and kills the Twilio fake for good, and has a tenth of the webhook recipients opt out,
// then checks the history: nothing accepted is lost, every delivery has one terminal state (or
// an unknown outcome with evidence), no SMS still awaits its receipt, every duplicate the webhook
// receiver or a phone saw is explained, and no delivery accepted after its recipient's opt-out
// reached the receiver. Retention runs all the while: partitions a few seconds old leave for
// the archive under the kills, and a delivery counts wherever its whole history is, in the hot
// store or in an archived segment (lost: in neither).
//
// Its last line is `lost=N duplicates=N unknown=N`; it exits 1 when a check fails. Run it with
// `make soak` (SOAK_DELIVERIES sets the size) or `go run ./cmd/soak --ledger bin/ledger`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	opts, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, opts, os.Stdout)
	stop()
	os.Exit(code)
}
