package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/deliveryledger/ledger/domain"
)

// The API's documents as the operator commands read them (docs/api.md). Only what a table or a
// key: value line shows is declared; --json prints the answers whole.

// deliveryDoc is the delivery document: GET /v1/deliveries/{id}, the items of GET /v1/deliveries
// and the answers of replay and reconcile.
type deliveryDoc struct {
	ID                  string `json:"id"`
	NotificationID      string `json:"notification_id"`
	Channel             string `json:"channel"`
	Recipient           string `json:"recipient"`
	State               string `json:"state"`
	Priority            string `json:"priority"`
	Attempts            int    `json:"attempts"`
	MaxAttempts         int    `json:"max_attempts"`
	Provider            string `json:"provider"`
	ProviderOperationID string `json:"provider_operation_id"`
	LastError           *struct {
		Class      string `json:"class"`
		Message    string `json:"message"`
		StatusCode int    `json:"status_code"`
	} `json:"last_error"`
	NextAttemptAt   *time.Time `json:"next_attempt_at"`
	IdempotencyKey  string     `json:"idempotency_key"`
	AcceptedAt      time.Time  `json:"accepted_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
	FirstAttemptAt  *time.Time `json:"first_attempt_at"`
	TerminalAt      *time.Time `json:"terminal_at"`
	AwaitingReceipt *struct {
		LookupAt time.Time `json:"lookup_at"`
		GiveUpAt time.Time `json:"give_up_at"`
	} `json:"awaiting_receipt"`
	Version int `json:"version"`
}

// dlqDoc is an item of GET /v1/dlq.
type dlqDoc struct {
	ID             string    `json:"id"`
	Channel        string    `json:"channel"`
	Recipient      string    `json:"recipient"`
	State          string    `json:"state"`
	FailureClass   string    `json:"failure_class"`
	Exhausted      bool      `json:"exhausted"`
	LastError      string    `json:"last_error"`
	LastStatusCode int       `json:"last_status_code"`
	Provider       string    `json:"provider"`
	Attempts       int       `json:"attempts"`
	Replays        int       `json:"replays"`
	EnteredAt      time.Time `json:"entered_at"`
}

// eventDoc is an entry of GET /v1/deliveries/{id}/events.
type eventDoc struct {
	Version    int              `json:"version"`
	Type       domain.EventType `json:"type"`
	State      string           `json:"state"`
	RecordedAt time.Time        `json:"recorded_at"`
	Data       json.RawMessage  `json:"data"`
}

// acceptDoc is GET /v1/requests/{key}: the answer of the accept request under that key.
type acceptDoc struct {
	ID         string `json:"id"`
	Deliveries []struct {
		ID        string `json:"id"`
		Channel   string `json:"channel"`
		Recipient string `json:"recipient"`
	} `json:"deliveries"`
	AcceptedAt time.Time `json:"accepted_at"`
}

// replayJobDoc is the replay job document of /v1/replays.
type replayJobDoc struct {
	ID             string            `json:"id"`
	State          string            `json:"state"`
	Reason         string            `json:"reason"`
	IncludeUnknown bool              `json:"include_unknown"`
	Filters        map[string]string `json:"filters"`
	Matched        int64             `json:"matched"`
	Replayed       int64             `json:"replayed"`
	Skipped        int64             `json:"skipped"`
	Skips          map[string]int64  `json:"skips"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	FinishedAt     *time.Time        `json:"finished_at"`
}

// replayJobRunning is the state of a job that has matched deliveries left to take (a job is
// then done, or cancelled by an operator).
const replayJobRunning = "running"

// viewDoc is the view member of a list answer: how far the view is behind the tenant's events.
type viewDoc struct {
	Name          string `json:"name"`
	PendingEvents int64  `json:"pending_events"`
}

// Widths at which a table cell is cut (the whole text is in --json and in `show`).
const (
	maxCellRunes      = 48
	maxErrorCellRunes = 72
)

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// row writes one table row of cleaned cells.
func row(tw io.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c)
		if cells[i] == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

