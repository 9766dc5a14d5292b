package app

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/domain"
)

// A channel's retry block replaces the server's policy for that channel, the delay tiers its
// queues hold messages in included (issue 14, build 2). The server's own policy in these tests
// is far from the channels', so that a delay that came from the wrong one shows in the recorded
// times.

// globalTier is the server's retry policy here (base and cap alike, so its one tier): long
// next to the channels' own schedules, short enough for the control to wait it out.
const globalTier = 2 * time.Second

// writeLedgerFile writes a configuration file for the test and returns its path.
func writeLedgerFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// attemptStarts returns when each attempt of a delivery started, as its history recorded it.
func attemptStarts(events []historyEvent) []time.Time {
	var out []time.Time
	for _, e := range eventsOfType(events, domain.EventAttemptStarted) {
		out = append(out, e.RecordedAt)
	}
	return out
}

// acceptWith accepts one delivery with more request fields and returns the answer.
func (b *e2eBundle) acceptWith(t *testing.T, key string, fields map[string]any) (*http.Response, string) {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries", key, fields)
	var one struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &one)
	if resp.StatusCode == http.StatusAccepted && one.ID == "" {
		t.Fatalf("accept answered %s without an id", body)
	}
	return resp, one.ID
}

// TestChannelScheduleUsesItsOwnTiers: the webhook channel's schedule [20ms, 40ms] gives its
// attempts at about those gaps although the server's policy waits 2 s: were the channel's retries
// held in the server's tiers, each gap would be at least 2 s. The same ledger's email channel,
// without a retry block, is the control: its retry does wait the server's tier.
func TestChannelScheduleUsesItsOwnTiers(t *testing.T) {
	t.Parallel()
	smtp, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0",
		Behaviour: smtpfake.Behaviour{FailAt: smtpfake.StageRcpt, Code: 451, EnhancedCode: "4.7.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { smtp.Close() })
	host, port, err := net.SplitHostPort(smtp.Addr())
	if err != nil {
		t.Fatal(err)
	}
	path := writeLedgerFile(t, fmt.Sprintf(`channels:
  webhook: {providers: [hook], retry: {schedule: [20ms, 40ms]}}
  email:   {providers: [relay]}
providers:
  hook:  {type: webhook, timeout: 2s}
  relay: {type: smtp, host: %s, port: %s, tls: none, from: "Ledger <noreply@ledger.test>", timeout: 2s}
`, host, port))
	b := setupE2E(t, "", func(c *Config) {
		c.ConfigFile = path
		c.RetryBase, c.RetryCap = globalTier, globalTier
	})
	b.sink.script(func(*http.Request, int) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	hook := b.accept(t, "tiers-hook", b.sink.URL+"/down", domain.PriorityNormal)
	resp, mail := b.acceptWith(t, "tiers-mail", map[string]any{"channel": "email", "recipient": "ann@example.com",
		"payload": map[string]any{"subject": "s", "text": "t"}, "max_attempts": 2})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept the email: %d", resp.StatusCode)
	}
	b.waitState(t, hook, domain.StateDead, 15*time.Second)
	b.waitState(t, mail, domain.StateDead, 15*time.Second)

	starts := attemptStarts(b.history(t, hook))
	if len(starts) != 3 {
		t.Fatalf("the webhook had %d attempts, want 3 (a schedule of 2 delays)", len(starts))
	}
	for i, delay := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond} {
		// Well under the server's tier: a retry held there would take at least 2 s.
		if gap := starts[i+1].Sub(starts[i]); gap < delay || gap >= globalTier/2 {
			t.Errorf("webhook attempt %d started %s after attempt %d, want at least its channel's %s and under %s (the server's tier is %s)",
				i+2, gap, i+1, delay, globalTier/2, globalTier)
		}
	}
	t.Logf("webhook attempts at +%s, +%s", starts[1].Sub(starts[0]), starts[2].Sub(starts[0]))
	control := attemptStarts(b.history(t, mail))
	if len(control) != 2 {
		t.Fatalf("the email had %d attempts, want 2", len(control))
	}
	if gap := control[1].Sub(control[0]); gap < globalTier-50*time.Millisecond {
		t.Errorf("the email's retry came %s after its first attempt, want the server's tier (%s): the control shows nothing", gap, globalTier)
	} else {
		t.Logf("the email's retry, on the server's policy, came %s after its first attempt", gap)
	}
}

