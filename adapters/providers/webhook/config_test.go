package webhook

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: Validate() = %v, want nil", err)
	}
	ok := Config{Timeout: time.Second, AllowCIDRs: loopback, UserAgent: "acme-hooks/2 (ops@example.com)"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid Config: Validate() = %v, want nil", err)
	}

	bad := Config{Timeout: -time.Second, AllowCIDRs: []netip.Prefix{{}}, UserAgent: "agent\r\nX-Evil: 1", InFlight: -1}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want every problem reported")
	}
	joined, isJoined := err.(interface{ Unwrap() []error })
	if !isJoined || len(joined.Unwrap()) != 4 {
		t.Fatalf("Validate() = %v, want 4 joined problems", err)
	}
	for _, want := range []string{"timeout", "CIDR", "user agent", "in flight"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, want it to mention %q", err, want)
		}
	}
	if _, err := New(bad); err == nil {
		t.Error("New(bad config) = nil error, want the validation problems")
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.CloseIdleConnections)
	if s.timeout != DefaultTimeout {
		t.Errorf("timeout = %s, want %s", s.timeout, DefaultTimeout)
	}
	if s.userAgent != DefaultUserAgent {
		t.Errorf("user agent = %q, want %q", s.userAgent, DefaultUserAgent)
	}
	if s.transport.MaxIdleConnsPerHost != maxIdleConnsPerHost || s.transport.IdleConnTimeout != idleConnTimeout {
		t.Errorf("pooling = %d per host / %s idle, want %d / %s", s.transport.MaxIdleConnsPerHost,
			s.transport.IdleConnTimeout, maxIdleConnsPerHost, idleConnTimeout)
	}
	if s.transport.Proxy != nil {
		t.Error("transport uses a proxy, which would bypass the SSRF guard")
	}
}

func TestParseCIDRs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []string
		wantErr []string
	}{
		{in: "", want: nil},
		{in: "   ", want: nil},
		{in: "127.0.0.0/8", want: []string{"127.0.0.0/8"}},
		{in: " 10.0.0.0/8 , fd00::/8, ", want: []string{"10.0.0.0/8", "fd00::/8"}},
		{in: "10.0.0.5", want: []string{"10.0.0.5/32"}},
		{in: "::1", want: []string{"::1/128"}},
		{in: "10.0.0.0/33,not-a-cidr", wantErr: []string{"10.0.0.0/33", "not-a-cidr"}},
	}
	for _, tt := range tests {
		got, err := ParseCIDRs(tt.in)
		if tt.wantErr != nil {
			if err == nil {
				t.Errorf("ParseCIDRs(%q) = %v, want an error", tt.in, got)
				continue
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ParseCIDRs(%q) error %q does not name %q", tt.in, err, want)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseCIDRs(%q): %v", tt.in, err)
			continue
		}
		var gotStr []string
		for _, p := range got {
			gotStr = append(gotStr, p.String())
		}
		if !slices.Equal(gotStr, tt.want) {
			t.Errorf("ParseCIDRs(%q) = %v, want %v", tt.in, gotStr, tt.want)
		}
	}
}
