package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"
)

// Bounds of the operator commands' flags.
const (
	// defaultListMax bounds the rows `--all` gathers.
	defaultListMax = 10000
	// maxListPage is the API's largest page (GET /v1/deliveries and /v1/dlq, limit 1-500),
	// which --all asks for unless --limit says otherwise.
	maxListPage = 500
	// defaultPollInterval is how often `replays create` asks how far its job is.
	defaultPollInterval = time.Second
)

// operatorCommands are the commands an operator runs against a ledger through its HTTP API, with
// one tenant's key: deliveries, dlq, replay, replays and reconcile.
type operatorCommands struct {
	stdout, stderr io.Writer
	now            func() time.Time
	// usagePrinted is set when the usage of one of these commands was printed: on --help, or by
	// the flag package because a flag did not parse.
	usagePrinted bool
}

func newOperatorCommands(stdout, stderr io.Writer) *operatorCommands {
	return &operatorCommands{stdout: stdout, stderr: stderr, now: time.Now}
}

// commands are the top-level commands to register.
func (o *operatorCommands) commands() []*ffcli.Command {
	return []*ffcli.Command{o.deliveriesCommand(), o.notificationsCommand(), o.dlqCommand(), o.replayCommand(), o.replaysCommand(),
		o.reconcileCommand(), o.suppressionsCommand(), o.preferencesCommand()}
}

// usageError is a command line a command cannot run (a missing operand or flag, a value that does
// not parse): exit status 2, like a flag the flag package refuses.
type usageError struct {
	command string
	msg     string
}

func (e *usageError) Error() string { return e.command + ": " + e.msg }

func usagef(command, format string, args ...any) error {
	return &usageError{command: command, msg: fmt.Sprintf(format, args...)}
}

// errHelpShown: the usage was printed for a -h given after an operand; exit status 0.
var errHelpShown = errors.New("help shown")

// exitCode prints err, returned by one of these commands, and gives the exit status: 1 for the
// API's refusal, 2 for a usage error. ok is false for an error none of these commands returned,
// which the caller reports as any other.
func (o *operatorCommands) exitCode(err error) (code int, ok bool) {
	var refused *apiError
	var usage *usageError
	switch {
	case errors.Is(err, errHelpShown):
		return 0, true
	case errors.As(err, &refused):
		fmt.Fprintf(o.stderr, "ledger: the API refused %s %s\n", refused.Method, refused.Path)
		tw := newTable(o.stderr)
		fmt.Fprintf(tw, "  status:\t%d %s\n", refused.Status, cell(refused.Title))
		if refused.Field != "" {
			fmt.Fprintf(tw, "  field:\t%s\n", cell(refused.Field))
		}
		if refused.Detail != "" {
			fmt.Fprintf(tw, "  detail:\t%s\n", cell(refused.Detail))
		}
		_ = tw.Flush()
		return 1, true
	case errors.As(err, &usage):
		fmt.Fprintf(o.stderr, "%v\nRun `%s --help` for its flags.\n", usage, usage.command)
		return 2, true
	case o.usagePrinted:
		// The flag package refused a flag of one of these commands; it printed why and the usage.
		fmt.Fprintf(o.stderr, "ledger: %v\n", err)
		return 2, true
	}
	return 0, false
}

// command finishes an operator command: flags also from LEDGER_* variables, usage on stderr.
func (o *operatorCommands) command(c *ffcli.Command) *ffcli.Command {
	c.FlagSet.SetOutput(o.stderr)
	c.Options = []ff.Option{ff.WithEnvVarPrefix(envPrefix)}
	c.UsageFunc = func(c *ffcli.Command) string {
		o.usagePrinted = true
		return ffcli.DefaultUsageFunc(c)
	}
	return c
}

// group is a command that only holds subcommands.
func (o *operatorCommands) group(name, shortHelp string, subs ...*ffcli.Command) *ffcli.Command {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.Name
	}
	cmd := o.command(&ffcli.Command{
		Name:        name,
		ShortUsage:  fmt.Sprintf("ledger %s <%s> [flags]", name, strings.Join(names, "|")),
		ShortHelp:   shortHelp,
		FlagSet:     flag.NewFlagSet("ledger "+name, flag.ContinueOnError),
		Subcommands: subs,
	})
	cmd.Exec = func(_ context.Context, args []string) error {
		fmt.Fprintln(o.stderr, ffcli.DefaultUsageFunc(cmd))
		if len(args) > 0 {
			return usagef("ledger "+name, "unknown subcommand %q; one of: %s", args[0], strings.Join(names, ", "))
		}
		return usagef("ledger "+name, "name a subcommand: %s", strings.Join(names, ", "))
	}
	return cmd
}

