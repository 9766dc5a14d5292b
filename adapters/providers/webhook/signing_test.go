package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// verify is a receiver's check, written from the Standard Webhooks specification, not from
// Sign: the signed content is "msg_id.timestamp.body", the key is the base64 part of the
// whsec_ secret, each signature of the header is "v1," and base64 HMAC-SHA256, space-separated,
// and a timestamp more than five minutes from now is refused.
func verify(secret string, header http.Header, body []byte, now time.Time) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	ts, err := strconv.ParseInt(header.Get("webhook-timestamp"), 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(header.Get("webhook-id") + "." + header.Get("webhook-timestamp") + "." + string(body)))
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(header.Get("webhook-signature")) {
		version, b64, ok := strings.Cut(sig, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if ok && version == "v1" && err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// Two secrets of the tests (24 and 32 random-looking bytes).
const (
	secretOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretNew = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD6LiAcYgXV3E="
)

type captured struct {
	mu     sync.Mutex
	header http.Header
	body   []byte
}

func captureServer(t *testing.T) (*httptest.Server, *captured) {
	t.Helper()
	c := &captured{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.header, c.body = r.Header.Clone(), body
		c.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, c
}

func TestSignedWebhooksVerifyWithTheSpec(t *testing.T) {
	t.Parallel()
	secrets, err := ParseSecrets("acme:" + secretOld + ", globex:" + secretNew + ",acme:" + secretNew)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSender(t, Config{Secrets: secrets})
	srv, got := captureServer(t)
	send := func(tenant, body string) {
		t.Helper()
		msg := commands.WorkMessage{DeliveryID: "0d9a1f2c-6a54-4f3e-9a3b-9b1c0e0f2a11", Tenant: tenant, Recipient: srv.URL + "/h",
			Payload: []byte(body), Attempt: 1}
		if o := s.Send(t.Context(), msg); o.Kind != domain.OutcomeDelivered {
			t.Fatalf("send: %+v", o)
		}
	}

	// acme has two secrets (a rotation): both signatures, each verifying with its own secret.
	body := `{"text":"héllo wörld ✓","emoji":"🚀","n":1}`
	send("acme", body)
	if string(got.body) != body {
		t.Fatalf("the receiver got %q, want the payload as it is", got.body)
	}
	if n := len(strings.Fields(got.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures for two secrets: %q", n, got.header.Get("webhook-signature"))
	}
	for _, secret := range []string{secretOld, secretNew} {
		if !verify(secret, got.header, got.body, fixedNow) {
			t.Errorf("the signature does not verify with %s...", secret[:10])
		}
	}
	// A changed byte, another id, another timestamp, another secret: no longer verifies.
	if verify(secretOld, got.header, []byte(strings.Replace(body, "1", "2", 1)), fixedNow) {
		t.Error("a changed body verifies")
	}
	stale := got.header.Clone()
	stale.Set("webhook-timestamp", strconv.FormatInt(fixedNow.Add(-time.Hour).Unix(), 10))
	if verify(secretOld, stale, got.body, fixedNow) {
		t.Error("another timestamp verifies")
	}
	if verify("whsec_"+base64.StdEncoding.EncodeToString([]byte("another key of twenty-four bytes")), got.header, got.body, fixedNow) {
		t.Error("another secret verifies")
	}
	if got.header.Get("webhook-timestamp") != strconv.FormatInt(fixedNow.Unix(), 10) {
		t.Errorf("webhook-timestamp %q, want the attempt's Unix seconds", got.header.Get("webhook-timestamp"))
	}

	// globex has one secret, and a tenant without one is sent unsigned.
	send("globex", `{"a":1}`)
	if !verify(secretNew, got.header, got.body, fixedNow) || len(strings.Fields(got.header.Get("webhook-signature"))) != 1 {
		t.Errorf("globex: signature %q does not verify", got.header.Get("webhook-signature"))
	}
	send("initech", `{"a":1}`)
	if got.header.Get("webhook-signature") != "" {
		t.Errorf("a tenant without a secret got a signature %q", got.header.Get("webhook-signature"))
	}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	if s, err := ParseSecrets(""); err != nil || len(s) != 0 {
		t.Fatalf("empty: %v %v", s, err)
	}
	for _, bad := range []string{"acme", "acme:", ":" + secretOld, "acme:" + strings.TrimPrefix(secretOld, "whsec_"),
		"acme:whsec_not*base64", "acme:whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))} {
		_, err := ParseSecrets(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "MfKQ9r8") {
			t.Errorf("%q: the error repeats the secret: %v", bad, err)
		}
	}
}
