package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/domain"
)

// maxExamples bounds the deliveries whose history a failed check prints.
const maxExamples = 20

// evidence is everything the checker judges.
type evidence struct {
	// ids maps each accepted Idempotency-Key to its delivery id.
	ids map[string]string
	// streams are the histories of the accepted deliveries, from the hot store or, for those
	// named in archived (with their segment), from the archive; segments counts the archive's.
	archived map[string]string
	segments int
	// unaccepted are keys that never got a 2xx (refused for good, or the run timed out).
	unaccepted map[string]string
	streams    map[string][]domain.Event
	calls      []sinkCall
	incidents  []incident
	// replaying: the soak replayed dead webhooks all through the run, so none may end dead.
	replaying bool
	// sends are the messages the SMS fakes took; twilioListed the sids the Twilio fake's list
	// answered just before twilioKilledAt (zero when it was not killed).
	sends          []smsSend
	twilioListed   []string
	twilioKilledAt time.Time
	// cancels is the canceller's final answer for each delivery it cancelled.
	cancels map[string]string
	// optOuts are the recipients' opt-outs, by recipient; sentAt is when each accepted key's
	// first request was sent.
	optOuts map[string]optOut
	sentAt  map[string]time.Time
}

// verdict is the checker's finding, over every channel unless a field says otherwise.
type verdict struct {
	Missing, Stuck                                  int
	Delivered, Dead, Unknown, Cancelled, Suppressed int
	// The unknown outcomes by what made them: the call's answer never came in time (a slow
	// answer, a reset after the request was written), the worker stopped mid-call, or a
	// provider took the message and no receipt or lookup said what became of it in time.
	UnknownCall, UnknownStopped, UnknownNoReceipt int
	// WebhookDead counts the dead webhooks, which the soak's replays should leave at none.
	WebhookDead                    int
	SameAttemptCalls               int // extra sink calls for one (delivery, attempt)
	ResentAfterSuccess             int // extra attempts of one delivery that the sink answered 200
	ByUnknown, ByKill, Unexplained int
	// Gone counts deliveries whose first attempt the sink answered 404 (deadStatus); Replayed the deliveries
	// with a replay in their history. Of the gone, GoneUnknown never learnt the 404 (the worker
	// died mid-call: unknown, never replayed), and GoneExpired died after their payload's body
	// had expired (retention.payloads), so that a replay is refused (409), as it must be.
	Gone, Replayed, GoneUnknown, GoneExpired int
	// SMS is what the checker found about the SMS deliveries, Schedule about the scheduled
	// sends and the cancels, OptOuts about the recipients who opted out.
	SMS      smsVerdict
	Schedule scheduleVerdict
	OptOuts  optOutVerdict
	// Retention is where the deliveries were found, hot or archived.
	Retention retentionVerdict
	Failures  []string
	// examples are delivery ids whose history is printed after the failures.
	examples map[string]string
}

// Lost counts accepted deliveries that are missing (in neither the hot store nor the archive) or
// did not settle.
func (v *verdict) Lost() int { return v.Missing + v.Stuck }

// Duplicates counts the duplicate receptions: the webhook sink's, and the SMS that reached a
// phone more than once.
func (v *verdict) Duplicates() int {
	return v.SameAttemptCalls + v.ResentAfterSuccess + v.SMS.Duplicates
}

func (v *verdict) fail(format string, args ...any) {
	v.Failures = append(v.Failures, fmt.Sprintf(format, args...))
}

func (v *verdict) example(id, why string) {
	if v.examples == nil {
		v.examples = map[string]string{}
	}
	if _, ok := v.examples[id]; !ok && len(v.examples) < maxExamples {
		v.examples[id] = why
	}
}

// attemptKey names one attempt of one delivery.
type attemptKey struct {
	id      string
	attempt int
}

// history is what one stream says about its attempts.
type history struct {
	d         *domain.Delivery
	started   map[int]bool
	startedAt map[int]time.Time
	unknown   map[int]string // attempt → the unknown outcome's error
	outcome   map[int]domain.EventType
	// terminal lists the terminal events of the current cycle (since the last replay).
	terminal []domain.EventType
	replays  int
	// deaths counts the dead-lettering events (dead, reconciled dead): each replay answers one.
	deaths int
	// last is the latest event that is not a receipt: a receipt adds evidence after an
	// outcome (a callback repeated, a lookup) and changes no state.
	last domain.Event
	// acceptances are the providers' acceptances of attempts (SMS); failedOver says whether an
	// attempt passed a provider over.
	acceptances []domain.ProviderAcceptance
	failedOver  bool
}