// apiSettings are the flags every operator command has.
type apiSettings struct {
	url     string
	key     string
	timeout time.Duration
	json    bool
}

func (s *apiSettings) flags(fs *flag.FlagSet) {
	s.connectionFlags(fs)
	fs.BoolVar(&s.json, "json", false, "print the API's JSON answer as it is (one document) instead of text")
}

// connectionFlags are the flags of a command that prints no API answer (a CSV import or
// export): every flag but --json.
func (s *apiSettings) connectionFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.url, "api-url", defaultAPIURL, "base URL of the ledger's HTTP API (env LEDGER_API_URL)")
	fs.StringVar(&s.key, "api-key", "", "API key of the tenant to act as, required (env LEDGER_API_KEY, better than the flag: a flag shows in the process list)")
	fs.DurationVar(&s.timeout, "timeout", defaultAPITimeout, "longest wait for one API request")
}

// client checks the settings and returns the API client they describe.
func (s *apiSettings) client(command string) (*apiClient, error) {
	u, err := url.Parse(s.url)
	switch {
	case err != nil:
		return nil, usagef(command, "--api-url %q: %v", s.url, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return nil, usagef(command, "--api-url %q: want an http or https URL such as %s", s.url, defaultAPIURL)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, usagef(command, "--api-url %q: give the base URL only, without credentials, query or fragment", s.url)
	case s.key == "":
		return nil, usagef(command, "no API key: set LEDGER_API_KEY (or --api-key) to a key of LEDGER_API_KEYS")
	case strings.IndexFunc(s.key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return nil, usagef(command, "the API key holds a space or a control character")
	case s.timeout <= 0:
		return nil, usagef(command, "--timeout %s: want a positive duration", s.timeout)
	}
	return &apiClient{base: strings.TrimRight(u.String(), "/"), key: s.key, http: &http.Client{Timeout: s.timeout}}, nil
}

// operands parses the flags given after the operands too, as in `ledger replay ID --reason x`:
// the flag package stops at the first operand. Everything after "--" is an operand.
func operands(command string, fs *flag.FlagSet, args []string) ([]string, error) {
	var out []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelpShown // the flag package printed the usage
			}
			return nil, usagef(command, "%v", err)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(out, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		out = append(out, rest[0])
		args = rest[1:]
	}
	return out, nil
}

// timeFlag reads a --since or --until value: an RFC 3339 time, or a duration meaning that long
// before now ("24h").
func timeFlag(command, name, v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", usagef(command, "--%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z, or a duration before now such as 24h", name, v)
}

// listSettings are the filters and paging of `deliveries list` and `dlq list`.
type listSettings struct {
	state, channel, recipient string
	since, until              string
	limit                     int
	cursor                    string
	all                       bool
	max                       int
}

func (l *listSettings) flags(fs *flag.FlagSet, states string) {
	fs.StringVar(&l.state, "state", "", "only deliveries in this state ("+states+")")
	fs.StringVar(&l.channel, "channel", "", "only deliveries of this channel (webhook, email, ...)")
	fs.StringVar(&l.recipient, "recipient", "", "only deliveries to exactly this recipient")
	fs.StringVar(&l.since, "since", "", "only deliveries accepted at or after this time: RFC 3339, or a duration before now (24h)")
	fs.StringVar(&l.until, "until", "", "only deliveries accepted before this time: RFC 3339, or a duration before now")
	fs.IntVar(&l.limit, "limit", 0, "rows per page, 1-500 (default: the API's, 50; with --all, 500)")
	fs.StringVar(&l.cursor, "cursor", "", "start after this point: the next cursor printed by the previous page")
	fs.BoolVar(&l.all, "all", false, "follow the cursors and print every page, up to --max rows")
	fs.IntVar(&l.max, "max", defaultListMax, "with --all, stop after this many rows (and print the cursor to go on from)")
}

// query is the list's query string; the API checks the values and names any it refuses.
func (l *listSettings) query(command string, now time.Time) (url.Values, error) {
	q := url.Values{}
	since, err := timeFlag(command, "since", l.since, now)
	if err != nil {
		return nil, err
	}
	until, err := timeFlag(command, "until", l.until, now)
	if err != nil {
		return nil, err
	}
	switch {
	case l.limit < 0:
		return nil, usagef(command, "--limit %d: want a number of rows from 1 to %d", l.limit, maxListPage)
	case l.max < 1:
		return nil, usagef(command, "--max %d: want a positive number of rows", l.max)
	}
	for name, v := range map[string]string{"state": l.state, "channel": l.channel, "recipient": l.recipient,
		"since": since, "until": until, "cursor": l.cursor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if l.limit > 0 {
		q.Set("limit", strconv.Itoa(l.limit))
	}
	return q, nil
}

// listPage is a page of GET /v1/deliveries or /v1/dlq.
type listPage struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor"`
	View       viewDoc           `json:"view"`
}

// list runs `deliveries list` or `dlq list`: one page, or with --all every page up to --max.
func (o *operatorCommands) list(ctx context.Context, command, path string, s *apiSettings, l *listSettings,
	table func(io.Writer, []json.RawMessage) error) error {
	c, err := s.client(command)
	if err != nil {
		return err
	}
	q, err := l.query(command, o.now())
	if err != nil {
		return err
	}
	if !l.all {
		a, err := c.get(ctx, path, q)
		if err != nil {
			return err
		}
		var p listPage
		if err := a.decode(&p); err != nil {
			return err
		}
		o.noteView(p.View)
		if s.json {
			return o.writeDocument(a)
		}
		if err := table(o.stdout, p.Items); err != nil {
			return err
		}
		if p.NextCursor != "" {
			fmt.Fprintf(o.stdout, "next cursor: %s\n", p.NextCursor)
		}
		return nil
	}
	pageSize := l.limit
	if pageSize == 0 {
		pageSize = maxListPage
	}
	prog := newProgress(o.stderr, command)
	prog.quiet = !isTerminal(o.stderr)
	var items []json.RawMessage
	var view viewDoc
	next := ""
	for pages := 1; ; pages++ {
		q.Set("limit", strconv.Itoa(min(pageSize, l.max-len(items))))
		a, err := c.get(ctx, path, q)
		if err != nil {
			prog.done()
			return err
		}
		var p listPage
		if err := a.decode(&p); err != nil {
			prog.done()
			return err
		}
		items = append(items, p.Items...)
		if p.View.PendingEvents > view.PendingEvents {
			view = p.View
		}
		prog.say(fmt.Sprintf("%s: %d rows in %d pages", command, len(items), pages), false)
		if p.NextCursor == "" {
			break
		}
		if len(items) >= l.max {
			next = p.NextCursor
			break
		}
		q.Set("cursor", p.NextCursor)
	}
	prog.done()
	o.noteView(view)
	if next != "" {
		fmt.Fprintf(o.stderr, "%s: stopped at --max %d rows; more follow from --cursor %s\n", command, l.max, next)
	}
	if s.json {
		return o.writeArray(items)
	}
	if err := table(o.stdout, items); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(o.stdout, "next cursor: %s\n", next)
	}
	return nil
}

