// Package email is the provider adapter that delivers a notification as an email, over SMTP to
// a provider's relay (one Sender per provider).
//
// Its job beyond sending is to tell the truth about what happened: every attempt ends in a
// typed domain.Outcome, drawn by the stage of the SMTP session at which it ended. A reply
// decides by its class at any stage (4xx transient, 5xx permanent). Without a reply the line
// is the final "." of the message: before it was written the server cannot have queued the
// message (transient, safe to retry); once it was written and the reply did not come, the
// server may have queued it (unknown). go-mail reports the stage (mail.SendError.Reason) but
// not whether that last write went out, so the connection is watched (attemptConn).
package email

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/tracing"
)

var _ commands.Sender = (*Sender)(nil)

const (
	// quitTimeout bounds the polite QUIT after the verdict: the outcome is known by then, and
	// a server slow to say goodbye must not hold a worker slot for the rest of the timeout.
	quitTimeout = 5 * time.Second
	// maxErrText bounds the text an outcome keeps: enough for a server's whole reply, small
	// enough to store with every attempt.
	maxErrText = 512
)

// Sender delivers email through one SMTP provider. It is safe for concurrent use. Each attempt
// is one SMTP session (connect, EHLO, STARTTLS, AUTH, one message, QUIT): sessions are not
// pooled, because a server's verdict on one message must not depend on what an earlier one
// left of the connection, and because providers close idle connections within seconds.
type Sender struct {
	cfg       Config
	addr      string // host:port, as dialled and as the outcomes name it
	domain    string // From's domain, the right-hand side of every Message-ID
	tlsConfig *tls.Config
	// secrets are the strings no outcome may carry: the password and the encodings of it that
	// AUTH sends, which a server could echo in a reply.
	secrets []string
	// now tells the wall-clock time for the Date header; tests replace it. Latency is measured
	// with the monotonic clock regardless.
	now func() time.Time
}

// New builds a Sender from cfg, with the defaults for its zero fields.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("email config: %w", err)
	}
	cfg = cfg.withDefaults()
	domain, _ := senderDomain(cfg.From) // Validate checked it
	s := &Sender{
		cfg:    cfg,
		addr:   net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		domain: domain,
		tlsConfig: &tls.Config{
			ServerName: cfg.Host,
			RootCAs:    cfg.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		now: time.Now,
	}
	if cfg.Password != "" {
		s.secrets = []string{
			cfg.Password,
			base64.StdEncoding.EncodeToString([]byte(cfg.Password)),
			base64.StdEncoding.EncodeToString([]byte("\x00" + cfg.Username + "\x00" + cfg.Password)),
		}
	}
	// go-mail checks its options when the client is built; build one now so that a setting it
	// refuses fails here, at start-up, rather than in every attempt.
	if _, err := s.client(&attempt{s: s}); err != nil {
		return nil, fmt.Errorf("email config: %w", err)
	}
	return s, nil
}

// Provider names the provider in the history and in metrics (Config.Provider).
func (s *Sender) Provider() string { return s.cfg.Provider }

// String names the sender without its password, so that printing a Sender (whose fields hold
// it) never writes the secret.
func (s *Sender) String() string {
	return "email.Sender{provider: " + s.cfg.Provider + ", addr: " + s.addr + "}"
}

// Deduplicates is false. The Message-ID is the same on every attempt of a delivery, and mail
// readers and some mailbox stores drop a repeat of it, but SMTP servers queue whatever they are
// given: an attempt with an unknown outcome must not be repeated blindly.
func (s *Sender) Deduplicates() bool { return false }

