package webhook

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestGuardDefaultAllowsOnlyPublicUnicast(t *testing.T) {
	t.Parallel()
	refused := []string{
		"127.0.0.1", "127.1.2.3", // loopback
		"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", // RFC 1918
		"169.254.169.254",               // link-local, the cloud metadata endpoint
		"100.64.0.1", "100.127.255.254", // CGNAT
		"0.0.0.0", "0.1.2.3", // unspecified, "this network"
		"255.255.255.255", "240.0.0.1", // broadcast, reserved
		"224.0.0.1", "239.255.255.250", // multicast
		"192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.7", "203.0.113.9", // special purpose
		"::", "::1", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "fec0::1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", // IPv4-mapped
		"::127.0.0.1",           // IPv4-compatible
		"64:ff9b::7f00:1",       // NAT64 of 127.0.0.1
		"64:ff9b::a9fe:a9fe",    // NAT64 of 169.254.169.254
		"64:ff9b:1::1",          // local-use NAT64
		"2002:7f00:1::1",        // 6to4 of 127.0.0.1
		"2001:db8::1", "100::1", // documentation, discard-only
	}
	allowed := []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "100.128.0.1", "172.32.0.1", "192.169.0.1",
		"2606:4700:4700::1111", "2a00:1450:4001::200e",
		"::ffff:8.8.8.8",   // IPv4-mapped public address
		"64:ff9b::808:808", // NAT64 of 8.8.8.8
		"2002:808:808::1",  // 6to4 of 8.8.8.8
	}
	g := newGuard(nil)
	for _, a := range refused {
		err := g.check(netip.MustParseAddr(a))
		var notAllowed *addressNotAllowedError
		if !errors.As(err, &notAllowed) {
			t.Errorf("check(%s) = %v, want refused", a, err)
		}
	}
	for _, a := range allowed {
		if err := g.check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("check(%s) = %v, want allowed", a, err)
		}
	}
}

func TestGuardAllowList(t *testing.T) {
	t.Parallel()
	g := newGuard([]netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("10.20.0.0/16"),
		netip.MustParsePrefix("10.30.1.5/16"), // not masked: still means 10.30.0.0/16
		netip.MustParsePrefix("fd00::/8"),
		netip.MustParsePrefix("::ffff:192.168.7.0/120"), // mapped form of 192.168.7.0/24
	})
	tests := []struct {
		addr    string
		allowed bool
	}{
		{"127.0.0.1", true},
		{"::ffff:127.0.0.1", true},
		{"10.20.3.4", true},
		{"10.30.200.1", true},
		{"10.21.0.1", false},
		{"192.168.7.9", true},
		{"192.168.8.9", false},
		{"fd12::1", true},
		{"fe80::1%eth0", false},
		{"::1", false},
		{"8.8.8.8", true},
	}
	for _, tt := range tests {
		err := g.check(netip.MustParseAddr(tt.addr))
		if got := err == nil; got != tt.allowed {
			t.Errorf("check(%s) = %v, want allowed=%t", tt.addr, err, tt.allowed)
		}
	}
}

func TestGuardControl(t *testing.T) {
	t.Parallel()
	g := newGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	tests := []struct {
		address string
		allowed bool
	}{
		{"127.0.0.1:8080", true},
		{"8.8.8.8:443", true},
		{"[2606:4700:4700::1111]:443", true},
		{"[::1]:443", false},
		{"[fe80::1%eth0]:80", false},
		{"10.0.0.1:80", false},
		{"not-an-address", false},
	}
	for _, tt := range tests {
		err := g.control("tcp", tt.address, nil)
		if got := err == nil; got != tt.allowed {
			t.Errorf("control(%q) = %v, want allowed=%t", tt.address, err, tt.allowed)
		}
	}
}

func TestAddressNotAllowedErrorNamesTheSetting(t *testing.T) {
	t.Parallel()
	err := newGuard(nil).check(netip.MustParseAddr("10.0.0.1"))
	if err == nil {
		t.Fatal("check(10.0.0.1) = nil, want refused")
	}
	for _, want := range []string{"10.0.0.1", "private address", "not allowed", "LEDGER_WEBHOOK_ALLOW_CIDRS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
