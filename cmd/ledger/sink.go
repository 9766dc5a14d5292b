package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/deliveryledger/ledger/adapters/email/smtpfake"
	"github.com/deliveryledger/ledger/adapters/telegram/telegramfake"
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
}

// sinkCommand runs local receivers that speak the providers' real protocols and print what they
// receive: a webhook receiver, an SMTP server and a Telegram Bot API, on loopback. They are the
// destinations of a first notification on a machine without outside network, and switches make
// them fail on purpose (see --help).
func sinkCommand(ctx context.Context, o sinkOptions, stdout io.Writer) error {
	var received atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		n := received.Add(1)
		fmt.Fprintf(stdout, "webhook: #%d %s webhook-id=%s attempt=%s signed=%t body=%s -> %d\n", n, r.URL.Path,
			r.Header.Get("webhook-id"), r.Header.Get("X-Ledger-Attempt"), r.Header.Get("webhook-signature") != "", body, o.webhookStatus)
		w.WriteHeader(o.webhookStatus)
	})
	server := &http.Server{Addr: o.webhookAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	if o.smtpAddr != "" {
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
	if o.telegramAddr != "" {
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
	fmt.Fprintf(stdout, "sink: webhooks on http://%s/ (answers %d to every POST)\n", o.webhookAddr, o.webhookStatus)
	if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
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