// noteView warns that a list's view has not caught up with the tenant's latest events.
func (o *operatorCommands) noteView(v viewDoc) {
	if v.PendingEvents > 0 {
		fmt.Fprintf(o.stderr, "note: the %s view does not show your latest %d events yet; the answer may be behind by a moment\n",
			v.Name, v.PendingEvents)
	}
}

// writeDocument prints an answer for --json, as the API sent it.
func (o *operatorCommands) writeDocument(a answer) error {
	doc, err := jsonDocument(a)
	if err != nil {
		return err
	}
	_, err = o.stdout.Write(doc)
	return err
}

// writeArray prints the items of every page as one JSON array, each as the API sent it.
func (o *operatorCommands) writeArray(items []json.RawMessage) error {
	var b strings.Builder
	b.WriteString("[")
	for i, it := range items {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n")
		b.Write(it)
	}
	b.WriteString("\n]\n")
	_, err := io.WriteString(o.stdout, b.String())
	return err
}

// decodeItems decodes a list's items for a table.
func decodeItems[T any](raw []json.RawMessage) ([]T, error) {
	out := make([]T, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("decode item %d of the API's answer: %w", i, err)
		}
	}
	return out, nil
}

// deliveriesCommand is `ledger deliveries list|show`.
func (o *operatorCommands) deliveriesCommand() *ffcli.Command {
	var ls apiSettings
	var lf listSettings
	listFS := flag.NewFlagSet("ledger deliveries list", flag.ContinueOnError)
	ls.flags(listFS)
	lf.flags(listFS, "accepted, scheduled, queued, processing, retrying, delivered, dead, unknown, cancelled, suppressed")
	list := o.command(&ffcli.Command{
		Name:       "list",
		ShortUsage: "ledger deliveries list [--state S] [--channel C] [--recipient R] [--since T] [--until T] [--limit N] [--cursor X] [--all [--max N]] [--json]",
		ShortHelp:  "list the tenant's deliveries, newest accepted first (GET /v1/deliveries)",
		LongHelp: "Prints a table of the deliveries the filters select: id, channel, recipient, state, attempts,\n" +
			"provider and when each last changed, then the cursor of the next page if there is one.\n" +
			"--all follows the cursors up to --max rows. The list is read from the status view, which may\n" +
			"be a moment behind (a note on stderr says so); `ledger deliveries show ID` is never behind.\n" +
			"With --json: the API's page as it is, or with --all one JSON array of every item.",
		FlagSet: listFS,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger deliveries list"
			if err := noOperands(command, listFS, args); err != nil {
				return err
			}
			return o.list(ctx, command, "/v1/deliveries", &ls, &lf, func(w io.Writer, raw []json.RawMessage) error {
				items, err := decodeItems[deliveryDoc](raw)
				if err != nil {
					return err
				}
				return writeDeliveries(w, items)
			})
		},
	})

	var ss apiSettings
	showFS := flag.NewFlagSet("ledger deliveries show", flag.ContinueOnError)
	ss.flags(showFS)
	key := showFS.String("key", "", "show the deliveries of the accept request under this Idempotency-Key (GET /v1/requests/{key}) instead of an ID")
	show := o.command(&ffcli.Command{
		Name:       "show",
		ShortUsage: "ledger deliveries show [--json] ID | --key IDEMPOTENCY-KEY",
		ShortHelp:  "show a delivery's status and its history of events",
		LongHelp: "Prints the delivery's status (GET /v1/deliveries/{id}, folded from its events, never behind)\n" +
			"as key: value lines, then its history (GET /v1/deliveries/{id}/events): each event's version,\n" +
			"time, type, the state after it, and what its data says: attempt, provider, status code,\n" +
			"latency, error class and message, or the evidence of a reconciliation.\n" +
			"With --key, first the accept request's answer, then each of its deliveries.\n" +
			"With --json: {\"delivery\": status, \"events\": history}; with --key,\n" +
			"{\"request\": answer, \"deliveries\": [{\"delivery\", \"events\"}, ...]}; each part as the API sent it.",
		FlagSet: showFS,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger deliveries show"
			ids, err := operands(command, showFS, args)
			if err != nil {
				return err
			}
			switch {
			case *key != "" && len(ids) > 0:
				return usagef(command, "give an ID or --key, not both")
			case *key == "" && len(ids) != 1:
				return usagef(command, "name one delivery ID (or --key IDEMPOTENCY-KEY), got %d operands", len(ids))
			}
			c, err := ss.client(command)
			if err != nil {
				return err
			}
			if *key != "" {
				return o.showRequest(ctx, c, *key, ss.json)
			}
			d, err := fetchDelivery(ctx, c, ids[0])
			if err != nil {
				return err
			}
			if ss.json {
				return o.writeJSONValue(d)
			}
			return o.writeShown(d)
		},
	})
	return o.group("deliveries", "list deliveries, show one's status and history, or cancel one, through the HTTP API", list, show, o.deliveryCancelCommand())
}

