package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi/openapitest"
	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
	"github.com/deliveryledger/ledger/domain"
)

const (
	testSID       = "AC0123456789abcdef0123456789abcdef"
	testAuthToken = "sms-test-auth-token"
	testAPIKey    = "smskey01"
	testAPISecret = "sms-test-api-secret"
	testCBToken   = "sms-test-callback-token-0001"
)

// smsBundle is a ledger serving the SMS channel against a Twilio and a Vonage fake.
type smsBundle struct {
	*e2eBundle
	twilio *twiliofake.Server
	vonage *vonagefake.Server
	// public is the ledger's base URL, the providers' callbacks' base.
	public string
}

var smsEnvSeq atomic.Int64

// freeAddr is a loopback address no one listens on now: the ledger's API must be known before it
// starts, because its callback URL is in the configuration file.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// setupSMS starts both fakes and a ledger whose configuration is channels (YAML under
// "channels:") and providers, with {twilio} and {vonage} replaced by the fakes' URLs and
// {tw_token}, {vg_secret}, {vg_cb} by environment variables holding the secrets.
func setupSMS(t *testing.T, channels, providers string, adjust ...func(*Config)) *smsBundle {
	t.Helper()
	tw, err := twiliofake.Start(twiliofake.Config{Addr: "127.0.0.1:0", AccountSID: testSID, AuthToken: testAuthToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tw.Close)
	vg, err := vonagefake.Start(vonagefake.Config{Addr: "127.0.0.1:0", APIKey: testAPIKey, APISecret: testAPISecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vg.Close)
	// Variables of this test alone (t.Setenv cannot be used in a parallel test).
	n := smsEnvSeq.Add(1)
	vars := map[string]string{}
	for key, value := range map[string]string{"tw_token": testAuthToken, "vg_secret": testAPISecret, "vg_cb": testCBToken} {
		name := fmt.Sprintf("SMS_TEST_%d_%s", n, strings.ToUpper(key))
		if err := os.Setenv(name, value); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Unsetenv(name) })
		vars["{"+key+"}"] = name
	}
	vars["{twilio}"], vars["{vonage}"] = tw.URL(), vg.URL()
	addr := freeAddr(t)
	file := "public_url: http://" + addr + "\nchannels:\n" + channels + "\nproviders:\n" + providers + "\n"
	for k, v := range vars {
		file = strings.ReplaceAll(file, k, v)
	}
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	adjusts := append([]func(*Config){func(c *Config) {
		c.ConfigFile, c.HTTPAddr, c.ReconcileInterval, c.ReconcileUnknownAfter = path, addr, 50*time.Millisecond, 0
	}}, adjust...)
	b := setupE2E(t, "", adjusts...)
	return &smsBundle{e2eBundle: b, twilio: tw, vonage: vg, public: "http://" + addr}
}

// twilioProvider is a Twilio provider block on the fake, with extra settings.
func twilioProvider(name, extra string) string {
	return fmt.Sprintf("  %s: {type: twilio, base_url: '{twilio}', account_sid: %s, auth_token_env: '{tw_token}', from: '+15005550006', timeout: 2s%s}\n",
		name, testSID, extra)
}

// vonageProvider is a Vonage provider block on the fake, with extra settings.
func vonageProvider(name, extra string) string {
	return fmt.Sprintf("  %s: {type: vonage, base_url: '{vonage}', api_key: %s, api_secret_env: '{vg_secret}', callback_token_env: '{vg_cb}', from: Ledger, timeout: 2s%s}\n",
		name, testAPIKey, extra)
}

// sendSMS accepts one SMS and returns its delivery id.
func (b *smsBundle) sendSMS(t *testing.T, key, number, text string) string {
	t.Helper()
	resp, body := b.do(t, "POST", "/v1/deliveries", key, map[string]any{"channel": "sms", "recipient": number,
		"payload": map[string]any{"text": text}})
	var one struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &one); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d %s", resp.StatusCode, body)
	}
	return one.ID
}

// types lists the event types of a history.
func types(events []historyEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, strings.TrimPrefix(e.Type, "delivery."))
	}
	return out
}

