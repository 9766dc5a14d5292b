package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// The suppression list and the preferences through the HTTP API (docs/operations.md,
// "Suppressions and preferences"): list, add, remove, CSV export and import; a recipient's
// preferences read and set.

const (
	// maxSuppressionsPage is the API's largest page of GET /v1/suppressions.
	maxSuppressionsPage = 1000
	// importInFlight bounds the POSTs an import has in flight: enough to hide the round trip,
	// few enough to leave the API to its other callers.
	importInFlight = 8
	// csvProgressRows is how often an export or an import says how far it is, in rows.
	csvProgressRows = 10_000
)

// suppressionColumns is the header of an export; an import reads channel, recipient and reason
// (and skips a row whose removed_at is set), so an export imports again as it is.
var suppressionColumns = []string{"id", "channel", "recipient", "source", "reason", "provider", "provider_code",
	"delivery_id", "actor", "created_at", "removed_at"}

// suppressionDoc is an entry of the suppression list: POST /v1/suppressions, the items of GET
// /v1/suppressions, GET and DELETE /v1/suppressions/{id}.
type suppressionDoc struct {
	ID        string `json:"id"`
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Source    string `json:"source"`
	Reason    string `json:"reason"`
	Evidence  struct {
		DeliveryID   string `json:"delivery_id"`
		EventVersion int    `json:"event_version"`
		Provider     string `json:"provider"`
		ProviderCode string `json:"provider_code"`
		Actor        string `json:"actor"`
	} `json:"evidence"`
	CreatedAt     time.Time  `json:"created_at"`
	RemovedAt     *time.Time `json:"removed_at"`
	RemovedBy     string     `json:"removed_by"`
	RemovedReason string     `json:"removed_reason"`
}

// preferenceDoc is a recipient's preference: PUT /v1/preferences and the items of GET.
type preferenceDoc struct {
	Channel   string    `json:"channel"`
	Recipient string    `json:"recipient"`
	Category  string    `json:"category"`
	OptedOut  bool      `json:"opted_out"`
	Source    string    `json:"source"`
	Actor     string    `json:"actor"`
	UpdatedAt time.Time `json:"updated_at"`
}

// suppressionRequest is the body of POST /v1/suppressions.
type suppressionRequest struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	Reason    string `json:"reason,omitempty"`
	Actor     string `json:"actor,omitempty"`
	Source    string `json:"source,omitempty"`
}

// suppressionsCommand is `ledger suppressions list|add|remove|export|import`.
func (o *operatorCommands) suppressionsCommand() *ffcli.Command {
	return o.group("suppressions", "the tenant's suppression list: list, add, remove, export and import as CSV, through the HTTP API",
		o.suppressionsListCommand(), o.suppressionsAddCommand(), o.suppressionsRemoveCommand(),
		o.suppressionsExportCommand(), o.suppressionsImportCommand())
}

// suppressionFilters are the filters of `suppressions list` and `export`.
type suppressionFilters struct {
	channel, recipient string
	includeRemoved     bool
}

func (f *suppressionFilters) flags(fs *flag.FlagSet, recipient bool) {
	fs.StringVar(&f.channel, "channel", "", "only entries of this channel (webhook, email, ...)")
	if recipient {
		fs.StringVar(&f.recipient, "recipient", "", "only the entry of this recipient, in any spelling its channel normalises (needs --channel)")
	}
	fs.BoolVar(&f.includeRemoved, "include-removed", false, "also entries that were removed (they suppress nothing; their history stays)")
}

func (f *suppressionFilters) query() url.Values {
	q := url.Values{}
	if f.channel != "" {
		q.Set("channel", f.channel)
	}
	if f.recipient != "" {
		q.Set("recipient", f.recipient)
	}
	if f.includeRemoved {
		q.Set("include_removed", "true")
	}
	return q
}

