package twilio_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/twilio"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []twilio.Config{
		{Provider: "twilio", AccountSID: testAccount, AuthToken: testToken, From: testFrom},
		{Provider: "twilio-backup_2", BaseURL: "http://127.0.0.1:8081", AccountSID: "b5e3c7a0-1111-2222-3333-444455556666",
			AuthToken: "PTsecretsecret", From: "Ledger Co", StatusCallback: "https://ledger.example/v1/receipts/twilio-backup_2?x=1",
			Timeout: time.Second, DeliveredOn: twilio.DeliveredOnAccept},
		{Provider: "twilio", BaseURL: "https://proxy.example/twilio/", AccountSID: testAccount, AuthToken: testToken, From: "12345",
			DeliveredOn: twilio.DeliveredOnReceipt},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%v: Validate() = %v, want nil", ok, err)
		}
	}

	err := (twilio.Config{}).Validate()
	for _, key := range []string{"provider is required", "account_sid is required", "auth_token_env", "from: is required"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("zero Config: Validate() = %v, want it to say %q", err, key)
		}
	}

	bad := twilio.Config{
		Provider:       "Twilio SMS",
		BaseURL:        "ftp://user:" + testToken + "@api.twilio.com",
		AccountSID:     "AC:123",
		AuthToken:      testToken + " \n",
		From:           "+0123",
		StatusCallback: "ledger.example/receipts",
		Timeout:        -time.Second,
		DeliveredOn:    "always",
	}
	err = bad.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 8 {
		t.Fatalf("Validate() = %v, want 8 joined problems", err)
	}
	for _, key := range []string{"provider", "base_url", "account_sid", "auth_token_env", "from", "status_callback", "timeout", "delivered_on"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("Validate() = %q, want it to name %s", err, key)
		}
	}
	if holdsToken(err.Error()) {
		t.Errorf("Validate() = %q repeats the auth token", err)
	}
	if _, err := twilio.New(bad); err == nil || holdsToken(err.Error()) {
		t.Errorf("New(bad config) = %v, want the problems without the auth token", err)
	}
}

func TestConfigFrom(t *testing.T) {
	t.Parallel()
	for _, from := range []string{"+15005550006", "12345", "Ledger", "Ledger Co 1"} {
		cfg := twilio.Config{Provider: "twilio", AccountSID: testAccount, AuthToken: testToken, From: from}
		if err := cfg.Validate(); err != nil {
			t.Errorf("From %q: Validate() = %v, want nil", from, err)
		}
	}
	for _, from := range []string{"15005550006", "+1 500 555", "Ledger Company Ltd", "12", "12345678901", "Ledger!"} {
		cfg := twilio.Config{Provider: "twilio", AccountSID: testAccount, AuthToken: testToken, From: from}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "from") {
			t.Errorf("From %q: Validate() = %v, want from refused", from, err)
		}
	}
}

// TestConfigPrintsNoToken: printing or logging a Config masks the auth token.
func TestConfigPrintsNoToken(t *testing.T) {
	t.Parallel()
	cfg := twilio.Config{Provider: "twilio", AccountSID: testAccount, AuthToken: testToken, From: testFrom}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "twilio", cfg)
	for _, printed := range []string{fmt.Sprint(cfg), fmt.Sprintf("%v %+v %s", cfg, cfg, cfg), buf.String()} {
		if holdsToken(printed) {
			t.Errorf("printing the Config shows the auth token: %s", printed)
		}
		if !strings.Contains(printed, "redacted") {
			t.Errorf("printed %s, want it to say the token is set", printed)
		}
	}
}
