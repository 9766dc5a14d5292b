package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestServeReturnsAfterTheRequestsInFlight: a stop begins the server's graceful shutdown, and
// serve returns only once a request already running has been answered, so that nothing the
// request uses (the database pool) is closed under it.
func TestServeReturnsAfterTheRequestsInFlight(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	var answered atomic.Bool
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
		answered.Store(true)
	})}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, server, l, 5*time.Second) }()
	got := make(chan string, 1)
	go func() {
		res, err := http.Get("http://" + l.Addr().String() + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		got <- res.Status + " " + string(body)
	}()
	<-entered
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !answered.Load() {
		t.Fatal("serve returned while a request was still being handled")
	}
	if answer := <-got; answer != "200 OK ok" {
		t.Fatalf("the request in flight got %q, want 200 OK ok", answer)
	}
}
