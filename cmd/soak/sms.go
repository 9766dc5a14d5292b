package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/sms"
)

// Settings of the SMS share. The credentials are the fakes' (nobody's account). A provider's
// acceptance waits receiptTimeout for a receipt before the reconciler asks, and receiptMaxWait
// before it gives up (the outcome is then unknown); the settle phase waits longer than that.
const (
	smsAccountSID     = "AC0123456789abcdef0123456789abcdef"
	smsAuthToken      = "soak-twilio-auth-token"
	smsAPIKey         = "soakkey1"
	smsAPISecret      = "soak-vonage-api-secret"
	smsCallbackToken  = "soak-vonage-callback-token"
	smsFrom           = "+15005550006"
	smsTimeout        = 2 * time.Second
	receiptTimeout    = 2 * time.Second
	receiptMaxWait    = 20 * time.Second
	reconcileInterval = 500 * time.Millisecond
	breakerFailures   = 3
	breakerCooldown   = 2 * time.Second

	// The providers' names in the configuration file, the history and the receipts' paths.
	twilioProvider = "twilio"
	vonageProvider = "vonage"
	// The environment variables the configuration file names for the secrets.
	twilioTokenVar    = "TWILIO_AUTH_TOKEN"
	vonageSecretVar   = "VONAGE_API_SECRET"
	vonageCallbackVar = "VONAGE_CALLBACK_TOKEN"

	// fakeUp bounds the wait for a fake to listen.
	fakeUp = 30 * time.Second
	// listToKill is the pause between reading the Twilio fake's list and killing it.
	listToKill = 200 * time.Millisecond
)

// smsSchedule is the sms channel's retry schedule: five attempts, all within the run.
var smsSchedule = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

// smsFate is what the fakes do with the messages to a number.
type smsFate int

const (
	// smsDelivered: the message is delivered (the fakes' default).
	smsDelivered smsFate = iota
	// smsPermanent: the message ends undelivered with a code that no resend mends; the
	// delivery dies after one attempt.
	smsPermanent
	// smsRetryable: the message ends undelivered with a code a resend may mend; the delivery is
	// retried until its attempts run out, then dies.
	smsRetryable
)

// The numbers whose messages do not arrive: small sets, because the fakes take them as flags.
var (
	permanentNumbers = []string{"+15005559001", "+15005559002", "+15005559003", "+15005559004"}
	retryableNumbers = []string{"+15005559101", "+15005559102"}
)

// smsPlan decides which deliveries are SMS and to which number: the i-th delivery is an SMS when
// (i+1)·share passes a whole number, so that a run has about n·share of them spread evenly; of
// the SMS, one in twenty goes to a permanent number and one in twenty to a retryable one, the
// rest each to a number of its own, because the channel lets one number take one SMS a second
// (burst 3).
type smsPlan struct{ share float64 }

// ordinal returns the SMS ordinal of the i-th delivery (both from 0), and whether it is an SMS.
func (p smsPlan) ordinal(i int) (int, bool) {
	lo, hi := int(float64(i)*p.share), int(float64(i+1)*p.share)
	return lo, hi > lo
}

// number is the recipient of the j-th SMS.
func (smsPlan) number(j int) string {
	switch j % 20 {
	case 3:
		return permanentNumbers[j/20%len(permanentNumbers)]
	case 11:
		return retryableNumbers[j/20%len(retryableNumbers)]
	}
	return fmt.Sprintf("+1500555%04d", 1000+j%8000)
}

// smsFateOf is what the fakes do with messages to number.
func smsFateOf(number string) smsFate {
	switch {
	case slices.Contains(permanentNumbers, number):
		return smsPermanent
	case slices.Contains(retryableNumbers, number):
		return smsRetryable
	}
	return smsDelivered
}

// smsText is the text of the SMS sent under an Idempotency-Key: the fakes' logs name messages by
// their text only (Twilio's has no reference of ours), so the key is in it.
func smsText(key string) string { return "soak " + key }

// keyOfText is the Idempotency-Key an SMS text names.
func keyOfText(text string) (string, bool) { return strings.CutPrefix(text, "soak ") }

// smsFakes are the SMS providers of the run, one `ledger sink` process each so that killing one
// is a real SIGKILL: a Twilio fake, first in the failover order, and a Vonage fake.
//
// The Twilio fake is killed for good mid-run and not restarted: a restarted fake would have
// forgotten its messages, and a lookup by sid would then answer not found, which the ledger
// rightly reads as never sent and retries, sending a second SMS it cannot know about. Dead, it
// answers nothing: new attempts fail over to Vonage (connection refused before the request was
// written), and the messages it had taken without a receipt end unknown after receipt_max_wait.
type smsFakes struct {
	twilio, vonage         *process
	twilioAddr, vonageAddr string
	// killedAt is when the Twilio fake was killed (zero before); listed are the message sids
	// its Messages list answered just before.
	killedAt time.Time
	listed   []string
}