// eachSuppressionPage reads GET /v1/suppressions page after page, following next_cursor to the
// end or until max entries (0: no bound), and hands each page's items to each.
func eachSuppressionPage(ctx context.Context, c *apiClient, q url.Values, max int, each func([]json.RawMessage) error) error {
	seen := 0
	for {
		size := maxSuppressionsPage
		if max > 0 {
			size = min(size, max-seen)
		}
		q.Set("limit", strconv.Itoa(size))
		a, err := c.get(ctx, "/v1/suppressions", q)
		if err != nil {
			return err
		}
		var p struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := a.decode(&p); err != nil {
			return err
		}
		if err := each(p.Items); err != nil {
			return err
		}
		seen += len(p.Items)
		if p.NextCursor == "" || (max > 0 && seen >= max) {
			return nil
		}
		q.Set("cursor", p.NextCursor)
	}
}

// suppressionsListCommand is `ledger suppressions list`.
func (o *operatorCommands) suppressionsListCommand() *ffcli.Command {
	const command = "ledger suppressions list"
	var s apiSettings
	var f suppressionFilters
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	s.flags(fs)
	f.flags(fs, true)
	limit := fs.Int("limit", 0, "print at most this many entries (default: every entry, page after page)")
	return o.command(&ffcli.Command{
		Name:       "list",
		ShortUsage: command + " [--channel C] [--recipient R] [--include-removed] [--limit N] [--json]",
		ShortHelp:  "list the tenant's suppression list, newest first (GET /v1/suppressions)",
		LongHelp: "Prints a table of the entries: id, channel, recipient in its channel's normal form, source\n" +
			"(provider, manual or import), reason, evidence (the delivery, its event and the provider's code\n" +
			"for an entry a provider's answer added; the actor for one added by hand), when it was added and\n" +
			"when removed. Follows the cursors to the last page, or to --limit entries. With --json: one JSON\n" +
			"array of the entries as the API sent them. For a file, `ledger suppressions export`.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := noOperands(command, fs, args); err != nil {
				return err
			}
			if *limit < 0 {
				return usagef(command, "--limit %d: want a positive number of entries, or 0 for all", *limit)
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			var items []json.RawMessage
			err = eachSuppressionPage(ctx, c, f.query(), *limit, func(page []json.RawMessage) error {
				items = append(items, page...)
				return nil
			})
			if err != nil {
				return err
			}
			if s.json {
				return o.writeArray(items)
			}
			entries, err := decodeItems[suppressionDoc](items)
			if err != nil {
				return err
			}
			return writeSuppressions(o.stdout, entries)
		},
	})
}

// suppressionsAddCommand is `ledger suppressions add CHANNEL RECIPIENT`.
func (o *operatorCommands) suppressionsAddCommand() *ffcli.Command {
	const command = "ledger suppressions add"
	var s apiSettings
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	s.flags(fs)
	reason, actor := cancelFlags(fs)
	return o.command(&ffcli.Command{
		Name:       "add",
		ShortUsage: command + " CHANNEL RECIPIENT [--reason TEXT] [--actor A] [--json]",
		ShortHelp:  "put a recipient on the suppression list (POST /v1/suppressions)",
		LongHelp: "From then on a delivery to the recipient (in any spelling its channel normalises) is\n" +
			"suppressed: at its accept, or at the start of its next attempt for one accepted before. A\n" +
			"recipient already on the list is shown as it is (nothing changes). Prints the entry.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			ops, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			if len(ops) != 2 {
				return usagef(command, "name a channel and a recipient, got %d operands", len(ops))
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			a, err := c.post(ctx, "/v1/suppressions", nil, suppressionRequest{Channel: ops[0], Recipient: ops[1], Reason: *reason, Actor: *actor})
			if err != nil {
				return err
			}
			what := "added"
			if a.Status != http.StatusCreated {
				what = "already suppressed"
			}
			return o.writeEntry(a, s.json, what)
		},
	})
}

// suppressionsRemoveCommand is `ledger suppressions remove ID`.
func (o *operatorCommands) suppressionsRemoveCommand() *ffcli.Command {
	const command = "ledger suppressions remove"
	var s apiSettings
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	s.flags(fs)
	reason, actor := cancelFlags(fs)
	return o.command(&ffcli.Command{
		Name:       "remove",
		ShortUsage: command + " ID [--reason TEXT] [--actor A] [--json]",
		ShortHelp:  "take an entry off the suppression list, with a reason (DELETE /v1/suppressions/{id})",
		LongHelp: "The recipient is no longer suppressed; deliveries suppressed before stay suppressed (the\n" +
			"state is terminal). The entry and its history stay, listed with --include-removed. A repeat\n" +
			"shows the removed entry again. Prints the entry.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			ids, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			if len(ids) != 1 {
				return usagef(command, "name one suppression ID, got %d operands", len(ids))
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			a, err := c.delete(ctx, "/v1/suppressions/"+url.PathEscape(ids[0]), cancelBody{*reason, *actor})
			if err != nil {
				return err
			}
			return o.writeEntry(a, s.json, "removed")
		},
	})
}