// noOperands refuses operands to a command that takes none, parsing flags given after them.
func noOperands(command string, fs *flag.FlagSet, args []string) error {
	rest, err := operands(command, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef(command, "takes no operands, got %q", rest)
	}
	return nil
}

// shownDelivery is a delivery's status and history as `deliveries show --json` prints them.
type shownDelivery struct {
	Delivery json.RawMessage `json:"delivery"`
	Events   json.RawMessage `json:"events"`
}

// fetchDelivery reads a delivery's status and history.
func fetchDelivery(ctx context.Context, c *apiClient, id string) (shownDelivery, error) {
	path := "/v1/deliveries/" + url.PathEscape(id)
	status, err := c.get(ctx, path, nil)
	if err != nil {
		return shownDelivery{}, err
	}
	history, err := c.get(ctx, path+"/events", nil)
	if err != nil {
		return shownDelivery{}, err
	}
	var h struct {
		Events json.RawMessage `json:"events"`
	}
	if err := history.decode(&h); err != nil {
		return shownDelivery{}, err
	}
	doc, err := jsonDocument(status)
	if err != nil {
		return shownDelivery{}, err
	}
	return shownDelivery{Delivery: doc, Events: h.Events}, nil
}

// writeShown prints a delivery's status lines and history table.
func (o *operatorCommands) writeShown(d shownDelivery) error {
	var doc deliveryDoc
	if err := json.Unmarshal(d.Delivery, &doc); err != nil {
		return fmt.Errorf("decode the API's answer: %w", err)
	}
	var events []eventDoc
	if err := json.Unmarshal(d.Events, &events); err != nil {
		return fmt.Errorf("decode the API's answer: %w", err)
	}
	if err := writeDelivery(o.stdout, doc); err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "\nhistory (%d events):\n", len(events))
	return writeHistory(o.stdout, doc.ID, events)
}