// startSMSFakes starts both fakes on free loopback ports and waits until they listen.
func startSMSFakes(ctx context.Context, binary, dir string) (*smsFakes, error) {
	f := &smsFakes{}
	var err error
	if f.twilioAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	if f.vonageAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	env := fakeEnv()
	// Each sink also runs a webhook receiver, which nothing calls: on a port of its own.
	base := []string{"sink", "--addr", "127.0.0.1:0", "--smtp-addr", "off", "--telegram-addr", "off"}
	f.twilio = newProcess(binary, dir, twilioProvider, append(slices.Clone(base), "--vonage-addr", "off",
		"--twilio-addr", f.twilioAddr, "--twilio-account-sid", smsAccountSID, "--twilio-auth-token", smsAuthToken,
		"--twilio-behaviour", twilioBehaviour()), env)
	f.vonage = newProcess(binary, dir, vonageProvider, append(slices.Clone(base), "--twilio-addr", "off",
		"--vonage-addr", f.vonageAddr, "--vonage-api-key", smsAPIKey, "--vonage-api-secret", smsAPISecret,
		"--vonage-behaviour", vonageBehaviour()), env)
	for _, p := range f.procs() {
		go p.supervise(context.WithoutCancel(ctx))
	}
	for _, addr := range []string{f.twilioAddr, f.vonageAddr} {
		if err := waitListening(ctx, addr); err != nil {
			return f, err
		}
	}
	return f, nil
}

// procs are the fakes' processes.
func (f *smsFakes) procs() []*process { return []*process{f.twilio, f.vonage} }

// twilioBehaviour: the Twilio fake loses every fourth status callback (the reconciler's lookup
// then decides), posts every fifth twice, delays each, and ends the permanent numbers' messages
// undelivered with 30005 (unknown handset) and the retryable ones' with 30003 (unreachable
// handset).
func twilioBehaviour() string {
	return "undelivered=30005@" + strings.Join(permanentNumbers, ",") + "; undelivered=30003@" + strings.Join(retryableNumbers, ",") +
		"; status-delay=200ms; callback-delay=300ms; lose-callbacks=4; duplicate-callbacks=5"
}

// vonageBehaviour: the Vonage fake loses its first three receipts (it has no status lookup, so
// those deliveries end unknown after receipt_max_wait), posts the next three twice, delays each,
// and fails the same numbers as the Twilio fake: err-code 3 (absent subscriber, permanent) and 2
// (absent subscriber, temporary).
func vonageBehaviour() string {
	var final []string
	for _, n := range permanentNumbers {
		final = append(final, strings.TrimPrefix(n, "+")+":failed:3")
	}
	for _, n := range retryableNumbers {
		final = append(final, strings.TrimPrefix(n, "+")+":failed:2")
	}
	return "dlr=" + strings.Join(final, ",") + "; dlr-delay=300ms; dlr-lose=3; dlr-twice=3"
}

// fakeEnv is the environment of the fakes: the caller's, without LEDGER_ settings.
func fakeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEDGER_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitListening waits until addr accepts TCP connections.
func waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(fakeUp)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nothing listens on %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeConfig writes the ledger's configuration file: the webhook channel as the soak has always
// run it, and the sms channel over the Twilio fake, then the Vonage fake. The file's webhook
// timeout is the soak's; LEDGER_WEBHOOK_TIMEOUT, set explicitly, would win over it anyway. Its
// retention archives partitions into archiveDir and expires payloads during the run.
func writeConfig(path, api, archiveDir string, f *smsFakes) error {
	schedule := make([]string, len(smsSchedule))
	for i, d := range smsSchedule {
		schedule[i] = d.String()
	}
	file := fmt.Sprintf(`# Written by the soak for one run.
public_url: http://%s
retention: {keep: %s, payloads: %s, partition: %s, archive_dir: %q}
channels:
  webhook: {providers: [webhook]}
  %s: {providers: [%s, %s], retry: {schedule: [%s]}}
categories:
  %s: {}
  account: {required: true}
providers:
  webhook: {type: webhook, timeout: %s}
  %s: {type: twilio, base_url: "http://%s", account_sid: %s, auth_token_env: %s, from: "%s", timeout: %s, receipt_timeout: %s, receipt_max_wait: %s, breaker: {failures: %d, cooldown: %s}}
  %s: {type: vonage, base_url: "http://%s", api_key: %s, api_secret_env: %s, callback_token_env: %s, from: Ledger, timeout: %s, receipt_timeout: %s, receipt_max_wait: %s}
`, api, retentionKeep, retentionPayloads, retentionPartition, archiveDir, sms.Name, twilioProvider, vonageProvider, strings.Join(schedule, ", "), soakCategory, webhookTimeout,
		twilioProvider, f.twilioAddr, smsAccountSID, twilioTokenVar, smsFrom, smsTimeout, receiptTimeout, receiptMaxWait,
		breakerFailures, breakerCooldown,
		vonageProvider, f.vonageAddr, smsAPIKey, vonageSecretVar, vonageCallbackVar, smsTimeout, receiptTimeout, receiptMaxWait)
	return os.WriteFile(path, []byte(file), 0o600)
}

