package retention

import (
	"strings"
	"testing"
	"time"
)

func TestParseDurationTakesDays(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second, "2h30m": 150 * time.Minute} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"d", "x1d", "1dx", "-1d", "1.5d", ""} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
	if FormatDuration(48*time.Hour) != "2d" || FormatDuration(90*time.Minute) != "1h30m0s" {
		t.Error(FormatDuration(48*time.Hour), FormatDuration(90*time.Minute))
	}
}

// TestJudgeHoldsOpenAndLongerKeptPartitions: a partition leaves when every tenant's deliveries
// in it are terminal and its end is past that tenant's keep; an open delivery holds it, overdue
// past twice keep; a tenant keeping longer holds it without being overdue.
func TestJudgeHoldsOpenAndLongerKeptPartitions(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := &Pass{Config: Config{Keep: 24 * time.Hour, ArchiveDir: "/a", Tenants: map[string]TenantPolicy{"long": {Keep: 72 * time.Hour}}}}
	part := Partition{Name: "events_p1_2", To: end}
	day := 24 * time.Hour
	for _, tt := range []struct {
		name          string
		counts        []TenantCount
		at            time.Duration
		ok, pastTwice bool
	}{
		{"terminal, past keep", []TenantCount{{Tenant: "a", Deliveries: 3}}, day + time.Second, true, false},
		{"terminal, within keep", []TenantCount{{Tenant: "a", Deliveries: 3}}, day - time.Second, false, false},
		{"open, past keep", []TenantCount{{Tenant: "a", Deliveries: 3, Open: 1}}, day + time.Second, false, false},
		{"open, past twice keep", []TenantCount{{Tenant: "a", Deliveries: 3, Open: 1}}, 2 * day, false, true},
		{"a tenant keeping longer", []TenantCount{{Tenant: "a", Deliveries: 3}, {Tenant: "long", Deliveries: 1}}, 2 * day, false, false},
		{"empty", nil, day, true, false},
	} {
		ok, pastTwice := p.judge(part, tt.counts, end.Add(tt.at))
		if ok != tt.ok || pastTwice != tt.pastTwice {
			t.Errorf("%s: ok %v, past twice %v; want %v, %v", tt.name, ok, pastTwice, tt.ok, tt.pastTwice)
		}
	}
	if p.shortestKeep() != day {
		t.Errorf("shortest keep %s", p.shortestKeep())
	}
}

func TestConfigValidateNamesEachKey(t *testing.T) {
	t.Parallel()
	err := Config{Keep: time.Hour, Payloads: 2 * time.Hour, Partition: 500 * time.Millisecond,
		Tenants: map[string]TenantPolicy{"t1": {Keep: 100 * time.Millisecond}}}.Validate()
	for _, want := range []string{"retention.partition", "retention.archive_dir", "retention.payloads", "retention.tenants.t1.keep"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v does not name %s", err, want)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the empty block: %v", err)
	}
}
