package email

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: every problem is reported at once, each naming its configuration key.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{Provider: "smtp", Host: "smtp.example.com", From: "Ledger <noreply@example.com>"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	err := Config{Port: 70000, TLS: "ssl", Password: "x", Timeout: -time.Second, HeloName: "two words"}.Validate()
	if err == nil {
		t.Fatal("an invalid config was accepted")
	}
	for _, key := range []string{"provider:", "host:", "port:", "tls:", "password:", "from:", "timeout:", "helo_name:"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("problems %q do not name %s", err, key)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		key  string
	}{
		{"host with a port", Config{Host: "smtp.example.com:587"}, "host:"},
		{"host as a URL", Config{Host: "smtp://smtp.example.com"}, "host:"},
		{"from not an address", Config{From: "noreply"}, "from:"},
		{"from with a line break", Config{From: "noreply@example.com\r\nBcc: x@example.com"}, "from:"},
		{"from, two addresses", Config{From: "a@example.com, b@example.com"}, "from:"},
		{"provider with a space", Config{Provider: "my smtp"}, "provider:"},
		{"password in clear to a remote host", Config{TLS: TLSNone, Username: "u", Password: "p"}, "username:"},
	} {
		cfg := valid
		if tc.cfg.Host != "" {
			cfg.Host = tc.cfg.Host
		}
		if tc.cfg.From != "" {
			cfg.From = tc.cfg.From
		}
		if tc.cfg.Provider != "" {
			cfg.Provider = tc.cfg.Provider
		}
		cfg.TLS, cfg.Username, cfg.Password = tc.cfg.TLS, tc.cfg.Username, tc.cfg.Password
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.key) {
			t.Errorf("%s: %v, want a problem naming %s", tc.name, err, tc.key)
		}
	}
	loopback := valid
	loopback.Host, loopback.TLS, loopback.Username, loopback.Password = "127.0.0.1", TLSNone, "u", "p"
	if err := loopback.Validate(); err != nil {
		t.Errorf("AUTH in clear to the loopback refused: %v", err)
	}
}

// TestNewDefaults: the zero fields get the documented defaults, and New refuses what Validate
// refuses.
func TestNewDefaults(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Provider: "smtp", Host: "smtp.example.com", From: "noreply@Example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.TLS != TLSStartTLS || s.cfg.Port != 587 || s.cfg.Timeout != 30*time.Second || s.cfg.HeloName != "localhost" {
		t.Errorf("defaults = tls %s, port %d, timeout %s, helo %q; want starttls, 587, 30s, localhost",
			s.cfg.TLS, s.cfg.Port, s.cfg.Timeout, s.cfg.HeloName)
	}
	if s.addr != "smtp.example.com:587" || s.domain != "example.com" {
		t.Errorf("address %q, Message-ID domain %q; want smtp.example.com:587, example.com", s.addr, s.domain)
	}
	for mode, port := range map[TLSMode]int{TLSImplicit: 465, TLSNone: 25} {
		s, err := New(Config{Provider: "smtp", Host: "::1", From: "noreply@example.com", TLS: mode})
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.Port != port {
			t.Errorf("tls %s: port %d, want %d", mode, s.cfg.Port, port)
		}
		if want := "[::1]:" + map[int]string{465: "465", 25: "25"}[port]; s.addr != want {
			t.Errorf("tls %s: address %q, want %q", mode, s.addr, want)
		}
	}
	if _, err := New(Config{}); err == nil || !strings.HasPrefix(err.Error(), "email config: ") {
		t.Errorf("New(Config{}) = %v, want the config's problems", err)
	}
}
