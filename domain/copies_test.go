package domain

import "testing"

// TestCopyVerdicts holds the redelivery rule to a table written out by hand: for a delivery in
// each state a worker can find, and a copy of each attempt's message, fresh or redelivered, to a
// provider that deduplicates or not, the one thing the copy may do.
func TestCopyVerdicts(t *testing.T) {
	t.Parallel()
	policy := DefaultRetryPolicy()
	states := map[string]func(t *testing.T) *Delivery{
		"accepted": func(t *testing.T) *Delivery { return accept(t, validSpec()).d },
		"queued": func(t *testing.T) *Delivery {
			s := accept(t, validSpec())
			s.add(t)(s.d.Queue(testNow))
			return s.d
		},
		"processing": func(t *testing.T) *Delivery { return processing(t, validSpec()).d },
		"awaiting a receipt": func(t *testing.T) *Delivery {
			s := processing(t, validSpec())
			s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeAccepted, Provider: "twilio", ProviderOperationID: "SM1"}, policy, testNow, 0))
			return s.d
		},
		"retrying": func(t *testing.T) *Delivery {
			s := processing(t, validSpec())
			s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeTransient}, policy, testNow, 0))
			return s.d
		},
		"delivered": func(t *testing.T) *Delivery {
			s := processing(t, validSpec())
			s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeDelivered}, policy, testNow, 0))
			return s.d
		},
		"dead": func(t *testing.T) *Delivery {
			s := processing(t, validSpec())
			s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomePermanent}, policy, testNow, 0))
			return s.d
		},
		"unknown": func(t *testing.T) *Delivery {
			s := processing(t, validSpec())
			s.add(t)(s.d.RecordOutcome(1, Outcome{Kind: OutcomeUnknown}, policy, testNow, 0))
			return s.d
		},
	}
	// Each row: the state, the copy's attempt, then the verdict for (fresh, no dedup), (fresh,
	// dedup), (redelivered, no dedup), (redelivered, dedup).
	const (
		qs = CopyQueueAndStart
		st = CopyStart
		ca = CopyCallAgain
		ru = CopyRecordUnknown
		sk = CopySkip
	)
	table := []struct {
		state   string
		attempt int
		want    [4]CopyVerdict
	}{
		{"accepted", 1, [4]CopyVerdict{qs, qs, qs, qs}},
		{"accepted", 2, [4]CopyVerdict{sk, sk, sk, sk}},
		{"queued", 1, [4]CopyVerdict{st, st, st, st}},
		{"queued", 2, [4]CopyVerdict{sk, sk, sk, sk}},
		{"processing", 1, [4]CopyVerdict{sk, sk, ru, ca}},
		{"processing", 2, [4]CopyVerdict{sk, sk, sk, sk}},
		{"awaiting a receipt", 1, [4]CopyVerdict{sk, sk, sk, sk}},
		{"retrying", 1, [4]CopyVerdict{sk, sk, sk, sk}},
		{"retrying", 2, [4]CopyVerdict{qs, qs, qs, qs}},
		{"retrying", 3, [4]CopyVerdict{sk, sk, sk, sk}},
		{"delivered", 1, [4]CopyVerdict{sk, sk, sk, sk}},
		{"dead", 1, [4]CopyVerdict{sk, sk, sk, sk}},
		{"dead", 2, [4]CopyVerdict{sk, sk, sk, sk}},
		{"unknown", 1, [4]CopyVerdict{sk, sk, sk, sk}},
	}
	for _, row := range table {
		for i, c := range []struct{ redelivered, dedup bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
			d := states[row.state](t)
			got := d.CopyOf(row.attempt, c.redelivered, c.dedup)
			if got != row.want[i] {
				t.Errorf("%s, copy of attempt %d, redelivered %v, provider deduplicates %v: %s, want %s",
					row.state, row.attempt, c.redelivered, c.dedup, got, row.want[i])
			}
			if got.Calls() != (got == qs || got == st || got == ca) {
				t.Errorf("%s: Calls() is %v", got, got.Calls())
			}
		}
	}
}
