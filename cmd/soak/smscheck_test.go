package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/domain"
)

// smsCase is one SMS delivery for checkSMS, delivered by the Twilio fake as message sid, and
// what the fakes took for it.
type smsCase struct {
	key, id, number, sid string
	sends                []smsSend
}

// deliveredSMS is the stream of an SMS the Twilio fake accepted as sid and whose receipt said
// delivered.
func deliveredSMS(t *testing.T, c smsCase) []domain.Event {
	t.Helper()
	now := time.Now()
	d, events, err := domain.Accept(domain.AcceptSpec{ID: c.id, Tenant: soakTenant, Channel: sms.Name, Recipient: c.number,
		Payload: []byte(`{"text":"` + smsText(c.key) + `"}`), Priority: domain.PriorityNormal, MaxAttempts: 5, RequestKey: c.key}, now)
	if err != nil {
		t.Fatal(err)
	}
	policy := domain.RetryPolicy{Strategy: domain.Schedule(smsSchedule), MaxAttempts: 5}
	steps := []func() ([]domain.Event, error){
		func() ([]domain.Event, error) { return d.Queue(now) },
		func() ([]domain.Event, error) { return d.StartAttempt(twilioProvider, now) },
		func() ([]domain.Event, error) {
			return d.RecordOutcome(1, domain.Outcome{Kind: domain.OutcomeAccepted, Provider: twilioProvider, ProviderOperationID: c.sid}, policy, now, 0)
		},
		func() ([]domain.Event, error) {
			return d.RecordReceipt(domain.ReceiptWord{Provider: twilioProvider, ProviderOperationID: c.sid, Status: domain.ReceiptDelivered,
				ProviderStatus: "delivered", Source: "receipt"}, policy, now, 0)
		},
	}
	return appendSteps(t, events, steps)
}

// checkSMSCases runs checkSMS on the cases and returns its failures.
func checkSMSCases(t *testing.T, listed []string, cases ...smsCase) []string {
	t.Helper()
	ev := evidence{ids: map[string]string{}}
	histories := map[string]*history{}
	for _, c := range cases {
		ev.ids[c.key] = c.id
		h, err := readHistory(deliveredSMS(t, c))
		if err != nil {
			t.Fatal(err)
		}
		histories[c.id] = h
		ev.sends = append(ev.sends, c.sends...)
	}
	ev.twilioListed = listed
	v := &verdict{}
	checkSMS(v, ev, histories)
	return v.Failures
}

func TestCheckSMS(t *testing.T) {
	sent := func(sid, key string) smsSend {
		return smsSend{Provider: twilioProvider, ID: sid, To: "+15005551000", Text: smsText(key)}
	}
	good := smsCase{key: "k1", id: "d1", number: "+15005551000", sid: "SM1", sends: []smsSend{sent("SM1", "k1")}}
	for _, tc := range []struct {
		name   string
		cases  []smsCase
		listed []string
		want   string // a failure names this; "" for none
	}{
		{name: "consistent", cases: []smsCase{good}, listed: []string{"SM1"}},
		{name: "sent twice in one attempt", want: "more times than their attempts explain",
			cases: []smsCase{{key: "k1", id: "d1", number: "+15005551000", sid: "SM1", sends: []smsSend{sent("SM1", "k1"), sent("SM2", "k1")}}}},
		{name: "a phone got it twice, no unknown", want: "without an unknown outcome",
			cases: []smsCase{{key: "k1", id: "d1", number: "+15005551000", sid: "SM1", sends: []smsSend{sent("SM1", "k1"), sent("SM2", "k1")}}}},
		{name: "delivered to a number that never takes it", want: "numbers the fakes never deliver to",
			cases: []smsCase{{key: "k1", id: "d1", number: permanentNumbers[0], sid: "SM1", sends: []smsSend{sent("SM1", "k1")}}}},
		{name: "accepted as a message the fake never took", want: "never took",
			cases: []smsCase{{key: "k1", id: "d1", number: "+15005551000", sid: "SM9", sends: []smsSend{sent("SM1", "k1")}}}},
		{name: "a message for no accepted delivery", want: "no accepted delivery explains",
			cases: []smsCase{{key: "k1", id: "d1", number: "+15005551000", sid: "SM1", sends: []smsSend{sent("SM1", "k1"), sent("SM2", "k2")}}}},
		{name: "listed and not logged", cases: []smsCase{good}, listed: []string{"SM1", "SM7"}, want: "its log does not show"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failures := checkSMSCases(t, tc.listed, tc.cases...)
			switch {
			case tc.want == "" && len(failures) > 0:
				t.Errorf("failures %q, want none", failures)
			case tc.want != "" && !slices.ContainsFunc(failures, func(f string) bool { return strings.Contains(f, tc.want) }):
				t.Errorf("failures %q, want one saying %q", failures, tc.want)
			}
		})
	}
}

func TestReadSends(t *testing.T) {
	dir := t.TempDir()
	twilioLog := filepath.Join(dir, "twilio.log")
	vonageLog := filepath.Join(dir, "vonage.log")
	// Lines as `ledger sink` prints them.
	write := func(path string, lines ...string) {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(twilioLog,
		"=== soak: start #1 at 2026-01-01T00:00:00Z",
		`twilio: twiliofake: created SMab12 from "+15005550006" to "+15005551234": "soak k-000001"`,
		`twilio: twiliofake: SMab12 to "+15005551234" is delivered`)
	write(vonageLog,
		`vonage: vonagefake: accepted message 0A00000000000001 from "Ledger" to "15005551235" (client-ref "d2", callback "http://127.0.0.1:1/v1/receipts/vonage"): "soak k-000002"`,
		`vonage: vonagefake: refused a message to "15005551236": status 1 Throttled`)
	f := &smsFakes{twilio: &process{logPath: twilioLog}, vonage: &process{logPath: vonageLog}}
	got, err := f.sends()
	if err != nil {
		t.Fatal(err)
	}
	want := []smsSend{
		{Provider: twilioProvider, ID: "SMab12", To: "+15005551234", Text: "soak k-000001"},
		{Provider: vonageProvider, ID: "0A00000000000001", To: "+15005551235", Text: "soak k-000002"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("sends %+v, want %+v", got, want)
	}
}

func TestSMSPlan(t *testing.T) {
	plan := smsPlan{share: 0.2}
	fates := map[smsFate]int{}
	n := 0
	for i := range 300 {
		j, ok := plan.ordinal(i)
		if !ok {
			continue
		}
		if j != n {
			t.Fatalf("delivery %d is SMS %d, want %d", i, j, n)
		}
		n++
		number := plan.number(j)
		if err := sms.CheckNumber(number); err != nil {
			t.Fatalf("SMS %d goes to %q: %v", j, number, err)
		}
		fates[smsFateOf(number)]++
	}
	if n != 60 || fates[smsPermanent] != 3 || fates[smsRetryable] != 3 {
		t.Errorf("%d SMS of 300 (permanent %d, retryable %d), want 60 (3, 3)", n, fates[smsPermanent], fates[smsRetryable])
	}
}
