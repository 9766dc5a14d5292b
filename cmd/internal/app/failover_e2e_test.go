package app

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/domain"
)

// Failover and breakers on every channel with two providers (issue 22, point 3): email over two
// SMTP relays and Telegram over two Bot API servers, as SMS had alone before. A provider that
// nothing can reach moves each attempt to the next one at once, its breaker opens after its
// threshold, and comes back through half_open; an unknown outcome never moves on. "Nothing can
// reach" is port 1 of the loopback, which nothing here listens on: a port just freed could be
// taken by a parallel test's listener.

// unreachable is the loopback port nothing listens on.
const unreachable = "1"

// startRelay starts an SMTP fake behaving as b, closed when the test ends, and returns its host
// and port.
func startRelay(t *testing.T, b smtpfake.Behaviour) (*smtpfake.Server, string, string) {
	t.Helper()
	srv, err := smtpfake.Start(smtpfake.Config{Addr: "127.0.0.1:0", Behaviour: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	host, port, err := net.SplitHostPort(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return srv, host, port
}

// setupTwoRelays starts a ledger whose email channel sends through first, then second (each a
// host and port), the first with the given breaker block.
func setupTwoRelays(t *testing.T, firstPort, secondPort, breaker string) *emailBundle {
	t.Helper()
	path := writeLedgerFile(t, fmt.Sprintf(`channels:
  email: {providers: [first, second], %s}
providers:
  first: {type: smtp, host: 127.0.0.1, port: %s, tls: none, from: "Ledger <noreply@ledger.test>", timeout: 2s, breaker: %s}
  second: {type: smtp, host: 127.0.0.1, port: %s, tls: none, from: "Ledger <noreply@ledger.test>", timeout: 2s}
`, emailRetry, firstPort, breaker, secondPort))
	return &emailBundle{e2eBundle: setupE2E(t, "", func(c *Config) { c.ConfigFile = path })}
}

// providerStates reads GET /v1/providers as name → state.
func (b *e2eBundle) providerStates(t *testing.T) map[string]string {
	t.Helper()
	resp, body := b.do(t, "GET", "/v1/providers", "", nil)
	var v struct {
		Providers []struct{ Name, State string } `json:"providers"`
	}
	if err := json.Unmarshal(body, &v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("providers: %d %s", resp.StatusCode, body)
	}
	states := map[string]string{}
	for _, p := range v.Providers {
		states[p.Name] = p.State
	}
	return states
}

// waitProviderState polls GET /v1/providers until provider shows state (workers report their
// breakers every healthInterval).
func (b *e2eBundle) waitProviderState(t *testing.T, provider, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		states := b.providerStates(t)
		if states[provider] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/providers shows %s %q after %s, want %q (all: %v)", provider, states[provider], within, state, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkFailedOver checks a delivered history: one attempt, the failover from `from` to `to`
// recorded between the start and the delivery, and the delivery by `to` naming `from` as tried.
func checkFailedOver(t *testing.T, h []historyEvent, from, to, reason string) {
	t.Helper()
	got := strings.Join(types(h), ",")
	if count(h, domain.EventAttemptStarted) != 1 || !strings.Contains(got, "attempt_started,failed_over,delivered") {
		t.Fatalf("history %s, want one attempt that failed over, then was delivered", got)
	}
	var fo domain.FailOver
	if err := json.Unmarshal(eventsOfType(h, domain.EventFailedOver)[0].Data, &fo); err != nil {
		t.Fatal(err)
	}
	if fo.From != from || fo.To != to || !strings.Contains(fo.Error, reason) {
		t.Fatalf("failover %+v, want from %s to %s because %q", fo, from, to, reason)
	}
	done := attemptResults(t, h, domain.EventDelivered)[0]
	if done.Provider != to || len(done.FailedOver) != 1 || done.FailedOver[0].Provider != from {
		t.Fatalf("delivered %+v, want by %s after %s failed over", done, to, from)
	}
}

// TestEmailFailsOverToTheSecondRelay: the first relay refuses connections, so each delivery is
// delivered by the second in the same attempt, the history naming both; after the first's
// breaker threshold (2) GET /v1/providers shows it open, and the next attempt passes it over as
// "circuit open" without calling it.
func TestEmailFailsOverToTheSecondRelay(t *testing.T) {
	t.Parallel()
	second, _, port := startRelay(t, smtpfake.Behaviour{})
	b := setupTwoRelays(t, unreachable, port, "{failures: 2, cooldown: 1m}")
	for i := range 2 {
		id := b.sendEmail(t, fmt.Sprintf("fo-mail-%d", i), "ann@example.com")
		b.waitState(t, id, domain.StateDelivered, 15*time.Second)
		checkFailedOver(t, b.history(t, id), "first", "second", "connection refused")
	}
	b.waitProviderState(t, "first", "open", 10*time.Second)
	if s := b.providerStates(t)["second"]; s != "closed" {
		t.Fatalf("second relay shows %q, want closed", s)
	}
	id := b.sendEmail(t, "fo-mail-open", "ann@example.com")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	done := attemptResults(t, b.history(t, id), domain.EventDelivered)[0]
	if done.Provider != "second" || len(done.FailedOver) != 1 || done.FailedOver[0].Error != "circuit open" {
		t.Fatalf("delivered with the circuit open as %+v, want by second, first passed over as circuit open", done)
	}
	if n := len(second.Messages()); n != 3 {
		t.Fatalf("the second relay got %d messages, want 3", n)
	}
}

// TestEmailBreakerClosesWhenTheRelayComesBack: the first relay refuses service (421 at MAIL
// FROM, before any recipient: nothing can be queued) for two transactions, which fail over to
// the second and open its circuit; after the cooldown GET /v1/providers shows it half_open, the
// next delivery is its probe, delivered by it without a failover, and it shows closed.
func TestEmailBreakerClosesWhenTheRelayComesBack(t *testing.T) {
	t.Parallel()
	first, _, firstPort := startRelay(t, smtpfake.Behaviour{FailAt: smtpfake.StageMail, Code: 421, EnhancedCode: "4.3.2",
		Text: "Service shutting down", Times: 2})
	second, _, secondPort := startRelay(t, smtpfake.Behaviour{})
	// The cooldown is longer than the workers' report interval, so that open is seen before
	// half_open.
	b := setupTwoRelays(t, firstPort, secondPort, "{failures: 2, cooldown: 3s}")
	for i := range 2 {
		id := b.sendEmail(t, fmt.Sprintf("back-%d", i), "ann@example.com")
		b.waitState(t, id, domain.StateDelivered, 15*time.Second)
		checkFailedOver(t, b.history(t, id), "first", "second", "421")
	}
	b.waitProviderState(t, "first", "open", 10*time.Second)
	b.waitProviderState(t, "first", "half_open", 10*time.Second)

	id := b.sendEmail(t, "back-probe", "ann@example.com")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	h := b.history(t, id)
	done := attemptResults(t, h, domain.EventDelivered)[0]
	if done.Provider != "first" || len(done.FailedOver) != 0 || count(h, domain.EventFailedOver) != 0 {
		t.Fatalf("the probe was delivered as %+v (%v), want by first, without a failover", done, types(h))
	}
	b.waitProviderState(t, "first", "closed", 10*time.Second)
	if f, s := len(first.Messages()), len(second.Messages()); f != 1 || s != 2 {
		t.Fatalf("the relays got %d and %d messages, want 1 (the probe) and 2", f, s)
	}
}

// TestEmailUnknownNeverFailsOver: the first relay reads the whole message and drops the
// connection before its reply, so it may have queued the message: the delivery is unknown, and
// the second relay is never called, however long one waits.
func TestEmailUnknownNeverFailsOver(t *testing.T) {
	t.Parallel()
	first, _, firstPort := startRelay(t, smtpfake.Behaviour{DropAfterData: true})
	second, _, secondPort := startRelay(t, smtpfake.Behaviour{})
	b := setupTwoRelays(t, firstPort, secondPort, "{failures: 2, cooldown: 1m}")
	id := b.sendEmail(t, "drop-fo", "ann@example.com")
	b.waitState(t, id, domain.StateUnknown, 15*time.Second)
	// Several times the channel's whole retry schedule (150 ms): a failover or a retry would
	// have come within it.
	time.Sleep(time.Second)
	h := b.history(t, id)
	if got, want := strings.Join(types(h), ","), "accepted,queued,attempt_started,outcome_unknown"; got != want {
		t.Fatalf("history %s, want %s", got, want)
	}
	unknown := attemptResults(t, h, domain.EventOutcomeUnknown)[0]
	if unknown.Provider != "first" || len(unknown.FailedOver) != 0 {
		t.Fatalf("unknown outcome %+v, want first's, nothing failed over", unknown)
	}
	if c := second.Counts(); c.Sessions != 0 {
		t.Fatalf("the second relay was asked %+v after an unknown outcome, want nothing", c)
	}
	if c := first.Counts(); c.Data != 1 {
		t.Fatalf("the first relay was asked %+v, want one DATA", c)
	}
}

var failoverEnvSeq atomic.Int64

// setupTwoBotServers starts a ledger whose telegram channel sends through two Bot API servers
// of one bot, first then second, the first with the given breaker block, and returns it.
func setupTwoBotServers(t *testing.T, token, first, second, breaker string) *e2eBundle {
	t.Helper()
	env := fmt.Sprintf("FAILOVER_E2E_%d_TOKEN", failoverEnvSeq.Add(1))
	if err := os.Setenv(env, token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(env) })
	path := writeLedgerFile(t, fmt.Sprintf(`channels:
  telegram: {providers: [first, second], retry: {schedule: [50ms, 50ms, 50ms]}}
providers:
  first: {type: telegram, base_url: "%s", token_env: %s, timeout: 2s, breaker: %s}
  second: {type: telegram, base_url: %s, token_env: %s, timeout: 2s}
`, first, env, breaker, second, env))
	return setupE2E(t, "", func(c *Config) { c.ConfigFile = path })
}

// sendTelegram accepts one message to chat and returns its delivery id.
func (b *e2eBundle) sendTelegram(t *testing.T, key, chat string) string {
	t.Helper()
	resp, id := b.acceptWith(t, key, map[string]any{"channel": "telegram", "recipient": chat, "payload": map[string]any{"text": "failover"}})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d", resp.StatusCode)
	}
	return id
}

// startBotServer starts a Bot API fake for token behaving as b, closed when the test ends.
func startBotServer(t *testing.T, token string, b telegramfake.Behaviour) *telegramfake.Server {
	t.Helper()
	tg, err := telegramfake.Start(telegramfake.Config{Addr: "127.0.0.1:0", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	tg.SetBehaviour(b)
	return tg
}

// TestTelegramBreakerClosesWhenTheServerComesBack: the first Bot API server answers 500 twice.
// A 500 is an answer, not a call that never arrived, so those attempts are retried, not failed
// over; but each counts against the server, its circuit opens after two, and the next attempt
// passes it over ("circuit open") to the second. After the cooldown GET /v1/providers shows it
// half_open; the next message is its probe, sent by it, and it shows closed.
func TestTelegramBreakerClosesWhenTheServerComesBack(t *testing.T) {
	t.Parallel()
	const token = "42:e2e-breaker-token"
	first := startBotServer(t, token, telegramfake.Behaviour{ServerErrors: 2})
	second := startBotServer(t, token, telegramfake.Behaviour{})
	b := setupTwoBotServers(t, token, first.URL(), second.URL(), "{failures: 2, cooldown: 3s}")
	id := b.sendTelegram(t, "brk-tg-0", "111")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	h := b.history(t, id)
	if n := count(h, domain.EventRetryScheduled); n != 2 || count(h, domain.EventFailedOver) != 0 {
		t.Fatalf("history %v, want two retries after the 500s and no failover", types(h))
	}
	done := attemptResults(t, h, domain.EventDelivered)[0]
	if done.Provider != "second" || len(done.FailedOver) != 1 || done.FailedOver[0].Error != "circuit open" {
		t.Fatalf("delivered as %+v, want by second with first's circuit open", done)
	}
	b.waitProviderState(t, "first", "open", 10*time.Second)
	b.waitProviderState(t, "first", "half_open", 10*time.Second)

	probe := b.sendTelegram(t, "brk-tg-probe", "222")
	b.waitState(t, probe, domain.StateDelivered, 15*time.Second)
	if done := attemptResults(t, b.history(t, probe), domain.EventDelivered)[0]; done.Provider != "first" || len(done.FailedOver) != 0 {
		t.Fatalf("the probe was delivered as %+v, want by first, nothing passed over", done)
	}
	b.waitProviderState(t, "first", "closed", 10*time.Second)
	if f, s := len(first.Messages()), len(second.Messages()); f != 1 || s != 1 {
		t.Fatalf("the servers sent %d and %d messages, want 1 (the probe) and 1", f, s)
	}
}

// TestTelegramFailsOverToTheSecondBotAPI: the first Bot API server refuses connections, so each
// message is sent through the second in the same attempt, the history naming both; after the
// first's breaker threshold GET /v1/providers shows it open.
func TestTelegramFailsOverToTheSecondBotAPI(t *testing.T) {
	t.Parallel()
	const token = "42:e2e-failover-token"
	tg := startBotServer(t, token, telegramfake.Behaviour{})
	b := setupTwoBotServers(t, token, "http://127.0.0.1:"+unreachable, tg.URL(), "{failures: 2, cooldown: 1m}")
	for i, chat := range []string{"111", "222"} {
		id := b.sendTelegram(t, fmt.Sprintf("fo-tg-%d", i), chat)
		b.waitState(t, id, domain.StateDelivered, 15*time.Second)
		checkFailedOver(t, b.history(t, id), "first", "second", "connection refused")
	}
	b.waitProviderState(t, "first", "open", 10*time.Second)
	if s := b.providerStates(t)["second"]; s != "closed" {
		t.Fatalf("second shows %q, want closed", s)
	}
	if n := len(tg.Messages()); n != 2 {
		t.Fatalf("the second Bot API server sent %d messages, want 2", n)
	}
}
