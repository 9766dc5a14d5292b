package app

import (
	"strings"
	"testing"
	"time"

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
	if smtp.Type != TypeSMTP || smtp.Host != "127.0.0.1" || smtp.Port != 2525 || smtp.TLS != "starttls" || smtp.Username != "ledger" ||
		smtp.Password != "pw" || smtp.From != "Ledger <noreply@example.com>" || smtp.Timeout != 30*time.Second {
		t.Fatalf("smtp provider %+v", smtp)
	}
	if tg := f.Providers["telegram"]; tg.Token != "123:abc" || tg.BaseURL != "https://api.telegram.org" {
		t.Fatalf("telegram provider %+v", tg)
	}
	email := f.Channels[1].Retry
	if email == nil || len(email.Schedule) != 3 || email.MaxAttempts != 4 || email.Base != 0 {
		t.Fatalf("email retry %+v, want a schedule of 3 delays and 4 attempts", email)
	}
	tg := f.Channels[2].Retry
	if tg == nil || tg.Base != time.Second || tg.Cap != time.Minute || tg.MaxAttempts != 4 {
		t.Fatalf("telegram retry %+v", tg)
	}
	if f.Channels[0].Retry != nil {
		t.Fatal("a channel without retry got a policy of its own")
	}
	if err := (domain.RetryPolicy{Schedule: email.Schedule, MaxAttempts: email.MaxAttempts}).Validate(); err != nil {
		t.Fatal(err)
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
		{"schedule with base", "channels:\n  webhook: {providers: [webhook], retry: {schedule: [1s], base: 1s}}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"channels.webhook.retry: a schedule gives its own delays"}},
		{"unknown channel", "channels:\n  pigeon: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n",
			[]string{"f.yaml:2: channels.pigeon: unknown channel \"pigeon\""}},
		{"unknown type", "channels:\n  webhook: {providers: [p]}\nproviders:\n  p: {type: carrier-pigeon}\n",
			[]string{"providers.p.type: unknown type \"carrier-pigeon\""}},
		{"twilio without its keys", "channels:\n  sms: {providers: [twilio]}\nproviders:\n  twilio: {type: twilio}\n",
			[]string{"f.yaml:4: providers.twilio.account_sid: required", "providers.twilio.auth_token_env: required", "providers.twilio.from: required"}},
		{"vonage without receipts", "channels:\n  sms: {providers: [vonage]}\nproviders:\n  vonage: {type: vonage, api_key: k, api_secret_env: S, from: x}\n",
			[]string{"providers.vonage.callback_token_env: required", "public_url: required by provider vonage", "api_secret_env: the environment variable S is not set"}},
		{"sms values", "channels:\n  sms: {providers: [t], unknown: maybe}\nproviders:\n  t:\n    type: twilio\n    account_sid: AC1\n    auth_token_env: T\n    from: '+15005550006'\n    delivered_on: sometimes\n    receipt_timeout: 1h\n    receipt_max_wait: 1m\n    lookup_rate: -1\n    breaker: {failures: 0, error_rate: 2, cooldown: soon, probes: 1, jitter: 1}\n",
			[]string{"f.yaml:2: channels.sms.unknown: want hold", "f.yaml:9: providers.t.delivered_on: want receipt", "providers.t.receipt_max_wait: must be at least receipt_timeout",
				"f.yaml:12: providers.t.lookup_rate: must be positive", "providers.t.breaker.failures: must be at least 1", "providers.t.breaker.error_rate: want a share",
				"providers.t.breaker.cooldown: want a duration", "providers.t.breaker.jitter: unknown key"}},
		{"sms provider on the wrong channel", "channels:\n  email: {providers: [t]}\nproviders:\n  t: {type: twilio, account_sid: AC1, auth_token_env: T, from: x}\n",
			[]string{"the email channel takes smtp providers"}},
		{"not yaml", "channels: [\n", []string{"f.yaml: yaml:"}},
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
	if tw.AccountSID != "AC0123456789abcdef0123456789abcdef" || tw.AuthToken != "tok-12345678" || tw.From != "+15005550006" ||
		tw.ReceiptTimeout != 5*time.Minute || tw.ReceiptMaxWait != 12*time.Hour || tw.LookupRate != 2.5 || tw.DeliveredOn != "" {
		t.Fatalf("twilio provider %+v", tw)
	}
	if b := tw.Breaker; b.Failures != 3 || b.ErrorRate != 0.25 || b.MinRequests != 8 || b.Window != 30*time.Second ||
		b.Cooldown != 10*time.Second || b.Probes != 2 {
		t.Fatalf("twilio breaker %+v", b)
	}
	if v := f.Providers["vonage"]; v.APIKey != "devkey01" || v.APISecret != "vsecret" || v.CallbackToken != "callback-token-0123456789" ||
		v.DeliveredOn != "accept" {
		t.Fatalf("vonage provider %+v", v)
	}
}
