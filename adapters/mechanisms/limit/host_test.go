package limit

import "testing"

func TestHostOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		recipient, want string
	}{
		{"https://example.com/hook", "example.com"},
		{"https://Example.COM/hook?x=1", "example.com"},
		{"https://example.com:8443/hook", "example.com:8443"},
		{"https://example.com:443/hook", "example.com"},
		{"http://example.com:80/hook", "example.com"},
		{"http://example.com:443/hook", "example.com:443"},
		{"https://example.com./hook", "example.com"},
		{"https://user:secret@example.com/hook", "example.com"},
		{"http://[::1]:8080/hook", "[::1]:8080"},
		{"http://[::1]/hook", "::1"},
		{"  https://example.com/hook  ", "example.com"},
		{"ann@Example.com", "example.com"},
		{"mailto:ann@example.org", "example.org"},
		{"odd@name@example.net", "example.net"},
		{"+15551234567", "+15551234567"},
		{"device-token-ABC", "device-token-ABC"},
		{"trailing@", "trailing@"},
		{"https://exa mple.com/", "https://exa mple.com/"},
		{"https:///path-only", "https:///path-only"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := HostOf(tt.recipient); got != tt.want {
			t.Errorf("HostOf(%q) = %q, want %q", tt.recipient, got, tt.want)
		}
	}
}

func TestHostOfMatchesOverrideKeys(t *testing.T) {
	t.Parallel()
	// An operator writes a key the way it looks to them; New must find it for the URL's host.
	for key, recipient := range map[string]string{
		"API.Example.com":  "https://api.example.com/x",
		"example.com.":     "https://example.com/x",
		"[::1]":            "http://[::1]/x",
		"Example.com:8443": "https://example.com:8443/x",
	} {
		if got, want := canonicalHost(key), HostOf(recipient); got != want {
			t.Errorf("key %q is stored as %q, but HostOf(%q) = %q", key, got, recipient, want)
		}
	}
}
