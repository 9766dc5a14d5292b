package app

import (
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// env is a fixed environment for the secrets a file names.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const exampleFile = `public_url: https://ledger.example.com
channels:
  webhook:  {providers: [webhook]}
  email:    {providers: [smtp], retry: {schedule: [1s, 4s, 9s]}}
  telegram: {providers: [telegram], retry: {base: 1s, cap: 1m, max_attempts: 4}}
providers:
  webhook:  {type: webhook, timeout: 10s}
  smtp:     {type: smtp, host: 127.0.0.1, port: 2525, tls: starttls, username: ledger,
             password_env: SMTP_PASSWORD, from: "Ledger <noreply@example.com>", timeout: 30s}
  telegram: {type: telegram, base_url: https://api.telegram.org, token_env: TELEGRAM_BOT_TOKEN,
             timeout: 10s}
`

func TestParseFileTakesTheDocumentedShape(t *testing.T) {
	t.Parallel()
	f, err := ParseFile("ledger.yaml", []byte(exampleFile), env(map[string]string{"SMTP_PASSWORD": "pw", "TELEGRAM_BOT_TOKEN": "123:abc"}))
	if err != nil {
		t.Fatal(err)
	}
	if f.PublicURL != "https://ledger.example.com" || len(f.Channels) != 3 || f.Channels[1].Name != "email" {
		t.Fatalf("file %+v", f)
	}
	smtp := f.Providers["smtp"]
	if ss := smtp.Settings; smtp.Type != "smtp" || ss.String("host") != "127.0.0.1" || ss.Int("port") != 2525 || ss.String("tls") != "starttls" ||
		ss.String("username") != "ledger" || ss.String("password_env") != "pw" || ss.String("from") != "Ledger <noreply@example.com>" ||
		ss.Timeout != 30*time.Second {
		t.Fatalf("smtp provider %+v", smtp)
	}
	if tg := f.Providers["telegram"].Settings; tg.String("token_env") != "123:abc" || tg.String("base_url") != "https://api.telegram.org" {
		t.Fatalf("telegram provider %+v", tg)
	}
	email := f.Channels[1].Retry
	if sched, _ := email.Strategy.(domain.Schedule); email == nil || !slices.Equal(sched, domain.Schedule{time.Second, 4 * time.Second, 9 * time.Second}) || email.MaxAttempts != 4 {
		t.Fatalf("email retry %+v, want a schedule of 3 delays and 4 attempts", email)
	}
	tg := f.Channels[2].Retry
	if tg == nil || tg.Strategy != (domain.Exponential{Base: time.Second, Cap: time.Minute}) || tg.MaxAttempts != 4 {
		t.Fatalf("telegram retry %+v", tg)
	}
	if f.Channels[0].Retry != nil {
		t.Fatal("a channel without retry got a policy of its own")
	}
	if err := email.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestParseFileTakesRetryStrategies: a retry block names its strategy; quadratic is seed 001's
// 1 s, 4 s, 9 s and then dead at 4 attempts; the spellings without a strategy keep working.
func TestParseFileTakesRetryStrategies(t *testing.T) {
	t.Parallel()
	const file = "channels:\n" +
		"  webhook: {providers: [webhook], retry: {strategy: quadratic, base: 1s, max_attempts: 4}}\n" +
		"  email: {providers: [smtp], retry: {strategy: schedule, schedule: [2s, 1m]}}\n" +
		"  telegram: {providers: [tg], retry: {strategy: exponential, base: 2s, cap: 1m}}\n" +
		"providers:\n  webhook: {type: webhook}\n  smtp: {type: smtp, host: h, port: 25, from: a@b.c}\n  tg: {type: telegram, token_env: G}\n"
	f, err := ParseFile("f.yaml", []byte(file), env(map[string]string{"G": "1:abc"}))
	if err != nil {
		t.Fatal(err)
	}
	q := f.Channels[0].Retry
	if q == nil || q.Strategy != (domain.Quadratic{Base: time.Second}) || q.MaxAttempts != 4 {
		t.Fatalf("quadratic retry %+v", q)
	}
	p := *q
	p.RetryAfterMax = time.Hour
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for attempt, want := range []time.Duration{time.Second, 4 * time.Second, 9 * time.Second} {
		if got := p.NextAttemptAt(attempt+1, time.Time{}, 0.5, 0).Sub(time.Time{}); got != want {
			t.Errorf("quadratic: wait after attempt %d %s, want %s", attempt+1, got, want)
		}
	}
	if got := p.Tiers(); !slices.Equal(got, []time.Duration{time.Second, 4 * time.Second, 9 * time.Second}) {
		t.Errorf("quadratic tiers %v", got)
	}
	if sched, _ := f.Channels[1].Retry.Strategy.(domain.Schedule); !slices.Equal(sched, domain.Schedule{2 * time.Second, time.Minute}) || f.Channels[1].Retry.MaxAttempts != 3 {
		t.Errorf("schedule retry %+v", f.Channels[1].Retry)
	}
	if tg := f.Channels[2].Retry; tg.Strategy != (domain.Exponential{Base: 2 * time.Second, Cap: time.Minute}) || tg.MaxAttempts != domain.DefaultMaxAttempts {
		t.Errorf("exponential retry %+v", tg)
	}
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, err := checkFile(path, DefaultConfig(), env(map[string]string{"G": "1:abc"}))
	if text := strings.Join(lines, "\n"); err != nil || !strings.Contains(text, "channel webhook: providers [webhook]; retry quadratic from 1s (1s, 4s, 9s, ...), 4 attempts") {
		t.Errorf("config check: %v\n%s", err, text)
	}
}

// TestParseFileRefusalsNameTheirField: every refusal says the file, the line and the field, and
// all of them come at once.
func TestParseFileRefusalsNameTheirField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file string
		want       []string
	}{
		{"typo'd key", "channels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook, timout: 10s}\n",
			[]string{"f.yaml:4: providers.webhook.timout: unknown key"}},
		{"top-level typo", "channel:\n  webhook: {providers: [webhook]}\n", []string{"f.yaml:1: channel: unknown key", "channels: required"}},
		{"missing secret", "channels:\n  email: {providers: [smtp]}\nproviders:\n  smtp: {type: smtp, host: h, port: 25, from: a@b.c, password_env: NOPE}\n",
			[]string{"f.yaml:4: providers.smtp.password_env: the environment variable NOPE is not set"}},
		{"secret in the file", "channels:\n  email: {providers: [smtp]}\nproviders:\n  smtp: {type: smtp, host: h, port: 25, from: a@b.c, password: hunter2}\n",
			[]string{"providers.smtp.password: secrets are not written in the file"}},
		{"undefined provider", "channels:\n  webhook: {providers: [hook]}\nproviders: {}\n",
			[]string{"f.yaml:2: channels.webhook.providers[0]: no provider \"hook\""}},
		{"wrong provider type", "channels:\n  email: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"channels.email.providers[0]: provider \"webhook\" is of type webhook; the email channel takes smtp providers"}},
		{"bad values", "channels:\n  email:\n    providers: [smtp]\n    retry: {base: 1m, cap: 1s}\nproviders:\n  smtp:\n    type: smtp\n    host: h\n    port: 99999\n    tls: sometimes\n    from: a@b.c\n    timeout: soon\n",
			[]string{"f.yaml:9: providers.smtp.port: must be from 1 to 65535", "f.yaml:10: providers.smtp.tls: want starttls",
				"f.yaml:12: providers.smtp.timeout: want a duration", "channels.email.retry.cap: must be at least base"}},
		{"unknown strategy", "channels:\n  webhook:\n    providers: [webhook]\n    retry: {strategy: fibonacci}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{`f.yaml:4: channels.webhook.retry.strategy: unknown strategy "fibonacci" (known: exponential, schedule, quadratic)`}},
		{"a key of another strategy", "channels:\n  webhook:\n    providers: [webhook]\n    retry:\n      strategy: quadratic\n      schedule: [1s]\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"f.yaml:6: channels.webhook.retry.schedule: strategy quadratic takes base, cap, max_attempts"}},
		{"schedule without one", "channels:\n  webhook: {providers: [webhook], retry: {strategy: schedule}}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"f.yaml:2: channels.webhook.retry.schedule: required by strategy schedule"}},
		{"schedule with base", "channels:\n  webhook: {providers: [webhook], retry: {schedule: [1s], base: 1s}}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"channels.webhook.retry: a schedule gives its own delays"}},
		{"unknown channel", "channels:\n  pigeon: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"f.yaml:2: channels.pigeon: unknown channel \"pigeon\""}},
		{"unknown type", "channels:\n  webhook: {providers: [p]}\nproviders:\n  p: {type: carrier-pigeon}\n",
			[]string{"providers.p.type: unknown type \"carrier-pigeon\""}},
		{"twilio without its keys", "channels:\n  sms: {providers: [twilio]}\nproviders:\n  twilio: {type: twilio}\n",
			[]string{"f.yaml:4: providers.twilio.account_sid: required", "providers.twilio.auth_token_env: required", "providers.twilio.from: required"}},
		{"vonage receipts without public_url", "channels:\n  sms: {providers: [vonage]}\nproviders:\n  vonage: {type: vonage, api_key: k, api_secret_env: S, from: x, callback_token_env: C}\n",
			[]string{"f.yaml:1: public_url: required by provider vonage", "f.yaml:4: providers.vonage.api_secret_env: the environment variable S is not set",
				"providers.vonage.callback_token_env: the environment variable C is not set"}},
		{"sms values", "channels:\n  sms: {providers: [t], unknown: maybe}\nproviders:\n  t:\n    type: twilio\n    account_sid: AC1\n    auth_token_env: T\n    from: '+15005550006'\n    delivered_on: sometimes\n    receipt_timeout: 1h\n    receipt_max_wait: 1m\n    lookup_rate: -1\n    breaker: {failures: 0, error_rate: 2, cooldown: soon, probes: 1, jitter: 1}\n",
			[]string{"f.yaml:2: channels.sms.unknown: want hold", "f.yaml:9: providers.t.delivered_on: want receipt", "providers.t.receipt_max_wait: must be at least receipt_timeout",
				"f.yaml:12: providers.t.lookup_rate: must be positive", "providers.t.breaker.failures: must be at least 1", "providers.t.breaker.error_rate: want a share",
				"providers.t.breaker.cooldown: want a duration", "providers.t.breaker.jitter: unknown key"}},
		{"sms provider on the wrong channel", "channels:\n  email: {providers: [t]}\nproviders:\n  t: {type: twilio, account_sid: AC1, auth_token_env: T, from: x}\n",
			[]string{"the email channel takes smtp providers"}},
		{"not yaml", "channels: [\n", []string{"f.yaml: yaml:"}},
		{"retention without an archive", "retention: {keep: 30d, payloads: 40d, partition: 2h, tenants: {t1: {keep: 1h, ttl: 2d}}}\nchannels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"retention.archive_dir: required with keep", "retention.payloads: 40d is longer than keep (30d)",
				"retention.tenants.t1.keep: 1h0m0s is shorter than a partition (2h0m0s)", "f.yaml:1: retention.tenants.t1.ttl: unknown key (known: keep, payloads)"}},
		{"retention durations", "retention: {keep: soon, partition: 0s, cold: 1d}\nchannels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{`f.yaml:1: retention.keep: want a duration such as 30d, 36h or 90s, got "soon"`, "retention.partition: must be positive", "retention.cold: unknown key"}},
		{"public_url", "public_url: ftp://x\nchannels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"f.yaml:1: public_url: want an absolute http(s) URL"}},
	}
	for _, tt := range tests {
		_, err := ParseFile("f.yaml", []byte(tt.file), env(nil))
		if err == nil {
			t.Errorf("%s: accepted", tt.name)
			continue
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", tt.name, err, want)
			}
		}
	}
}

// TestParseFileTakesRetention: the retention block with days, a tenant's own keep, and what the
// ledger derives from it.
func TestParseFileTakesRetention(t *testing.T) {
	t.Parallel()
	const file = "retention: {keep: 30d, payloads: 7d, partition: 1d, archive_dir: /var/lib/ledger/archive, tenants: {t1: {keep: 90d}, t2: {payloads: 1d12h}}}\n" +
		"channels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n"
	f, err := ParseFile("f.yaml", []byte(file), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	r, day := f.Retention, 24*time.Hour
	if r.Keep != 30*day || r.Payloads != 7*day || r.PartitionWidth() != day || r.ArchiveDir != "/var/lib/ledger/archive" {
		t.Fatalf("retention %+v", r)
	}
	if r.KeepOf("t1") != 90*day || r.KeepOf("t2") != 30*day || r.PayloadsOf("t2") != 36*time.Hour || r.PayloadsOf("t3") != 7*day {
		t.Fatalf("per tenant: %s %s %s %s", r.KeepOf("t1"), r.KeepOf("t2"), r.PayloadsOf("t2"), r.PayloadsOf("t3"))
	}
	none, err := ParseFile("f.yaml", []byte("channels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n"), env(nil))
	if err != nil || none.Retention.KeepOf("t1") != 0 || none.Retention.PartitionWidth() != day {
		t.Fatalf("no block: %+v, %v", none.Retention, err)
	}
}

func TestParseFileTakesSMSProviders(t *testing.T) {
	t.Parallel()
	const file = `public_url: https://ledger.example.com
channels:
  sms:     {providers: [twilio, vonage], unknown: hold}
  webhook: {providers: [webhook], unknown: retry}
providers:
  webhook: {type: webhook}
  twilio:
    type: twilio
    account_sid: AC0123456789abcdef0123456789abcdef
    auth_token_env: TWILIO_AUTH_TOKEN
    from: "+15005550006"
    receipt_timeout: 5m
    receipt_max_wait: 12h
    lookup_rate: 2.5
    breaker: {failures: 3, error_rate: 0.25, min_requests: 8, window: 30s, cooldown: 10s, probes: 2}
  vonage: {type: vonage, api_key: devkey01, api_secret_env: VONAGE_API_SECRET, from: Ledger,
           callback_token_env: VONAGE_CALLBACK_TOKEN, delivered_on: accept}
`
	f, err := ParseFile("sms.yaml", []byte(file), env(map[string]string{"TWILIO_AUTH_TOKEN": "tok-12345678",
		"VONAGE_API_SECRET": "vsecret", "VONAGE_CALLBACK_TOKEN": "callback-token-0123456789"}))
	if err != nil {
		t.Fatal(err)
	}
	if f.Channels[0].Unknown != UnknownHold || f.Channels[1].Unknown != UnknownRetry || len(f.Channels[0].Providers) != 2 {
		t.Fatalf("channels %+v", f.Channels)
	}
	tw := f.Providers["twilio"]
	if ts := tw.Settings; ts.String("account_sid") != "AC0123456789abcdef0123456789abcdef" || ts.String("auth_token_env") != "tok-12345678" ||
		ts.String("from") != "+15005550006" || ts.Duration("receipt_timeout") != 5*time.Minute || ts.Duration("receipt_max_wait") != 12*time.Hour ||
		ts.Number("lookup_rate") != 2.5 || ts.String("delivered_on") != "" {
		t.Fatalf("twilio provider %+v", tw)
	}
	if b := tw.Breaker; b.Failures != 3 || b.ErrorRate != 0.25 || b.MinRequests != 8 || b.Window != 30*time.Second ||
		b.Cooldown != 10*time.Second || b.Probes != 2 {
		t.Fatalf("twilio breaker %+v", b)
	}
	if v := f.Providers["vonage"].Settings; v.String("api_key") != "devkey01" || v.String("api_secret_env") != "vsecret" ||
		v.String("callback_token_env") != "callback-token-0123456789" || v.String("delivered_on") != "accept" {
		t.Fatalf("vonage provider %+v", v)
	}
}

// issue14Env holds the secrets the example of issue 14 names, and docs/ledger.example.yaml's
// (the values scripts/run.sh gives them).
var issue14Env = env(map[string]string{"SMTP_PASSWORD": "pw", "TELEGRAM_BOT_TOKEN": "123456:dev-bot-token",
	"TWILIO_AUTH_TOKEN": "dev-twilio-auth-token", "VONAGE_API_SECRET": "dev-vonage-secret",
	"VONAGE_CALLBACK_TOKEN":     "dev-vonage-callback-token-0001",
	"LEDGER_UNSUBSCRIBE_SECRET": "dev-unsubscribe-secret-of-32-bytes!"}) // as scripts/run.sh sets them

// TestConfigCheckTakesTheIssuesExampleAsWritten: `ledger config check` on the literal example of
// issue 14 ("every key below must work as written") and on the committed sample passes, the
// example's Vonage account (no callback_token_env, api_key abc) with a warning that says what
// it means.
func TestConfigCheckTakesTheIssuesExampleAsWritten(t *testing.T) {
	t.Parallel()
	lines, err := checkFile("testdata/issue14-example.yaml", DefaultConfig(), issue14Env)
	if err != nil {
		t.Fatalf("the issue's example is refused:\n%v", err)
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{"channel webhook: providers [webhook]", "channel email: providers [smtp]",
		"channel telegram: providers [telegram]", "channel sms: providers [twilio vonage]",
		"warning: provider vonage: no callback_token_env, so no callback URL is sent",
		"receipts posted for vonage are refused", "provider twilio: receipts at https://ledger.example.com/v1/receipts/twilio"} {
		if !strings.Contains(text, want) {
			t.Errorf("config check says\n%s\nwhich does not say %q", text, want)
		}
	}
	if strings.Contains(text, "receipts at https://ledger.example.com/v1/receipts/vonage") {
		t.Errorf("config check promises receipts for a provider that asks for none:\n%s", text)
	}
	lines, err = checkFile("../../../docs/ledger.example.yaml", DefaultConfig(), issue14Env)
	if err != nil {
		t.Fatalf("docs/ledger.example.yaml is refused:\n%v", err)
	}
	if text := strings.Join(lines, "\n"); strings.Contains(text, "warning") ||
		!strings.Contains(text, "provider vonage: receipts at http://127.0.0.1:8080/v1/receipts/vonage") {
		t.Errorf("docs/ledger.example.yaml: config check says\n%s", text)
	}
}

// TestVonageWithoutCallbackTokenSendsNoCallbackAndRefusesReceipts: the documented behaviour of a
// Vonage account without callback_token_env: no callback URL goes with its messages, and a
// receipt posted for it is refused, since nothing could authenticate it.
func TestVonageWithoutCallbackTokenSendsNoCallbackAndRefusesReceipts(t *testing.T) {
	t.Parallel()
	file, err := LoadFile("testdata/issue14-example.yaml", issue14Env)
	if err != nil {
		t.Fatal(err)
	}
	a := &App{cfg: DefaultConfig()}
	if _, _, err := a.registry(file); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(a.providers, func(p provider) bool { return p.name == "vonage" })
	if i < 0 || a.providers[i].receipts == nil {
		t.Fatalf("providers %+v: no vonage with a receipt parser", a.providers)
	}
	body := []byte("msisdn=447700900000&to=Ledger&messageId=0A0000000123ABCD1&status=delivered&err-code=0&client-ref=d1")
	header := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for _, url := range []string{"https://ledger.example.com/v1/receipts/vonage", "https://ledger.example.com/v1/receipts/vonage?token="} {
		if _, err := a.providers[i].receipts.ParseReceipt(url, header, body); !errors.Is(err, commands.ErrReceiptUnauthenticated) {
			t.Errorf("receipt at %s: %v, want it refused as unauthenticated", url, err)
		}
	}
}

// TestParseFileChecksEveryProviderDeclared: a provider no channel uses is checked like one that
// is used, each problem at its line and under the key the file writes.
func TestParseFileChecksEveryProviderDeclared(t *testing.T) {
	t.Parallel()
	const file = "channels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n" +
		"  smtp: {type: smtp, host: \"a b\", port: 25, from: nope}\n" +
		"  tg:\n    type: telegram\n    token_env: TG_TOKEN\n"
	_, err := ParseFile("f.yaml", []byte(file), env(map[string]string{"TG_TOKEN": "abc"}))
	if err == nil {
		t.Fatal("bad values in unused providers accepted")
	}
	for _, want := range []string{`f.yaml:5: providers.smtp.host: "a b" is not a host name`, `f.yaml:5: providers.smtp.from: "nope" is not one address`,
		"f.yaml:8: providers.tg.token_env: token is not of the form <bot id>:<secret>"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestSecondPassRefusalsNameLineAndKey: what only a provider's own checks find (a Telegram token
// of the wrong form, a Twilio sender, a Vonage key with a space) is refused at its line, under
// the key as the file writes it (token_env, not token).
func TestSecondPassRefusalsNameLineAndKey(t *testing.T) {
	t.Parallel()
	const file = "channels:\n  telegram: {providers: [tg]}\n  sms: {providers: [tw, vo]}\nproviders:\n" +
		"  tg: {type: telegram, token_env: TG_TOKEN}\n" +
		"  tw:\n    type: twilio\n    account_sid: AC1\n    auth_token_env: TW_TOKEN\n    from: 'not a sender!'\n" +
		"  vo:\n    type: vonage\n    api_key: 'ab cd'\n    api_secret_env: VO_SECRET\n    from: Ledger\n"
	_, err := ParseFile("f.yaml", []byte(file), env(map[string]string{"TG_TOKEN": "abc", "TW_TOKEN": "tok-12345678", "VO_SECRET": "s"}))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"f.yaml:5: providers.tg.token_env: token is not of the form", "f.yaml:10: providers.tw.from: want a number",
		"f.yaml:13: providers.vo.api_key: want the API key as the dashboard shows it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestUnknownRetryOnlyWhereReceiversDeduplicate: `unknown: retry` is taken by channels whose
// receivers drop a repeat of our id (webhook-id, Message-ID) and refused, at its line, on a
// channel with a provider whose receivers do not: a retry after an unknown SMS could go out
// through the next provider and send it twice.
func TestUnknownRetryOnlyWhereReceiversDeduplicate(t *testing.T) {
	t.Parallel()
	const providers = "providers:\n  webhook: {type: webhook}\n  smtp: {type: smtp, host: h, port: 25, from: a@b.c}\n" +
		"  tw: {type: twilio, account_sid: AC1, auth_token_env: T, from: '+15005550006'}\n  tg: {type: telegram, token_env: G}\n"
	vars := env(map[string]string{"T": "tok-12345678", "G": "1:abc"})
	if _, err := ParseFile("f.yaml", []byte("channels:\n  webhook: {providers: [webhook], unknown: retry}\n  email: {providers: [smtp], unknown: retry}\n"+providers), vars); err != nil {
		t.Fatalf("unknown: retry refused where receivers deduplicate: %v", err)
	}
	for channel, want := range map[string]string{
		"sms:\n    providers: [tw]\n    unknown: retry\n":      `f.yaml:4: channels.sms.unknown: retry is only for channels whose receivers deduplicate on the delivery id (webhook-id, Message-ID); the receivers of provider "tw" (type twilio) do not`,
		"telegram:\n    providers: [tg]\n    unknown: retry\n": `f.yaml:4: channels.telegram.unknown: retry is only for channels whose receivers deduplicate`,
	} {
		_, err := ParseFile("f.yaml", []byte("channels:\n  "+channel+providers), vars)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("channel %q: error %v, want %q", channel, err, want)
		}
	}
}

// TestConfigCheckRefusesWhatServeWouldRefuseOrMisuse (issue 23, rows 5, 6, 7 and 10): what
// `serve` would refuse without a line, or start with and misuse, is refused by the check at the
// line that says it, and a secret written in a *_env key is never repeated.
func TestConfigCheckRefusesWhatServeWouldRefuseOrMisuse(t *testing.T) {
	t.Parallel()
	const hook = "providers:\n  webhook: {type: webhook}\n"
	const twilio = "channels:\n  sms: {providers: [t]}\nproviders:\n  t:\n    type: twilio\n    account_sid: AC1\n    auth_token_env: T\n    from: '+15005550006'\n"
	retry := func(block string) string {
		return "channels:\n  webhook:\n    providers: [webhook]\n    retry: " + block + "\n" + hook
	}
	delays := func(n int) string {
		var d []string
		for i := 1; i <= n; i++ {
			d = append(d, strconv.Itoa(i)+"s")
		}
		return "{schedule: [" + strings.Join(d, ", ") + "]}"
	}
	tests := []struct {
		name, file, want string
	}{
		// Row 5: non-finite numbers, out-of-range ports, delays beyond what a delay queue holds.
		{"lookup_rate NaN", twilio + "    lookup_rate: NaN\n", "f.yaml:9: providers.t.lookup_rate: want a finite number, got NaN"},
		{"lookup_rate Inf", twilio + "    lookup_rate: Inf\n", "f.yaml:9: providers.t.lookup_rate: want a finite number, got Inf"},
		{"error_rate NaN", twilio + "    breaker: {error_rate: NaN}\n", "f.yaml:9: providers.t.breaker.error_rate: want a finite number, got NaN"},
		{"base 1ns", retry("{base: 1ns, cap: 1m}"), "f.yaml:4: channels.webhook.retry.base: must be from 1ms to 1193h2m47.295s: each delay is a RabbitMQ queue's TTL"},
		{"cap 2000000h", retry("{base: 1s, cap: 2000000h}"), "f.yaml:4: channels.webhook.retry.cap: must be from 1ms to 1193h2m47.295s"},
		{"max_attempts MaxInt64", retry("{max_attempts: 9223372036854775807}"), "f.yaml:4: channels.webhook.retry.max_attempts: must be from 1 to 100"},
		{"a square beyond the longest tier", retry("{strategy: quadratic, base: 24h, max_attempts: 9}"), "f.yaml:4: channels.webhook.retry: the longest wait 1536h0m0s is beyond 1193h2m47.295s"},
		{"port 99999", "channels:\n  telegram: {providers: [tg]}\nproviders:\n  tg:\n    type: telegram\n    base_url: https://127.0.0.1:99999\n    token_env: G\n",
			"f.yaml:6: providers.tg.base_url: want an absolute http(s) URL: port 99999 is not from 1 to 65535"},
		{"public_url port 0", "public_url: http://127.0.0.1:0\nchannels:\n  webhook: {providers: [webhook]}\n" + hook, "f.yaml:1: public_url: want an absolute http(s) URL: port 0 is not from 1 to 65535"},
		// Row 6: each distinct delay is a queue.
		{"200 delays", retry(delays(200)), "f.yaml:4: channels.webhook.retry.schedule: 200 delays: at most 99"},
		{"10,000 delays", retry(delays(10000)), "f.yaml:4: channels.webhook.retry.schedule: 10000 delays: at most 99"},
		{"50 distinct delays", retry(delays(50)), "f.yaml:4: channels.webhook.retry: 50 distinct waits, each a delay queue of its own: at most 32"},
		{"1e8 attempts", retry("{max_attempts: 100000000}"), "f.yaml:4: channels.webhook.retry.max_attempts: must be from 1 to 100"},
		{"base 1ms to the longest cap", retry("{base: 1ms, cap: 1193h2m47.295s}"), "f.yaml:4: channels.webhook.retry: 33 distinct waits"},
		// Row 7: a secret in a *_env key is refused without being repeated.
		{"a token in token_env", "channels:\n  telegram: {providers: [tg]}\nproviders:\n  tg: {type: telegram, token_env: \"123456:SECRET-bot-token\"}\n",
			"f.yaml:4: providers.tg.token_env: names no environment variable (is this the secret itself?)"},
		// Row 10: a second document, a key that is not a name, a provider without a name.
		{"second document", "channels:\n  webhook: {providers: [webhook]}\n" + hook + "---\nchannels: 1\n", "f.yaml:5: (file): a second YAML document (after ---)"},
		{"complex key", "channels:\n  webhook: {providers: [webhook]}\n" + hook + "  ? [complex, key]\n  : {type: webhook}\n", "f.yaml:5: providers: want a name as a key, got a list"},
		{"empty provider name", "channels:\n  webhook: {providers: [webhook]}\n" + hook + "  \"\": {type: webhook}\n", "f.yaml:5: providers: a provider needs a name"},
		{"empty provider in a channel", "channels:\n  webhook: {providers: [webhook, \"\"]}\n" + hook, "f.yaml:2: channels.webhook.providers[1]: want a provider's name, got an empty one"},
	}
	vars := env(map[string]string{"T": "tok-12345678", "G": "1:abc"})
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "f.yaml")
		if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
			t.Fatal(err)
		}
		lines, err := checkFile(path, DefaultConfig(), vars)
		if err == nil {
			t.Errorf("%s: config check says ok:\n%s", tt.name, strings.Join(lines, "\n"))
			continue
		}
		// The check names the file by the path it was given; the cases say f.yaml.
		if msg := strings.ReplaceAll(err.Error(), path, "f.yaml"); !strings.Contains(msg, tt.want) {
			t.Errorf("%s: refusal\n%s\ndoes not say %q", tt.name, msg, tt.want)
		}
		if strings.Contains(err.Error(), "SECRET-bot-token") {
			t.Errorf("%s: the refusal repeats the secret: %v", tt.name, err)
		}
	}
}

// TestServeFlagsKeepTheRetryBounds: the environment variables of the server's retry policy keep
// the bounds a file's retry block keeps (issue 23, rows 5 and 6).
func TestServeFlagsKeepTheRetryBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.MaxAttempts = 100000000 }, "--max-attempts 100000000: want 1 to 100"},
		{func(c *Config) { c.RetryCap = 2000000 * time.Hour }, "--retry-cap 2000000h0m0s is beyond 1193h2m47.295s"},
		{func(c *Config) { c.RetryBase = time.Nanosecond }, "--retry-base 1ns is below 1ms"},
		{func(c *Config) { c.RetryBase, c.RetryCap = time.Millisecond, domain.MaxRetryDelay }, "33 distinct waits"},
		{func(c *Config) { c.HostRate = math.NaN() }, "--host-rate NaN"},
	} {
		c := DefaultConfig()
		tt.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want it to say %q", err, tt.want)
		}
	}
	if c := DefaultConfig(); c.Validate() != nil {
		t.Errorf("the defaults are refused: %v", c.Validate())
	}
}
