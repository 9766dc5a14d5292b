package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnsubscribeSecretTooShortIsRefusedAtStart: a LEDGER_UNSUBSCRIBE_SECRET under 32 bytes is
// refused by the serve configuration's check, naming the variable and never repeating the value;
// 32 bytes and unset are taken.
func TestUnsubscribeSecretTooShortIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.UnsubscribeSecret = "short-secret-31-bytes-long-xxxx"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "LEDGER_UNSUBSCRIBE_SECRET") || strings.Contains(err.Error(), cfg.UnsubscribeSecret) {
		t.Errorf("a 31-byte secret: %v; want a refusal naming LEDGER_UNSUBSCRIBE_SECRET without the value", err)
	}
	for _, ok := range []string{"", strings.Repeat("k", 32)} {
		cfg.UnsubscribeSecret = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("a secret of %d bytes is refused: %v", len(ok), err)
		}
	}
}

// TestConfigCheckWarnsOfEmailWithoutOneClickUnsubscribe: `ledger config check` of a file with
// categories and the email channel warns when LEDGER_UNSUBSCRIBE_SECRET or public_url is missing
// (its messages would go without List-Unsubscribe), and says nothing when both are there or
// when no category can be opted out of; a short secret is refused.
func TestConfigCheckWarnsOfEmailWithoutOneClickUnsubscribe(t *testing.T) {
	t.Parallel()
	const email = "channels:\n  email: {providers: [relay]}\nproviders:\n  relay: {type: smtp, host: 127.0.0.1, port: 25, tls: none, from: noreply@ledger.test}\n"
	secret := map[string]string{envUnsubscribeSecret: strings.Repeat("k", 32)}
	tests := []struct {
		name, file string
		env        map[string]string
		warning    string // "" for none
	}{
		{"no secret", "public_url: http://127.0.0.1:8080\ncategories: {marketing: {}}\n" + email, nil, "LEDGER_UNSUBSCRIBE_SECRET is not set"},
		{"no public_url", "categories: {marketing: {}}\n" + email, secret, "the file has no public_url"},
		{"neither", "categories: {marketing: {}}\n" + email, nil, "LEDGER_UNSUBSCRIBE_SECRET is not set and the file has no public_url"},
		{"both", "public_url: http://127.0.0.1:8080\ncategories: {marketing: {}}\n" + email, secret, ""},
		{"only required categories", "categories: {account: {required: true}}\n" + email, nil, ""},
		{"no categories", email, nil, ""},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "f.yaml")
		if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
			t.Fatal(err)
		}
		lines, err := checkFile(path, DefaultConfig(), env(tt.env))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		text := strings.Join(lines, "\n")
		switch {
		case tt.warning == "" && strings.Contains(text, "List-Unsubscribe"):
			t.Errorf("%s: config check warns:\n%s", tt.name, text)
		case tt.warning != "" && !strings.Contains(text, "warning: categories are declared and the email channel is served, but "+tt.warning+":"):
			t.Errorf("%s: config check says\n%s\nwhich does not warn that %s", tt.name, text, tt.warning)
		}
	}
	path := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(path, []byte("categories: {marketing: {}}\n"+email), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkFile(path, DefaultConfig(), env(map[string]string{envUnsubscribeSecret: "short"})); err == nil ||
		!strings.Contains(err.Error(), envUnsubscribeSecret) {
		t.Errorf("a short secret: %v, want a refusal naming %s", err, envUnsubscribeSecret)
	}
}