func readHistory(events []domain.Event) (*history, error) {
	d, err := domain.Rehydrate(events)
	if err != nil {
		return nil, err
	}
	h := &history{d: d, started: map[int]bool{}, startedAt: map[int]time.Time{}, unknown: map[int]string{},
		outcome: map[int]domain.EventType{}}
	for _, e := range events {
		if e.Type != domain.EventReceiptRecorded {
			h.last = e
		}
		data, err := domain.DecodeData(e)
		if err != nil {
			return nil, err
		}
		switch v := data.(type) {
		case *domain.AttemptStarted:
			h.started[v.Attempt] = true
			h.startedAt[v.Attempt] = e.RecordedAt
		case *domain.AttemptResult:
			h.outcome[v.Attempt] = e.Type
			if e.Type == domain.EventOutcomeUnknown {
				h.unknown[v.Attempt] = v.Error
			}
			h.failedOver = h.failedOver || len(v.FailedOver) > 0
		case *domain.ProviderAcceptance:
			h.acceptances = append(h.acceptances, *v)
			h.failedOver = h.failedOver || len(v.FailedOver) > 0
		case *domain.Resolution:
			h.outcome[v.Attempt] = e.Type
		}
		switch e.Type {
		case domain.EventDelivered, domain.EventDeadLettered, domain.EventReconciledDelivered, domain.EventReconciledDead, domain.EventCancelled,
			domain.EventSuppressed:
			h.terminal = append(h.terminal, e.Type)
		case domain.EventReplayed:
			h.terminal, h.replays = nil, h.replays+1
		}
		if e.Type == domain.EventDeadLettered || e.Type == domain.EventReconciledDead {
			h.deaths++
		}
	}
	return h, nil
}

// deliveredAttempt is the attempt whose outcome made the delivery delivered.
func (h *history) deliveredAttempt() int {
	for a, t := range h.outcome {
		if t == domain.EventDelivered || t == domain.EventReconciledDelivered {
			return a
		}
	}
	return 0
}

// check runs checks 1 to 3 on the evidence: nothing lost, one terminal state each, every sink
// reception explained by the history, every SMS the fakes took explained by its attempts,
// every scheduled send and cancel kept to its word, and every opt-out honoured.
func check(ev evidence) *verdict {
	v := &verdict{}
	if len(ev.unaccepted) > 0 {
		keys := sortedKeys(ev.unaccepted)
		v.fail("%d deliveries were never accepted (first: %s: %s)", len(keys), keys[0], ev.unaccepted[keys[0]])
	}
	accepted := map[string]string{} // id → key
	for key, id := range ev.ids {
		accepted[id] = key
	}
	histories := map[string]*history{}
	for _, id := range sortedKeys(accepted) {
		events, ok := ev.streams[id]
		if !ok {
			v.Missing++
			v.example(id, "missing: accepted, no stream in the hot store or the archive")
			continue
		}
		h, err := readHistory(events)
		if err != nil {
			v.fail("delivery %s: history does not fold: %v", id, err)
			v.example(id, "history does not fold")
			continue
		}
		histories[id] = h
		checkHistory(v, id, accepted[id], h)
	}
	if v.Missing > 0 {
		v.fail("lost: %d accepted deliveries have no stream in the hot store or the archive", v.Missing)
	}
	if v.Stuck > 0 {
		v.fail("lost: %d accepted deliveries never settled", v.Stuck)
	}
	checkSink(v, ev, accepted, histories)
	checkReplays(v, ev, histories)
	checkSMS(v, ev, histories)
	checkSchedule(v, ev, histories)
	checkOptOuts(v, ev, accepted, histories)
	checkRetention(v, ev)
	return v
}

// checkReplays checks that the deliveries the sink killed (deadStatus) were replayed and then
// delivered, when the soak replayed the DLQ.
func checkReplays(v *verdict, ev evidence, histories map[string]*history) {
	gone := map[string]bool{}
	for _, c := range ev.calls {
		if c.Status == deadStatus {
			gone[c.ID] = true
		}
	}
	v.Gone = len(gone)
	doubled := 0
	for id, h := range histories {
		if h.replays > 0 {
			v.Replayed++
		}
		// The soak replays dead deliveries only (never unknown ones), from the DLQ page and from
		// two jobs at once: each replay must answer a death of its own.
		if h.replays > h.deaths {
			doubled++
			v.example(id, fmt.Sprintf("replayed %d times after %d deaths", h.replays, h.deaths))
		}
	}
	if doubled > 0 {
		v.fail("%d deliveries were replayed more often than they died (a dead cycle replayed twice)", doubled)
	}
	if !ev.replaying {
		return
	}
	notReplayed := 0
	for id := range gone {
		h := histories[id]
		switch {
		case h == nil:
			continue
		case h.deaths == 0 && h.d.State() == domain.StateUnknown:
			v.GoneUnknown++ // the 404 never reached the ledger: nothing to replay
			continue
		case h.replays == 0 && h.d.State() == domain.StateDead && h.d.PayloadExpired():
			v.GoneExpired++ // a replay would have nothing to send
			continue
		}
		// A replay whose attempt found the recipient opted out ends suppressed (checkOptOuts).
		if h.replays == 0 || h.d.State() != domain.StateDelivered && h.d.State() != domain.StateSuppressed {
			notReplayed++
			v.example(id, "answered 404, not replayed and delivered")
		}
	}
	if notReplayed > 0 {
		v.fail("%d deliveries the sink answered 404 were not replayed and delivered", notReplayed)
	}
	if dead := v.WebhookDead - v.GoneExpired; dead > 0 {
		v.fail("%d webhooks ended dead although the DLQ was replayed all through the run", dead)
	}
}