// Send delivers msg in one SMTP session and classifies what happened. It never returns an
// error: every failure is an outcome. A message the payload or recipient cannot make fails
// permanently without a network call. The attempt is bounded by Config.Timeout and by ctx.
func (s *Sender) Send(ctx context.Context, msg commands.WorkMessage) domain.Outcome {
	start := time.Now()
	m, err := s.message(msg, s.now())
	if err != nil {
		return s.outcome(domain.OutcomePermanent, time.Since(start), 0, "", err.Error())
	}
	caller := ctx
	deadline := start.Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	a := &attempt{s: s, caller: caller, ctx: ctx, start: start, deadline: deadline}
	defer a.close()
	span := tracing.NoSpan
	if tracing.Enabled() {
		_, span = tracing.Start(ctx, "smtp send", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			semconv.ServerAddress(s.cfg.Host), semconv.ServerPort(s.cfg.Port), semconv.NetworkProtocolName("smtp"),
			attribute.String("smtp.tls", string(s.cfg.TLS))))
	}
	outcome := a.run(m)
	if span.IsRecording() {
		span.SetAttributes(tracing.OutcomeKind.String(string(outcome.Kind)))
		if outcome.StatusCode != 0 {
			span.SetAttributes(attribute.Int("smtp.reply_code", outcome.StatusCode))
		}
		if outcome.Kind != domain.OutcomeDelivered {
			span.SetStatus(codes.Error, outcome.Err)
		}
	}
	span.End()
	return outcome
}

// client builds the go-mail client of one attempt. go-mail is asked for the connection, the
// greeting and EHLO only (no TLS policy, no AUTH): the attempt does STARTTLS and AUTH itself,
// so that it knows which of them failed. go-mail's own Client.tls (client.go) reports "STARTTLS
// not offered" as a bare fmt.Errorf and its Client.auth returns AUTH errors wrapped with
// nothing to tell them from a lost connection but their text.
func (s *Sender) client(a *attempt) (*mail.Client, error) {
	return mail.NewClient(s.cfg.Host,
		mail.WithPort(s.cfg.Port),
		mail.WithTimeout(s.cfg.Timeout),
		mail.WithHELO(s.cfg.HeloName),
		mail.WithTLSPolicy(mail.NoTLS),
		mail.WithDialContextFunc(a.dial),
		// One message per session: no NOOP before it (a round trip that proves nothing the
		// MAIL command does not) and no RSET after it (QUIT follows).
		mail.WithoutNoop(),
		mail.WithoutRset(),
	)
}

// attempt is one SMTP session.
type attempt struct {
	s *Sender
	// caller is the context Send was given, ctx the attempt's (with the provider's timeout):
	// the caller's end is not the relay's fault.
	caller   context.Context
	ctx      context.Context
	start    time.Time
	deadline time.Time
	// stage is where the session ended, which decides NotSent and ProviderFault (flags).
	stage stage

	conn *attemptConn // set once dialled
	stop func() bool  // stops the context watch on conn
	// handshake is set when the dial succeeded and implicit TLS's handshake failed.
	handshake error
}

// stage is a part of the SMTP session, as the Sender contract's flags see it.
type stage int

const (
	// stageSession: connect, TLS, greeting, EHLO, STARTTLS, AUTH, MAIL FROM. The relay has
	// not been given a recipient: it cannot have queued anything, so a transient end may go
	// to the channel's next relay at once (NotSent), and any failure is the relay's (a refusal
	// here is of the service, the credentials or our sender, for every message).
	stageSession stage = iota
	// stageMessage: RCPT TO, DATA and the message body. Nothing is queued before the end of
	// data, but the relay took the transaction: the attempt stays with it. A reply here is
	// about this recipient or message, not the relay's health; a lost connection is.
	stageMessage
	// stageEnd: the final "." and its reply. A 4xx is the relay's trouble (451 local error,
	// 452 storage), a 5xx its verdict on this message; a drop before the reply is unknown.
	stageEnd
	// stageOurs: the message cannot be built or encoded; no call counts either way.
	stageOurs
)