// TestRequestMaxAttemptsWithinTheChannelsPolicy: a request's max_attempts lowers its channel's
// own policy (a schedule of 3 delays, 4 attempts), and the channel's policy, not the server's
// (3 attempts), bounds what a request may ask.
func TestRequestMaxAttemptsWithinTheChannelsPolicy(t *testing.T) {
	t.Parallel()
	path := writeLedgerFile(t, "channels:\n  webhook: {providers: [hook], retry: {schedule: [20ms, 40ms, 80ms]}}\n"+
		"providers:\n  hook: {type: webhook, timeout: 2s}\n")
	b := setupE2E(t, "", func(c *Config) { c.ConfigFile = path }) // the server's maximum stays 3
	b.sink.script(func(*http.Request, int) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	ask := func(key string, maxAttempts int) (*http.Response, string) {
		return b.acceptWith(t, key, map[string]any{"channel": "webhook", "recipient": b.sink.URL + "/" + key,
			"payload": map[string]any{"k": key}, "max_attempts": maxAttempts})
	}
	if resp, _ := ask("max-5", 5); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("max_attempts 5 on a channel allowing 4: %d, want 400", resp.StatusCode)
	}
	for _, want := range []int{2, 4} {
		resp, id := ask(fmt.Sprintf("max-%d", want), want)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("max_attempts %d: %d, want 202", want, resp.StatusCode)
		}
		st := b.waitState(t, id, domain.StateDead, 15*time.Second)
		if n := b.sink.count(id); n != want || st.Attempts != want {
			t.Errorf("max_attempts %d: %d calls, %d attempts recorded", want, n, st.Attempts)
		}
		dead := attemptResults(t, b.history(t, id), domain.EventDeadLettered)
		if len(dead) != 1 || !dead[0].Exhausted || dead[0].Attempt != want {
			t.Errorf("max_attempts %d: dead with %+v, want exhausted at attempt %d", want, dead, want)
		}
	}
}

// TestChannelQuadraticRetryThroughTheBroker: a channel's `strategy: quadratic` declares the delay
// tiers of its squares and holds its retries in them: base 50ms gives 50ms, 200ms and 450ms
// between four attempts, then dead, while the server's policy would wait 2 s each time.
func TestChannelQuadraticRetryThroughTheBroker(t *testing.T) {
	t.Parallel()
	path := writeLedgerFile(t, `channels:
  webhook: {providers: [hook], retry: {strategy: quadratic, base: 50ms, max_attempts: 4}}
providers:
  hook: {type: webhook, timeout: 2s}
`)
	b := setupE2E(t, "", func(c *Config) {
		c.ConfigFile = path
		c.RetryBase, c.RetryCap = globalTier, globalTier
	})
	b.sink.script(func(*http.Request, int) (int, http.Header) { return http.StatusServiceUnavailable, nil })
	id := b.accept(t, "quadratic", b.sink.URL+"/down", domain.PriorityNormal)
	b.waitState(t, id, domain.StateDead, 15*time.Second)
	starts := attemptStarts(b.history(t, id))
	if len(starts) != 4 {
		t.Fatalf("%d attempts, want 4", len(starts))
	}
	// The server's policy has one tier, 2 s, into which every one of its delays rounds up: a gap
	// under it shows the channel's own tiers carried the retry, whatever the machine's load adds.
	for i, delay := range []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 450 * time.Millisecond} {
		if gap := starts[i+1].Sub(starts[i]); gap < delay || gap >= globalTier {
			t.Errorf("attempt %d started %s after attempt %d, want at least %s and under the server's tier of %s",
				i+2, gap, i+1, delay, globalTier)
		}
	}
}