// showRequest is `deliveries show --key`: the accept request's answer, then its deliveries.
func (o *operatorCommands) showRequest(ctx context.Context, c *apiClient, key string, asJSON bool) error {
	a, err := c.get(ctx, "/v1/requests/"+url.PathEscape(key), nil)
	if err != nil {
		return err
	}
	var acc acceptDoc
	if err := a.decode(&acc); err != nil {
		return err
	}
	shown := make([]shownDelivery, 0, len(acc.Deliveries))
	for _, d := range acc.Deliveries {
		s, err := fetchDelivery(ctx, c, d.ID)
		if err != nil {
			return err
		}
		shown = append(shown, s)
	}
	if asJSON {
		doc, err := jsonDocument(a)
		if err != nil {
			return err
		}
		return o.writeJSONValue(struct {
			Request    json.RawMessage `json:"request"`
			Deliveries []shownDelivery `json:"deliveries"`
		}{doc, shown})
	}
	fmt.Fprintf(o.stdout, "request %s: notification %s accepted at %s, %d deliveries\n",
		cell(key), acc.ID, stamp(acc.AcceptedAt), len(acc.Deliveries))
	for i, s := range shown {
		fmt.Fprintf(o.stdout, "\ndelivery %d of %d:\n", i+1, len(shown))
		if err := o.writeShown(s); err != nil {
			return err
		}
	}
	return nil
}

// writeJSONValue prints v as one JSON document (its raw members as the API sent them).
func (o *operatorCommands) writeJSONValue(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = o.stdout.Write(append(b, '\n'))
	return err
}

// dlqCommand is `ledger dlq list`.
func (o *operatorCommands) dlqCommand() *ffcli.Command {
	var s apiSettings
	var l listSettings
	fs := flag.NewFlagSet("ledger dlq list", flag.ContinueOnError)
	s.flags(fs)
	l.flags(fs, "dead or unknown; default both")
	list := o.command(&ffcli.Command{
		Name:       "list",
		ShortUsage: "ledger dlq list [--state dead|unknown] [--channel C] [--recipient R] [--since T] [--until T] [--limit N] [--cursor X] [--all [--max N]] [--json]",
		ShortHelp:  "list the tenant's dead and unknown deliveries (GET /v1/dlq)",
		LongHelp: "Prints a table of the dead-letter view: id, channel, recipient, state, failure class, attempts\n" +
			"and the last error (status code and message, cut to fit; --json has it whole, with the\n" +
			"evidence of each attempt). A dead delivery is replayed with `ledger replay ID` or, many at\n" +
			"once, `ledger replays create`; an unknown one is resolved with `ledger reconcile ID`.\n" +
			"--all follows the cursors up to --max rows.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger dlq list"
			if err := noOperands(command, fs, args); err != nil {
				return err
			}
			return o.list(ctx, command, "/v1/dlq", &s, &l, func(w io.Writer, raw []json.RawMessage) error {
				items, err := decodeItems[dlqDoc](raw)
				if err != nil {
					return err
				}
				return writeDLQ(w, items)
			})
		},
	})
	return o.group("dlq", "list the dead and unknown deliveries through the HTTP API", list)
}

// idempotencyHeader is the Idempotency-Key header of a decision, when one is given.
func idempotencyHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"Idempotency-Key": []string{key}}
}

// replayCommand is `ledger replay ID`.
func (o *operatorCommands) replayCommand() *ffcli.Command {
	var s apiSettings
	fs := flag.NewFlagSet("ledger replay", flag.ContinueOnError)
	s.flags(fs)
	reason := fs.String("reason", "", "why the delivery is sent again, recorded in its history (required, at most 500 characters)")
	actor := fs.String("actor", "", "who asks, recorded in the history (default: the key's tenant, as tenant:NAME)")
	key := fs.String("idempotency-key", "", "Idempotency-Key of the replay: the same key again answers with the first replay and replays nothing")
	return o.command(&ffcli.Command{
		Name:       "replay",
		ShortUsage: "ledger replay ID --reason TEXT [--actor A] [--idempotency-key K] [--json]",
		ShortHelp:  "send a dead delivery again: a new cycle of attempts (POST /v1/deliveries/{id}/replay)",
		LongHelp: "Replays one dead delivery: it is queued again for a new cycle of attempts, numbered on after\n" +
			"the last, and its history is kept. Prints the delivery as the replay left it. A delivery that\n" +
			"is not dead is refused (409, exit status 1). Many at once: `ledger replays create`.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger replay"
			ids, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			switch {
			case len(ids) != 1:
				return usagef(command, "name one delivery ID, got %d operands", len(ids))
			case strings.TrimSpace(*reason) == "":
				return usagef(command, "--reason is required: say why the delivery is sent again")
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			a, err := c.post(ctx, "/v1/deliveries/"+url.PathEscape(ids[0])+"/replay", idempotencyHeader(*key),
				struct {
					Reason string `json:"reason"`
					Actor  string `json:"actor,omitempty"`
				}{*reason, *actor})
			if err != nil {
				return err
			}
			return o.writeDecision(a, s.json, "replayed")
		},
	})
}