// flags sets NotSent and ProviderFault on an outcome of the attempt by the stage it ended at
// (see stage) and the reply code (0 when none came).
func (a *attempt) flags(o domain.Outcome, code int) domain.Outcome {
	if o.Kind == domain.OutcomeDelivered {
		return o
	}
	callerGone := a.caller != nil && a.caller.Err() != nil
	switch a.stage {
	case stageSession:
		o.NotSent = o.Kind == domain.OutcomeTransient
		o.ProviderFault = code != 0 || !callerGone
	case stageMessage:
		o.ProviderFault = code == 0 && !callerGone && o.Kind != domain.OutcomePermanent
	case stageEnd:
		switch {
		case code >= 400 && code < 500:
			o.ProviderFault = true
		case code == 0:
			o.ProviderFault = !callerGone
		}
	}
	return o
}

// dial is go-mail's DialContextFunc: it connects to the configured address (go-mail's own
// Client.ServerAddr does not bracket IPv6 literals), holds the connection to the attempt's
// deadline and, for implicit TLS, does the handshake. It returns a *tls.Conn then, which is how
// go-mail's smtp.NewClient knows the session is encrypted.
func (a *attempt) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, network, a.s.addr)
	if err != nil {
		return nil, err
	}
	a.conn = newAttemptConn(raw, a.deadline)
	a.stop = context.AfterFunc(a.ctx, a.conn.expire)
	if a.s.cfg.TLS != TLSImplicit {
		return a.conn, nil
	}
	tc := tls.Client(a.conn, a.s.tlsConfig)
	if err := tc.HandshakeContext(ctx); err != nil {
		a.handshake = err
		return nil, err
	}
	a.conn.mark()
	return tc, nil
}

// close releases the connection; every path out of Send calls it.
func (a *attempt) close() {
	if a.stop != nil {
		a.stop()
	}
	if a.conn != nil {
		_ = a.conn.Close()
	}
}

// run drives the session stage by stage; each stage either passes or gives the outcome.
func (a *attempt) run(m *mail.Msg) domain.Outcome {
	c, err := a.s.client(a)
	if err != nil {
		// New built the same client; this cannot happen short of a go-mail change.
		return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("build the SMTP client: %v", err))
	}
	sc, err := c.DialToSMTPClientWithContext(a.ctx)
	if err != nil {
		return a.connectFailed(err)
	}
	if a.s.cfg.TLS == TLSStartTLS {
		if o, failed := a.startTLS(sc); failed {
			return o
		}
	}
	if a.s.cfg.Username != "" {
		if o, failed := a.authenticate(sc); failed {
			return o
		}
	}
	o := a.sendOutcome(c.SendWithSMTPClient(sc, m), m, sc)
	if o.StatusCode != 0 {
		a.quit(sc)
	}
	return o
}

// quit ends a session politely while the server is still talking to us, so that it does not
// log a lost connection; after a transport failure the connection is just closed.
func (a *attempt) quit(sc *smtp.Client) {
	_ = sc.UpdateDeadline(quitTimeout) // never beyond the attempt's deadline: attemptConn clamps
	_ = sc.Quit()
}

// connectFailed classifies a failure of go-mail's DialToSMTPClientWithContext: the dial, the
// implicit TLS handshake, the greeting or EHLO. Nothing of the message was sent.
func (a *attempt) connectFailed(err error) domain.Outcome {
	switch {
	case a.conn == nil:
		return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("connect to %s: %s", a.s.addr, a.describe(err)))
	case a.handshake != nil:
		return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("TLS handshake with %s (tls: implicit): %s", a.s.addr, a.describe(err)))
	case a.conn.sent.Load() == 0:
		// The client speaks only after the server's 220, so nothing sent means the greeting.
		return a.replyOrLost("greeting", err)
	default:
		return a.replyOrLost("EHLO", err)
	}
}

