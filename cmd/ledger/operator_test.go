package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
	"github.com/deliveryledger/ledger/adapters/postgres/pgtest"
	"github.com/deliveryledger/ledger/cmd/internal/app"
)

// The operator commands against a real ledger (API, relay, workers, projector over the test
// PostgreSQL and RabbitMQ), accepting through the API and running the CLI through run.

// Keys of the test ledger's two tenants.
const (
	acmeKey   = "acme-key"
	globexKey = "globex-key"
)

// opBundle is a running ledger and the webhook receiver its deliveries go to.
type opBundle struct {
	base     string
	receiver *receiver
}

// receiver is a webhook receiver on loopback that answers by path: /ok 200; /gone 404 while gone (a 410 would suppress it: not what a replay test wants)
// is set, then 200; /slow reads the request and holds the answer past the ledger's webhook
// timeout (an unknown outcome).
type receiver struct {
	*httptest.Server
	gone atomic.Bool
}

// testWebhookTimeout is the ledger's webhook timeout in these tests: /slow outlasts it.
const testWebhookTimeout = 300 * time.Millisecond

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.gone.Store(true)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		switch req.URL.Path {
		case "/gone":
			if r.gone.Load() {
				w.WriteHeader(http.StatusNotFound)
				return
			}
		case "/slow":
			// The ledger gives up at its timeout and closes the connection, which ends this wait.
			select {
			case <-req.Context().Done():
			case <-time.After(10 * testWebhookTimeout):
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.Close)
	return r
}

// setupLedger starts a whole ledger on loopback over its own schema and broker prefix, with fast
// retries (2 attempts) and a 300 ms webhook timeout, until the test ends; each option changes
// the configuration before it is checked.
func setupLedger(t *testing.T, options ...func(*app.Config)) *opBundle {
	t.Helper()
	schema := pgtest.New(t)
	cfg := app.DefaultConfig()
	cfg.DatabaseURL = schema.URL
	cfg.AMQPURL = amqptest.URL()
	cfg.AMQPPrefix = amqptest.Prefix()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.MetricsAddr = "off"
	cfg.APIKeys = "acme:" + acmeKey + ",globex:" + globexKey
	cfg.WebhookAllowCIDRs = "127.0.0.0/8"
	cfg.WebhookTimeout = testWebhookTimeout
	cfg.WorkerConcurrency = 4
	cfg.RetryBase = 20 * time.Millisecond
	cfg.RetryCap = 80 * time.Millisecond
	cfg.MaxAttempts = 2
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "warn"
	for _, o := range options {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := app.Build(ctx, cfg, logger)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// Build declared the topology: remove it when the test ends (registered first, so it runs
	// after the ledger has stopped).
	t.Cleanup(func() {
		conn, err := amqp091.Dial(amqptest.URL())
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		defer conn.Close()
		if err := a.Topology().Delete(conn); err != nil {
			t.Errorf("clean up topology: %v", err)
		}
	})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ledger stopped with: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("ledger did not stop")
		}
	})
	return &opBundle{base: "http://" + a.Addr(), receiver: newReceiver(t)}
}

// accept posts one webhook delivery to path on the receiver and returns its id.
func (b *opBundle) accept(t *testing.T, apiKey, idemKey, path string) string {
	t.Helper()
	body := fmt.Sprintf(`{"channel":"webhook","recipient":%q,"payload":{"order":42}}`, b.receiver.URL+path)
	req, err := http.NewRequest(http.MethodPost, b.base+"/v1/deliveries", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &a) != nil || a.ID == "" {
		t.Fatalf("accept: %d %s", resp.StatusCode, raw)
	}
	return a.ID
}

// state is the delivery's state, from GET /v1/deliveries/{id}.
func (b *opBundle) state(t *testing.T, id string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+"/v1/deliveries/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.State
}

