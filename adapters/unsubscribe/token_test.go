package unsubscribe_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/unsubscribe"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

var token = unsubscribe.Token{Tenant: "acme", Channel: "email", Recipient: "ann.o'neil+news@example.com", Category: "marketing"}

// TestSignVerifyRoundTrip: a signed token verifies to the same fields, and is URL-safe as it is.
func TestSignVerifyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tok := range []unsubscribe.Token{token, {}, {Tenant: "t", Channel: "email", Recipient: strings.Repeat("é", 200), Category: "c"}} {
		s := unsubscribe.Sign(secret, tok)
		if strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || strings.Count(s, ".") != 1 {
			t.Errorf("token %q is not base64url.base64url", s)
		}
		got, err := unsubscribe.Verify(secret, s)
		if err != nil || got != tok {
			t.Errorf("Verify(Sign(%+v)) = %+v, %v", tok, got, err)
		}
	}
	if got, want := unsubscribe.Link("https://ledger.example/", "abc.def"), "https://ledger.example/u/abc.def"; got != want {
		t.Errorf("Link = %q, want %q", got, want)
	}
}

// TestVerifyRefusesEverySingleByteAlteration: every byte of a token replaced by every other
// byte value, every truncation and every insertion is refused, so no change to a link opts
// anyone else out.
func TestVerifyRefusesEverySingleByteAlteration(t *testing.T) {
	t.Parallel()
	s := unsubscribe.Sign(secret, token)
	refused := func(altered string) {
		t.Helper()
		if got, err := unsubscribe.Verify(secret, altered); !errors.Is(err, unsubscribe.ErrInvalid) {
			t.Fatalf("Verify(%q) = %+v, %v; want ErrInvalid (altered from %q)", altered, got, err, s)
		}
	}
	for i := range len(s) {
		for b := range 256 {
			if byte(b) == s[i] {
				continue
			}
			refused(s[:i] + string([]byte{byte(b)}) + s[i+1:])
		}
		refused(s[:i])
		refused(s[:i] + s[i+1:])
		refused(s[:i] + "A" + s[i:])
	}
	refused(s + "A")
}

// TestVerifyRefusesAnotherSecret: a token signed under another secret is refused.
func TestVerifyRefusesAnotherSecret(t *testing.T) {
	t.Parallel()
	other := []byte("0123456789abcdef0123456789abcdeF")
	if got, err := unsubscribe.Verify(other, unsubscribe.Sign(secret, token)); !errors.Is(err, unsubscribe.ErrInvalid) {
		t.Fatalf("Verify under another secret = %+v, %v; want ErrInvalid", got, err)
	}
	if got, err := unsubscribe.Verify(secret, strings.Repeat("A", 2000)+"."+"B"); !errors.Is(err, unsubscribe.ErrInvalid) {
		t.Fatalf("Verify of a long string = %+v, %v; want ErrInvalid", got, err)
	}
}