// startTLS upgrades the session. A server that does not offer STARTTLS is refused rather than
// spoken to in clear (see TLSStartTLS).
func (a *attempt) startTLS(sc *smtp.Client) (domain.Outcome, bool) {
	if ok, _ := sc.Extension("STARTTLS"); !ok {
		o := a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf(
			"STARTTLS at %s: server does not offer STARTTLS, which tls: starttls requires; nothing was sent", a.s.addr))
		a.quit(sc)
		return o, true
	}
	err := sc.StartTLS(a.s.tlsConfig)
	if err == nil {
		return domain.Outcome{}, false
	}
	// go-mail's smtp.Client.StartTLS sends STARTTLS, wraps the connection in TLS once the 220
	// came, and sends EHLO again (the handshake runs on that first write): the connection
	// state tells which of the three failed.
	state, upgraded := sc.TLSConnectionState()
	switch {
	case !upgraded:
		o := a.replyOrLost("STARTTLS", err)
		if o.StatusCode != 0 {
			a.quit(sc) // the server refused STARTTLS and is still speaking plain SMTP
		}
		return o, true
	case !state.HandshakeComplete:
		return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("STARTTLS at %s: TLS handshake: %s", a.s.addr, a.describe(err))), true
	default:
		return a.replyOrLost("EHLO after STARTTLS", err), true
	}
}

// authenticate runs SMTP AUTH with PLAIN, or LOGIN when the server offers only that. Both
// send the password as it is, which is why go-mail (smtp.PlainAuth, smtp.LoginAuth) refuses
// them in clear to anything but the loopback, and Validate refuses such a configuration.
func (a *attempt) authenticate(sc *smtp.Client) (domain.Outcome, bool) {
	ok, offered := sc.Extension("AUTH")
	if !ok {
		o := a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf(
			"AUTH at %s: server does not offer AUTH, which username %q requires; nothing was sent", a.s.addr, a.s.cfg.Username))
		a.quit(sc)
		return o, true
	}
	mechs := strings.Fields(strings.ToUpper(offered))
	var auth smtp.Auth
	switch {
	case contains(mechs, "PLAIN"):
		auth = smtp.PlainAuth("", a.s.cfg.Username, a.s.cfg.Password, a.s.cfg.Host, false)
	case contains(mechs, "LOGIN"):
		auth = smtp.LoginAuth(a.s.cfg.Username, a.s.cfg.Password, a.s.cfg.Host, false)
	default:
		o := a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf(
			"AUTH at %s: server offers %s, the sender speaks PLAIN and LOGIN; nothing was sent", a.s.addr, offered))
		a.quit(sc)
		return o, true
	}
	if err := sc.Auth(auth); err != nil {
		// go-mail's smtp.Client.Auth has sent QUIT already after a refusal.
		return a.replyOrLost("AUTH", err), true
	}
	return domain.Outcome{}, false
}