// waitState polls the delivery until it is in state.
func (b *opBundle) waitState(t *testing.T, id, state string) {
	t.Helper()
	eventually(t, 15*time.Second, func() (bool, string) {
		got := b.state(t, id)
		return got == state, fmt.Sprintf("delivery %s is %s, want %s", id, got, state)
	})
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cli runs a command of the CLI with the bundle's API URL and a tenant's key (flags after the
// operands, as an operator types them).
func (b *opBundle) cli(t *testing.T, apiKey string, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(append(args, "--api-url="+b.base, "--api-key="+apiKey)...)
}

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// lineOf returns the output's line that holds id ("" when none does).
func lineOf(out, id string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, id) {
			return l
		}
	}
	return ""
}

// fields splits a table row on its column gaps.
func fields(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

func TestOperatorListShowDLQAndReplay(t *testing.T) {
	t.Parallel()
	b := setupLedger(t)
	ok := b.accept(t, acmeKey, "order-ok", "/ok")
	gone := b.accept(t, acmeKey, "order-gone", "/gone")
	other := b.accept(t, globexKey, "order-globex", "/ok")
	b.waitState(t, ok, "delivered")
	b.waitState(t, gone, "dead")

	// The list reads the status view: wait until it has caught up with both.
	var out string
	eventually(t, 15*time.Second, func() (bool, string) {
		code, stdout, stderr := b.cli(t, acmeKey, "deliveries", "list")
		out = stdout
		return code == 0 && strings.Contains(lineOf(out, ok), "delivered") && strings.Contains(lineOf(out, gone), "dead"),
			fmt.Sprintf("deliveries list: exit %d\n%s%s", code, stdout, stderr)
	})
	if h := fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(h, ",") != "ID,CHANNEL,RECIPIENT,STATE,ATTEMPTS,PROVIDER,UPDATED" {
		t.Fatalf("header %q", h)
	}
	if f := fields(lineOf(out, gone)); len(f) != 7 || f[1] != "webhook" || f[2] != b.receiver.URL+"/gone" || f[3] != "dead" || f[4] != "1" || f[5] != "webhook" {
		t.Fatalf("row of the dead delivery: %q", f)
	}
	if strings.Contains(out, other) || strings.Contains(out, "next cursor") {
		t.Fatalf("acme's list shows globex's delivery or a next page:\n%s", out)
	}

	// Filters, paging, --all and --max.
	code, out, _ := b.cli(t, acmeKey, "deliveries", "list", "--state", "dead")
	if code != 0 || lineOf(out, gone) == "" || lineOf(out, ok) != "" {
		t.Fatalf("--state dead: exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "list", "--limit=1")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "next cursor: ") {
		t.Fatalf("--limit 1: exit %d\n%s", code, out)
	}
	cursor := strings.TrimSpace(strings.SplitN(out, "next cursor: ", 2)[1])
	code, out, _ = b.cli(t, acmeKey, "deliveries", "list", "--limit=1", "--cursor="+cursor)
	if code != 0 || lineOf(out, ok) == "" || lineOf(out, gone) != "" {
		t.Fatalf("the second page (newest first, so the first accepted): exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "list", "--all", "--limit=1")
	if code != 0 || lineOf(out, ok) == "" || lineOf(out, gone) == "" || strings.Contains(out, "next cursor") {
		t.Fatalf("--all: exit %d\n%s", code, out)
	}
	code, out, errOut := b.cli(t, acmeKey, "deliveries", "list", "--all", "--max=1")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(errOut, "stopped at --max 1 rows") {
		t.Fatalf("--all --max 1: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "list", "--all", "--limit=1", "--json")
	var all []struct{ ID, State string }
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all) != 2 || all[0].ID != gone || all[1].ID != ok {
		t.Fatalf("--all --json: exit %d, %v\n%s", code, err, out)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "list", "--json")
	var page struct {
		Items []struct{ ID string } `json:"items"`
		View  struct{ Name string } `json:"view"`
	}
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Items) != 2 || page.View.Name == "" {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}

	// show: the status lines, then the history with the event types in order.
	code, out, errOut = b.cli(t, acmeKey, "deliveries", "show", gone)
	if code != 0 {
		t.Fatalf("show: exit %d\n%s", code, errOut)
	}
	t.Logf("deliveries show:\n%s", out)
	for _, want := range []string{"id:", gone, "state:", "dead", "last error:", "permanent, status 404", "idempotency key:", "order-gone", "history (4 events):"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show lacks %q:\n%s", want, out)
		}
	}
	history := strings.SplitN(out, "history (4 events):\n", 2)[1]
	rows := strings.Split(strings.TrimSpace(history), "\n")
	if h := fields(rows[0]); strings.Join(h, ",") != "VERSION,TIME,EVENT,STATE,ATTEMPT,PROVIDER,STATUS,LATENCY,DETAIL" {
		t.Fatalf("history header %q", h)
	}
	for i, want := range []struct{ event, state string }{
		{"delivery.accepted", "accepted"}, {"delivery.queued", "queued"},
		{"delivery.attempt_started", "processing"}, {"delivery.dead_lettered", "dead"},
	} {
		if f := fields(rows[i+1]); f[0] != fmt.Sprint(i+1) || f[2] != want.event || f[3] != want.state {
			t.Fatalf("history row %d: %q, want %s → %s", i+1, f, want.event, want.state)
		}
	}
	if f := fields(rows[4]); f[4] != "1" || f[5] != "webhook" || f[6] != "404" || !strings.HasSuffix(f[7], "ms") || !strings.HasPrefix(f[8], "permanent: ") {
		t.Fatalf("the dead_lettered row: %q", f)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "show", "--json", gone)
	var shown struct {
		Delivery struct{ ID, State string } `json:"delivery"`
		Events   []struct{ Type string }    `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.Delivery.ID != gone || shown.Delivery.State != "dead" || len(shown.Events) != 4 {
		t.Fatalf("show --json: exit %d, %v\n%s", code, err, out)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "show", "--key", "order-ok")
	if code != 0 || !strings.Contains(out, "request order-ok: notification ") || !strings.Contains(out, "delivery 1 of 1:") ||
		!strings.Contains(out, ok) || !strings.Contains(out, "delivery.delivered") {
		t.Fatalf("show --key: exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "show", "--key=order-ok", "--json")
	var byKey struct {
		Request    struct{ ID string } `json:"request"`
		Deliveries []struct {
			Delivery struct{ ID string } `json:"delivery"`
		} `json:"deliveries"`
	}
	if err := json.Unmarshal([]byte(out), &byKey); code != 0 || err != nil || byKey.Request.ID == "" || len(byKey.Deliveries) != 1 || byKey.Deliveries[0].Delivery.ID != ok {
		t.Fatalf("show --key --json: exit %d, %v\n%s", code, err, out)
	}

	// dlq list: the dead one, not the delivered one. The DLQ view has its own checkpoint: it may
	// apply the dead letter a batch after the status view did.
	eventually(t, 15*time.Second, func() (bool, string) {
		code, out, _ = b.cli(t, acmeKey, "dlq", "list")
		return code == 0 && lineOf(out, gone) != "", fmt.Sprintf("dlq list: exit %d\n%s", code, out)
	})
	t.Logf("dlq list:\n%s", out)
	if f := fields(lineOf(out, gone)); code != 0 || len(f) != 7 || f[3] != "dead" || f[4] != "permanent" || f[5] != "1" || !strings.HasPrefix(f[6], "404 ") {
		t.Fatalf("dlq list: exit %d, row %q\n%s", code, f, out)
	}
	if h := fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(h, ",") != "ID,CHANNEL,RECIPIENT,STATE,FAILURE CLASS,ATTEMPTS,LAST ERROR" || lineOf(out, ok) != "" {
		t.Fatalf("dlq list:\n%s", out)
	}
	code, out, _ = b.cli(t, acmeKey, "dlq", "list", "--json")
	var dlq struct {
		Items []struct {
			ID           string `json:"id"`
			FailureClass string `json:"failure_class"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &dlq); code != 0 || err != nil || len(dlq.Items) != 1 || dlq.Items[0].ID != gone || dlq.Items[0].FailureClass != "permanent" {
		t.Fatalf("dlq list --json: exit %d, %v\n%s", code, err, out)
	}

	// Another tenant's key sees none of it.
	code, out, _ = b.cli(t, globexKey, "deliveries", "list", "--all")
	if code != 0 || strings.Contains(out, ok) || strings.Contains(out, gone) {
		t.Fatalf("globex's list: exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, globexKey, "dlq", "list")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("globex's dlq: exit %d\n%s", code, out)
	}
	code, _, errOut = b.cli(t, globexKey, "deliveries", "show", gone)
	if code != 1 || !strings.Contains(errOut, "404 Not Found") || !strings.Contains(errOut, "no delivery with this id") {
		t.Fatalf("globex shows acme's delivery: exit %d\n%s", code, errOut)
	}
	code, _, errOut = b.cli(t, globexKey, "replay", gone, "--reason", "not mine")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("globex replays acme's delivery: exit %d\n%s", code, errOut)
	}

	// Replay once the receiver takes it: queued by the replay, then delivered.
	b.receiver.gone.Store(false)
	code, out, errOut = b.cli(t, acmeKey, "replay", gone, "--reason", "receiver fixed", "--idempotency-key", "fix-1")
	if code != 0 || !strings.Contains(out, "replayed "+gone+": queued after the decision") || !strings.Contains(out, "state:") {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	b.waitState(t, gone, "delivered")
	// The same key again answers with the first replay and replays nothing.
	code, out, _ = b.cli(t, acmeKey, "replay", gone, "--reason", "receiver fixed", "--idempotency-key", "fix-1")
	if code != 0 || !strings.Contains(out, "replayed "+gone+": queued after the decision") {
		t.Fatalf("the same replay again: exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "show", gone)
	if code != 0 || strings.Count(out, "delivery.replayed") != 1 || !strings.Contains(out, "cycle 1; reason: receiver fixed; by tenant:acme") ||
		fields(lineOf(out, "delivery.delivered"))[6] != "200" {
		t.Fatalf("show after the replay:\n%s", out)
	}

	// An API refusal: a delivered delivery is not replayed (409), exit 1 with the problem.
	code, out, errOut = b.cli(t, acmeKey, "replay", gone, "--reason", "again")
	if code != 1 || out != "" {
		t.Fatalf("replay of a delivered delivery: exit %d, stdout %q", code, out)
	}
	t.Logf("replay of a delivered delivery:\n%s", errOut)
	for _, want := range []string{"the API refused POST /v1/deliveries/" + gone + "/replay", "status:  409 Conflict", "field:   state", "detail:  "} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("the refusal lacks %q:\n%s", want, errOut)
		}
	}
	// A value the API refuses names its field.
	code, _, errOut = b.cli(t, acmeKey, "deliveries", "list", "--state", "lost")
	if code != 1 || !strings.Contains(errOut, "400 Bad Request") || !strings.Contains(errOut, "field:   state") {
		t.Fatalf("--state lost: exit %d\n%s", code, errOut)
	}
	code, _, errOut = b.cli(t, "no-such-key", "deliveries", "list")
	if code != 1 || !strings.Contains(errOut, "401 Unauthorized") {
		t.Fatalf("a wrong key: exit %d\n%s", code, errOut)
	}
}

func TestOperatorReconcileResolvesAnUnknown(t *testing.T) {
	t.Parallel()
	b := setupLedger(t)
	id := b.accept(t, acmeKey, "order-slow", "/slow")
	second := b.accept(t, acmeKey, "order-slow-2", "/slow")
	b.waitState(t, id, "unknown")
	b.waitState(t, second, "unknown")

	var out string
	eventually(t, 15*time.Second, func() (bool, string) {
		code, stdout, stderr := b.cli(t, acmeKey, "dlq", "list", "--state", "unknown")
		out = stdout
		return code == 0 && lineOf(out, id) != "" && lineOf(out, second) != "",
			fmt.Sprintf("dlq list --state unknown: exit %d\n%s%s", code, stdout, stderr)
	})
	if f := fields(lineOf(out, id)); f[3] != "unknown" || f[4] != "unknown" {
		t.Fatalf("dlq row of the unknown: %q", f)
	}

	code, out, errOut := b.cli(t, acmeKey, "reconcile", id, "--outcome", "delivered",
		"--evidence", "receiver log: order 42 received", "--actor", "alice", "--status-code", "200", "--provider-operation-id", "req-7")
	if code != 0 || !strings.Contains(out, "reconciled "+id+": delivered after the decision") {
		t.Fatalf("reconcile: exit %d\n%s%s", code, out, errOut)
	}
	if got := b.state(t, id); got != "delivered" {
		t.Fatalf("after reconcile: %s", got)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "show", id)
	unknown, resolved := lineOf(out, "delivery.outcome_unknown"), lineOf(out, "delivery.reconciled_delivered")
	if code != 0 || !strings.Contains(unknown, "unknown: ") ||
		!strings.Contains(resolved, "evidence: receiver log: order 42 received; by alice; operation req-7") || fields(resolved)[6] != "200" {
		t.Fatalf("show after reconcile:\n%s", out)
	}

	// Once resolved, it is not unknown any more: 409.
	code, _, errOut = b.cli(t, acmeKey, "reconcile", id, "--outcome", "dead", "--evidence", "second thoughts", "--json")
	if code != 1 || !strings.Contains(errOut, "409 Conflict") || !strings.Contains(errOut, "field:   state") {
		t.Fatalf("reconcile of a delivered one: exit %d\n%s", code, errOut)
	}
	code, _, errOut = b.cli(t, acmeKey, "reconcile", id, "--outcome", "maybe", "--evidence", "x")
	if code != 1 || !strings.Contains(errOut, "field:   outcome") {
		t.Fatalf("--outcome maybe: exit %d\n%s", code, errOut)
	}

	// A replay job takes the other unknown one only when asked to, and its history says so. (The
	// view may still list the reconciled one as unknown: the job then skips it.)
	code, out, errOut = b.cli(t, acmeKey, "replays", "create", "--reason", "resend the unknowns", "--wait", "--poll-interval=20ms")
	if f := fields(lineOf(out, "matched:")); code != 0 || f[1] != "0" {
		t.Fatalf("a job without --include-unknown: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = b.cli(t, acmeKey, "replays", "create", "--reason", "resend the unknowns", "--include-unknown", "--wait", "--poll-interval=20ms")
	if f := fields(lineOf(out, "replayed:")); code != 0 || f[1] != "1" || !strings.Contains(out, "include_unknown") {
		t.Fatalf("a job with --include-unknown: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = b.cli(t, acmeKey, "deliveries", "show", second)
	if replayed := lineOf(out, "delivery.replayed"); code != 0 || !strings.Contains(replayed, "reason: resend the unknowns (replay job ") ||
		!strings.Contains(replayed, "; by tenant:acme;") ||
		!strings.HasSuffix(replayed, "; from unknown") {
		t.Fatalf("show of the replayed unknown:\n%s", out)
	}
}

// TestOperatorReplayJobsOnALedger runs `replays` against the real endpoints.
func TestOperatorReplayJobsOnALedger(t *testing.T) {
	t.Parallel()
	b := setupLedger(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, b.accept(t, acmeKey, fmt.Sprintf("job-%d", i), "/gone"))
	}
	for _, id := range ids {
		b.waitState(t, id, "dead")
	}
	eventually(t, 15*time.Second, func() (bool, string) {
		_, out, _ := b.cli(t, acmeKey, "dlq", "list")
		return strings.Count(out, "\n") == 4, "the DLQ view does not list the 3 dead deliveries:\n" + out
	})
	b.receiver.gone.Store(false)

	code, out, errOut := b.cli(t, acmeKey, "replays", "create", "--reason", "receiver fixed", "--channel", "webhook",
		"--failure-class", "permanent", "--wait", "--poll-interval", "20ms")
	if code != 0 {
		t.Fatalf("replays create: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"idempotency key: ", "state:", "done", "matched:", "3", "filters:", "channel=webhook failure_class=permanent"} {
		if !strings.Contains(out, want) {
			t.Fatalf("replays create lacks %q:\n%s", want, out)
		}
	}
	if f := fields(lineOf(out, "replayed:")); len(f) != 2 || f[1] != "3" {
		t.Fatalf("replayed line %q:\n%s", f, out)
	}
	for _, id := range ids {
		b.waitState(t, id, "delivered")
	}
	jobID := fields(lineOf(out, "id:"))[1]
	code, out, _ = b.cli(t, acmeKey, "replays", "show", jobID)
	if code != 0 || !strings.Contains(out, jobID) || !strings.Contains(out, "receiver fixed") {
		t.Fatalf("replays show: exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, acmeKey, "replays", "list", "--json")
	var jobs struct {
		Items []struct{ ID, State string } `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &jobs); code != 0 || err != nil || len(jobs.Items) != 1 || jobs.Items[0].ID != jobID {
		t.Fatalf("replays list --json: exit %d, %v\n%s", code, err, out)
	}
	code, _, errOut = b.cli(t, acmeKey, "replays", "cancel", jobID)
	if code != 1 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "is done") {
		t.Fatalf("replays cancel of a done job: exit %d\n%s", code, errOut)
	}
	code, _, errOut = b.cli(t, globexKey, "replays", "show", jobID)
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("globex shows acme's job: exit %d\n%s", code, errOut)
	}
	code, _, errOut = b.cli(t, acmeKey, "replays", "create", "--reason", "x", "--failure-class", "cosmic")
	if code != 1 || !strings.Contains(errOut, "field:   failure_class") {
		t.Fatalf("--failure-class cosmic: exit %d\n%s", code, errOut)
	}
}

// contractServer plays the replay jobs contract (POST /v1/replays, GET /v1/replays/{id}): the
// job is done after `polls` reads. It records the requests it got.
type contractServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	keys   []string
	reads  int
}

func newContractServer(t *testing.T, polls int) *contractServer {
	s := &contractServer{}
	job := func(state string, replayed int) map[string]any {
		j := map[string]any{"id": "0b6c2a8e-9d1f-4b7e-8a43-2f5e6d7c8b9a", "state": state, "reason": "receiver fixed",
			"include_unknown": true, "filters": map[string]string{"channel": "webhook", "since": "2026-04-01T00:00:00Z"},
			"matched": 4, "replayed": replayed, "skipped": 0, "skips": map[string]int{},
			"created_at": "2026-04-02T10:00:00Z", "updated_at": "2026-04-02T10:00:01Z"}
		switch state {
		case "done":
			j["skipped"], j["skips"], j["finished_at"] = 1, map[string]int{"no longer dead: delivered": 1}, "2026-04-02T10:00:02Z"
		case "cancelled":
			j["skipped"], j["finished_at"] = 2, "2026-04-02T10:00:02Z"
			j["skips"] = map[string]int{"already replayed by job 7e1d0c3b-5a4f-4e2d-9c8b-1a2b3c4d5e6f": 2}
		}
		return j
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+acmeKey {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"about:blank","title":"Unauthorized","status":401,"detail":"send Authorization: Bearer <api key>","field":"Authorization"}`)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/replays":
			var body map[string]any
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			s.bodies, s.keys = append(s.bodies, body), append(s.keys, r.Header.Get("Idempotency-Key"))
			if r.Header.Get("Idempotency-Key") == "used" {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = io.WriteString(w, `{"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used with a different request","field":"Idempotency-Key"}`)
				return
			}
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(job("running", 0))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/replays/0b6c2a8e-9d1f-4b7e-8a43-2f5e6d7c8b9a":
			s.reads++
			if s.reads >= polls {
				_ = json.NewEncoder(w).Encode(job("done", 3))
				return
			}
			_ = json.NewEncoder(w).Encode(job("running", s.reads))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/replays/0b6c2a8e-9d1f-4b7e-8a43-2f5e6d7c8b9a/cancel":
			_ = json.NewEncoder(w).Encode(job("cancelled", 1))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/replays":
			_ = json.NewEncoder(w).Encode(map[string]any{"items": []any{job("done", 3)}})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestReplaysCreateFollowsTheContract checks what `replays create` sends and how it follows the
// job, against a server that plays the contract.
func TestReplaysCreateFollowsTheContract(t *testing.T) {
	t.Parallel()
	s := newContractServer(t, 3)
	api := []string{"--api-url=" + s.URL, "--api-key=" + acmeKey}

	code, out, errOut := runCLI(append([]string{"replays", "create", "--reason", "receiver fixed", "--channel", "webhook",
		"--since", "2026-04-01T02:00:00+02:00", "--include-unknown", "--actor", "ops:ann", "--wait", "--poll-interval", "5ms"}, api...)...)
	if code != 0 {
		t.Fatalf("replays create --wait: exit %d\n%s%s", code, out, errOut)
	}
	s.mu.Lock()
	body, key, reads := s.bodies[0], s.keys[0], s.reads
	s.mu.Unlock()
	want := map[string]any{"reason": "receiver fixed", "channel": "webhook", "since": "2026-04-01T00:00:00Z", "include_unknown": true, "actor": "ops:ann"}
	if fmt.Sprint(body) != fmt.Sprint(want) {
		t.Fatalf("body %v, want %v", body, want)
	}
	if len(key) != 36 || !strings.Contains(out, "idempotency key: "+key) {
		t.Fatalf("generated key %q not printed:\n%s", key, out)
	}
	if reads != 3 {
		t.Fatalf("%d polls, want 3 (until done)", reads)
	}
	for _, want := range []string{"state:", "done", "filters:", "channel=webhook since=2026-04-01T00:00:00Z include_unknown",
		"skips:", "1 no longer dead: delivered", "finished at:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the job lacks %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Fatalf("progress on a stderr that is not a terminal: %q", errOut)
	}

	// Not a terminal, no --wait: the job as created, once, as JSON; the key on stderr.
	code, out, errOut = runCLI(append([]string{"replays", "create", "--reason", "r", "--json", "--idempotency-key", "k-1"}, api...)...)
	var job struct{ ID, State string }
	if err := json.Unmarshal([]byte(out), &job); code != 0 || err != nil || job.State != "running" || strings.Contains(errOut, "idempotency key") {
		t.Fatalf("replays create --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	s.mu.Lock()
	if s.keys[1] != "k-1" || s.reads != 3 {
		t.Fatalf("key %q, %d reads: want k-1 and no polling", s.keys[1], s.reads)
	}
	s.mu.Unlock()

	code, _, errOut = runCLI(append([]string{"replays", "create", "--reason", "r", "--idempotency-key", "used"}, api...)...)
	if code != 1 || !strings.Contains(errOut, "422 Unprocessable Entity") || !strings.Contains(errOut, "field:   Idempotency-Key") {
		t.Fatalf("a reused key: exit %d\n%s", code, errOut)
	}
	code, out, _ = runCLI(append([]string{"replays", "list"}, api...)...)
	if code != 0 || !strings.Contains(out, "0b6c2a8e-9d1f-4b7e-8a43-2f5e6d7c8b9a  done") {
		t.Fatalf("replays list: exit %d\n%s", code, out)
	}
	// A cancelled job, and the deliveries it skipped because another job replayed them first.
	code, out, errOut = runCLI(append([]string{"replays", "cancel", "0b6c2a8e-9d1f-4b7e-8a43-2f5e6d7c8b9a"}, api...)...)
	for _, want := range []string{"cancelled", "2 already replayed by job 7e1d0c3b-5a4f-4e2d-9c8b-1a2b3c4d5e6f", "finished at:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("replays cancel: exit %d, lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	if bar := replayBar(replayJobDoc{ID: "0b6c2a8e-9d1f", State: "running", Matched: 4, Replayed: 1, Skipped: 1}); bar !=
		"replay job 0b6c2a8e [###############...............] 2/4 matched: 1 replayed, 1 skipped (running)" {
		t.Fatalf("bar %q", bar)
	}
}

func TestOperatorUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"deliveries", "list", "--bogus", "--api-key=k"}, 2, "flag provided but not defined: -bogus"},
		{"bad flag value", []string{"dlq", "list", "--limit=many", "--api-key=k"}, 2, "invalid value"},
		{"flag after the operand", []string{"replay", "id", "--bogus"}, 2, "flag provided but not defined"},
		{"no key", []string{"deliveries", "list", "--api-key="}, 2, "no API key: set LEDGER_API_KEY"},
		{"no operand", []string{"deliveries", "show", "--api-key=k"}, 2, "name one delivery ID"},
		{"an ID and --key", []string{"deliveries", "show", "id", "--key=x", "--api-key=k"}, 2, "not both"},
		{"no reason", []string{"replay", "id", "--api-key=k"}, 2, "--reason is required"},
		{"no evidence", []string{"reconcile", "id", "--outcome=dead", "--api-key=k"}, 2, "--evidence is required"},
		{"bad time", []string{"deliveries", "list", "--since=yesterday", "--api-key=k"}, 2, "--since \"yesterday\""},
		{"bad URL", []string{"dlq", "list", "--api-url=127.0.0.1:8080", "--api-key=k"}, 2, "--api-url"},
		{"no subcommand", []string{"replays"}, 2, "name a subcommand: create, show, list"},
		{"unknown subcommand", []string{"dlq", "replay"}, 2, "unknown subcommand \"replay\""},
		{"operands to list", []string{"deliveries", "list", "extra", "--api-key=k"}, 2, "takes no operands"},
		{"help", []string{"replays", "create", "--help"}, 0, "-include-unknown"},
		{"help after an operand", []string{"reconcile", "id", "-h"}, 0, "-provider-operation-id"},
		{"nothing listens", []string{"deliveries", "show", "id", "--api-url=http://127.0.0.1:1", "--api-key=k"}, 1, "connect"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, want %d with %q; stderr:\n%s", c.name, code, c.code, c.want, errOut)
		}
	}
	// Every flag of every operator command is explained.
	for _, cmd := range [][]string{{"deliveries", "list"}, {"deliveries", "show"}, {"dlq", "list"}, {"replay"},
		{"replays", "create"}, {"replays", "show"}, {"replays", "list"}, {"replays", "cancel"}, {"reconcile"}} {
		code, _, help := runCLI(append(cmd, "--help")...)
		if code != 0 || !strings.Contains(help, "DESCRIPTION") || !strings.Contains(help, "-api-key") || !strings.Contains(help, "-json") {
			t.Errorf("%v --help: exit %d\n%s", cmd, code, help)
		}
	}
}

// TestOperatorSettingsFromTheEnvironment: LEDGER_API_URL and LEDGER_API_KEY (not parallel: it
// sets the environment).
func TestOperatorSettingsFromTheEnvironment(t *testing.T) {
	s := newContractServer(t, 1)
	t.Setenv("LEDGER_API_URL", s.URL+"/")
	t.Setenv("LEDGER_API_KEY", acmeKey)
	if code, out, errOut := runCLI("replays", "show", "0b6c2a8e-9d1f-4b7e-8a43-2f5e6d7c8b9a"); code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("replays show with the environment's settings: exit %d\n%s%s", code, out, errOut)
	}
	// A flag wins over the environment.
	code, _, errOut := runCLI("replays", "list", "--api-key", "other-key")
	if code != 1 || !strings.Contains(errOut, "401 Unauthorized") || !strings.Contains(errOut, "field:   Authorization") {
		t.Fatalf("--api-key over LEDGER_API_KEY: exit %d\n%s", code, errOut)
	}
}