// writeDecision prints the delivery a replay or a reconciliation answered with.
func (o *operatorCommands) writeDecision(a answer, asJSON bool, what string) error {
	if asJSON {
		return o.writeDocument(a)
	}
	var d deliveryDoc
	if err := a.decode(&d); err != nil {
		return err
	}
	// The answer is the delivery as the decision left it (for a repeat under the same
	// Idempotency-Key, as the first one left it); workers may have moved it on since.
	fmt.Fprintf(o.stdout, "%s %s: %s after the decision\n", what, d.ID, d.State)
	return writeDelivery(o.stdout, d)
}

// reconcileCommand is `ledger reconcile ID`.
func (o *operatorCommands) reconcileCommand() *ffcli.Command {
	var s apiSettings
	fs := flag.NewFlagSet("ledger reconcile", flag.ContinueOnError)
	s.flags(fs)
	outcome := fs.String("outcome", "", "what the evidence shows (required): delivered, dead (failed for good), or retrying (the provider never got it: attempt again, dead if no attempt is left)")
	evidence := fs.String("evidence", "", "what shows the outcome, recorded in the history (required): a provider receipt, a log line, a ticket")
	actor := fs.String("actor", "", "who decided, recorded in the history (default: the key's tenant, as tenant:NAME)")
	statusCode := fs.Int("status-code", 0, "the provider's HTTP status in the evidence, if it has one (100-599)")
	operation := fs.String("provider-operation-id", "", "the provider's id of the message in the evidence, if it has one")
	return o.command(&ffcli.Command{
		Name:       "reconcile",
		ShortUsage: "ledger reconcile ID --outcome delivered|dead|retrying --evidence TEXT [--actor A] [--status-code N] [--provider-operation-id X] [--json]",
		ShortHelp:  "resolve an unknown outcome with evidence (POST /v1/deliveries/{id}/reconcile)",
		LongHelp: "An attempt whose outcome is unknown (the provider may or may not have acted: a timeout after\n" +
			"the request was sent) waits for a receipt, a lookup or an operator. This records the\n" +
			"operator's decision and its evidence, and prints the delivery as the decision left it. A\n" +
			"delivery whose outcome is not unknown is refused (409, exit status 1).",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger reconcile"
			ids, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			switch {
			case len(ids) != 1:
				return usagef(command, "name one delivery ID, got %d operands", len(ids))
			case *outcome == "":
				return usagef(command, "--outcome is required: delivered, dead or retrying")
			case strings.TrimSpace(*evidence) == "":
				return usagef(command, "--evidence is required: what shows the outcome")
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			body := struct {
				Outcome             string `json:"outcome"`
				Evidence            string `json:"evidence"`
				Actor               string `json:"actor,omitempty"`
				StatusCode          int    `json:"status_code,omitempty"`
				ProviderOperationID string `json:"provider_operation_id,omitempty"`
			}{*outcome, *evidence, *actor, *statusCode, *operation}
			a, err := c.post(ctx, "/v1/deliveries/"+url.PathEscape(ids[0])+"/reconcile", nil, body)
			if err != nil {
				return err
			}
			return o.writeDecision(a, s.json, "reconciled")
		},
	})
}

// replayJobRequest is the body of POST /v1/replays.
type replayJobRequest struct {
	Reason         string `json:"reason"`
	Channel        string `json:"channel,omitempty"`
	FailureClass   string `json:"failure_class,omitempty"`
	Since          string `json:"since,omitempty"`
	Until          string `json:"until,omitempty"`
	Recipient      string `json:"recipient,omitempty"`
	IncludeUnknown bool   `json:"include_unknown,omitempty"`
	Actor          string `json:"actor,omitempty"`
}