// count returns how many of events are of typ.
func count(events []historyEvent, typ domain.EventType) int {
	return len(eventsOfType(events, typ))
}

// TestTwilioReceiptDecidesDelivery: the 201 is recorded as an acceptance by the provider and the
// delivery stays processing until Twilio's signed callbacks say delivered (sent, then
// delivered, each posted twice and recorded once); an undelivered callback with a permanent
// code makes another delivery dead; a forged callback is refused with 403 and records nothing.
func TestTwilioReceiptDecidesDelivery(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [twilio]}", twilioProvider("twilio", ""))
	// No delays: the first callback races the worker recording the acceptance, and waits for it.
	b.twilio.SetBehaviour(twiliofake.Behaviour{DuplicateEvery: 1,
		Final: []twiliofake.FinalRule{{Status: "undelivered", Code: 30005, To: []string{"+15005550009"}}}})

	ok := b.sendSMS(t, "tw-1", "+15005550001", "your code is 1234")
	gone := b.sendSMS(t, "tw-2", "+15005550009", "your code is 5678")
	b.waitState(t, ok, domain.StateDelivered, 15*time.Second)
	b.waitState(t, gone, domain.StateDead, 15*time.Second)

	h := b.history(t, ok)
	want := []string{"accepted", "queued", "attempt_started", "provider_accepted", "receipt_recorded", "receipt_recorded", "delivered"}
	if got := types(h); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("history %v, want %v (each callback posted twice, recorded once)", got, want)
	}
	var acc domain.ProviderAcceptance
	_ = json.Unmarshal(h[3].Data, &acc)
	var res domain.AttemptResult
	_ = json.Unmarshal(h[6].Data, &res)
	if acc.Provider != "twilio" || !strings.HasPrefix(acc.ProviderOperationID, "SM") || res.Source != "receipt" ||
		res.ProviderOperationID != acc.ProviderOperationID || h[3].State != "processing" {
		t.Fatalf("acceptance %+v (state %s), outcome %+v", acc, h[3].State, res)
	}
	if n := len(b.twilio.Callbacks()); n < 4 {
		t.Fatalf("the fake posted %d callbacks, want sent and delivered twice each", n)
	}
	var dead domain.AttemptResult
	for _, e := range eventsOfType(b.history(t, gone), domain.EventDeadLettered) {
		_ = json.Unmarshal(e.Data, &dead)
	}
	if dead.ProviderCode != "30005" || dead.Source != "receipt" || dead.Class != domain.ClassPermanent {
		t.Fatalf("undelivered 30005 ended with %+v, want a permanent failure with Twilio's code, decided by the receipt", dead)
	}

	// A forged callback for the delivered message: refused, nothing recorded.
	before := len(b.history(t, ok))
	form := url.Values{"AccountSid": {testSID}, "MessageSid": {acc.ProviderOperationID}, "MessageStatus": {"undelivered"}, "ErrorCode": {"30003"}}
	for _, sig := range []string{"", twilio.Signature("wrong-token", b.public+"/v1/receipts/twilio", form)} {
		resp := b.postForm(t, "/v1/receipts/twilio", form, sig)
		if resp != http.StatusForbidden {
			t.Fatalf("callback signed %q: %d, want 403", sig, resp)
		}
	}
	// A receipt is recorded before its answer, so a refused one that recorded anything shows now
	// (the signed copy below would be deduplicated against it and hide it).
	if n := len(b.history(t, ok)); n != before {
		t.Fatalf("forged callbacks recorded %d events, want none", n-before)
	}
	// The same callback, signed right, is evidence only: the delivery is delivered.
	if resp := b.postForm(t, "/v1/receipts/twilio", form, twilio.Signature(testAuthToken, b.public+"/v1/receipts/twilio", form)); resp != http.StatusOK {
		t.Fatalf("late signed callback: %d", resp)
	}
	after := b.history(t, ok)
	if len(after) != before+1 || after[len(after)-1].Type != string(domain.EventReceiptRecorded) || after[len(after)-1].State != "delivered" {
		t.Fatalf("after a forged and a late callback: %v", types(after))
	}
	// A callback about a message no delivery has is answered 200 recorded:false, so that it is
	// not sent again (see TestVonageReceiptIsMatchedByMessageID).
	form.Set("MessageSid", "SM00000000000000000000000000000000")
	if a := b.postReceipt(t, "/v1/receipts/twilio", form, twilio.Signature(testAuthToken, b.public+"/v1/receipts/twilio", form)); a.status != http.StatusOK ||
		!strings.Contains(a.body, `"recorded":false`) || strings.Contains(a.body, "delivery_id") {
		t.Fatalf("callback for an unknown message: %d %s, want 200 recorded:false naming no delivery", a.status, a.body)
	}
}

