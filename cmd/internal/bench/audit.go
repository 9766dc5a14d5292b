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
// SELECT. Delivery i's id is auditDeliveryID's: a version 7 UUID of accept time $3 + i ms, so
// that it has its partition of events (migration 0019).
var benchAuditGenerate = strings.ReplaceAll(`INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
SELECT d.id, 'bench', v.version, v.type, '/' || v.key, v.data::jsonb,
       to_timestamp(($3::bigint + i) / 1000.0)
FROM generate_series($1::int, $2::int) AS i
CROSS JOIN LATERAL (SELECT overlay(md5(i::text) PLACING lpad(to_hex($3::bigint + i), 12, '0') || '7' FROM 1 FOR 13)::uuid AS id) AS d
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
	// A day ago: in the partition that holds everything before the schema was partitioned.
	base := time.Now().Add(-24 * time.Hour).UnixMilli()
	const chunk = 50000
	start := time.Now()
	for from := 1; from <= deliveries; from += chunk {
		to := min(from+chunk-1, deliveries)
		if _, err := env.pool.Exec(ctx, benchAuditGenerate, from, to, base); err != nil {
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
		id := auditDeliveryID(base, i)
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

// auditDeliveryID is the id benchAuditGenerate gives delivery i: md5(i) with the first 48 bits
// the accept time base + i (Unix ms) and the version 7.
func auditDeliveryID(base int64, i int) string {
	id := uuid.UUID(md5.Sum([]byte(strconv.Itoa(i))))
	ms := uint64(base + int64(i))
	for b := range 6 {
		id[b] = byte(ms >> (40 - 8*b))
	}
	id[6] = 0x70 | id[6]&0x0f
	return id.String()
}
