package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/peterbourgon/ff/v3"
)

// ServeFromEnvironment is cmd/ledger's serve for a test binary that runs itself as a ledger
// process: the same flags, read from the same LEDGER_ variables, with roles (empty: the default
// roles). It returns the process's exit code.
func ServeFromEnvironment(roles string) int {
	var cfg Config
	fs := flag.NewFlagSet("ledger serve", flag.ContinueOnError)
	cfg.ServeFlags(fs)
	var args []string
	if roles != "" {
		args = []string{"--roles", roles}
	}
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("LEDGER")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.Explicit(fs)
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Serve(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		return 1
	}
	return 0
}