// postForm posts a callback to the ledger and returns the status.
func (b *smsBundle) postForm(t *testing.T, path string, form url.Values, signature string) int {
	t.Helper()
	return b.postReceipt(t, path, form, signature).status
}

// TestVonageOutcomes: accepted and delivered by its receipt (found by its messageId, client-ref
// agreeing),
// throttled then accepted on the retry, an invalid number dead at once.
func TestVonageOutcomes(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [vonage], retry: {schedule: [50ms, 50ms]}}", vonageProvider("vonage", ""))
	b.vonage.SetBehaviour(vonagefake.Behaviour{Status: "1", StatusCalls: 1, First: "accepted",
		NumberStatus: map[string]string{"+15005550003": "3"}})
	throttled := b.sendSMS(t, "vg-1", "+15005550002", "first")
	b.waitState(t, throttled, domain.StateDelivered, 15*time.Second)
	invalid := b.sendSMS(t, "vg-2", "+15005550003", "second")
	b.waitState(t, invalid, domain.StateDead, 15*time.Second)

	h := b.history(t, throttled)
	if count(h, domain.EventRetryScheduled) != 1 || count(h, domain.EventProviderAccepted) != 1 || count(h, domain.EventReceiptRecorded) != 2 {
		t.Fatalf("throttled then accepted: %v, want one retry, one acceptance, two receipts (accepted, delivered)", types(h))
	}
	var retry domain.AttemptResult
	_ = json.Unmarshal(eventsOfType(h, domain.EventRetryScheduled)[0].Data, &retry)
	if retry.Class != domain.ClassTransient || retry.ProviderCode != "1" {
		t.Fatalf("throttled: %+v", retry)
	}
	var dead domain.AttemptResult
	_ = json.Unmarshal(eventsOfType(b.history(t, invalid), domain.EventDeadLettered)[0].Data, &dead)
	if dead.Class != domain.ClassPermanent || dead.ProviderCode != "3" || count(b.history(t, invalid), domain.EventAttemptStarted) != 1 {
		t.Fatalf("invalid number: %+v", dead)
	}
	// A receipt whose URL lacks the token is refused.
	resp, err := openapitest.Client(t).Post(b.base+"/v1/receipts/vonage", "application/x-www-form-urlencoded", strings.NewReader("messageId=x&status=delivered"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("receipt without the token: %d, want 403", resp.StatusCode)
	}
}

// TestFailoverWhenTheFirstProviderIsUnreachable: provider one refuses connections, so the same
// attempt goes to provider two at once and is delivered there, the history naming both.
func TestFailoverWhenTheFirstProviderIsUnreachable(t *testing.T) {
	t.Parallel()
	closed := "http://" + freeAddr(t)
	b := setupSMS(t, "  sms: {providers: [down, vonage]}",
		strings.Replace(twilioProvider("down", ""), "'{twilio}'", closed, 1)+vonageProvider("vonage", ""))
	id := b.sendSMS(t, "fo-1", "+15005550004", "failover")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	h := b.history(t, id)
	if count(h, domain.EventAttemptStarted) != 1 {
		t.Fatalf("history %v: want one attempt", types(h))
	}
	var acc domain.ProviderAcceptance
	_ = json.Unmarshal(eventsOfType(h, domain.EventProviderAccepted)[0].Data, &acc)
	if acc.Provider != "vonage" || len(acc.FailedOver) != 1 || acc.FailedOver[0].Provider != "down" || acc.FailedOver[0].Error == "" {
		t.Fatalf("acceptance %+v, want vonage after down failed over", acc)
	}
	if n := len(b.vonage.Messages()); n != 1 {
		t.Fatalf("vonage got %d messages", n)
	}
	// The failover is in the history before the call it leads to.
	got := strings.Join(types(h), ",")
	if !strings.Contains(got, "attempt_started,failed_over,provider_accepted") {
		t.Fatalf("history %s, want the failover recorded between the start and the acceptance", got)
	}
	var fo domain.FailOver
	_ = json.Unmarshal(eventsOfType(h, domain.EventFailedOver)[0].Data, &fo)
	if fo.From != "down" || fo.To != "vonage" || fo.Error == "" {
		t.Fatalf("failover %+v", fo)
	}
}

