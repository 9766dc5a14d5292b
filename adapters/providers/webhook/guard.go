package webhook

import (
	"fmt"
	"net/netip"
	"syscall"
)

// guard is the SSRF guard: webhook URLs come from callers, so without it any tenant could make
// the ledger POST to its own admin ports, the cloud metadata endpoint or the private network.
//
// It runs in the dialer's Control hook, on the address about to be connected, after name
// resolution. Checking the URL's host before sending would not be enough: a name can resolve to
// a public address when checked and to a private one when dialled (DNS rebinding), and a
// redirect or a name with several addresses would escape a check done only once.
type guard struct {
	allow []netip.Prefix
}

// newGuard normalises the allow list so that lookups compare like with like: prefixes are
// masked, and an IPv4-mapped IPv6 prefix becomes the IPv4 prefix it denotes, because dialled
// addresses are unmapped before the check.
func newGuard(allow []netip.Prefix) *guard {
	g := &guard{allow: make([]netip.Prefix, 0, len(allow))}
	for _, p := range allow {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		g.allow = append(g.allow, p.Masked())
	}
	return g
}

// control is the net.Dialer Control hook: it runs after the socket is created and before
// connect, so a refused address never sees a single packet from us.
func (g *guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &addressNotAllowedError{address: address, reason: "unparsable address"}
	}
	return g.check(ap.Addr())
}

// check returns an *addressNotAllowedError unless addr may be dialled.
func (g *guard) check(addr netip.Addr) error {
	// A zone never matches a prefix, and ::ffff:10.0.0.1 is 10.0.0.1 on the wire.
	addr = addr.WithZone("").Unmap()
	for _, p := range g.allow {
		if p.Contains(addr) {
			return nil
		}
	}
	if reason := blockedReason(addr); reason != "" {
		return &addressNotAllowedError{address: addr.String(), reason: reason}
	}
	return nil
}

// addressNotAllowedError says that the guard refused a destination. Retrying cannot help, so the
// attempt is permanent; the message names the setting that would let the address through.
type addressNotAllowedError struct {
	address string
	reason  string
}

func (e *addressNotAllowedError) Error() string {
	return fmt.Sprintf("address %s is not allowed (%s); add it to LEDGER_WEBHOOK_ALLOW_CIDRS to let webhooks reach it",
		e.address, e.reason)
}

// specialPurpose lists the non-public ranges that netip's predicates do not cover (IANA
// special-purpose address registries, RFC 6890 and successors).
var specialPurpose = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "discard-only address"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("fec0::/10"), "site-local address"},
}

// Prefixes whose addresses embed an IPv4 address that a translator on the path would reach:
// 64:ff9b::a.b.c.d must be judged as a.b.c.d, or it becomes a way into 127.0.0.1.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// blockedReason returns why addr is not a public unicast address, or "" if it is one.
func blockedReason(addr netip.Addr) string {
	switch {
	case !addr.IsValid():
		return "invalid address"
	case addr.IsUnspecified():
		return "unspecified address"
	case addr.IsLoopback():
		return "loopback address"
	case addr.IsPrivate():
		return "private address"
	case addr.IsLinkLocalUnicast():
		return "link-local address"
	case addr.IsMulticast():
		return "multicast address"
	}
	for _, sp := range specialPurpose {
		if sp.prefix.Contains(addr) {
			return sp.reason
		}
	}
	if nat64Prefix.Contains(addr) {
		b := addr.As16()
		if r := blockedReason(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return "NAT64 address embedding a " + r
		}
	}
	if sixToFour.Contains(addr) {
		b := addr.As16()
		if r := blockedReason(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
			return "6to4 address embedding a " + r
		}
	}
	if !addr.IsGlobalUnicast() {
		// Catch-all for anything the cases above missed (the IPv4 broadcast address, say).
		return "not a global unicast address"
	}
	return ""
}
