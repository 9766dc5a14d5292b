package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/deliveryledger/ledger/tracing"
)

// traceSink is the OTLP/HTTP endpoint of a traced run: it takes every export and throws it
// away, counting requests and bytes, as a collector on another machine would cost the ledger
// nothing but the export itself.
type traceSink struct {
	server          *http.Server
	exports, octets atomic.Int64
}

// startTracing turns tracing on for the run's ledgers, every span sampled, exported to a
// discarding sink on loopback. The returned stop flushes the exporter and stops the sink.
func startTracing(ctx context.Context) (*traceSink, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	s := &traceSink{}
	s.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		s.octets.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.server.Serve(l) }()
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + l.Addr().String(),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_SAMPLER":         "always_on",
		"OTEL_SERVICE_NAME":           "ledger-bench",
	} {
		if err := os.Setenv(k, v); err != nil {
			return nil, nil, err
		}
	}
	_, shutdown, err := tracing.Setup(ctx)
	if err != nil {
		_ = s.server.Close()
		return nil, nil, err
	}
	return s, func() {
		_ = shutdown(context.WithoutCancel(ctx))
		_ = s.server.Close()
	}, nil
}