// TestUnknownNeverFailsOverAndTheLookupResolvesIt: provider one takes the message but answers
// after the call timed out, so the outcome is unknown; provider two is never called; the
// reconciler finds the message by listing (no sid was received), the provider says delivered,
// and the delivery is delivered with the provider's answer as evidence. Provider one saw one
// send.
func TestUnknownNeverFailsOverAndTheLookupResolvesIt(t *testing.T) {
	t.Parallel()
	const unknownAfter = 700 * time.Millisecond
	b := setupSMS(t, "  sms: {providers: [twilio, vonage]}",
		strings.Replace(twilioProvider("twilio", ""), "timeout: 2s", "timeout: 300ms", 1)+vonageProvider("vonage", ""),
		func(c *Config) { c.ReconcileUnknownAfter = unknownAfter })
	b.twilio.SetBehaviour(twiliofake.Behaviour{CreateDelay: 1500 * time.Millisecond})
	id := b.sendSMS(t, "un-1", "+15005550005", "the unknown one")
	b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	h := b.history(t, id)
	if count(h, domain.EventOutcomeUnknown) != 1 || count(h, domain.EventReconciledDelivered) != 1 || count(h, domain.EventAttemptStarted) != 1 {
		t.Fatalf("history %v, want unknown then reconciled delivered in one attempt", types(h))
	}
	var unknown domain.AttemptResult
	_ = json.Unmarshal(eventsOfType(h, domain.EventOutcomeUnknown)[0].Data, &unknown)
	if unknown.Provider != "twilio" || len(unknown.FailedOver) != 0 {
		t.Fatalf("unknown outcome %+v", unknown)
	}
	// The provider is asked no sooner than ReconcileUnknownAfter: it may not list the message yet.
	if gap := eventsOfType(h, domain.EventReconciledDelivered)[0].RecordedAt.Sub(eventsOfType(h, domain.EventOutcomeUnknown)[0].RecordedAt); gap < unknownAfter {
		t.Errorf("looked up %s after the unknown outcome, want no sooner than %s", gap, unknownAfter)
	}
	var res domain.Resolution
	_ = json.Unmarshal(eventsOfType(h, domain.EventReconciledDelivered)[0].Data, &res)
	if res.Actor != "lookup" || !strings.HasPrefix(res.ProviderOperationID, "SM") || !strings.Contains(res.Evidence, "twilio") {
		t.Fatalf("resolution %+v, want the lookup's answer from twilio", res)
	}
	if n := len(b.twilio.Messages()); n != 1 {
		t.Fatalf("twilio got %d messages, want 1", n)
	}
	if n := len(b.vonage.Messages()); n != 0 {
		t.Fatalf("vonage got %d messages after an unknown outcome, want none", n)
	}
}

// TestReceiptThatNeverComesIsLookedUp: every callback is lost; after receipt_timeout the
// reconciler asks, Twilio says delivered.
func TestReceiptThatNeverComesIsLookedUp(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [twilio]}", twilioProvider("twilio", ", receipt_timeout: 200ms"))
	b.twilio.SetBehaviour(twiliofake.Behaviour{LoseEvery: 1})
	id := b.sendSMS(t, "lost-1", "+15005550007", "no callback")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	h := b.history(t, id)
	var res domain.AttemptResult
	_ = json.Unmarshal(eventsOfType(h, domain.EventDelivered)[0].Data, &res)
	acc := eventsOfType(h, domain.EventProviderAccepted)[0]
	decided := eventsOfType(h, domain.EventDelivered)[0]
	if res.Source != "lookup" || decided.RecordedAt.Sub(acc.RecordedAt) < 200*time.Millisecond {
		t.Fatalf("delivered by %q %s after the acceptance, want by a lookup after receipt_timeout", res.Source,
			decided.RecordedAt.Sub(acc.RecordedAt))
	}
	for _, c := range b.twilio.Callbacks() {
		if !c.Lost {
			t.Fatalf("callback %+v reached the ledger, want every one lost", c)
		}
	}
}