// replaysCommand is `ledger replays create|show|list`.
func (o *operatorCommands) replaysCommand() *ffcli.Command {
	var cs apiSettings
	createFS := flag.NewFlagSet("ledger replays create", flag.ContinueOnError)
	cs.flags(createFS)
	var req replayJobRequest
	createFS.StringVar(&req.Reason, "reason", "", "why the deliveries are sent again, recorded in each one's history (required, at most 500 characters)")
	createFS.StringVar(&req.Channel, "channel", "", "only dead deliveries of this channel")
	createFS.StringVar(&req.FailureClass, "failure-class", "", "only dead deliveries whose failure is of this class: permanent, transient, unknown or panic")
	since := createFS.String("since", "", "only deliveries accepted at or after this time: RFC 3339, or a duration before now (24h; the time it stands for is sent, so repeat with the printed time)")
	until := createFS.String("until", "", "only deliveries accepted before this time: RFC 3339, or a duration before now")
	createFS.StringVar(&req.Recipient, "recipient", "", "only deliveries to exactly this recipient")
	createFS.BoolVar(&req.IncludeUnknown, "include-unknown", false, "also replay the deliveries whose outcome is unknown (they may have reached the recipient)")
	createFS.StringVar(&req.Actor, "actor", "", "who asks, recorded on each replay (default: the key's tenant, as tenant:NAME)")
	key := createFS.String("idempotency-key", "", "Idempotency-Key of the job (default: a random one, printed): the same key and filters again answer with the same job")
	wait := createFS.Bool("wait", false, "wait until the job is done, even when standard output is not a terminal (it waits on a terminal anyway)")
	poll := createFS.Duration("poll-interval", defaultPollInterval, "how often to ask how far the job is while waiting")
	create := o.command(&ffcli.Command{
		Name:       "create",
		ShortUsage: "ledger replays create --reason TEXT [--channel C] [--failure-class F] [--since T] [--until T] [--recipient R] [--include-unknown] [--actor A] [--idempotency-key K] [--wait] [--json]",
		ShortHelp:  "replay every dead delivery the filters match, as a background job (POST /v1/replays)",
		LongHelp: "Creates a replay job: at creation it matches the tenant's dead deliveries that fit the\n" +
			"filters (and the unknown ones with --include-unknown), then the ledger replays them in the\n" +
			"background; a delivery no longer dead when its turn comes is skipped, with the reason\n" +
			"counted. When standard output is a terminal, or with --wait, it follows the job (GET\n" +
			"/v1/replays/{id}) until it is done, with a progress bar on stderr when stderr is a terminal,\n" +
			"and prints the job as it ended; otherwise it prints the job as created and returns. Ctrl-C\n" +
			"stops the waiting, not the job. --json prints the API's job document (the last one read).",
		FlagSet: createFS,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger replays create"
			if err := noOperands(command, createFS, args); err != nil {
				return err
			}
			if strings.TrimSpace(req.Reason) == "" {
				return usagef(command, "--reason is required: say why the deliveries are sent again")
			}
			if *poll <= 0 {
				return usagef(command, "--poll-interval %s: want a positive duration", *poll)
			}
			body := req
			var err error
			now := o.now()
			if body.Since, err = timeFlag(command, "since", *since, now); err != nil {
				return err
			}
			if body.Until, err = timeFlag(command, "until", *until, now); err != nil {
				return err
			}
			c, err := cs.client(command)
			if err != nil {
				return err
			}
			return o.createReplayJob(ctx, c, body, *key, *wait || isTerminal(o.stdout), *poll, cs.json)
		},
	})

	show := o.jobCommand("show", "show a replay job: its filters and how far it is (GET /v1/replays/{id})", "",
		func(ctx context.Context, c *apiClient, id string) (answer, error) {
			return c.get(ctx, "/v1/replays/"+url.PathEscape(id), nil)
		})

	var ls apiSettings
	listFS := flag.NewFlagSet("ledger replays list", flag.ContinueOnError)
	ls.flags(listFS)
	limit := listFS.Int("limit", 0, "jobs to list, newest first, 1-100 (default: the API's, 20)")
	list := o.command(&ffcli.Command{
		Name:       "list",
		ShortUsage: "ledger replays list [--limit N] [--json]",
		ShortHelp:  "list the tenant's replay jobs, newest first (GET /v1/replays)",
		FlagSet:    listFS,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger replays list"
			if err := noOperands(command, listFS, args); err != nil {
				return err
			}
			if *limit < 0 {
				return usagef(command, "--limit %d: want a number of jobs from 1 to 100", *limit)
			}
			c, err := ls.client(command)
			if err != nil {
				return err
			}
			var q url.Values
			if *limit > 0 {
				q = url.Values{"limit": {strconv.Itoa(*limit)}}
			}
			a, err := c.get(ctx, "/v1/replays", q)
			if err != nil {
				return err
			}
			if ls.json {
				return o.writeDocument(a)
			}
			var p struct {
				Items []replayJobDoc `json:"items"`
			}
			if err := a.decode(&p); err != nil {
				return err
			}
			return writeJobs(o.stdout, p.Items)
		},
	})
	cancel := o.jobCommand("cancel", "cancel a running replay job: it stops at its next page (POST /v1/replays/{id}/cancel)",
		"The job becomes cancelled at once; its runner finishes the page in hand and replays nothing\n"+
			"more, so the deliveries it had not reached stay dead. Cancelling a cancelled job shows it\n"+
			"again; a done job is refused (409, exit status 1).",
		func(ctx context.Context, c *apiClient, id string) (answer, error) {
			return c.post(ctx, "/v1/replays/"+url.PathEscape(id)+"/cancel", nil, nil)
		})
	return o.group("replays", "replay many dead deliveries as a background job, follow the jobs and cancel them, through the HTTP API",
		create, show, list, cancel)
}