// sendOutcome classifies the result of go-mail's SendWithSMTPClient for the one message, by
// the stage its *mail.SendError names (senderror.go). go-mail fills ErrorCode (the reply
// code, 0 when the failure was not a reply) and EnhancedStatusCode (when the server offers
// ENHANCEDSTATUSCODES); IsTemp alone cannot be used, since it is false for a lost connection.
func (a *attempt) sendOutcome(err error, m *mail.Msg, sc *smtp.Client) domain.Outcome {
	if err == nil || m.IsDelivered() {
		// IsDelivered: the 250 after the final "." came; a later failure (RSET, turned off
		// here) cannot undo that.
		return a.delivered(m.ServerResponse(), sc)
	}
	var se *mail.SendError
	if !errors.As(err, &se) {
		return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("send to %s: %s", a.s.addr, a.describe(err)))
	}
	code, enhanced, text := se.ErrorCode(), se.EnhancedStatusCode(), sendErrorText(se)
	if code == 0 {
		// go-mail's errorCode (senderror.go) keeps 4xx and 5xx codes only; a reply of another
		// class where it expected 250 or 354 is still a reply, and its text says so.
		code = unexpectedReplyCode(text)
	}
	switch se.Reason {
	case mail.ErrSMTPMailFrom:
		return a.stageFailed("MAIL FROM", code, enhanced, text)
	case mail.ErrSMTPRcptTo:
		a.stage = stageMessage
		o := a.stageFailed("RCPT TO", code, enhanced, text)
		o.Suppress = o.Kind == domain.OutcomePermanent && suppresses(code, enhanced, text)
		return o
	case mail.ErrSMTPData:
		a.stage = stageMessage
		return a.stageFailed("DATA", code, enhanced, text)
	case mail.ErrWriteContent:
		a.stage = stageMessage
		// Message.WriteTo into the DATA writer failed: the body did not get out whole.
		if a.conn.writeFailed.Load() {
			return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf(
				"message body at %s: %s while sending the message, before its end; the server cannot queue an incomplete message", a.s.addr, a.lost(text)))
		}
		a.stage = stageOurs
		return a.result(domain.OutcomePermanent, 0, "", fmt.Sprintf("message: could not write it: %s", text))
	case mail.ErrSMTPDataClose:
		a.stage = stageEnd
		// The end of data: DataCloser.Close writes the buffered tail and the final ".", then
		// reads the reply.
		if code != 0 {
			o := a.reply("end of data", code, enhanced, text, true)
			o.Suppress = o.Kind == domain.OutcomePermanent && suppresses(code, enhanced, text)
			return o
		}
		if a.conn.writeFailed.Load() {
			a.stage = stageMessage
			return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf(
				"end of data at %s: %s before the whole message was sent; the server cannot queue an incomplete message", a.s.addr, a.lost(text)))
		}
		return a.result(domain.OutcomeUnknown, 0, "", fmt.Sprintf(
			"end of data at %s: the whole message was sent, then %s before the reply; the server may have queued it", a.s.addr, a.lost(text)))
	case mail.ErrGetSender, mail.ErrGetRcpts, mail.ErrNoUnencoded:
		// The message itself cannot be sent as built; it would fail the same way again.
		a.stage = stageOurs
		return a.result(domain.OutcomePermanent, 0, "", fmt.Sprintf("message: %s", text))
	default:
		// ErrConnCheck and anything newer: raised before MAIL FROM was sent.
		return a.stageFailed(se.Reason.String(), code, enhanced, text)
	}
}

// stageFailed classifies a failure before the message body was sent: a reply by its class,
// anything else transient (the server had nothing to queue).
func (a *attempt) stageFailed(stage string, code int, enhanced, text string) domain.Outcome {
	if code != 0 {
		return a.reply(stage, code, enhanced, text, false)
	}
	return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("%s at %s: %s; nothing was queued", stage, a.s.addr, a.lost(text)))
}

// replyOrLost classifies an error of a session stage (greeting, EHLO, STARTTLS, AUTH), which
// go-mail's smtp package returns as the *textproto.Error of the reply, or as the transport's.
func (a *attempt) replyOrLost(stage string, err error) domain.Outcome {
	var reply *textproto.Error
	if errors.As(err, &reply) {
		return a.reply(stage, reply.Code, enhancedCode(reply.Code, reply.Msg), fmt.Sprintf("%03d %s", reply.Code, reply.Msg), false)
	}
	return a.result(domain.OutcomeTransient, 0, "", fmt.Sprintf("%s at %s: %s; nothing was sent", stage, a.s.addr, a.describe(err)))
}

