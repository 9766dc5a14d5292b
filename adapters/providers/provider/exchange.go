package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"

	"github.com/deliveryledger/ledger/domain"
)

// Answer is one HTTP exchange with a provider: what came back, or why nothing did, and whether
// the request had been fully written when the exchange ended.
type Answer struct {
	// Response is the provider's answer (its body already read and closed); nil when none came.
	Response *http.Response
	// Body is the answer's body, at most the limit Exchange was given.
	Body []byte
	// ReadErr says the body could not be read whole: the connection failed while reading it,
	// or it is longer than the limit (Body then holds its start). A 2xx read short proves
	// nothing.
	ReadErr error
	// Err is why no answer came, without the *url.Error around it (whose text repeats the
	// URL, and with it any credential in the URL); nil with a Response.
	Err error
	// Written says the whole request (headers and body) was handed to the connection: from
	// then on the provider may have acted on it.
	Written bool
	// CallerGone says the attempt's own context ended (the worker's deadline or shutdown),
	// which is nobody's fault but ours.
	CallerGone bool
}

// Exchange sends req with client and reads the answer's body up to limit bytes. caller is the
// attempt's context, the one req's context derives from (usually with the provider's timeout
// added): its end tells a failure of ours from the provider's. The written flag is observed
// through net/http/httptrace; net/http waits for its write loop before Do returns, so it is
// settled by then.
func Exchange(caller context.Context, client *http.Client, req *http.Request, limit int) Answer {
	var written atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				written.Store(true)
			}
		},
	}))
	resp, err := client.Do(req)
	if err != nil {
		return Answer{Err: Cause(err), Written: written.Load(), CallerGone: caller.Err() != nil}
	}
	body, readErr := ReadBounded(resp.Body, limit)
	_ = resp.Body.Close() // nothing to learn from a close error once the answer is read
	return Answer{Response: resp, Body: body, ReadErr: readErr, Written: true, CallerGone: caller.Err() != nil}
}

// Cause is a transport error without the *url.Error net/http wraps it in, which repeats the
// whole URL.
func Cause(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err
	}
	return err
}

// ReadBounded reads at most limit bytes of an answer. One longer than that is reported as an
// error, so that a 2xx cut short is never read as proof of anything, and a peer that is not the
// provider cannot fill a worker's memory.
func ReadBounded(body io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return b, err
	}
	if len(b) > limit {
		return b[:limit], fmt.Errorf("the answer is longer than %d KiB", limit>>10)
	}
	return b, nil
}

// Verdict is what a call's ending means for the Sender contract (commands.Sender): the
// outcome's kind and the two flags failover and the breakers read.
type Verdict struct {
	Kind domain.OutcomeKind
	// NotSent: the provider cannot have acted; the attempt may go to the next provider at once.
	NotSent bool
	// ProviderFault: the ending counts against the provider's health.
	ProviderFault bool
}

// Unanswered is the verdict on a call that ended without an answer, the same for every
// adapter. Once the whole request was written the provider may have acted: unknown, and never
// NotSent, whatever the failure (a reset, EOF, the timeout). Before that it cannot have:
// transient and NotSent (a refused or timed-out dial, a DNS or TLS failure, a reset while
// writing). Either way the failure is the provider's unless the caller went away first.
func Unanswered(written, callerGone bool) Verdict {
	if written {
		return Verdict{Kind: domain.OutcomeUnknown, ProviderFault: !callerGone}
	}
	return Verdict{Kind: domain.OutcomeTransient, NotSent: true, ProviderFault: !callerGone}
}

// Answered is the verdict on an HTTP status from an API that answers in its status (not in a
// 200's body): 2xx delivered, 408, 425, 429 and 5xx transient, anything else permanent. 5xx
// and 408 count against the provider; 429 and 425 do not (a provider that throttles or asks
// for patience is well); a refusal is the request's, unless the adapter knows better (refused
// credentials: Verdict.ProviderFault set by the adapter).
func Answered(status int) Verdict {
	switch {
	case status >= 200 && status < 300:
		return Verdict{Kind: domain.OutcomeDelivered}
	case status == http.StatusTooManyRequests, status == http.StatusTooEarly:
		return Verdict{Kind: domain.OutcomeTransient}
	case status == http.StatusRequestTimeout, status >= 500 && status < 600:
		return Verdict{Kind: domain.OutcomeTransient, ProviderFault: true}
	}
	return Verdict{Kind: domain.OutcomePermanent}
}

// Mark gives o the verdict's flags. A NotSent on anything but a transient outcome is dropped:
// only a call that failed before it reached the provider may move on to the next one.
func (v Verdict) Mark(o domain.Outcome) domain.Outcome {
	o.NotSent = v.NotSent && o.Kind == domain.OutcomeTransient
	o.ProviderFault = v.ProviderFault
	return o
}

// Unproven says why a 2xx answer is no proof of what the provider did: it could not be read
// whole (readErr, Answer.ReadErr) or is not the API's answer (parseErr, with what naming the
// form it should have: "Twilio's JSON"); "" when it is neither. The provider took the request
// and may have acted whatever the body says, so such an answer is unknown, never transient:
// retrying could send the message twice.
func Unproven(readErr, parseErr error, what string) string {
	switch {
	case readErr != nil:
		return fmt.Sprintf("reading the answer failed: %v", readErr)
	case parseErr != nil:
		return "the answer is not " + what
	}
	return ""
}

// UnprovenVerdict is the verdict on an answer Unproven refuses: unknown, and the provider's
// fault (what answered is not the API, or it broke off).
var UnprovenVerdict = Verdict{Kind: domain.OutcomeUnknown, ProviderFault: true}
