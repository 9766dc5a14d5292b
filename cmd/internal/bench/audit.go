package bench

import (
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"strings"

	"context"
	"crypto/md5"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// benchAuditGenerate fills the log with webhook deliveries of four events each (accepted,
// queued, attempt started, delivered), with the event data the domain writes, in one INSERT ...
// SELECT.
var benchAuditGenerate = strings.ReplaceAll(`INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
SELECT md5(i::text)::uuid, 'bench', v.version, v.type, md5(i::text) || '/' || v.key, v.data::jsonb,
       now() - interval '1 day' + (i || ' milliseconds')::interval
FROM generate_series($1::int, $2::int) AS i
CROSS JOIN (VALUES
  (1, 'delivery.accepted', 'accepted', '{"notification_id":"n","channel":"CHANNEL","recipient":"http://127.0.0.1:9/hook","payload":{"order":42,"text":"benchmark"},"priority":"normal","max_attempts":10,"idempotency_key":"k"}'),
  (2, 'delivery.queued', 'queued/1', '{"attempt":1}'),
  (3, 'delivery.attempt_started', 'attempt/1/started', '{"attempt":1,"provider":"CHANNEL"}'),
  (4, 'delivery.delivered', 'attempt/1/outcome', '{"attempt":1,"provider":"CHANNEL","status_code":200,"latency_ms":3.2}')
) AS v(version, type, key, data)`, "CHANNEL", webhook.Name)

// benchAudit builds a log of at least events rows and times reads of random deliveries'
// histories through the API.
func benchAudit(ctx context.Context, env *benchEnv, events, reads int, out io.Writer) ([]float64, int, error) {
	deliveries := (events + 3) / 4
	const chunk = 50000
	start := time.Now()
	for from := 1; from <= deliveries; from += chunk {
		to := min(from+chunk-1, deliveries)
		if _, err := env.pool.Exec(ctx, benchAuditGenerate, from, to); err != nil {
			return nil, 0, fmt.Errorf("generate audit log: %w", err)
		}
		done := to * 4
		rate := float64(done) / time.Since(start).Seconds()
		benchLog(out, "audit log: %d/%d events (%.0f events/s, ETA %s)", done, deliveries*4, rate,
			time.Duration(float64(deliveries*4-done)/rate*float64(time.Second)).Round(time.Second))
	}
	if _, err := env.pool.Exec(ctx, "ANALYZE events"); err != nil {
		return nil, 0, err
	}
	var n int
	if err := env.pool.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
		return nil, 0, err
	}
	var lat latencies
	for range reads {
		i := 1 + rand.IntN(deliveries)
		sum := md5.Sum([]byte(strconv.Itoa(i)))
		id := uuid.UUID(sum).String()
		req, _ := http.NewRequest("GET", env.base+"/v1/deliveries/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer bench-key")
		t0 := time.Now()
		resp, err := benchClient.Do(req)
		if err != nil {
			return nil, n, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, n, fmt.Errorf("audit read of %s: status %d", id, resp.StatusCode)
		}
		lat.add(time.Since(t0))
	}
	return lat.sorted(), n, nil
}