// TestTwoReconcilersRecordOneResolution: two ledgers over one database both run the reconciler
// on the same overdue receipts; each delivery is decided once.
func TestTwoReconcilersRecordOneResolution(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [twilio]}", twilioProvider("twilio", ", receipt_timeout: 100ms"))
	b.twilio.SetBehaviour(twiliofake.Behaviour{LoseEvery: 1, StatusDelay: 300 * time.Millisecond})
	// The second ledger runs only the reconciler, on the first one's database and topology.
	cfg := b.cfg
	cfg.Roles, cfg.HTTPAddr, cfg.MetricsAddr = "reconciler", "127.0.0.1:0", MetricsOff
	ctx, cancel := context.WithCancel(context.Background())
	other, err := Build(ctx, cfg, testLogger())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second reconciler: %v", err)
		}
	})
	var ids []string
	for i := range 6 {
		ids = append(ids, b.sendSMS(t, fmt.Sprintf("two-%d", i), fmt.Sprintf("+1500555010%d", i), "twice looked"))
	}
	for _, id := range ids {
		b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	}
	for _, id := range ids {
		h := b.history(t, id)
		if count(h, domain.EventDelivered) != 1 {
			t.Fatalf("%s: %v", id, types(h))
		}
		// The provider's final word is recorded once, whichever reconciler asked first.
		finals := 0
		for _, e := range eventsOfType(h, domain.EventReceiptRecorded) {
			var r domain.ReceiptData
			_ = json.Unmarshal(e.Data, &r)
			if r.Status == domain.ReceiptDelivered {
				finals++
			}
		}
		if finals != 1 {
			t.Fatalf("%s: %d delivered receipts recorded, want 1: %v", id, finals, types(h))
		}
	}
}

