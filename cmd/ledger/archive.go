package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/deliveryledger/ledger/adapters/archive"
	"github.com/deliveryledger/ledger/cmd/internal/app"
)

// archiveDirOf is the retention.archive_dir of the configuration file at path ("" without a file
// or without the key).
func archiveDirOf(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	f, err := app.LoadFile(path, os.LookupEnv)
	if err != nil {
		return "", err
	}
	return f.Retention.ArchiveDir, nil
}

// errArchiveDamaged makes `ledger archive verify` exit non-zero.
var errArchiveDamaged = errors.New("the archive holds segments that fail their check")

// archiveCommand is `ledger archive` with its subcommands verify and show. Both read the archive
// only: they need no database, so an auditor can run them on a copy of the directory.
func archiveCommand(stdout, stderr io.Writer) *ffcli.Command {
	verifyFS := flag.NewFlagSet("ledger archive verify", flag.ContinueOnError)
	verifyDir := verifyFS.String("dir", "", "the archive directory (default: the configuration file's retention.archive_dir); or give it as the operand")
	verifyConfig := verifyFS.String("config", "", "the ledger's configuration file, for its retention.archive_dir when no directory is named (LEDGER_CONFIG)")
	verify := &ffcli.Command{
		Name:       "verify",
		ShortUsage: "ledger archive verify [--dir] DIR",
		ShortHelp:  "re-check every archived segment against its manifest; exit 1 on any mismatch",
		LongHelp: "Reads every segment's manifest in DIR and the segment's file: its size and SHA-256, the SHA-256\n" +
			"of its JSON lines after zstd decompression, its event and delivery counts, its tenants' counts\n" +
			"and its first and last positions and times must be what the manifest says. Prints one line per\n" +
			"segment (id, events, ok or the mismatch) and a summary; exits 1 when any segment fails, 2 on\n" +
			"a usage error. Progress goes to stderr when stderr is a terminal.",
		FlagSet: verifyFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
	}
	verify.Exec = func(ctx context.Context, args []string) error {
		const command = "ledger archive verify"
		ops, err := operands(command, verifyFS, args)
		if err != nil {
			return err
		}
		dir := *verifyDir
		switch {
		case len(ops) > 1 || (len(ops) == 1 && dir != "" && ops[0] != dir):
			return usagef(command, "name one archive directory, as the operand or --dir")
		case len(ops) == 1:
			dir = ops[0]
		case dir == "":
			if dir, err = archiveDirOf(*verifyConfig); err != nil {
				return err
			}
			if dir == "" {
				return usagef(command, "name the archive directory: ledger archive verify DIR (or --config with retention.archive_dir)")
			}
		}
		return archiveVerify(ctx, dir, stdout, stderr)
	}

	showFS := flag.NewFlagSet("ledger archive show", flag.ContinueOnError)
	showDir := showFS.String("dir", "", "the archive directory (default: the configuration file's retention.archive_dir)")
	showConfig := showFS.String("config", "", "the ledger's configuration file, for its retention.archive_dir when --dir is not given (LEDGER_CONFIG)")
	asJSON := showFS.Bool("json", false, "print the events as JSON lines, as ledger export writes them")
	show := &ffcli.Command{
		Name:       "show",
		ShortUsage: "ledger archive show --dir DIR [--json] DELIVERY_ID",
		ShortHelp:  "print an archived delivery's history from the archive",
		LongHelp: "Finds the segments whose range holds the delivery id's time (a delivery id is a UUIDv7: its\n" +
			"first 48 bits are its accept time), or reads every segment when none does, and prints the\n" +
			"delivery's events in order, one a line: recorded_at, version, type, state and data. --json\n" +
			"prints them as JSON lines instead, as `ledger export` writes them.",
		FlagSet: showFS,
		Options: []ff.Option{ff.WithEnvVarPrefix(envPrefix)},
	}
	show.Exec = func(ctx context.Context, args []string) error {
		const command = "ledger archive show"
		ops, err := operands(command, showFS, args)
		if err != nil {
			return err
		}
		if len(ops) != 1 {
			return usagef(command, "name one delivery id, got %d operands", len(ops))
		}
		dir := *showDir
		if dir == "" {
			if dir, err = archiveDirOf(*showConfig); err != nil {
				return err
			}
		}
		if dir == "" {
			return usagef(command, "name the archive directory: --dir DIR, or --config with retention.archive_dir")
		}
		return archiveShow(ctx, dir, ops[0], *asJSON, stdout)
	}

	fs := flag.NewFlagSet("ledger archive", flag.ContinueOnError)
	for _, f := range []*flag.FlagSet{fs, verifyFS, showFS} {
		f.SetOutput(stderr)
	}
	cmd := &ffcli.Command{
		Name:        "archive",
		ShortUsage:  "ledger archive <verify|show> [flags] ...",
		ShortHelp:   "check the archive of dropped partitions, or read a delivery from it",
		FlagSet:     fs,
		Subcommands: []*ffcli.Command{verify, show},
	}
	cmd.Exec = func(context.Context, []string) error {
		fmt.Fprintln(stderr, ffcli.DefaultUsageFunc(cmd))
		return usagef("ledger archive", "name a subcommand: verify or show")
	}
	return cmd
}