// writeEntry prints the entry an add or a remove answered with.
func (o *operatorCommands) writeEntry(a answer, asJSON bool, what string) error {
	if asJSON {
		return o.writeDocument(a)
	}
	var e suppressionDoc
	if err := a.decode(&e); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "%s %s\n", what, e.ID)
	return writeSuppression(o.stdout, e)
}

// suppressionsExportCommand is `ledger suppressions export`.
func (o *operatorCommands) suppressionsExportCommand() *ffcli.Command {
	const command = "ledger suppressions export"
	var s apiSettings
	var f suppressionFilters
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	s.connectionFlags(fs)
	f.flags(fs, false)
	out := fs.String("o", "", "write the CSV to this file instead of standard output (removed again if the export fails)")
	return o.command(&ffcli.Command{
		Name:       "export",
		ShortUsage: command + " [--channel C] [--include-removed] [-o FILE]",
		ShortHelp:  "write the suppression list as CSV, every page (GET /v1/suppressions)",
		LongHelp: "Writes a header row and one row an entry, newest first (RFC 4180 quoting):\n" +
			"  " + strings.Join(suppressionColumns, ",") + "\n" +
			"provider, provider_code and delivery_id are the evidence of an entry a provider's answer\n" +
			"added; actor who added one by hand. Times are RFC 3339 in UTC; removed_at is empty for an\n" +
			"entry in force. `ledger suppressions import` reads the file back. Says how far it is on\n" +
			"stderr every 10,000 rows.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if err := noOperands(command, fs, args); err != nil {
				return err
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			w := o.stdout
			var file *os.File
			if *out != "" && *out != "-" {
				if file, err = os.Create(*out); err != nil {
					return fmt.Errorf("%s: %w", command, err)
				}
				w = file
			}
			n, err := exportSuppressions(ctx, c, f.query(), w, func(n int) {
				fmt.Fprintf(o.stderr, "%s: %d rows\n", command, n)
			})
			if file != nil {
				if cerr := file.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					// Half a list read as the whole would un-suppress the rest on an import elsewhere.
					_ = os.Remove(*out)
				}
			}
			if err != nil {
				return err
			}
			if file != nil {
				fmt.Fprintf(o.stderr, "%s: wrote %d rows to %s\n", command, n, *out)
			}
			return nil
		},
	})
}

// exportSuppressions writes the entries q selects to w as CSV, calling progress every
// csvProgressRows rows, and returns the rows written.
func exportSuppressions(ctx context.Context, c *apiClient, q url.Values, w io.Writer, progress func(int)) (int, error) {
	cw := csv.NewWriter(w)
	if err := cw.Write(suppressionColumns); err != nil {
		return 0, fmt.Errorf("write the CSV: %w", err)
	}
	n := 0
	err := eachSuppressionPage(ctx, c, q, 0, func(page []json.RawMessage) error {
		entries, err := decodeItems[suppressionDoc](page)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := cw.Write(suppressionRecord(e)); err != nil {
				return fmt.Errorf("write the CSV: %w", err)
			}
			if n++; n%csvProgressRows == 0 {
				progress(n)
			}
		}
		cw.Flush()
		return cw.Error()
	})
	if err != nil {
		return n, err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return n, fmt.Errorf("write the CSV: %w", err)
	}
	return n, nil
}

// suppressionRecord is an entry as a row of suppressionColumns.
func suppressionRecord(e suppressionDoc) []string {
	removed := ""
	if e.RemovedAt != nil {
		removed = e.RemovedAt.UTC().Format(time.RFC3339Nano)
	}
	return []string{e.ID, e.Channel, e.Recipient, e.Source, e.Reason, e.Evidence.Provider, e.Evidence.ProviderCode,
		e.Evidence.DeliveryID, e.Evidence.Actor, e.CreatedAt.UTC().Format(time.RFC3339Nano), removed}
}

