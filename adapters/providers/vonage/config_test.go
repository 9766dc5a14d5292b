package vonage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
)

// goodConfig is a valid configuration with a callback.
func goodConfig() Config {
	return Config{Provider: "vonage", APIKey: testKey, APISecret: testSecret, From: "+447700900999",
		Callback: "https://ledger.example.com/v1/receipts/vonage?token=" + testToken, CallbackToken: testToken}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, change := range []func(*Config){
		func(*Config) {},
		func(c *Config) { c.Callback, c.CallbackToken = "", "" },
		func(c *Config) { c.Callback = "" }, // receipts to the dashboard's URL, with the token
		func(c *Config) { c.From = "Ledger Co" },
		func(c *Config) { c.From = "447700900999" },
		func(c *Config) {
			c.BaseURL, c.Timeout, c.DeliveredOn = "http://127.0.0.1:8081/", time.Second, DeliveredOnAccept
		},
		func(c *Config) { c.Callback = "http://127.0.0.1:8080/v1/receipts/vonage?token=" + testToken },
		func(c *Config) { c.Callback = "http://localhost:8080/v1/receipts/vonage?token=" + testToken },
		func(c *Config) { c.DeliveredOn = DeliveredOnReceipt },
		func(c *Config) { c.APIKey = "abc" }, // issue 14's example: Vonage documents no form
	} {
		cfg := goodConfig()
		change(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("%v: Validate() = %v, want nil", cfg, err)
		}
	}

	err := (Config{}).Validate()
	for _, want := range []string{"provider is required", "api_key is required", "api_secret_env", "from is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("zero Config: Validate() = %v, want %q", err, want)
		}
	}

	bad := Config{Provider: "Vonage SMS", BaseURL: "ftp://rest.nexmo.com", APIKey: "abcd 1234", APISecret: testSecret + "\n",
		From: "A very long sender name", Callback: "http://ledger.example.com/v1/receipts/vonage?token=" + testToken,
		CallbackToken: "short", Timeout: -time.Second, DeliveredOn: "handset"}
	err = bad.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want every problem reported")
	}
	joined, isJoined := err.(interface{ Unwrap() []error })
	if !isJoined || len(joined.Unwrap()) != 9 {
		t.Fatalf("Validate() = %v, want 9 joined problems", err)
	}
	for _, key := range []string{"provider", "base_url", "api_key", "api_secret_env", "from", "callback_token_env", "callback:", "timeout", "delivered_on"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("Validate() = %q, want it to name %s", err, key)
		}
	}
	if secret := holdsSecret(err.Error()); secret != "" {
		t.Errorf("Validate() = %q repeats a secret", err)
	}
	if _, err := New(bad); err == nil || holdsSecret(err.Error()) != "" || !strings.HasPrefix(err.Error(), "vonage config: ") {
		t.Errorf("New(bad config) = %v, want the problems without the secrets", err)
	}
}

// TestConfigValidateCallback: the callback and its token are checked together, so a
// configuration whose receipts would all be refused does not start; no message repeats either.
func TestConfigValidateCallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		change  func(*Config)
		wantHas string
	}{
		{"a callback without a token", func(c *Config) { c.CallbackToken = "" }, "callback_token_env"},
		{"a token too short", func(c *Config) { c.CallbackToken = "abc"; c.Callback = "https://l.example/r?token=abc" }, "shorter than"},
		{"a token with a space", func(c *Config) { c.CallbackToken = testToken + " x" }, "callback_token_env"},
		{"the callback's token is another", func(c *Config) { c.CallbackToken = "another-token-0123456789" }, "not the callback token"},
		{"no token in the callback", func(c *Config) { c.Callback = "https://ledger.example.com/v1/receipts/vonage" }, "token query parameter"},
		{"two tokens in the callback", func(c *Config) { c.Callback += "&token=" + testToken }, "exactly one token"},
		{"http to another host", func(c *Config) { c.Callback = strings.Replace(c.Callback, "https", "http", 1) }, "https"},
		{"a relative callback", func(c *Config) { c.Callback = "/v1/receipts/vonage?token=" + testToken }, "https"},
		{"a user in the callback", func(c *Config) { c.Callback = "https://u:p@ledger.example.com/?token=" + testToken }, "user name"},
		{"a fragment", func(c *Config) { c.Callback += "#x" }, "fragment"},
		{"not a URL", func(c *Config) { c.Callback = "https://[::1?token=" + testToken }, "not a URL"},
	}
	for _, tt := range tests {
		cfg := goodConfig()
		tt.change(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.wantHas) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.wantHas)
			continue
		}
		if secret := holdsSecret(err.Error()); secret != "" || strings.Contains(err.Error(), "another-token") {
			t.Errorf("%s: Validate() = %q repeats a token", tt.name, err)
		}
	}
}