// TestUnknownRetryOnWebhooksResendsWithTheSameID: with unknown: retry, a webhook call that
// times out after the request was written is retried, marked a possible duplicate, and the
// receiver sees the same webhook-id twice.
func TestUnknownRetryOnWebhooksResendsWithTheSameID(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(path, []byte("channels:\n  webhook: {providers: [webhook], unknown: retry}\nproviders:\n  webhook: {type: webhook, timeout: 300ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupE2E(t, "", func(c *Config) { c.ConfigFile, c.WebhookTimeout = path, 300*time.Millisecond; c.explicit = nil })
	b.sink.script(func(r *http.Request, n int) (int, http.Header) {
		if n == 1 {
			time.Sleep(600 * time.Millisecond) // past the timeout, after the request was read
		}
		return http.StatusOK, nil
	})
	a := b.notify(t, "ur-1", b.sink.URL+"/slow")
	id := a.Deliveries[0].ID
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	h := b.history(t, id)
	retries := eventsOfType(h, domain.EventRetryScheduled)
	if len(retries) != 1 || count(h, domain.EventOutcomeUnknown) != 0 {
		t.Fatalf("history %v, want a retry after the unknown outcome", types(h))
	}
	var r domain.AttemptResult
	_ = json.Unmarshal(retries[0].Data, &r)
	if !r.PossibleDuplicate || r.Class != domain.ClassUnknown {
		t.Fatalf("retry %+v, want a possible duplicate of class unknown", r)
	}
	// The sink counts calls by their webhook-id, the delivery id: both carried it.
	if n := b.sink.count(id); n != 2 {
		t.Fatalf("the receiver got %d calls with webhook-id %s, want 2", n, id)
	}
}

// TestProvidersViewAndCircuitMetric: GET /v1/providers lists every provider with its breaker
// state; after the threshold of failures against an unreachable provider its circuit is open
// there and in ledger_provider_circuit_state.
func TestProvidersViewAndCircuitMetric(t *testing.T) {
	t.Parallel()
	closed := "http://" + freeAddr(t)
	b := setupSMS(t, "  sms: {providers: [down, vonage]}",
		strings.Replace(twilioProvider("down", ", breaker: {failures: 2, cooldown: 1m}"), "'{twilio}'", closed, 1)+vonageProvider("vonage", ""))
	for i := range 3 {
		b.waitState(t, b.sendSMS(t, fmt.Sprintf("pv-%d", i), fmt.Sprintf("+1500555020%d", i), "via two"), domain.StateDelivered, 15*time.Second)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := b.do(t, "GET", "/v1/providers", "", nil)
		var v struct {
			Providers []struct {
				Name, Channel, Type, State string
				ErrorRate                  float64 `json:"error_rate"`
			} `json:"providers"`
		}
		if err := json.Unmarshal(body, &v); err != nil || resp.StatusCode != http.StatusOK || len(v.Providers) != 2 {
			t.Fatalf("providers: %d %s", resp.StatusCode, body)
		}
		// Shown to every tenant: a rate, never the counts of everyone's calls.
		if strings.Contains(string(body), `"requests"`) || strings.Contains(string(body), `"failures"`) {
			t.Fatalf("providers view shows call counts: %s", body)
		}
		if v.Providers[0].Name == "down" && v.Providers[0].State == "open" && v.Providers[0].ErrorRate > 0 &&
			v.Providers[1].State == "closed" && v.Providers[1].Channel == "sms" && v.Providers[1].Type == "vonage" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("providers view %s, want down open and vonage closed", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	metrics := b.metricsText(t)
	if !strings.Contains(metrics, `ledger_provider_circuit_state{provider="down"} 2`) ||
		!strings.Contains(metrics, `ledger_provider_circuit_state{provider="vonage"} 0`) {
		t.Fatalf("circuit metric missing or wrong:\n%s", grepLines(metrics, "circuit"))
	}
	// With the circuit open, the next attempt goes straight to vonage, naming down as open.
	id := b.sendSMS(t, "pv-open", "+15005550299", "circuit open")
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	var acc domain.ProviderAcceptance
	_ = json.Unmarshal(eventsOfType(b.history(t, id), domain.EventProviderAccepted)[0].Data, &acc)
	if len(acc.FailedOver) != 1 || acc.FailedOver[0].Error != "circuit open" {
		t.Fatalf("acceptance with the circuit open %+v", acc)
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestAwaitingReceiptIsShown: while Twilio holds the message, the delivery is processing with
// no worker on it, and its status says when the ledger will ask and when it gives up.
func TestAwaitingReceiptIsShown(t *testing.T) {
	t.Parallel()
	b := setupSMS(t, "  sms: {providers: [twilio]}", twilioProvider("twilio", ", receipt_timeout: 1h, receipt_max_wait: 2h"))
	b.twilio.SetBehaviour(twiliofake.Behaviour{Hold: true})
	id := b.sendSMS(t, "aw-1", "+15005550011", "held")
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := b.do(t, "GET", "/v1/deliveries/"+id, "", nil)
		var v struct {
			State           string `json:"state"`
			AwaitingReceipt *struct {
				LookupAt time.Time `json:"lookup_at"`
				GiveUpAt time.Time `json:"give_up_at"`
			} `json:"awaiting_receipt"`
		}
		_ = json.Unmarshal(body, &v)
		if resp.StatusCode == http.StatusOK && v.AwaitingReceipt != nil {
			if v.State != "processing" || v.AwaitingReceipt.GiveUpAt.Sub(v.AwaitingReceipt.LookupAt) != time.Hour {
				t.Fatalf("awaiting delivery %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery never shown awaiting its receipt: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.twilio.Release()
	b.waitState(t, id, domain.StateDelivered, 15*time.Second)
	_, body := b.do(t, "GET", "/v1/deliveries/"+id, "", nil)
	if strings.Contains(string(body), "awaiting_receipt") {
		t.Fatalf("a delivered delivery still awaits: %s", body)
	}
}
