// Package console is the operators' web console: a single-page application of plain HTML, CSS
// and JavaScript, embedded in the binary and served under /console/. It has no build step and
// fetches nothing from anywhere but its own origin: the page calls the public HTTP API (/v1/)
// with the tenant's API key, which the operator enters once and the browser keeps in
// sessionStorage, so the console can do nothing the key cannot do over curl.
//
// Mount Handler on the API listener at "/console/" as it is:
//
//	mux.Handle("/console/", console.Handler())
//
// The handler reads the full request path, so it needs no http.StripPrefix; it also works behind
// http.StripPrefix("/console", ...), since it accepts its paths with or without that prefix. A
// ServeMux answers /console with a redirect to /console/ for such a pattern; the handler does the
// same when it is reached at /console itself.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// contentSecurityPolicy forbids inline scripts and styles and every other origin: the console's
// only code is its own files, and it talks only to the API of the origin that served it.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Cache policies. index.html is revalidated on every load (its ETag makes that a 304), so a new
// binary's console is picked up at once; it names the other files under a path that holds the
// hash of their content (staticDir + "/<hash>/"), so those may be kept for a year.
const (
	cacheIndex     = "no-cache"
	cacheVersioned = "public, max-age=31536000, immutable"
	staticDir      = "static"
)

//go:embed assets
var embedded embed.FS

// asset is one file as served.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// site is the console's files, read once.
type site struct {
	index   asset
	static  map[string]asset // by name under assets/static
	version string           // hash of every static file, in the versioned paths
}

// Handler serves the console (see the package comment for where to mount it). Every answer,
// errors and redirects included, carries the security headers.
func Handler() http.Handler {
	s, err := load(embedded)
	if err != nil {
		// The files are compiled in: a failure here is a broken build, caught by the tests.
		panic(fmt.Sprintf("console: %v", err))
	}
	return s
}

// load reads the embedded files and names the static ones by version in index.html.
func load(fsys fs.FS) (*site, error) {
	s := &site{static: map[string]asset{}}
	all := sha256.New()
	err := fs.WalkDir(fsys, "assets/"+staticDir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(name, "assets/"+staticDir+"/")
		s.static[rel] = newAsset(rel, body)
		fmt.Fprintf(all, "%s\x00%x\x00", rel, sha256.Sum256(body))
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.version = hex.EncodeToString(all.Sum(nil))[:16]
	index, err := fs.ReadFile(fsys, "assets/index.html")
	if err != nil {
		return nil, err
	}
	// index.html names its files relatively ("static/app.js"): point them at this version.
	index = bytes.ReplaceAll(index, []byte(`"`+staticDir+`/`), []byte(`"`+staticDir+`/`+s.version+`/`))
	s.index = newAsset("index.html", index)
	return s, nil
}

func newAsset(name string, body []byte) asset {
	sum := sha256.Sum256(body)
	return asset{body: body, contentType: contentType(name), etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}

// contentType is chosen here rather than by the mime package, whose table depends on the
// machine's files: with nosniff, a wrong type would stop the script from running.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}

// ServeHTTP answers GET and HEAD for the console's files.
func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")

	// The path with or without the mount point, so http.StripPrefix("/console", ...) works too.
	rel := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/"))
	if rel == "" {
		h.Set("Cache-Control", cacheIndex)
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: the console is read with GET", http.StatusMethodNotAllowed)
		return
	}
	switch {
	case rel == "/" || rel == "/index.html":
		s.serve(w, r, s.index, cacheIndex)
		return
	case strings.HasPrefix(rel, "/"+staticDir+"/"):
		version, name, ok := strings.Cut(strings.TrimPrefix(rel, "/"+staticDir+"/"), "/")
		if a, found := s.static[name]; ok && found {
			cache := cacheVersioned
			if version != s.version {
				// A page of another build (say, during a rolling deploy) asks for its version:
				// give the current file, but do not let it be kept under the other name.
				cache = cacheIndex
			}
			s.serve(w, r, a, cache)
			return
		}
	}
	h.Set("Cache-Control", cacheIndex)
	http.Error(w, "not found: the console is at "+Prefix, http.StatusNotFound)
}

func (s *site) serve(w http.ResponseWriter, r *http.Request, a asset, cache string) {
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", cache)
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
