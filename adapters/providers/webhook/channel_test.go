package webhook

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
)

func TestValidateURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"https://example.com/hook", "http://example.com", "HTTPS://EXAMPLE.COM/x?y=1", "https://127.0.0.1:8443/h", "https://[::1]/h",
		"https://example.com:1/h", "https://example.com:65535/h", "https://example.com:/h"} {
		if err := ValidateURL(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/relative/path", "example.com/hook", "ftp://example.com/f", "mailto:a@example.com",
		"https:///nohost", "https://:443/h", "http://exa mple.com/", "javascript:alert(1)",
		"https://example.com:0/h", "https://example.com:99999/h", "https://example.com:65536/h",
		"https://user:secret@example.com/h", "https://user@example.com/h", "https://:secret@example.com/h"} {
		if err := ValidateURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestChannel: the channel the registry gets names itself and its provider with Name, checks
// recipients with ValidateURL (naming the recipient field), limits per host, and gives its
// provider the default concurrency cap.
func TestChannel(t *testing.T) {
	t.Parallel()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ch := Channel(s)
	if ch.Name != Name || len(ch.Providers) != 1 || ch.Providers[0].Provider() != Name {
		t.Fatalf("channel %q with providers %v, want %q with its one sender", ch.Name, ch.Providers, Name)
	}
	if got, want := ch.ProviderLimit, (commands.Limit{Concurrency: 256}); got != want {
		t.Errorf("provider limit = %+v, want %+v", got, want)
	}
	if got := ch.Destination("https://Example.com:443/hook"); got != "example.com" {
		t.Errorf("destination = %q, want example.com", got)
	}
	if err := ch.Check("https://example.com/hook", json.RawMessage(`{}`)); err != nil {
		t.Errorf("valid recipient refused: %v", err)
	}
	var field *commands.InvalidField
	if err := ch.Check("ftp://example.com/f", json.RawMessage(`{}`)); !errors.As(err, &field) || field.Field != "recipient" {
		t.Errorf("invalid recipient: %v, want an InvalidField naming recipient", err)
	}
	if _, err := commands.NewChannels(ch); err != nil {
		t.Errorf("the registry refuses the channel: %v", err)
	}
}

// TestNormalize: the spellings of one URL that no receiver can tell apart have one normal form;
// the path and query stay as given; what ValidateURL refuses comes back unchanged. A normal form
// is itself a recipient the channel takes, and its own normal form.
func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"http://h/p", "http://h/p"},
		{"HTTP://h/p", "http://h/p"},
		{"http://h/p#f", "http://h/p"},
		{"http://h/p?", "http://h/p"},
		{"http://h/p?#f", "http://h/p"},
		{"Http://H:80/p", "http://h/p"},
		{"http://127.0.0.1:8081/hook", "http://127.0.0.1:8081/hook"},
		{"HTTP://127.0.0.1:8081/hook#f", "http://127.0.0.1:8081/hook"},
		{"https://Example.COM:443", "https://example.com/"},
		{"https://example.com:080/h", "https://example.com:80/h"},
		{"http://example.com:080/h", "http://example.com/h"},
		{"http://example.com:0443/h", "http://example.com:443/h"},
		{"https://example.com:/h", "https://example.com/h"},
		{"http://example.com", "http://example.com/"},
		{"http://example.com?a=1", "http://example.com/?a=1"},
		{"http://example.com#top", "http://example.com/"},
		{"HTTP://Example.COM:80/Hook?#f", "http://example.com/Hook"},
		{"https://example.com/Path/To?Q=A&b=%2F#frag", "https://example.com/Path/To?Q=A&b=%2F"},
		{"https://example.com/a%2fb", "https://example.com/a%2fb"},
		{"https://example.com/p??", "https://example.com/p??"},
		{"https://example.com/p?a#b?c", "https://example.com/p?a"},
		{"https://example.com//double", "https://example.com//double"},
		{"http://[::1]:80/h", "http://[::1]/h"},
		{"https://[2001:DB8::1]:8443/h", "https://[2001:db8::1]:8443/h"},
		{"http://[FE80::1%25En0]/h", "http://[fe80::1%25En0]/h"},
		// Refused by ValidateURL: returned as they are.
		{"ftp://Example.com/f", "ftp://Example.com/f"},
		{"HTTPS://user:secret@Example.com/h", "HTTPS://user:secret@Example.com/h"},
		{"/relative#f", "/relative#f"},
		{"", ""},
	} {
		got := Normalize(tt.in)
		if got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			continue
		}
		if ValidateURL(tt.in) != nil {
			continue
		}
		if err := ValidateURL(got); err != nil {
			t.Errorf("normal form %q of %q is refused: %v", got, tt.in, err)
		}
		if again := Normalize(got); again != got {
			t.Errorf("Normalize(%q) = %q: a normal form must be its own", got, again)
		}
	}
	if got := Channel().Normalize("HTTP://h/p#f"); got != "http://h/p" {
		t.Errorf("the channel's Normalize gives %q, want http://h/p", got)
	}
}

// FuzzNormalize: the normal form of any URL the channel takes is a URL it takes, its own normal
// form, and the same request: the same host (but for case), the same effective port, path and
// query.
func FuzzNormalize(f *testing.F) {
	for _, seed := range []string{"HTTP://h/p#f", "http://h/p?", "https://Example.COM:443", "http://[FE80::1%25En0]:080/a%2Fb?x#y",
		"http://h?", "https://h:/p??#", "http://h.example//a/../b?q=%41"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Normalize(in)
		if ValidateURL(in) != nil {
			if out != in {
				t.Fatalf("Normalize(%q) = %q, want a refused URL as it is", in, out)
			}
			return
		}
		if err := ValidateURL(out); err != nil {
			t.Fatalf("normal form %q of %q is refused: %v", out, in, err)
		}
		if again := Normalize(out); again != out {
			t.Fatalf("Normalize(%q) = %q, want its own normal form", out, again)
		}
		u, _ := url.Parse(in)
		v, _ := url.Parse(out)
		port := func(u *url.URL) string {
			if p := strings.TrimLeft(u.Port(), "0"); p != "" {
				return p
			}
			return map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		path := func(u *url.URL) string { return cmp.Or(u.EscapedPath(), "/") }
		if u.Scheme != v.Scheme || !strings.EqualFold(u.Hostname(), v.Hostname()) || port(u) != port(v) ||
			path(u) != path(v) || u.RawQuery != v.RawQuery {
			t.Fatalf("Normalize(%q) = %q: another request (scheme %s/%s, host %s/%s, port %s/%s, path %s/%s, query %s/%s)",
				in, out, u.Scheme, v.Scheme, u.Hostname(), v.Hostname(), port(u), port(v), path(u), path(v), u.RawQuery, v.RawQuery)
		}
	})
}