// checkHistory checks one settled-or-not delivery: exactly one terminal state, or unknown with
// its evidence.
func checkHistory(v *verdict, id, key string, h *history) {
	if h.d.RequestKey() != key {
		v.fail("delivery %s: accepted under key %q, its history says %q", id, key, h.d.RequestKey())
	}
	state := h.d.State()
	switch state {
	case domain.StateDelivered:
		v.Delivered++
	case domain.StateDead:
		v.Dead++
		if h.d.Channel() == webhook.Name {
			v.WebhookDead++
			v.example(id, "dead (the sink kills only first attempts, and the soak replays them)")
		}
	case domain.StateUnknown:
		v.Unknown++
	case domain.StateCancelled:
		v.Cancelled++
	case domain.StateSuppressed:
		v.Suppressed++ // checkOptOuts checks that its recipient had opted out
	default:
		v.Stuck++
		v.example(id, "stuck in "+string(state))
		return
	}
	wantTerminal := 1
	if state == domain.StateUnknown {
		wantTerminal = 0
	}
	if len(h.terminal) != wantTerminal {
		v.fail("delivery %s: state %s after %d terminal events %v", id, state, len(h.terminal), h.terminal)
		v.example(id, "terminal events")
	}
	if state != domain.StateUnknown {
		return
	}
	// Evidence: the last event (receipts aside) is the unknown outcome of the latest attempt,
	// with its reason.
	reason, ok := h.unknown[h.d.Attempt()]
	if h.last.Type != domain.EventOutcomeUnknown || !ok || reason == "" {
		v.fail("delivery %s: unknown without an outcome_unknown event explaining attempt %d", id, h.d.Attempt())
		v.example(id, "unknown without evidence")
		return
	}
	switch unknownCause(reason) {
	case causeStopped:
		v.UnknownStopped++
	case causeNoReceipt:
		v.UnknownNoReceipt++
	default:
		v.UnknownCall++
	}
}

// What made an outcome unknown, read from its error.
const (
	causeCall      = "call"
	causeStopped   = "stopped"
	causeNoReceipt = "no receipt"
)

func unknownCause(reason string) string {
	switch {
	case strings.Contains(reason, "worker stopped"):
		return causeStopped
	case strings.Contains(reason, "no receipt or lookup"):
		return causeNoReceipt
	}
	return causeCall
}

// checkSink matches the sink's receptions with the histories: every delivered attempt was
// received and answered 200, every call belongs to a recorded attempt, and every duplicate is
// explained by an unknown outcome or by a redelivery after a worker was killed.
func checkSink(v *verdict, ev evidence, accepted map[string]string, histories map[string]*history) {
	byAttempt := map[attemptKey][]sinkCall{}
	for _, c := range ev.calls {
		if _, ok := accepted[c.ID]; !ok {
			v.fail("the sink received delivery %q (attempt %d), which was never accepted", c.ID, c.Attempt)
			continue
		}
		byAttempt[attemptKey{c.ID, c.Attempt}] = append(byAttempt[attemptKey{c.ID, c.Attempt}], c)
	}
	unrecorded := 0
	for k, calls := range byAttempt {
		h := histories[k.id]
		if h == nil {
			continue
		}
		if !h.started[k.attempt] {
			unrecorded++
			v.example(k.id, fmt.Sprintf("the sink received attempt %d, the history has no such attempt", k.attempt))
		}
		if len(calls) > 1 {
			v.SameAttemptCalls += len(calls) - 1
			explain(v, ev, h, k, calls[0].At, calls[len(calls)-1].At, len(calls)-1)
		}
	}
	if unrecorded > 0 {
		v.fail("%d sink receptions belong to no attempt recorded in the history", unrecorded)
	}

	// A delivery answered 200 in more than one attempt reached the receiver more than once.
	successes := map[string][]sinkCall{}
	for _, c := range ev.calls {
		if c.Status == http.StatusOK {
			successes[c.ID] = append(successes[c.ID], c)
		}
	}
	neverSeen := 0
	for id, h := range histories {
		if h.d.Channel() != webhook.Name {
			continue
		}
		if h.d.State() == domain.StateDelivered {
			a := h.deliveredAttempt()
			ok := false
			for _, c := range byAttempt[attemptKey{id, a}] {
				ok = ok || c.Status == http.StatusOK
			}
			if !ok {
				neverSeen++
				v.example(id, fmt.Sprintf("delivered by attempt %d, which the sink never answered 200", a))
			}
		}
		seen := map[int]bool{}
		var first *sinkCall
		for i, c := range successes[id] {
			if seen[c.Attempt] {
				continue // counted above as a same-attempt duplicate
			}
			seen[c.Attempt] = true
			if first == nil {
				first = &successes[id][i]
				continue
			}
			v.ResentAfterSuccess++
			explain(v, ev, h, attemptKey{id, first.Attempt}, first.At, c.At, 1)
		}
	}
	if neverSeen > 0 {
		v.fail("%d delivered deliveries were never answered 200 by the sink for their delivering attempt", neverSeen)
	}
	if v.Unexplained > 0 {
		v.fail("%d duplicate receptions are explained neither by an unknown outcome nor by a redelivery after a kill", v.Unexplained)
	}
}

