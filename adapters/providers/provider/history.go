package provider

import (
	"fmt"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// History is how an adapter writes what it records of its calls (outcomes, peer texts): under
// its provider's name, on one printable line, without its credentials whatever produced the
// text. The adapters build their messages not to contain their secrets; this is the net under
// them, for texts that come from elsewhere (an error of net/http, a proxy's error page that
// echoes the request).
type History struct {
	// Provider names the provider in every outcome.
	Provider string
	// Secrets are every spelling of the adapter's credentials (raw, escaped, encoded) that
	// Redact replaces with Mark.
	Secrets []string
	Mark    string
	// MaxPeerText bounds a text the peer wrote (PeerText).
	MaxPeerText int
}

// Outcome is an outcome of the provider with the fields every adapter fills, its text redacted
// and on one line.
func (h History) Outcome(kind domain.OutcomeKind, code int, latency time.Duration, text string) domain.Outcome {
	return domain.Outcome{
		Kind:       kind,
		Class:      domain.ClassOf(kind),
		Provider:   h.Provider,
		StatusCode: code,
		Latency:    latency,
		Err:        Printable(h.Redact(text)),
	}
}

// Redact replaces every spelling of the secrets in text.
func (h History) Redact(text string) string { return Redact(text, h.Secrets, h.Mark) }

// PeerText prepares a text the peer wrote for the history: without the secrets (before it is
// cut, so that no half of one survives the cut), on one printable line, at most MaxPeerText
// bytes.
func (h History) PeerText(text string) string { return Clip(Printable(h.Redact(text)), h.MaxPeerText) }

// Unanswered is the outcome of a call that got no answer (Answer.Response nil), by the kit's
// line (the package function Unanswered), its text naming the call ("sendMessage to
// api.telegram.org"), never the URL, and once the request was written what the provider may
// have done ("Telegram may have sent the message").
func (h History) Unanswered(a Answer, latency time.Duration, call, mayHave string) domain.Outcome {
	v := Unanswered(a.Written, a.CallerGone)
	text := fmt.Sprintf("%s: %v", call, a.Err)
	if a.Written {
		text = fmt.Sprintf("%s: request written, then %v; %s", call, a.Err, mayHave)
	}
	return v.Mark(h.Outcome(v.Kind, 0, latency, text))
}