// suppressionsImportCommand is `ledger suppressions import FILE`.
func (o *operatorCommands) suppressionsImportCommand() *ffcli.Command {
	const command = "ledger suppressions import"
	var s apiSettings
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	s.connectionFlags(fs)
	reason := fs.String("reason", "", "the reason of the rows whose reason is empty (at most 500 characters)")
	actor := fs.String("actor", "", "who imports, recorded on each entry (default: the key's tenant, as tenant:NAME)")
	return o.command(&ffcli.Command{
		Name:       "import",
		ShortUsage: command + " FILE|- [--reason TEXT] [--actor A]",
		ShortHelp:  "add the recipients of a CSV file to the suppression list (POST /v1/suppressions a row)",
		LongHelp: "Reads FILE (- for standard input): CSV with a header row naming its columns. channel and\n" +
			"recipient are required, reason is optional; other columns are ignored, and a row whose\n" +
			"removed_at is set is skipped, so the file of `ledger suppressions export` imports as it is.\n" +
			"Each row is one POST /v1/suppressions with source import, 8 in flight. A recipient already\n" +
			"on the list is counted, not added again: importing a file twice adds nothing the second\n" +
			"time. Prints `added N, already suppressed M, refused K` and, for each refused row, its line\n" +
			"and the API's problem (field and detail); exit status 1 when any row was refused. Says how\n" +
			"far it is on stderr every 10,000 rows.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			files, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			if len(files) != 1 {
				return usagef(command, "name one CSV file, or - for standard input, got %d operands", len(files))
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			in, name := io.Reader(os.Stdin), "standard input"
			if files[0] != "-" {
				f, err := os.Open(files[0])
				if err != nil {
					return fmt.Errorf("%s: %w", command, err)
				}
				defer f.Close()
				in, name = f, files[0]
			}
			sum, err := importSuppressions(ctx, c, in, name, *reason, *actor, func(n int) {
				fmt.Fprintf(o.stderr, "%s: %d rows sent\n", command, n)
			})
			sum.write(o.stdout)
			if err != nil {
				return err
			}
			if len(sum.refused) > 0 {
				return fmt.Errorf("%s: %d of the rows of %s were refused (lines above)", command, len(sum.refused), name)
			}
			return nil
		},
	})
}

// importSummary is what an import did.
type importSummary struct {
	added, already, skipped int
	refused                 []refusedRow
}

// refusedRow is a row of an import the API refused: its line and the problem.
type refusedRow struct {
	line int
	err  *apiError
}

// write prints the summary line and then each refused row, by line.
func (s *importSummary) write(w io.Writer) {
	fmt.Fprintf(w, "added %d, already suppressed %d, refused %d", s.added, s.already, len(s.refused))
	if s.skipped > 0 {
		fmt.Fprintf(w, ", skipped %d removed", s.skipped)
	}
	fmt.Fprintln(w)
	slices.SortFunc(s.refused, func(a, b refusedRow) int { return a.line - b.line })
	for _, r := range s.refused {
		var b strings.Builder
		fmt.Fprintf(&b, "line %d: %d %s", r.line, r.err.Status, r.err.Title)
		if r.err.Field != "" {
			fmt.Fprintf(&b, ": field %s", r.err.Field)
		}
		if r.err.Detail != "" {
			fmt.Fprintf(&b, ": %s", r.err.Detail)
		}
		fmt.Fprintln(w, cell(b.String()))
	}
}

// importRow is a row of an import, by its line in the file.
type importRow struct {
	line int
	req  suppressionRequest
}