// cell makes text safe for one table cell or one line: what a provider or a caller wrote (an
// error message, a recipient) may hold tabs, newlines or terminal escape sequences.
func cell(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r) || r == utf8.RuneError:
			return '?'
		}
		return r
	}, s)
}

// excerpt cuts s to at most n runes, marking the cut.
func excerpt(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// stamp formats a time for tables and lines: UTC, to the millisecond.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return stamp(*t)
}

// keyValues writes aligned "key: value" lines, leaving out empty values.
func keyValues(w io.Writer, pairs [][2]string) error {
	tw := newTable(w)
	for _, p := range pairs {
		if p[1] == "" {
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", p[0], cell(p[1]))
	}
	return tw.Flush()
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// writeDeliveries is the table of `deliveries list`.
func writeDeliveries(w io.Writer, items []deliveryDoc) error {
	tw := newTable(w)
	row(tw, "ID", "CHANNEL", "RECIPIENT", "STATE", "ATTEMPTS", "PROVIDER", "UPDATED")
	for _, d := range items {
		row(tw, d.ID, d.Channel, excerpt(d.Recipient, maxCellRunes), d.State, strconv.Itoa(d.Attempts), d.Provider,
			d.UpdatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// writeDLQ is the table of `dlq list`.
func writeDLQ(w io.Writer, items []dlqDoc) error {
	tw := newTable(w)
	row(tw, "ID", "CHANNEL", "RECIPIENT", "STATE", "FAILURE CLASS", "ATTEMPTS", "LAST ERROR")
	for _, d := range items {
		last := d.LastError
		if d.LastStatusCode != 0 {
			last = strconv.Itoa(d.LastStatusCode) + " " + last
		}
		row(tw, d.ID, d.Channel, excerpt(d.Recipient, maxCellRunes), d.State, d.FailureClass, strconv.Itoa(d.Attempts),
			excerpt(strings.TrimSpace(last), maxErrorCellRunes))
	}
	return tw.Flush()
}

// writeDelivery writes a delivery document as key: value lines.
func writeDelivery(w io.Writer, d deliveryDoc) error {
	attempts := strconv.Itoa(d.Attempts)
	if d.MaxAttempts > 0 {
		attempts += fmt.Sprintf(" (at most %d per cycle)", d.MaxAttempts)
	}
	var lastErr, awaiting string
	if e := d.LastError; e != nil {
		lastErr = e.Class
		if e.StatusCode != 0 {
			lastErr += fmt.Sprintf(", status %d", e.StatusCode)
		}
		if e.Message != "" {
			lastErr += ": " + e.Message
		}
	}
	if a := d.AwaitingReceipt; a != nil {
		awaiting = fmt.Sprintf("lookup at %s, give up at %s", stamp(a.LookupAt), stamp(a.GiveUpAt))
	}
	return keyValues(w, [][2]string{
		{"id", d.ID},
		{"notification", d.NotificationID},
		{"channel", d.Channel},
		{"recipient", d.Recipient},
		{"state", d.State},
		{"priority", d.Priority},
		{"attempts", attempts},
		{"provider", d.Provider},
		{"provider operation", d.ProviderOperationID},
		{"last error", lastErr},
		{"next attempt at", stampPtr(d.NextAttemptAt)},
		{"awaiting receipt", awaiting},
		{"idempotency key", d.IdempotencyKey},
		{"accepted at", stamp(d.AcceptedAt)},
		{"first attempt at", stampPtr(d.FirstAttemptAt)},
		{"updated at", stamp(d.UpdatedAt)},
		{"terminal at", stampPtr(d.TerminalAt)},
		{"version", itoa(d.Version)},
	})
}

// writeHistory is the history table of `deliveries show`: one row per event, with what its data
// says (see domain/event.go for each type's data).
func writeHistory(w io.Writer, id string, events []eventDoc) error {
	tw := newTable(w)
	row(tw, "VERSION", "TIME", "EVENT", "STATE", "ATTEMPT", "PROVIDER", "STATUS", "LATENCY", "DETAIL")
	for _, e := range events {
		f := eventFacts(id, e)
		row(tw, strconv.Itoa(e.Version), stamp(e.RecordedAt), string(e.Type), e.State, itoa(f.attempt), f.provider,
			f.status, f.latency, excerpt(f.detail, 2*maxErrorCellRunes))
	}
	return tw.Flush()
}

// facts are the columns of one history row.
type facts struct {
	attempt  int
	provider string
	status   string
	latency  string
	detail   string
}

// eventFacts reads an event's data with the domain's data types. An event type this binary does
// not know (a newer server) shows its data as it is.
func eventFacts(id string, e eventDoc) facts {
	v, err := domain.DecodeData(domain.Event{DeliveryID: id, Version: e.Version, Type: e.Type, Data: e.Data})
	if err != nil {
		return facts{detail: string(e.Data)}
	}
	var f facts
	var detail []string
	add := func(format string, args ...any) { detail = append(detail, fmt.Sprintf(format, args...)) }
	switch d := v.(type) {
	case *domain.Accepted:
		add("%s to %s, priority %s, at most %d attempts", d.Channel, d.Recipient, d.Priority, d.MaxAttempts)
	case *domain.Queued:
		f.attempt = d.Attempt
	case *domain.Deferred:
		f.attempt = d.Attempt
		add("until %s: %s", stamp(d.Until), d.Reason)
	case *domain.AttemptStarted:
		f.attempt, f.provider = d.Attempt, d.Provider
	case *domain.AttemptResult:
		f.attempt, f.provider, f.status, f.latency = d.Attempt, d.Provider, itoa(d.StatusCode), latency(d.LatencyMS)
		switch {
		case d.Class != "" && d.Error != "":
			add("%s: %s", d.Class, d.Error)
		case d.Class != "":
			add("%s", d.Class)
		case d.Error != "":
			add("%s", d.Error)
		}
		if d.ProviderOperationID != "" {
			add("operation %s", d.ProviderOperationID)
		}
		if d.ProviderCode != "" {
			add("provider code %s", d.ProviderCode)
		}
		if d.Source != "" {
			add("decided by %s", d.Source)
		}
		for _, t := range d.FailedOver {
			add("failed over from %s", t.Provider)
		}
		if d.PossibleDuplicate {
			add("possible duplicate")
		}
		if d.Exhausted {
			add("attempts exhausted")
		}
		if d.NextAttemptAt != nil {
			add("next attempt at %s", stamp(*d.NextAttemptAt))
		}
	case *domain.Resolution:
		f.attempt, f.status = d.Attempt, itoa(d.StatusCode)
		add("evidence: %s", d.Evidence)
		if d.Actor != "" {
			add("by %s", d.Actor)
		}
		if d.ProviderOperationID != "" {
			add("operation %s", d.ProviderOperationID)
		}
		if d.Exhausted {
			add("attempts exhausted")
		}
		if d.NextAttemptAt != nil {
			add("next attempt at %s", stamp(*d.NextAttemptAt))
		}
	case *domain.Replayed:
		f.attempt = d.Attempt
		add("cycle %d", d.Cycle)
		if d.Reason != "" {
			add("reason: %s", d.Reason)
		}
		if d.Actor != "" {
			add("by %s", d.Actor)
		}
		if d.FromUnknown {
			add("from unknown")
		}
	case *domain.ProviderAcceptance:
		f.attempt, f.provider, f.status, f.latency = d.Attempt, d.Provider, itoa(d.StatusCode), latency(d.LatencyMS)
		add("operation %s, lookup at %s, give up at %s", d.ProviderOperationID, stamp(d.CheckAt), stamp(d.GiveUpAt))
	case *domain.ReceiptData:
		f.attempt, f.provider = d.Attempt, d.Provider
		words := d.Status
		for _, s := range []string{d.ProviderStatus, d.Code, d.Detail} {
			if s != "" {
				words += " " + s
			}
		}
		add("%s %s", d.Source, words)
		if d.Evidence != "" {
			add("%s", d.Evidence)
		}
	case *domain.FailOver:
		f.attempt, f.provider = d.Attempt, d.To
		add("from %s to %s: %s", d.From, d.To, d.Error)
	case *domain.Suppressed:
		f.attempt = d.Attempt
		if d.By == domain.SuppressedByPreference {
			add("the recipient opted out of category %s", d.Category)
			break
		}
		add("on the suppression list: entry %s (%s)", d.SuppressionID, d.Source)
		if d.Reason != "" {
			add("reason: %s", d.Reason)
		}
		if ev := d.Evidence; ev != nil && ev.DeliveryID != "" {
			add("evidence: %s %s, delivery %s event %d", ev.Provider, ev.ProviderCode, ev.DeliveryID, ev.EventVersion)
		} else if ev != nil && ev.Actor != "" {
			add("added by %s", ev.Actor)
		}
	default:
		add("%s", e.Data)
	}
	f.detail = strings.Join(detail, "; ")
	return f
}

func latency(ms float64) string {
	switch {
	case ms <= 0:
		return ""
	case ms < 10:
		return fmt.Sprintf("%.1fms", ms)
	default:
		return fmt.Sprintf("%.0fms", ms)
	}
}

// filterOrder is the order in which a job's filters are shown; others follow by name.
var filterOrder = []string{"channel", "failure_class", "since", "until", "recipient"}

// jobFilters renders a job's filters as name=value pairs.
func jobFilters(j replayJobDoc) string {
	names := make([]string, 0, len(j.Filters))
	for name := range j.Filters {
		names = append(names, name)
	}
	rank := func(name string) int {
		for i, n := range filterOrder {
			if n == name {
				return i
			}
		}
		return len(filterOrder)
	}
	sort.Slice(names, func(a, b int) bool {
		if ra, rb := rank(names[a]), rank(names[b]); ra != rb {
			return ra < rb
		}
		return names[a] < names[b]
	})
	parts := make([]string, 0, len(names)+1)
	for _, n := range names {
		parts = append(parts, n+"="+j.Filters[n])
	}
	if j.IncludeUnknown {
		parts = append(parts, "include_unknown")
	}
	return strings.Join(parts, " ")
}

// writeJob writes a replay job document as key: value lines.
func writeJob(w io.Writer, j replayJobDoc) error {
	skips := make([]string, 0, len(j.Skips))
	for reason, n := range j.Skips {
		skips = append(skips, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(skips)
	filters := jobFilters(j)
	if filters == "" {
		filters = "(none: every dead delivery)"
	}
	return keyValues(w, [][2]string{
		{"id", j.ID},
		{"state", j.State},
		{"reason", j.Reason},
		{"filters", filters},
		{"matched", strconv.FormatInt(j.Matched, 10)},
		{"replayed", strconv.FormatInt(j.Replayed, 10)},
		{"skipped", strconv.FormatInt(j.Skipped, 10)},
		{"skips", strings.Join(skips, ", ")},
		{"created at", stamp(j.CreatedAt)},
		{"updated at", stamp(j.UpdatedAt)},
		{"finished at", stampPtr(j.FinishedAt)},
	})
}

// writeJobs is the table of `replays list`.
func writeJobs(w io.Writer, jobs []replayJobDoc) error {
	tw := newTable(w)
	row(tw, "ID", "STATE", "MATCHED", "REPLAYED", "SKIPPED", "CREATED", "FILTERS", "REASON")
	for _, j := range jobs {
		row(tw, j.ID, j.State, strconv.FormatInt(j.Matched, 10), strconv.FormatInt(j.Replayed, 10),
			strconv.FormatInt(j.Skipped, 10), j.CreatedAt.UTC().Format(time.RFC3339),
			excerpt(jobFilters(j), maxCellRunes), excerpt(j.Reason, maxCellRunes))
	}
	return tw.Flush()
}
