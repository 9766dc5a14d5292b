package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// mounts are the two ways the handler may be mounted; both must serve the same console.
var mounts = map[string]func() http.Handler{
	"mux at /console/": func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle(Prefix, Handler())
		return mux
	},
	"StripPrefix /console": func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle(Prefix, http.StripPrefix("/console", Handler()))
		mux.Handle("/console", http.StripPrefix("/console", Handler()))
		return mux
	},
}

func get(t *testing.T, h http.Handler, method, target string, header http.Header) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func checkSecurityHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
			"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s: %s = %q, want %q", what, name, got, want)
		}
	}
}

var assetRef = regexp.MustCompile(`(?:src|href)="(static/[^"]+)"`)

func TestConsoleHandlerServesIndexAndAssets(t *testing.T) {
	for name, mount := range mounts {
		t.Run(name, func(t *testing.T) {
			h := mount()
			resp, body := get(t, h, http.MethodGet, "/console/", nil)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
				t.Fatalf("GET /console/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			checkSecurityHeaders(t, "index.html", resp)
			if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
				t.Errorf("index.html Cache-Control %q, want no-cache", got)
			}
			if !strings.Contains(body, `<main id="main"`) {
				t.Errorf("GET /console/ is not the console's index.html: %.200s", body)
			}
			refs := assetRef.FindAllStringSubmatch(body, -1)
			if len(refs) < 3 {
				t.Fatalf("index.html names %d files, want the script, the stylesheet and the icon", len(refs))
			}
			for _, ref := range refs {
				if !regexp.MustCompile(`^static/[0-9a-f]{16}/`).MatchString(ref[1]) {
					t.Errorf("index.html names %s without the version", ref[1])
				}
				resp, _ := get(t, h, http.MethodGet, "/console/"+ref[1], nil)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET /console/%s: %d", ref[1], resp.StatusCode)
					continue
				}
				checkSecurityHeaders(t, ref[1], resp)
				if got := resp.Header.Get("Cache-Control"); !strings.Contains(got, "immutable") {
					t.Errorf("%s Cache-Control %q, want immutable (its path holds its version)", ref[1], got)
				}
			}
			resp, _ = get(t, h, http.MethodGet, "/console/static/0000000000000000/app.js", nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-cache" ||
				resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" {
				t.Errorf("app.js of another version: %d %q %q, want 200, no-cache, text/javascript", resp.StatusCode,
					resp.Header.Get("Cache-Control"), resp.Header.Get("Content-Type"))
			}

			resp, _ = get(t, h, http.MethodGet, "/console", nil)
			if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/console/" {
				t.Errorf("GET /console: %d Location %q, want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
			}
			resp, _ = get(t, h, http.MethodGet, "/console/nothing-here", nil)
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /console/nothing-here: %d, want 404", resp.StatusCode)
			}
			checkSecurityHeaders(t, "a 404", resp)
			resp, _ = get(t, h, http.MethodPost, "/console/", nil)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("POST /console/: %d Allow %q, want 405 GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
			}
			checkSecurityHeaders(t, "a 405", resp)
		})
	}
}

func TestConsoleIndexRevalidatesWithItsETag(t *testing.T) {
	h := Handler()
	resp, _ := get(t, h, http.MethodGet, "/console/", nil)
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("index.html has no ETag: no-cache would then mean a full download on every load")
	}
	resp, body := get(t, h, http.MethodGet, "/console/", http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Fatalf("GET with If-None-Match: %d (%d bytes), want 304", resp.StatusCode, len(body))
	}
	checkSecurityHeaders(t, "a 304", resp)
}

// svgNamespace is an XML namespace name, not an address anything fetches.
const svgNamespace = "http://www.w3.org/2000/svg"

// TestConsoleAssetsFetchNothingElsewhere: the files name no other origin (no CDN, no font, no
// analytics), hold no inline script or style the policy would block, and build no HTML from
// strings.
func TestConsoleAssetsFetchNothingElsewhere(t *testing.T) {
	absolute := regexp.MustCompile(`(?i)https?://[^\s"'<>)]*`)
	inlineScript := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`)
	checks := []struct {
		re   *regexp.Regexp
		what string
	}{
		{regexp.MustCompile(`(?i)\sstyle\s*=`), "an inline style attribute"},
		{regexp.MustCompile(`(?i)<style`), "a style element"},
		{regexp.MustCompile(`(?i)\son[a-z]+\s*=\s*["']`), "an inline event handler"},
		{regexp.MustCompile(`(?i)javascript:`), "a javascript: URL"},
		{regexp.MustCompile(`\.(?:inner|outer)HTML\b|insertAdjacentHTML|document\.write|\beval\(|new Function\(`), "HTML or code built from strings"},
		{regexp.MustCompile(`localStorage\.|document\.cookie`), "a place that outlives the tab (the key belongs in sessionStorage)"},
		{regexp.MustCompile(`(?i)@import|url\(`), "a stylesheet that loads more"},
	}
	n := 0
	err := fs.WalkDir(embedded, "assets", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(embedded, name)
		if err != nil {
			return err
		}
		text := string(b)
		for _, u := range absolute.FindAllString(text, -1) {
			if u != svgNamespace {
				t.Errorf("%s references %s: the console fetches nothing from another origin", name, u)
			}
		}
		if inlineScript.MatchString(text) {
			t.Errorf("%s has an inline script", name)
		}
		for _, c := range checks {
			if loc := c.re.FindStringIndex(text); loc != nil {
				t.Errorf("%s has %s: %q", name, c.what, text[max(0, loc[0]-20):min(len(text), loc[1]+20)])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("walked %d files, want index.html, app.js, style.css and the icon", n)
	}
}

// TestConsoleScriptCallsOnlyTheAPI: every fetch goes through api(), which takes a path under
// /v1/ and sends it to the page's own origin.
func TestConsoleScriptCallsOnlyTheAPI(t *testing.T) {
	b, err := fs.ReadFile(embedded, "assets/static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	if n := strings.Count(script, "fetch("); n != 1 {
		t.Errorf("app.js calls fetch %d times, want once (in api())", n)
	}
	if !strings.Contains(script, "!path.startsWith('/v1/')") {
		t.Error("api() no longer refuses a path outside /v1/")
	}
	for _, call := range regexp.MustCompile(`api\('(?:GET|POST|PUT|DELETE)', ([^,)]+)`).FindAllStringSubmatch(script, -1) {
		if !strings.HasPrefix(call[1], "'/v1/") && !strings.HasPrefix(call[1], "base") {
			t.Errorf("api() called with %s, want a literal /v1/ path", call[1])
		}
	}
	if strings.Contains(script, "XMLHttpRequest") || strings.Contains(script, "WebSocket") || strings.Contains(script, "sendBeacon") {
		t.Error("app.js talks to the network other than through api()")
	}
}
