package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/adapters/providers/twilio/twiliofake"
	"github.com/deliveryledger/ledger/adapters/providers/vonage/vonagefake"
)

// sinkOff, as the address of a fake, runs no such fake.
const sinkOff = "off"

// The credentials the sink's SMS fakes accept unless told otherwise: docs/ledger.example.yaml
// and scripts/run.sh configure the ledger with the same, so that `make run` sends SMS out of
// the box. They are nobody's account.
const (
	// defaultTwilioAccountSID has a real SID's shape, AC and 32 hex digits.
	defaultTwilioAccountSID = "AC0123456789abcdef0123456789abcdef"
	defaultTwilioAuthToken  = "dev-twilio-auth-token"
	defaultVonageAPIKey     = "devkey01"
	defaultVonageAPISecret  = "dev-vonage-secret"
)

// sinkOptions are the flags of `ledger sink`.
type sinkOptions struct {
	webhookAddr       string
	webhookStatus     int
	smtpAddr          string
	smtpBehaviour     string
	telegramAddr      string
	telegramToken     string
	telegramBehaviour string
	twilioAddr        string
	twilioAccountSID  string
	twilioAuthToken   string
	twilioBehaviour   string
	vonageAddr        string
	vonageAPIKey      string
	vonageAPISecret   string
	vonageBehaviour   string
}

// sinkRuns reports whether a fake's address asks for it to run: neither empty nor off.
func sinkRuns(addr string) bool { return addr != "" && addr != sinkOff }

// sinkCommand runs local receivers that speak the providers' real protocols and print what they
// receive: a webhook receiver, an SMTP server, a Telegram Bot API, a Twilio Messages API and a
// Vonage SMS API, on loopback. They are the destinations of a first notification on a machine
// without outside network, and switches make them fail on purpose (see --help). Each start-up
// line names the address bound, so that port 0 (any free port) can be asked for.
func sinkCommand(ctx context.Context, o sinkOptions, stdout io.Writer) error {
	if sinkRuns(o.smtpAddr) {
		b, err := smtpfake.ParseBehaviour(o.smtpBehaviour)
		if err != nil {
			return fmt.Errorf("--smtp-behaviour: %w", err)
		}
		smtp, err := smtpfake.Start(smtpfake.Config{Addr: o.smtpAddr, Out: prefixed(stdout, "smtp: "), Behaviour: b})
		if err != nil {
			return fmt.Errorf("smtp: %w", err)
		}
		defer smtp.Close()
		fmt.Fprintf(stdout, "sink: SMTP on %s (plain, no AUTH)\n", smtp.Addr())
	}
	if sinkRuns(o.telegramAddr) {
		b, err := telegramfake.ParseBehaviour(o.telegramBehaviour)
		if err != nil {
			return fmt.Errorf("--telegram-behaviour: %w", err)
		}
		tg, err := telegramfake.Start(telegramfake.Config{Addr: o.telegramAddr, Token: o.telegramToken, Out: prefixed(stdout, "telegram: ")})
		if err != nil {
			return fmt.Errorf("telegram: %w", err)
		}
		tg.SetBehaviour(b)
		defer tg.Close()
		fmt.Fprintf(stdout, "sink: Telegram Bot API on %s (base_url; token %q)\n", tg.URL(), o.telegramToken)
	}
	if sinkRuns(o.twilioAddr) {
		b, err := twiliofake.ParseBehaviour(o.twilioBehaviour)
		if err != nil {
			return fmt.Errorf("--twilio-behaviour: %w", err)
		}
		tw, err := twiliofake.Start(twiliofake.Config{Addr: o.twilioAddr, AccountSID: o.twilioAccountSID,
			AuthToken: o.twilioAuthToken, Out: prefixed(stdout, "twilio: ")})
		if err != nil {
			return fmt.Errorf("twilio: %w", err)
		}
		tw.SetBehaviour(b)
		defer tw.Close()
		// The auth token is not printed: it is the password of the account, and signs callbacks.
		fmt.Fprintf(stdout, "sink: Twilio Messages API on %s (base_url; account_sid %q; status callbacks to each message's StatusCallback)\n",
			tw.URL(), o.twilioAccountSID)
	}
	if sinkRuns(o.vonageAddr) {
		b, err := vonagefake.ParseBehaviour(o.vonageBehaviour)
		if err != nil {
			return fmt.Errorf("--vonage-behaviour: %w", err)
		}
		vg, err := vonagefake.Start(vonagefake.Config{Addr: o.vonageAddr, APIKey: o.vonageAPIKey,
			APISecret: o.vonageAPISecret, Out: prefixed(stdout, "vonage: ")})
		if err != nil {
			return fmt.Errorf("vonage: %w", err)
		}
		vg.SetBehaviour(b)
		defer vg.Close()
		fmt.Fprintf(stdout, "sink: Vonage SMS API on %s (base_url; api_key %q; delivery receipts to each message's callback)\n",
			vg.URL(), o.vonageAPIKey)
	}

	var received atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		n := received.Add(1)
		fmt.Fprintf(stdout, "webhook: #%d %s webhook-id=%s attempt=%s signed=%t body=%s -> %d\n", n, r.URL.Path,
			r.Header.Get("webhook-id"), r.Header.Get("X-Ledger-Attempt"), r.Header.Get("webhook-signature") != "", body, o.webhookStatus)
		w.WriteHeader(o.webhookStatus)
	})
	ln, err := net.Listen("tcp", o.webhookAddr)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	fmt.Fprintf(stdout, "sink: webhooks on http://%s/ (answers %d to every POST)\n", ln.Addr(), o.webhookStatus)
	if err := server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// prefixed writes each write to w with a prefix: the fakes print one line per write.
func prefixed(w io.Writer, prefix string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if _, err := io.WriteString(w, prefix+string(p)); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
