package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

// maxReceiptBytes bounds a provider's callback: a receipt is a few hundred bytes of form or JSON.
const maxReceiptBytes = 64 << 10

// ReceiptParser reads one provider's callbacks in the provider's own format, and authenticates
// them (Twilio's X-Twilio-Signature, a secret in Vonage's callback URL). twilio.Sender and
// vonage.Sender implement it.
type ReceiptParser interface {
	// ParseReceipt returns the receipt a callback holds; callbackURL is the full URL the
	// provider called, as it was configured there. A callback that fails authentication gives
	// commands.ErrReceiptUnauthenticated, one that holds no receipt commands.ErrReceiptMalformed.
	ParseReceipt(callbackURL string, header http.Header, body []byte) (commands.Receipt, error)
}

// GETReceipts is a ReceiptParser whose provider may also send its receipts as a GET with the
// receipt in the query (an account setting of Vonage's); the wiring puts those in Receipts.ByGET.
type GETReceipts interface {
	ReceiptsByGET() bool
}

// Receipts are the dependencies of POST /v1/receipts/{provider}.
type Receipts struct {
	// Parsers by provider name: the providers that send receipts.
	Parsers map[string]ReceiptParser
	// Record records a receipt and what it decides.
	Record *commands.RecordReceiptHandler
	// PublicURL is the base URL the providers were given (public_url of the configuration
	// file); a callback's URL is it followed by the request's path and query, which is what the
	// provider signed. Empty: the request's own scheme and host are used.
	PublicURL string
	// Observe, when set, is told each receipt recorded (for metrics).
	Observe func(provider, status string)
	// ByGET names the providers that may also send their receipts as a GET with the receipt in
	// the query (Vonage: a setting of the account's dashboard). The others take POST only: a
	// GET to them is 405, as a Twilio callback is a signed form that only a POST carries.
	ByGET map[string]bool
}

// ProviderView is one provider in GET /v1/providers.
type ProviderView struct {
	Name    string `json:"name"`
	Channel string `json:"channel"`
	Type    string `json:"type"`
	// State is the worst breaker state the processes running the provider report: closed,
	// half_open or open; "unknown" when no worker has reported lately.
	State string `json:"state"`
	// ErrorRate is the share of failed calls in the breakers' current windows, over the
	// processes (0 without calls). The counts themselves are left out: they hold every
	// tenant's traffic, and the view is shown to each. The operators have the calls by provider
	// in /metrics (ledger_attempt_duration_seconds_count), on its own listener.
	ErrorRate float64 `json:"error_rate"`
	// Instances is the number of processes that reported, ReportedAt the latest report.
	Instances  int        `json:"instances"`
	ReportedAt *time.Time `json:"reported_at,omitempty"`
}

// ProviderLister answers GET /v1/providers.
type ProviderLister func(ctx context.Context) ([]ProviderView, error)

// receipt takes a provider's callback: POST /v1/receipts/{provider}, or GET for the providers
// of Receipts.ByGET. It carries no bearer key; the provider's signature (or secret)
// authenticates it, and a callback that fails that is refused with 403 and records nothing. Its
// query is the provider's to choose (Vonage sends receipts as query parameters), so it is not
// checked against a list. The delivery is the one the provider gave the callback's message id
// (commands.RecordReceiptHandler.Handle); a callback that matches none is 200 recorded:false.
func (s *server) receipt(w http.ResponseWriter, r *http.Request) {
	tracing.Route(r, r.Method+" /v1/receipts/{provider}")
	name := r.PathValue("provider")
	parser, ok := s.deps.Receipts.Parsers[name]
	if !ok {
		s.writeProblem(w, r, &requestError{kind: errRouteNotFound, field: "provider",
			detail: fmt.Sprintf("no provider %q takes receipts here", name)})
		return
	}
	// The mux sends HEAD to the GET route too: a HEAD records nothing, whatever the provider.
	if r.Method != http.MethodPost && (r.Method != http.MethodGet || !s.deps.Receipts.ByGET[name]) {
		allow := http.MethodPost
		if s.deps.Receipts.ByGET[name] {
			allow = http.MethodGet + ", " + http.MethodPost
		}
		w.Header().Set("Allow", allow)
		s.writeProblem(w, r, &requestError{kind: errMethodNotAllowed,
			detail: fmt.Sprintf("provider %s sends its receipts by %s", name, allow)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReceiptBytes))
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	base := strings.TrimSuffix(s.deps.Receipts.PublicURL, "/")
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	rec, err := parser.ParseReceipt(base+r.URL.RequestURI(), r.Header, body)
	switch {
	case errors.Is(err, commands.ErrReceiptUnauthenticated):
		s.writeProblem(w, r, &requestError{kind: errForbidden, field: "signature",
			detail: "the callback's signature or secret is missing or wrong; nothing was recorded"})
		return
	case errors.Is(err, commands.ErrReceiptMalformed):
		s.writeProblem(w, r, invalid("", "%s", err.Error()))
		return
	case err != nil:
		s.writeProblem(w, r, err)
		return
	}
	rec.Provider = name
	res, err := s.deps.Receipts.Record.Handle(r.Context(), commands.RecordReceipt{Receipt: rec, Source: "receipt"})
	switch {
	case errors.Is(err, commands.ErrReceiptUnmatched):
		// Answered 2xx, so that the provider does not send it again for a day (Vonage tries a
		// 429 or 5xx again for 24 hours): no delivery will ever have it. The answer names no
		// delivery and says nothing of what the callback named, so it is the same whether the
		// message id is unknown or the client-ref names another delivery.
		s.logger.InfoContext(r.Context(), "receipt matches no delivery; nothing recorded", "provider", name, "err", err)
		s.writeJSON(w, r, http.StatusOK, map[string]any{"recorded": false, "changed": false})
		return
	case errors.Is(err, domain.ErrReceiptEarly):
		// The provider's answer to our call is not recorded yet; providers send again.
		s.writeProblem(w, r, &requestError{kind: errNotYet, detail: "the delivery's call to the provider is still being recorded; send the receipt again"})
		return
	case err != nil:
		s.writeProblem(w, r, err)
		return
	}
	if s.deps.Receipts.Observe != nil && res.Recorded {
		s.deps.Receipts.Observe(name, string(rec.Status))
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"delivery_id": res.DeliveryID, "recorded": res.Recorded,
		"state": res.State, "changed": res.Changed})
}

// providers answers GET /v1/providers: every provider, its channel and its health. It is the
// same for every tenant (providers are the operator's), and needs a key like any /v1 route.
func (s *server) providers(w http.ResponseWriter, r *http.Request, _ string) error {
	list, err := s.deps.Providers(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []ProviderView{}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"providers": list})
	return nil
}