func TestConfigValidateBaseURL(t *testing.T) {
	t.Parallel()
	for _, base := range []string{
		"rest.nexmo.com",
		"/relative",
		"https://",
		"https://user:" + testSecret + "@rest.nexmo.com",
		"https://rest.nexmo.com?api_secret=" + testSecret,
		"https://rest.nexmo.com#frag",
		"http://[::1",
		"http://127.0.0.1:",
	} {
		cfg := goodConfig()
		cfg.BaseURL = base
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "base_url") {
			t.Errorf("base_url %q: Validate() = %v, want base_url refused", base, err)
			continue
		}
		if holdsSecret(err.Error()) != "" || strings.Contains(err.Error(), base) {
			t.Errorf("base_url %q: Validate() = %q repeats the base URL", base, err)
		}
	}
}

func TestConfigValidateSender(t *testing.T) {
	t.Parallel()
	for _, from := range []string{"Ledger", "AB 12", "+15550100", "4477009009991", "+123456789012345"} {
		cfg := goodConfig()
		cfg.From = from
		if err := cfg.Validate(); err != nil {
			t.Errorf("from %q: Validate() = %v, want nil", from, err)
		}
	}
	for _, from := range []string{"TwelveLetter", "+0447700900", "+1234567890123456", "Ledger!", " ", "Lé", "44-7700"} {
		cfg := goodConfig()
		cfg.From = from
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "from") {
			t.Errorf("from %q: Validate() = %v, want from refused", from, err)
		}
	}
}

// TestConfigPrintsNoSecret: a Config printed with fmt or logged with slog shows where things go
// but neither secret, nor the callback's query.
func TestConfigPrintsNoSecret(t *testing.T) {
	t.Parallel()
	cfg := goodConfig()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "vonage", cfg)
	for _, printed := range []string{fmt.Sprint(cfg), fmt.Sprintf("%v %+v %s", cfg, cfg, cfg), buf.String()} {
		if secret := holdsSecret(printed); secret != "" {
			t.Errorf("printed %q shows a secret", printed)
		}
		if !strings.Contains(printed, "ledger.example.com/v1/receipts/vonage") || !strings.Contains(printed, testKey) {
			t.Errorf("printed %q, want the callback's host and path and the API key", printed)
		}
	}
}

// TestNewAppliesDefaults: the zero fields get their defaults.
func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	s := newSender(t, Config{Provider: "vonage", APIKey: testKey, APISecret: testSecret, From: "+447700900999"})
	if s.endpoint != DefaultBaseURL+"/sms/json" || s.timeout != DefaultTimeout || s.deliveredOn != DeliveredOnReceipt || s.from != "447700900999" {
		t.Errorf("endpoint %s, timeout %s, delivered_on %s, from %s; want the default base URL, timeout and delivered_on, and from without +",
			s.endpoint, s.timeout, s.deliveredOn, s.from)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New(Config{}) = nil error, want the problems")
	}
}

// TestProviderTypeBlamesTheFilesKeys: the provider type's check names each problem by the key the
// configuration file writes, and warns when no callback token means no receipts.
func TestProviderTypeBlamesTheFilesKeys(t *testing.T) {
	t.Parallel()
	s := &provider.Settings{Name: "vonage", PublicURL: "https://ledger.example.com",
		Values: map[string]any{"api_key": "ab cd", "api_secret_env": testSecret, "from": "Ledger"}}
	var keys []string
	for _, problem := range provider.Problems(ProviderType.Check(s)) {
		var ke *provider.KeyError
		if !errors.As(problem, &ke) {
			t.Fatalf("problem %v names no key", problem)
		}
		keys = append(keys, ke.Key)
	}
	if !slices.Equal(keys, []string{"api_key"}) || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "no callback_token_env") {
		t.Fatalf("keys %v, warnings %q; want api_key refused and a warning that no receipt is asked for", keys, s.Warnings)
	}
	s.Values["api_key"], s.Values["callback_token_env"], s.Warnings = "abc", testToken, nil
	if err := ProviderType.Check(s); err != nil || len(s.Warnings) != 0 {
		t.Fatalf("Check = %v, warnings %q", err, s.Warnings)
	}
	if c := config(s); c.Callback != "https://ledger.example.com/v1/receipts/vonage?token="+testToken {
		t.Fatalf("callback %s", c.Callback)
	}
	s.PublicURL = ""
	var ke *provider.KeyError
	if err := ProviderType.Check(s); !errors.As(err, &ke) || ke.Key != "public_url" || !ke.Root {
		t.Fatalf("Check without public_url = %v, want public_url required", err)
	}
}
