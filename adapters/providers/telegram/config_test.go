package telegram

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []Config{
		{Provider: "telegram", Token: testToken},
		{Provider: "telegram-backup_2", BaseURL: "http://127.0.0.1:8081", Token: testToken, Timeout: time.Second},
		{Provider: "telegram", BaseURL: "https://proxy.example/telegram/", Token: testToken},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%v: Validate() = %v, want nil", ok, err)
		}
	}

	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "provider is required") || !strings.Contains(err.Error(), "token is required") {
		t.Errorf("zero Config: Validate() = %v, want provider and token required", err)
	}

	bad := Config{Provider: "Telegram Bot", BaseURL: "ftp://api.telegram.org", Token: "123456789:AAHsecretPart with a space", Timeout: -time.Second}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want every problem reported")
	}
	joined, isJoined := err.(interface{ Unwrap() []error })
	if !isJoined || len(joined.Unwrap()) != 4 {
		t.Fatalf("Validate() = %v, want 4 joined problems", err)
	}
	for _, key := range []string{"provider", "base_url", "token", "timeout"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("Validate() = %q, want it to name %s", err, key)
		}
	}
	if strings.Contains(err.Error(), "secretPart") {
		t.Errorf("Validate() = %q repeats the token", err)
	}
	if _, err := New(bad); err == nil || strings.Contains(err.Error(), "secretPart") {
		t.Errorf("New(bad config) = %v, want the problems without the token", err)
	}
}

func TestConfigValidateBaseURL(t *testing.T) {
	t.Parallel()
	for _, base := range []string{
		"api.telegram.org",
		"/relative",
		"https://",
		"https://user:pw@api.telegram.org",
		"https://api.telegram.org?x=1",
		"https://api.telegram.org#frag",
		// The token pasted into base_url: refused, and not repeated.
		"https://api.telegram.org/bot123456789:AAHsecretPartOfTheTestToken_0123456",
		"http://[::1",
	} {
		err := Config{Provider: "telegram", BaseURL: base, Token: testToken}.Validate()
		if err == nil || !strings.Contains(err.Error(), "base_url") {
			t.Errorf("base_url %q: Validate() = %v, want base_url refused", base, err)
			continue
		}
		if strings.Contains(err.Error(), "secretPart") || strings.Contains(err.Error(), base) {
			t.Errorf("base_url %q: Validate() = %q repeats the base URL", base, err)
		}
	}
}

func TestConfigValidateToken(t *testing.T) {
	t.Parallel()
	for _, token := range []string{`"123456789:AAHsecretPart"`, "123456789:AAHsecretPart\n", " 123456789:AAHsecretPart", "AAHsecretPart", "123456789:", "bot123456789:AAHsecretPart", "123456789:AAH/secretPart"} {
		err := Config{Provider: "telegram", Token: token}.Validate()
		if err == nil || !strings.Contains(err.Error(), "token") {
			t.Errorf("token %q: Validate() = %v, want the token refused", token, err)
			continue
		}
		if strings.Contains(err.Error(), "secretPart") {
			t.Errorf("token %q: Validate() = %q repeats it", token, err)
		}
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	s := newSender(t, Config{Provider: "telegram", Token: testToken})
	if s.timeout != DefaultTimeout {
		t.Errorf("timeout = %s, want %s", s.timeout, DefaultTimeout)
	}
	if want := "https://api.telegram.org/bot" + testToken + "/sendMessage"; s.endpoint != want {
		t.Errorf("endpoint is not {DefaultBaseURL}/bot{token}/sendMessage")
	}
	if s.host != "api.telegram.org" {
		t.Errorf("host = %q, want api.telegram.org", s.host)
	}
	trailing := newSender(t, Config{Provider: "telegram", BaseURL: "http://127.0.0.1:8081/", Token: testToken})
	if want := "http://127.0.0.1:8081/bot" + testToken + "/sendMessage"; trailing.endpoint != want {
		t.Errorf("a base_url with a trailing slash gives a double slash in the endpoint")
	}
}

// TestConfigDoesNotPrintTheToken: a Config logged by fmt or slog, in either handler, shows that
// a token is set and nothing of it.
func TestConfigDoesNotPrintTheToken(t *testing.T) {
	t.Parallel()
	cfg := Config{Provider: "telegram", BaseURL: DefaultBaseURL, Token: testToken, Timeout: time.Second}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%v %+v %s\n", cfg, cfg, cfg)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "telegram", cfg)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "telegram", cfg)
	printed := buf.String()
	if strings.Contains(printed, "secretPart") || strings.Contains(printed, "123456789") {
		t.Errorf("the printed config shows the token:\n%s", printed)
	}
	if !strings.Contains(printed, "[redacted]") || !strings.Contains(printed, "api.telegram.org") {
		t.Errorf("the printed config does not show its settings:\n%s", printed)
	}
}