// jobCommand is `ledger replays NAME [--json] ID`: call the API about one job, then show the job
// it answers with.
func (o *operatorCommands) jobCommand(name, shortHelp, longHelp string,
	call func(ctx context.Context, c *apiClient, id string) (answer, error)) *ffcli.Command {
	command := "ledger replays " + name
	var settings apiSettings
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	settings.flags(fs)
	return o.command(&ffcli.Command{
		Name:       name,
		ShortUsage: command + " [--json] ID",
		ShortHelp:  shortHelp,
		LongHelp:   longHelp,
		FlagSet:    fs,
		Exec: func(ctx context.Context, args []string) error {
			ids, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			if len(ids) != 1 {
				return usagef(command, "name one replay job ID, got %d operands", len(ids))
			}
			c, err := settings.client(command)
			if err != nil {
				return err
			}
			a, err := call(ctx, c, ids[0])
			if err != nil {
				return err
			}
			if settings.json {
				return o.writeDocument(a)
			}
			var j replayJobDoc
			if err := a.decode(&j); err != nil {
				return err
			}
			return writeJob(o.stdout, j)
		},
	})
}

// createReplayJob posts the job and, when wait, follows it until it is done.
func (o *operatorCommands) createReplayJob(ctx context.Context, c *apiClient, body replayJobRequest, key string,
	wait bool, poll time.Duration, asJSON bool) error {
	generated := key == ""
	if generated {
		key = uuid.NewString()
	}
	a, err := c.post(ctx, "/v1/replays", idempotencyHeader(key), body)
	if err != nil {
		return err
	}
	var job replayJobDoc
	if err := a.decode(&job); err != nil {
		return err
	}
	// The key is what gets this job back after a lost answer: show it, but keep stdout one
	// document under --json.
	notes := o.stdout
	if asJSON {
		notes = o.stderr
	}
	if generated {
		fmt.Fprintf(notes, "idempotency key: %s (repeat with --idempotency-key %s to get this job back)\n", key, key)
	}
	if a.Header.Get("Idempotent-Replayed") == "true" {
		fmt.Fprintf(notes, "this key's job exists already: nothing new was started\n")
	}
	if wait && job.State == replayJobRunning {
		prog := newProgress(o.stderr, "replay job")
		prog.quiet = !isTerminal(o.stderr)
		prog.say(replayBar(job), true)
		t := time.NewTicker(poll)
		defer t.Stop()
		for job.State == replayJobRunning {
			select {
			case <-ctx.Done():
				prog.done()
				return fmt.Errorf("stopped waiting for replay job %s, which goes on (`ledger replays show %s`): %w", job.ID, job.ID, ctx.Err())
			case <-t.C:
			}
			if a, err = c.get(ctx, "/v1/replays/"+url.PathEscape(job.ID), nil); err != nil {
				prog.done()
				return err
			}
			if err := a.decode(&job); err != nil {
				prog.done()
				return err
			}
			prog.say(replayBar(job), job.State != replayJobRunning)
		}
		prog.done()
	}
	if asJSON {
		return o.writeDocument(a)
	}
	return writeJob(o.stdout, job)
}

// replayBarWidth is the width of the progress bar, in characters.
const replayBarWidth = 30

// replayBar is the progress line of a replay job.
func replayBar(j replayJobDoc) string {
	taken := j.Replayed + j.Skipped
	filled := replayBarWidth
	if j.Matched > 0 {
		filled = int(min(taken, j.Matched) * replayBarWidth / j.Matched)
	}
	id := j.ID
	if len(id) > 8 {
		id = id[:8]
	}
	return fmt.Sprintf("replay job %s [%s%s] %d/%d matched: %d replayed, %d skipped (%s)", id,
		strings.Repeat("#", filled), strings.Repeat(".", replayBarWidth-filled), taken, j.Matched, j.Replayed, j.Skipped, j.State)
}

// say prints text as the progress line, on update's schedule (forced: now): for progress that is
// not a count of events, such as a replay job's deliveries or a list's pages.
func (p *progress) say(text string, force bool) {
	if p.quiet {
		return
	}
	interval := 10 * time.Second
	if p.tty {
		interval = 250 * time.Millisecond
	}
	now := time.Now()
	if !force && now.Sub(p.printed) < interval {
		return
	}
	p.printed = now
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\033[K", text)
		p.line = true
		return
	}
	fmt.Fprintln(p.w, text)
}
