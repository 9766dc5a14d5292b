package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// sinkCommand runs a local webhook receiver that answers 200 to every POST and prints what it
// received: a destination for a first notification on a machine without outside network.
func sinkCommand(ctx context.Context, addr string, stdout io.Writer) error {
	var received atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		n := received.Add(1)
		fmt.Fprintf(stdout, "sink: #%d %s webhook-id=%s attempt=%s body=%s\n",
			n, r.URL.Path, r.Header.Get("webhook-id"), r.Header.Get("X-Ledger-Attempt"), body)
		w.WriteHeader(http.StatusOK)
	})
	server := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	fmt.Fprintf(stdout, "sink: listening on http://%s/ (answers 200 to every POST)\n", addr)
	if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
