package app

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// TestRateLimitedDeliveriesAreDeferredOnce: one notification to 300 Telegram chats under the
// bot's 30 messages a second. The first second's worth goes at once; every other delivery is
// deferred once, to the slot the limiter kept for it, and starts at that slot: on average at
// most one deferral per attempt and three for any, every until true (the attempt after it starts
// at or after it, and at most untilLate later). Before the
// limiter kept slots, a refused delivery polled a short wait and asked again: 6,780 deferrals
// for 300 deliveries, 66 for one.
func TestRateLimitedDeliveriesAreDeferredOnce(t *testing.T) {
	t.Parallel()
	b, tg := setupTelegram(t)
	const chats = 300
	// untilLate bounds how long after its until a held attempt starts. A message that comes back
	// joins the tail of the work queue, behind whatever the workers have not taken yet: here the
	// rest of the burst of 300, taken at the pace of a worker on two cores that run other tests
	// too. Measured: 0.6 to 2.3 s alone or beside another test, 11.5 s under -race with the whole
	// package in parallel (the workers then took fewer than 30 a second, and most deliveries were
	// never deferred).
	const untilLate = 30 * time.Second
	// earlyBy is how early an attempt may seem to start before its until: the start's record is
	// at the clock's microsecond, the until at the nanosecond.
	const earlyBy = time.Millisecond

	recipients := make([]map[string]string, chats)
	for i := range recipients {
		recipients[i] = map[string]string{"channel": "telegram", "recipient": strconv.Itoa(1000 + i)}
	}
	acc := b.acceptNotification(t, "chats-300", map[string]any{
		"payload": map[string]any{"text": "hello"}, "recipients": recipients})

	// 300 deliveries at 30 a second take ten seconds; wait for the last with room to spare (33 s
	// under -race beside the rest of the package).
	total, most, latest, earliest := 0, 0, time.Duration(0), time.Hour
	histories := make([][]historyEvent, chats)
	deadline := time.Now().Add(90 * time.Second)
	for i, d := range acc.Deliveries {
		b.waitState(t, d.ID, domain.StateDelivered, time.Until(deadline))
		histories[i] = b.history(t, d.ID)
	}
	for i, h := range histories {
		id := acc.Deliveries[i].ID
		if s := attemptStarts(h); len(s) != 1 {
			t.Fatalf("delivery %s had %d attempts, want 1: %v", id, len(s), types(h))
		}
		n := 0
		for j, e := range h {
			if e.Type != string(domain.EventDeferred) {
				continue
			}
			n++
			var held domain.Deferred
			if err := json.Unmarshal(e.Data, &held); err != nil {
				t.Fatal(err)
			}
			// What follows a deferral is the next try of the same attempt: another deferral or
			// the start.
			var next *historyEvent
			for k := j + 1; k < len(h); k++ {
				if h[k].Type == string(domain.EventDeferred) || h[k].Type == string(domain.EventAttemptStarted) {
					next = &h[k]
					break
				}
			}
			if next == nil {
				t.Fatalf("delivery %s: a deferral with nothing after it: %v", id, types(h))
			}
			late := next.RecordedAt.Sub(held.Until)
			if late < -earlyBy || late > untilLate {
				t.Errorf("delivery %s: deferred until %s (%s), the next try (%s) came %s after it, want within [-%s, %s]",
					id, held.Until.Format(time.StampMicro), held.Reason, next.Type, late, earlyBy, untilLate)
			}
			latest, earliest = max(latest, late), min(earliest, late)
		}
		total += n
		most = max(most, n)
	}
	t.Logf("%d deliveries: %d deferrals (%.2f per attempt, at most %d for one); the next try came %s to %s after its until",
		chats, total, float64(total)/chats, most, earliest, latest)
	if float64(total)/chats > 1 {
		t.Errorf("%d deferrals for %d attempts: want at most one per attempt on average", total, chats)
	}
	if most > 3 {
		t.Errorf("a delivery was deferred %d times: want at most 3", most)
	}

	if n := len(tg.Messages()); n != chats {
		t.Errorf("the Bot API sent %d messages, want %d", n, chats)
	}
}