// reply classifies a server's reply: 4xx transient, 5xx permanent, at any stage (an AUTH 535
// is permanent for the attempt: retrying the same password cannot help). Any other code is a
// protocol violation: transient before the message was sent, and after its end a 2xx is an
// acceptance and anything else leaves the outcome unknown.
func (a *attempt) reply(stage string, code int, enhanced, text string, afterEnd bool) domain.Outcome {
	kind := domain.OutcomeTransient
	switch {
	case code >= 400 && code < 500:
	case code >= 500 && code < 600:
		kind = domain.OutcomePermanent
	case afterEnd && code >= 200 && code < 300:
		kind = domain.OutcomeDelivered
	case afterEnd:
		kind = domain.OutcomeUnknown
	}
	o := a.result(kind, code, enhanced, fmt.Sprintf("%s at %s: %s", stage, a.s.addr, oneLine(text)))
	if kind == domain.OutcomeDelivered {
		o.Err = ""
		o.ProviderOperationID = a.s.clean(strings.TrimSpace(strings.TrimPrefix(text, strconv.Itoa(code))))
	}
	return o
}

// suppressingCodes are the enhanced status codes (RFC 3463) that, on a 5xx reply to RCPT TO
// or at the end of data, are hard evidence that the address takes no mail at all: the mailbox
// or its domain does not exist, cannot exist, or is closed (Outcome.Suppress). Every other
// refusal is about this message, this sender or this moment and suppresses nothing: 5.7.x
// (policy, spam, authentication), 5.2.2 (mailbox full), 5.4.x (routing), a 5xx without an
// enhanced code (its text alone is no evidence), and any 4xx.
var suppressingCodes = map[string]string{
	"5.1.1":  "bad destination mailbox address: no such mailbox",
	"5.1.2":  "bad destination system address: no such domain",
	"5.1.3":  "bad destination mailbox address syntax",
	"5.1.6":  "destination mailbox has moved, no forwarding address",
	"5.1.10": "recipient address has a null MX (RFC 7505): the domain accepts no mail",
	"5.2.1":  "mailbox disabled, not accepting messages",
}

// suppresses reports whether a reply about the recipient (RCPT TO, end of data) is hard
// evidence that it takes no mail: a 5xx whose enhanced code is one of suppressingCodes, in the
// place RFC 2034 gives it, first in the reply's text. go-mail takes one from anywhere in the
// text: "550 User unknown (see 5.1.1)" is recorded as 550 5.1.1 but is no evidence.
func suppresses(code int, enhanced, text string) bool {
	if code < 500 || code > 599 || suppressingCodes[enhanced] == "" {
		return false
	}
	words := strings.TrimSpace(strings.TrimPrefix(text, strconv.Itoa(code)))
	return enhancedCode(code, words) == enhanced
}

// delivered is the outcome of a 250 after the final ".": its text (usually the queue id,
// "2.0.0 Ok: queued as 4F2A1") is the provider's operation id.
func (a *attempt) delivered(response string, sc *smtp.Client) domain.Outcome {
	enhanced := ""
	if ok, _ := sc.Extension("ENHANCEDSTATUSCODES"); ok {
		enhanced = enhancedCode(250, response)
	}
	o := a.result(domain.OutcomeDelivered, 250, enhanced, "")
	o.ProviderOperationID = a.s.clean(response)
	return o
}

// lost says why a session ended without a reply: the attempt's deadline, its cancellation, or
// what the connection reported.
func (a *attempt) lost(text string) string {
	switch {
	case errors.Is(a.ctx.Err(), context.Canceled):
		return "the attempt was cancelled"
	case !time.Now().Before(a.deadline):
		return fmt.Sprintf("the attempt's time (%s) ran out", a.deadline.Sub(a.start).Round(time.Millisecond))
	case text == "":
		return "the connection was lost"
	default:
		return fmt.Sprintf("the connection was lost (%s)", oneLine(text))
	}
}

// describe is lost for an error value.
func (a *attempt) describe(err error) string {
	if errors.Is(a.ctx.Err(), context.Canceled) || !time.Now().Before(a.deadline) {
		return a.lost("")
	}
	return oneLine(err.Error())
}