// importSuppressions posts each row of the CSV in r (name is what it is called in errors),
// importInFlight at a time, calling progress every csvProgressRows rows sent. A row the API
// refuses is counted in the summary; anything else (a transport error, a CSV that does not parse)
// stops the import and is returned with the summary of what was done until then.
func importSuppressions(ctx context.Context, c *apiClient, r io.Reader, name, reason, actor string, progress func(int)) (*importSummary, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // a short row's missing cells are empty
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return &importSummary{}, fmt.Errorf("%s: empty: want a header row naming channel and recipient", name)
	}
	if err != nil {
		return &importSummary{}, fmt.Errorf("%s: %w", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\uFEFF")))
		if _, dup := col[h]; !dup {
			col[h] = i
		}
	}
	for _, need := range []string{"channel", "recipient"} {
		if _, ok := col[need]; !ok {
			return &importSummary{}, fmt.Errorf("%s: the header row has no %s column (it names %s)", name, need, strings.Join(header, ","))
		}
	}
	cellOf := func(rec []string, column string) string {
		if i, ok := col[column]; ok && i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sum := &importSummary{}
	var (
		mu    sync.Mutex
		fatal error
		wg    sync.WaitGroup
	)
	rows := make(chan importRow)
	for range importInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for row := range rows {
				a, err := c.post(ctx, "/v1/suppressions", nil, row.req)
				var refused *apiError
				mu.Lock()
				switch {
				case err == nil && a.Status == http.StatusCreated:
					sum.added++
				case err == nil:
					sum.already++
				case errors.As(err, &refused):
					sum.refused = append(sum.refused, refusedRow{line: row.line, err: refused})
				case fatal == nil:
					fatal = fmt.Errorf("%s line %d: %w", name, row.line, err)
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	sent := 0
	var readErr error
read:
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			readErr = fmt.Errorf("%s: %w", name, err) // a csv.ParseError names its line
			break
		}
		if cellOf(rec, "removed_at") != "" {
			sum.skipped++
			continue
		}
		line, _ := cr.FieldPos(0)
		req := suppressionRequest{Channel: cellOf(rec, "channel"), Recipient: cellOf(rec, "recipient"),
			Reason: cellOf(rec, "reason"), Actor: actor, Source: "import"}
		if req.Reason == "" {
			req.Reason = reason
		}
		select {
		case rows <- importRow{line: line, req: req}:
		case <-ctx.Done():
			break read
		}
		if sent++; sent%csvProgressRows == 0 {
			progress(sent)
		}
	}
	close(rows)
	wg.Wait()
	switch {
	case fatal != nil:
		return sum, fatal
	case readErr != nil:
		return sum, readErr
	}
	return sum, ctx.Err()
}

// preferencesCommand is `ledger preferences get|set`.
func (o *operatorCommands) preferencesCommand() *ffcli.Command {
	var gs apiSettings
	getFS := flag.NewFlagSet("ledger preferences get", flag.ContinueOnError)
	gs.flags(getFS)
	get := o.command(&ffcli.Command{
		Name:       "get",
		ShortUsage: "ledger preferences get CHANNEL RECIPIENT [--json]",
		ShortHelp:  "show a recipient's preferences, by category (GET /v1/preferences)",
		LongHelp: "Prints one row a category the recipient has a preference for: whether it is opted out, how\n" +
			"it was set (api, or unsubscribe: the recipient's one-click unsubscribe), by whom and when.",
		FlagSet: getFS,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger preferences get"
			ops, err := operands(command, getFS, args)
			if err != nil {
				return err
			}
			if len(ops) != 2 {
				return usagef(command, "name a channel and a recipient, got %d operands", len(ops))
			}
			c, err := gs.client(command)
			if err != nil {
				return err
			}
			a, err := c.get(ctx, "/v1/preferences", url.Values{"channel": {ops[0]}, "recipient": {ops[1]}})
			if err != nil {
				return err
			}
			if gs.json {
				return o.writeDocument(a)
			}
			var p struct {
				Items []preferenceDoc `json:"items"`
			}
			if err := a.decode(&p); err != nil {
				return err
			}
			if len(p.Items) == 0 {
				fmt.Fprintf(o.stdout, "no preferences: %s %s is opted out of no category\n", cell(ops[0]), cell(ops[1]))
				return nil
			}
			return writePreferences(o.stdout, p.Items)
		},
	})

	var ss apiSettings
	setFS := flag.NewFlagSet("ledger preferences set", flag.ContinueOnError)
	ss.flags(setFS)
	optedOut := setFS.String("opted-out", "", "true opts the recipient out of the category, false back in (required)")
	actor := setFS.String("actor", "", "who sets it, recorded in the preference's history (default: the key's tenant, as tenant:NAME)")
	set := o.command(&ffcli.Command{
		Name:       "set",
		ShortUsage: "ledger preferences set CHANNEL RECIPIENT CATEGORY --opted-out=true|false [--actor A] [--json]",
		ShortHelp:  "opt a recipient out of a category, or back in (PUT /v1/preferences)",
		LongHelp: "A delivery of the category to the recipient is then suppressed. The category must be declared\n" +
			"in the ledger's configuration file; a required one cannot be opted out of (400 naming\n" +
			"category, exit status 1). Prints the preference as it stands.",
		FlagSet: setFS,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger preferences set"
			ops, err := operands(command, setFS, args)
			if err != nil {
				return err
			}
			if len(ops) != 3 {
				return usagef(command, "name a channel, a recipient and a category, got %d operands", len(ops))
			}
			out, err := strconv.ParseBool(*optedOut)
			if err != nil {
				return usagef(command, "--opted-out %q: want true or false", *optedOut)
			}
			c, err := ss.client(command)
			if err != nil {
				return err
			}
			a, err := c.put(ctx, "/v1/preferences", struct {
				Channel   string `json:"channel"`
				Recipient string `json:"recipient"`
				Category  string `json:"category"`
				OptedOut  bool   `json:"opted_out"`
				Actor     string `json:"actor,omitempty"`
			}{ops[0], ops[1], ops[2], out, *actor})
			if err != nil {
				return err
			}
			if ss.json {
				return o.writeDocument(a)
			}
			var p preferenceDoc
			if err := a.decode(&p); err != nil {
				return err
			}
			return writePreferences(o.stdout, []preferenceDoc{p})
		},
	})
	return o.group("preferences", "a recipient's opt-outs of notification categories, through the HTTP API", get, set)
}

