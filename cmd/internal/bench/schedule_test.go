package bench

import (
	"strings"
	"testing"
	"time"
)

// TestBenchSchedulePhase runs the schedule phase at a small scale against the real services:
// the fire lateness comes from the histories of every delivery of the stream, the far-ahead
// schedule holds no RabbitMQ message, and the phase reports its three targets alone.
func TestBenchSchedulePhase(t *testing.T) {
	t.Parallel()
	base := testBase(t)
	base.WorkerConcurrency = 8
	opts := Options{Only: []string{"schedule"}, Phase: time.Second, SchedulePending: 300, ScheduleRate: 100,
		ScheduleFor: 2 * time.Second, ResultsDir: t.TempDir()}
	rep, out := runBench(t, base, opts)
	if got := rep.Counts["schedule_filled"]; got != 300 {
		t.Fatalf("filled %d, want 300", got)
	}
	if got := rep.Counts["schedule_pending"]; got < 300 {
		t.Fatalf("%d pending when counted, want the 300 filled and the sub-runs' scheduled accepts", got)
	}
	if held := rep.Counts["schedule_pending_queue_messages"]; held != 0 {
		t.Fatalf("%d RabbitMQ messages held while only far-ahead schedules are pending, want 0", held)
	}
	sent, timed := rep.Counts["schedule_stream_sent"], len(rep.Samples["fire lateness at 100/s"])
	if sent != 200 || timed != sent-rep.Counts["schedule_stream_accepted_late"] || timed == 0 {
		t.Fatalf("stream of %d, %d timed (%d accepted late), want 200, each timed from its history", sent, timed, rep.Counts["schedule_stream_accepted_late"])
	}
	// An attempt starts at or after its send_at (the due pass releases nothing early), and the
	// samples are those the percentiles report.
	s := rep.Samples["fire lateness at 100/s"]
	if s[0] < 0 || rep.LatencyMS["schedule_lateness_p99"] != percentile(s, .99) || rep.LatencyMS["schedule_lateness_p50"] <= 0 {
		t.Fatalf("lateness min %.1f ms, p50 %.1f, p99 %.1f", s[0], rep.LatencyMS["schedule_lateness_p50"], rep.LatencyMS["schedule_lateness_p99"])
	}
	if rep.BytesPerDelivery["schedule_pending_due_work"] <= 0 || rep.BytesPerDelivery["schedule_pending_events"] <= 0 || rep.BytesPerDelivery["schedule_pending_status_view"] <= 0 {
		t.Fatalf("bytes per pending delivery %v", rep.BytesPerDelivery)
	}
	if rep.Ratios["schedule_accept_with_vs_without"] <= 0 {
		t.Fatalf("ratios %v", rep.Ratios)
	}
	var names []string
	for _, target := range rep.Targets {
		names = append(names, target.Name)
	}
	if got := strings.Join(names, ","); got != "schedule_lateness_p99,schedule_accept_with_vs_without,schedule_pending_queue_messages" {
		t.Fatalf("targets %s, want the schedule phase's three", got)
	}
	if !strings.Contains(out, "fire lateness (attempt start − send_at)") {
		t.Fatalf("no schedule line in\n%s", out)
	}
}