// result builds an outcome of the attempt, with the flags of the stage it ended at.
func (a *attempt) result(kind domain.OutcomeKind, code int, enhanced, text string) domain.Outcome {
	return a.flags(a.s.outcome(kind, time.Since(a.start), code, enhanced, text), code)
}

// outcome fills the fields every outcome of this adapter has. ProviderCode is the reply code
// and, when the server gave one, its enhanced code ("451 4.7.1").
func (s *Sender) outcome(kind domain.OutcomeKind, latency time.Duration, code int, enhanced, text string) domain.Outcome {
	o := domain.Outcome{
		Kind:       kind,
		Provider:   s.cfg.Provider,
		StatusCode: code,
		Latency:    latency,
		Err:        s.clean(text),
	}
	if code != 0 {
		o.ProviderCode = strings.TrimSpace(strconv.Itoa(code) + " " + enhanced)
	}
	o.Class = domain.ClassOf(kind)
	return o
}

// clean makes server-controlled text fit for the history: no password (a server may echo what
// AUTH sent), one line, bounded.
func (s *Sender) clean(text string) string {
	for _, secret := range s.secrets {
		text = strings.ReplaceAll(text, secret, "[redacted]")
	}
	text = oneLine(text)
	if len(text) > maxErrText {
		text = strings.ToValidUTF8(text[:maxErrText], "") + "..."
	}
	return text
}

// sendErrorText is the part of a *mail.SendError's text that is not go-mail's framing: its
// Error (senderror.go) is the reason, ": ", the errors joined with ", " (for a reply,
// "451 4.7.1 Try again later"), then ", affected recipient(s): ..." and ", affected message
// ID: ...". The error list itself is not exported.
func sendErrorText(se *mail.SendError) string {
	text := strings.TrimPrefix(se.Error(), se.Reason.String())
	text = strings.TrimPrefix(text, ":")
	if i := strings.Index(text, ", affected recipient(s): "); i >= 0 {
		text = text[:i]
	}
	if i := strings.Index(text, ", affected message ID: "); i >= 0 {
		text = text[:i]
	}
	return unquoteReply(strings.TrimSpace(text))
}

// unquoteReply undoes the quoting of a reply's text: since Go 1.26 textproto.Error.Error is
// `451 "4.7.1 Try again later"` (fmt %q), and the history should show the server's words.
// Anything after the quoted text (a failed RSET that go-mail appends) is kept.
func unquoteReply(text string) string {
	if unexpectedReplyCode(text) == 0 || len(text) < 5 || text[4] != '"' {
		return text
	}
	quoted, err := strconv.QuotedPrefix(text[4:])
	if err != nil {
		return text
	}
	msg, err := strconv.Unquote(quoted)
	if err != nil {
		return text
	}
	return text[:4] + msg + text[4+len(quoted):]
}

// replyPrefix is a reply code at the start of a textproto.Error's text ("%03d %s").
var replyPrefix = regexp.MustCompile(`^([1-5][0-9]{2})( |$)`)

// unexpectedReplyCode returns the reply code text starts with, or 0 when text is not a reply
// (a transport error's text starts with words: "EOF", "read tcp ...").
func unexpectedReplyCode(text string) int {
	m := replyPrefix.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	code, _ := strconv.Atoi(m[1])
	return code
}

// enhancedPrefix is an RFC 3463 enhanced status code at the start of a reply's text.
var enhancedPrefix = regexp.MustCompile(`^([245])\.[0-9]{1,3}\.[0-9]{1,3}\b`)

// enhancedCode returns the enhanced code a reply's text starts with, if its class is the
// reply code's (RFC 2034 puts it first; a mismatched one is not a status code but text).
func enhancedCode(code int, text string) string {
	m := enhancedPrefix.FindStringSubmatch(text)
	if m == nil || m[1] != strconv.Itoa(code/100) {
		return ""
	}
	return m[0]
}

// oneLine joins a multi-line reply (textproto joins its lines with "\n") and drops other
// control characters.
func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " / ")
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
