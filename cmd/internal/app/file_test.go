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
		{"sms not yet", "channels:\n  webhook: {providers: [webhook]}\nproviders:\n  webhook: {type: webhook}\n  twilio: {type: twilio}\n",
			[]string{"providers.twilio.type: twilio is not yet supported"}},
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
