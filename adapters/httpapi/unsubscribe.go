package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html/template"
	"mime"
	"net/http"
	"strings"

	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// One-click unsubscribe (RFC 8058). An email message of a category that is not required names
// {public_url}/u/{token} in its List-Unsubscribe header; the token is signed over the tenant,
// the channel, the recipient and the category, so it needs no API key and opts out no one else.
// A GET shows a page with one button and changes nothing: mail scanners and link previews fetch
// every link of a message. The POST with List-Unsubscribe=One-Click, which mail clients send
// when the reader asks to unsubscribe, records the opt-out.

const (
	// oneClickField and oneClickValue are the POST body RFC 8058 section 3.1 prescribes.
	oneClickField = "List-Unsubscribe"
	oneClickValue = "One-Click"
	// maxUnsubscribeBody bounds the body of a one-click POST: it holds one short field.
	maxUnsubscribeBody = 16 << 10
)

// unsubscribeStyle is the pages' only style; the Content-Security-Policy admits it by its hash,
// and nothing else: no script, no image, no other origin, no frame.
const unsubscribeStyle = `body{font:16px/1.5 system-ui,sans-serif;margin:3em auto;max-width:32em;padding:0 1em;color:#222}` +
	`button{font:inherit;padding:.5em 1.5em;cursor:pointer}`

// unsubscribeCSP is the pages' Content-Security-Policy: the form posts to the page's own URL.
var unsubscribeCSP = func() string {
	sum := sha256.Sum256([]byte(unsubscribeStyle))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}()

// unsubscribePageHTML is the confirmation page (GET) and the answer to the one-click (POST).
var unsubscribePageHTML = template.Must(template.New("unsubscribe").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{{if .Done}}Unsubscribed{{else}}Unsubscribe{{end}}</title>
<style>{{.Style}}</style></head>
<body><main>
{{if .Done}}<h1>You are unsubscribed</h1>
<p>No more <strong>{{.Category}}</strong> messages will be sent to <strong>{{.Recipient}}</strong>.</p>
{{else}}<h1>Unsubscribe</h1>
<p>Stop sending <strong>{{.Category}}</strong> messages to <strong>{{.Recipient}}</strong>?</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>
{{end}}</main></body></html>
`))

// unsubscribePage is GET /u/{token}: the confirmation page. It records nothing.
func (s *server) unsubscribePage(w http.ResponseWriter, r *http.Request) {
	unsubscribeHeaders(w)
	t, err := s.unsubscribeToken(r)
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	s.writeUnsubscribePage(w, r, t, false)
}

// unsubscribe is POST /u/{token}: the one-click opt-out, recorded as the recipient's preference
// (source unsubscribe). A repeat changes nothing and gets the same answer.
func (s *server) unsubscribe(w http.ResponseWriter, r *http.Request) {
	unsubscribeHeaders(w)
	t, err := s.unsubscribeToken(r)
	if err == nil {
		err = readOneClick(w, r)
	}
	if err == nil {
		_, err = s.deps.Suppressions.SetPreference(r.Context(), t.Tenant, domain.Preference{Channel: t.Channel,
			Recipient: t.Recipient, Category: t.Category, OptedOut: true, Source: domain.PreferenceByUnsubscribe})
		var field *commands.InvalidField
		if errors.As(err, &field) {
			// Signed when the message went out, refused now: the configuration changed since.
			err = invalid("token", "the link's %s cannot be opted out of now: %s", field.Field, field.Reason)
		}
	}
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	s.writeUnsubscribePage(w, r, t, true)
}

// unsubscribeToken verifies the path's token and checks that its category may still be opted
// out of: declared, and not required.
func (s *server) unsubscribeToken(r *http.Request) (unsubscribe.Token, error) {
	t, err := unsubscribe.Verify(s.cfg.UnsubscribeSecret, r.PathValue("token"))
	if err != nil {
		return t, &requestError{kind: errForbidden, field: "token",
			detail: "this unsubscribe link was not made by this ledger, or it was altered"}
	}
	switch c, ok := s.deps.Suppressions.Category(t.Category); {
	case !ok:
		return t, invalid("token", "the link's category %q is no longer declared", t.Category)
	case c.Required:
		return t, invalid("token", "the link's category %q is required now (security, legal): it cannot be opted out of", t.Category)
	}
	return t, nil
}

// readOneClick reads the body of a one-click POST: a form (urlencoded, or multipart as RFC 8058
// permits) whose List-Unsubscribe is One-Click. Anything else is a 400: only a mail client's
// one-click, or the page's button, unsubscribes.
func readOneClick(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxUnsubscribeBody)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	switch mt {
	case "application/x-www-form-urlencoded":
		err = r.ParseForm()
	case "multipart/form-data":
		err = r.ParseMultipartForm(maxUnsubscribeBody)
		if r.MultipartForm != nil {
			defer func() { _ = r.MultipartForm.RemoveAll() }()
		}
	default:
		return invalid(oneClickField, "send the form body %s=%s (application/x-www-form-urlencoded or multipart/form-data)",
			oneClickField, oneClickValue)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case err != nil:
		return invalid(oneClickField, "the form does not decode: %v", err)
	}
	if v := r.PostForm[oneClickField]; len(v) != 1 || v[0] != oneClickValue {
		return invalid(oneClickField, "send %s=%s in the form body (RFC 8058)", oneClickField, oneClickValue)
	}
	return nil
}

// unsubscribeHeaders are the pages' security headers, the console's: the token in the URL
// must not leak through a Referer, the page must not be framed (a click-jacked button) or kept.
func unsubscribeHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", unsubscribeCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// writeUnsubscribePage answers 200 with the confirmation page, or with the opt-out's (done).
func (s *server) writeUnsubscribePage(w http.ResponseWriter, r *http.Request, t unsubscribe.Token, done bool) {
	var body bytes.Buffer
	err := unsubscribePageHTML.Execute(&body, struct {
		Done                bool
		Category, Recipient string
		Style               template.CSS
	}{done, t.Category, maskRecipient(t.Recipient), template.CSS(unsubscribeStyle)})
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body.Bytes())
}

// maskRecipient shows enough of a recipient for its owner to recognise it and not enough for
// whoever holds a forwarded link to learn it: the first character of an address's local part
// and its domain ("a***@example.com"); of anything else its first and last two characters.
func maskRecipient(recipient string) string {
	runes := []rune(recipient)
	if at := strings.LastIndex(recipient, "@"); at > 0 {
		local := []rune(recipient[:at])
		return string(local[0]) + "***" + recipient[at:]
	}
	if len(runes) <= 4 {
		return "***"
	}
	return string(runes[0]) + "***" + string(runes[len(runes)-2:])
}
