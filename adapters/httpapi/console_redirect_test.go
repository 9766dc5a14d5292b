package httpapi_test

import (
	"net/http"
	"testing"
)

// TestConsoleRedirectCarriesTheConsoleHeaders: /console, the redirect to /console/, carries the
// same security headers as every console answer (CSP, X-Frame-Options, nosniff, referrer and
// opener policies), whatever the method. The mux used to answer it itself, with Content-Type
// and Location only.
func TestConsoleRedirectCarriesTheConsoleHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Not b.client: that one follows redirects, and the description has no operation for the
	// redirect itself.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	answer := func(method, path string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, b.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	page := answer(http.MethodGet, "/console/")
	if page.StatusCode != http.StatusOK {
		t.Fatalf("GET /console/: %d", page.StatusCode)
	}
	headers := []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy", "Cross-Origin-Opener-Policy"}
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
		for _, path := range []string{"/console", "/console?x=1"} {
			res := answer(method, path)
			if res.StatusCode < 300 || res.StatusCode > 399 || res.Header.Get("Location") != "/console/" {
				t.Fatalf("%s %s: %d to %q, want a redirect to /console/", method, path, res.StatusCode, res.Header.Get("Location"))
			}
			for _, h := range headers {
				if got, want := res.Header.Get(h), page.Header.Get(h); got == "" || got != want {
					t.Errorf("%s %s: %s %q, want the console's %q", method, path, h, got, want)
				}
			}
		}
	}
}