// writeSuppressions is the table of `suppressions list`.
func writeSuppressions(w io.Writer, entries []suppressionDoc) error {
	tw := newTable(w)
	row(tw, "ID", "CHANNEL", "RECIPIENT", "SOURCE", "REASON", "EVIDENCE", "CREATED", "REMOVED")
	for _, e := range entries {
		row(tw, e.ID, e.Channel, excerpt(e.Recipient, maxCellRunes), e.Source, excerpt(e.Reason, maxCellRunes),
			excerpt(suppressionEvidence(e), maxErrorCellRunes), stamp(e.CreatedAt), stampPtr(e.RemovedAt))
	}
	return tw.Flush()
}

// suppressionEvidence is an entry's evidence in a few words: the provider's code and the
// delivery event, or who added it.
func suppressionEvidence(e suppressionDoc) string {
	ev := e.Evidence
	if ev.DeliveryID != "" {
		return strings.TrimSpace(fmt.Sprintf("%s %s delivery %s v%d", ev.Provider, ev.ProviderCode, ev.DeliveryID, ev.EventVersion))
	}
	if ev.Actor != "" {
		return "by " + ev.Actor
	}
	return ""
}

// writeSuppression is one entry as key: value lines.
func writeSuppression(w io.Writer, e suppressionDoc) error {
	return keyValues(w, [][2]string{
		{"id", e.ID},
		{"channel", e.Channel},
		{"recipient", e.Recipient},
		{"source", e.Source},
		{"reason", e.Reason},
		{"provider", e.Evidence.Provider},
		{"provider code", e.Evidence.ProviderCode},
		{"evidence delivery", e.Evidence.DeliveryID},
		{"evidence event", itoa(e.Evidence.EventVersion)},
		{"actor", e.Evidence.Actor},
		{"created", stamp(e.CreatedAt)},
		{"removed", stampPtr(e.RemovedAt)},
		{"removed by", e.RemovedBy},
		{"removed reason", e.RemovedReason},
	})
}

// writePreferences is the table of `preferences get` and `set`.
func writePreferences(w io.Writer, ps []preferenceDoc) error {
	tw := newTable(w)
	row(tw, "CHANNEL", "RECIPIENT", "CATEGORY", "OPTED-OUT", "SOURCE", "ACTOR", "UPDATED")
	for _, p := range ps {
		row(tw, p.Channel, excerpt(p.Recipient, maxCellRunes), p.Category, strconv.FormatBool(p.OptedOut), p.Source, p.Actor, stamp(p.UpdatedAt))
	}
	return tw.Flush()
}