func archiveVerify(ctx context.Context, dir string, stdout, stderr io.Writer) error {
	store, err := archive.OpenDir(dir)
	if err != nil {
		return err
	}
	ms, err := store.Manifests(ctx)
	if err != nil && !errors.Is(err, archive.ErrCheckFailed) {
		return err
	}
	var failed, events int64
	total := len(ms)
	if err != nil {
		// Manifests that cannot be read: each is a failed segment, and the others are checked.
		for _, e := range unjoin(err) {
			failed++
			total++
			fmt.Fprintf(stdout, "FAILED: %v\n", e)
		}
	}
	if total == 0 {
		fmt.Fprintf(stdout, "no segments in %s\n", dir)
		return nil
	}
	// On a terminal, the segment being read shows on stderr (a large one takes minutes) and is
	// cleared before its result line.
	tty := isTerminal(stderr)
	for i, m := range ms {
		if tty {
			fmt.Fprintf(stderr, "\rarchive verify: reading %s (%d of %d, %d events)\033[K", m.ID, i+1, len(ms), m.Events)
		}
		_, err := store.Verify(ctx, m.ID)
		if tty {
			fmt.Fprint(stderr, "\r\033[K")
		}
		switch {
		case errors.Is(err, archive.ErrCheckFailed):
			failed++
			fmt.Fprintf(stdout, "%s\t%d events\tFAILED: %v\n", m.ID, m.Events, err)
		case err != nil:
			return err
		default:
			events += m.Events
			fmt.Fprintf(stdout, "%s\t%d events\tok\n", m.ID, m.Events)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d segments failed their check\n", failed, total)
		return fmt.Errorf("%w (%d of %d in %s)", errArchiveDamaged, failed, total, dir)
	}
	fmt.Fprintf(stdout, "%d segments, %d events: all ok\n", len(ms), events)
	return nil
}

// unjoin lists the errors errors.Join put together under err's wrapping, or err alone.
func unjoin(err error) []error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			return j.Unwrap()
		}
	}
	return []error{err}
}

func archiveShow(ctx context.Context, dir, id string, asJSON bool, stdout io.Writer) error {
	store, err := archive.OpenDir(dir)
	if err != nil {
		return err
	}
	lines, from, err := archive.History(ctx, store, id)
	if errors.Is(err, archive.ErrNotFound) {
		return fmt.Errorf("delivery %s is in no segment of the archive %s", id, dir)
	}
	if err != nil {
		return err
	}
	if asJSON {
		w := archive.NewLineWriter(stdout)
		for _, l := range lines {
			if err := w.Write(l); err != nil {
				return err
			}
		}
		return nil
	}
	segs := make([]string, len(from))
	for i, m := range from {
		segs[i] = m.ID
	}
	fmt.Fprintf(stdout, "delivery %s, tenant %s: %d events, archived in %v\n", id, lines[0].Tenant, len(lines), segs)
	for _, l := range lines {
		var data bytes.Buffer
		if err := json.Compact(&data, l.Data); err != nil {
			data.Reset()
			data.Write(l.Data)
		}
		state := string(l.State)
		if state == "" {
			state = "-"
		}
		fmt.Fprintf(stdout, "%s  v%d  %s  %s  %s\n", l.RecordedAt.UTC().Format(time.RFC3339Nano), l.Version, l.Type, state, data.String())
	}
	return nil
}