// checkConfig runs `ledger config check` on the file and returns what it says.
func checkConfig(ctx context.Context, ledger, path string, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, ledger, "config", "check", path)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return "", fmt.Errorf("ledger config check %s: %w: %s", path, err, text)
	}
	return text, nil
}

// killTwilio reads the Twilio fake's Messages list, then kills it for good. It reports false
// when the fake was not running.
func (f *smsFakes) killTwilio(ctx context.Context) (bool, error) {
	listed, listErr := listTwilio(ctx, f.twilioAddr)
	// The fake lists a message a moment before it logs it: let the last ones listed reach the
	// log before the kill cuts it.
	time.Sleep(listToKill)
	if !f.twilio.killForGood() {
		return false, listErr
	}
	f.killedAt, f.listed = time.Now(), listed
	return true, listErr
}

// listTwilio reads the sid of every message the Twilio fake holds, page by page. Messages created
// meanwhile may shift a page: the list is a subset of what the fake took, never more.
func listTwilio(ctx context.Context, addr string) ([]string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	next := "/2010-04-01/Accounts/" + smsAccountSID + "/Messages.json?PageSize=1000"
	var sids []string
	for pages := 0; next != "" && pages < 100; pages++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+next, nil)
		if err != nil {
			return sids, err
		}
		req.SetBasicAuth(smsAccountSID, smsAuthToken)
		resp, err := client.Do(req)
		if err != nil {
			return sids, fmt.Errorf("list the Twilio fake's messages: %w", err)
		}
		var page struct {
			Messages []struct {
				SID string `json:"sid"`
			} `json:"messages"`
			NextPageURI *string `json:"next_page_uri"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return sids, fmt.Errorf("list the Twilio fake's messages: %s (%v)", resp.Status, err)
		}
		for _, m := range page.Messages {
			sids = append(sids, m.SID)
		}
		next = ""
		if page.NextPageURI != nil {
			next = *page.NextPageURI
		}
	}
	return sids, nil
}

// smsSend is one message a provider fake took (created, or accepted), read from its log.
type smsSend struct {
	Provider string
	// ID is the fake's id of the message: Twilio's sid, Vonage's message-id.
	ID       string
	To, Text string
}

// The log lines of a message taken, as `ledger sink` prints them (each fake's line behind the
// sink's prefix); the strings are Go-quoted.
var (
	twilioCreated  = regexp.MustCompile(`^twilio: twiliofake: created (\S+) from ".*?" to (".*?"): (".*")$`)
	vonageAccepted = regexp.MustCompile(`^vonage: vonagefake: accepted message (\S+) from ".*?" to (".*?") \(client-ref .*?, callback .*?\): (".*")$`)
)

// sends reads the messages both fakes took from their logs: complete once they are stopped, and
// whole up to the kill for the killed one (a line is written before the create is answered).
func (f *smsFakes) sends() ([]smsSend, error) {
	tw, err := readSends(f.twilio.logPath, twilioProvider, twilioCreated)
	if err != nil {
		return nil, err
	}
	vg, err := readSends(f.vonage.logPath, vonageProvider, vonageAccepted)
	return append(tw, vg...), err
}

func readSends(path, provider string, line *regexp.Regexp) ([]smsSend, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the %s fake's log: %w", provider, err)
	}
	defer file.Close()
	var out []smsSend
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		to, err1 := strconv.Unquote(m[2])
		text, err2 := strconv.Unquote(m[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: unreadable line %q", filepath.Base(path), sc.Text())
		}
		if !strings.HasPrefix(to, "+") {
			to = "+" + to // Vonage takes numbers without their +
		}
		out = append(out, smsSend{Provider: provider, ID: m[1], To: to, Text: text})
	}
	return out, sc.Err()
}