// explain classifies n duplicates of attempt k seen between from and to: an unknown outcome of
// that attempt in the history, else a worker kill or a broker restart in between (a redelivery),
// else unexplained.
func explain(v *verdict, ev evidence, h *history, k attemptKey, from, to time.Time, n int) {
	if _, ok := h.unknown[k.attempt]; ok {
		v.ByUnknown += n
		return
	}
	for _, in := range ev.incidents {
		worker := in.Kind == "kill" && strings.HasPrefix(in.Target, "worker")
		broker := in.Kind == "rabbitmq-restart"
		end := in.End
		if end.IsZero() {
			end = in.At
		}
		if (worker || broker) && !end.Before(from) && !in.At.After(to) {
			v.ByKill += n
			return
		}
	}
	v.Unexplained += n
	v.example(k.id, fmt.Sprintf("unexplained duplicate of attempt %d", k.attempt))
}

// checkLog runs check 4 and counts the streams: no idempotency key twice in the log, and exactly
// one stream per accepted key.
func checkLog(ctx context.Context, v *verdict, pool *pgxpool.Pool, ids map[string]string) {
	// The key is stored without the delivery id it begins with (migration 0024): unique with it.
	rows, err := pool.Query(ctx, `SELECT delivery_id::text || idempotency_key, count(*) FROM events
		GROUP BY delivery_id, idempotency_key HAVING count(*) > 1 ORDER BY 1 LIMIT 10`)
	if err != nil {
		v.fail("check idempotency keys: %v", err)
		return
	}
	var dups []string
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			v.fail("check idempotency keys: %v", err)
			return
		}
		dups = append(dups, fmt.Sprintf("%s ×%d", key, n))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		v.fail("check idempotency keys: %v", err)
	}
	if len(dups) > 0 {
		v.fail("idempotency keys appear more than once in the log: %s", strings.Join(dups, ", "))
	}

	accepted := map[string]bool{}
	for _, id := range ids {
		accepted[id] = true
	}
	rows, err = pool.Query(ctx, `SELECT delivery_id::text, data->>'idempotency_key' FROM events WHERE type = $1`, string(domain.EventAccepted))
	if err != nil {
		v.fail("count streams: %v", err)
		return
	}
	defer rows.Close()
	extra := 0
	for rows.Next() {
		var id, key string
		if err := rows.Scan(&id, &key); err != nil {
			v.fail("count streams: %v", err)
			return
		}
		if !accepted[id] {
			extra++
			v.example(id, "a stream for key "+key+" that the API never answered with")
		}
	}
	if extra > 0 {
		v.fail("%d streams were opened that no accepted request answered with (a key accepted twice?)", extra)
	}
}

// printExamples prints the history and the sink calls of the deliveries a check flagged.
func printExamples(w io.Writer, v *verdict, ev evidence) {
	if len(v.examples) == 0 {
		return
	}
	calls := map[string][]sinkCall{}
	for _, c := range ev.calls {
		calls[c.ID] = append(calls[c.ID], c)
	}
	ids := sortedKeys(v.examples)
	fmt.Fprintf(w, "deliveries to look at (%d):\n", len(ids))
	for _, id := range ids {
		fmt.Fprintf(w, "  %s: %s\n", id, v.examples[id])
		for _, e := range ev.streams[id] {
			fmt.Fprintf(w, "    v%-2d %s %-30s %s\n", e.Version, e.RecordedAt.Format("15:04:05.000"), e.Type, e.Data)
		}
		for _, c := range calls[id] {
			slow := ""
			if c.Slow {
				slow = " (answered after the webhook timeout)"
			}
			fmt.Fprintf(w, "    sink %s attempt %d → %d%s\n", c.At.UTC().Format("15:04:05.000"), c.Attempt, c.Status, slow)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
