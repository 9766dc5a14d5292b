package fairshare

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

func TestClassString(t *testing.T) {
	t.Parallel()
	want := []string{"high", "normal", "low"}
	for i, class := range Classes() {
		if class.String() != want[i] {
			t.Errorf("Classes()[%d].String() = %q, want %q", i, class.String(), want[i])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		// wantErrs are fragments that must all appear in the error; nil means valid.
		wantErrs []string
	}{
		{name: "nil shares mean the defaults", cfg: Config{Slots: 16}},
		{name: "default shares", cfg: Config{Slots: 16, Shares: DefaultShares()}},
		{name: "one slot", cfg: Config{Slots: 1, Shares: DefaultShares()}},
		{name: "a missing class has share 0", cfg: Config{Slots: 4, Shares: map[Class]int{High: 70, Normal: 30}}},
		{name: "zero shares allowed", cfg: Config{Slots: 4, Shares: map[Class]int{High: 100, Normal: 0, Low: 0}}},
		{name: "zero slots", cfg: Config{Slots: 0}, wantErrs: []string{"slots must be at least 1, got 0"}},
		{name: "negative slots", cfg: Config{Slots: -3}, wantErrs: []string{"slots must be at least 1, got -3"}},
		{
			name:     "sum below 100",
			cfg:      Config{Slots: 16, Shares: map[Class]int{High: 60, Normal: 30, Low: 5}},
			wantErrs: []string{"sum to 100, got 95"},
		},
		{
			name:     "sum above 100",
			cfg:      Config{Slots: 16, Shares: map[Class]int{High: 60, Normal: 30, Low: 20}},
			wantErrs: []string{"sum to 100, got 110"},
		},
		{
			name:     "empty map is not the defaults",
			cfg:      Config{Slots: 16, Shares: map[Class]int{}},
			wantErrs: []string{"sum to 100, got 0"},
		},
		{
			name:     "negative share even when the sum is 100",
			cfg:      Config{Slots: 16, Shares: map[Class]int{High: 110, Normal: 0, Low: -10}},
			wantErrs: []string{"share of low must not be negative, got -10"},
		},
		{
			name:     "unknown class",
			cfg:      Config{Slots: 16, Shares: map[Class]int{High: 60, Normal: 30, Low: 10, "urgent": 0}},
			wantErrs: []string{`class "urgent" is unknown`},
		},
		{
			name: "all problems at once",
			cfg:  Config{Slots: 0, Shares: map[Class]int{High: -1, "bulk": 5, Low: 10}},
			wantErrs: []string{
				"slots must be at least 1, got 0",
				"share of high must not be negative, got -1",
				`class "bulk" is unknown`,
				"sum to 100, got 9",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.wantErrs == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors containing %q", tt.wantErrs)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
			if got := len(strings.Split(err.Error(), "\n")); got != len(tt.wantErrs) {
				t.Errorf("Validate() reported %d problems, want %d: %q", got, len(tt.wantErrs), err)
			}
		})
	}
}

func TestParseShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		want     map[Class]int
		wantErrs []string
	}{
		{name: "canonical", in: "high=60,normal=30,low=10", want: map[Class]int{High: 60, Normal: 30, Low: 10}},
		{name: "spaces, case, any order", in: " Low = 10 , HIGH=60,normal= 30 ", want: map[Class]int{High: 60, Normal: 30, Low: 10}},
		{name: "trailing comma", in: "high=100,", want: map[Class]int{High: 100}},
		{name: "values are not checked here", in: "high=-5,low=500", want: map[Class]int{High: -5, Low: 500}},
		{name: "empty means defaults", in: "", want: nil},
		{name: "blank means defaults", in: "  ", want: nil},
		{name: "missing equals", in: "high60", wantErrs: []string{`"high60" is not class=percent`}},
		{name: "not an integer", in: "high=60%", wantErrs: []string{`"high=60%": percent is not an integer`}},
		{name: "unknown class", in: "urgent=100", wantErrs: []string{`unknown class "urgent"`}},
		{name: "duplicate", in: "high=60,high=40", wantErrs: []string{"share of high is given twice"}},
		{
			name:     "all problems at once",
			in:       "high=x,bulk=5,normal,low=1,low=2",
			wantErrs: []string{`"high=x"`, `unknown class "bulk"`, `"normal" is not`, "low is given twice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseShares(tt.in)
			if tt.wantErrs == nil {
				if err != nil {
					t.Fatalf("ParseShares(%q) error = %v", tt.in, err)
				}
				if !maps.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
					t.Fatalf("ParseShares(%q) = %v, want %v", tt.in, got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseShares(%q) = %v, want an error", tt.in, got)
			}
			if got != nil {
				t.Errorf("ParseShares(%q) returned %v alongside the error, want nil", tt.in, got)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ParseShares(%q) error = %q, want it to contain %q", tt.in, err, want)
				}
			}
		})
	}
}

func TestParsedDefaultsValidate(t *testing.T) {
	t.Parallel()
	shares, err := ParseShares("high=60,normal=30,low=10")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(shares, DefaultShares()) {
		t.Fatalf("parsed %v, want the defaults %v", shares, DefaultShares())
	}
	if err := (Config{Slots: 16, Shares: shares}).Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

func TestReserved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		slots  int
		shares map[Class]int
		want   map[Class]int
	}{
		// floor gives 9/4/1; the two left over go to high then normal.
		{slots: 16, shares: DefaultShares(), want: map[Class]int{High: 10, Normal: 5, Low: 1}},
		{slots: 20, shares: DefaultShares(), want: map[Class]int{High: 12, Normal: 6, Low: 2}},
		{slots: 100, shares: DefaultShares(), want: map[Class]int{High: 60, Normal: 30, Low: 10}},
		// floor gives 1/0/0; the minimums make it 1/1/1.
		{slots: 3, shares: DefaultShares(), want: map[Class]int{High: 1, Normal: 1, Low: 1}},
		// floor gives 4/2/0; low's minimum fills the seventh slot.
		{slots: 7, shares: DefaultShares(), want: map[Class]int{High: 4, Normal: 2, Low: 1}},
		// Fewer slots than classes with a share: nothing is reserved.
		{slots: 1, shares: DefaultShares(), want: map[Class]int{High: 0, Normal: 0, Low: 0}},
		{slots: 2, shares: DefaultShares(), want: map[Class]int{High: 0, Normal: 0, Low: 0}},
		// floor gives 3/0/0, the minimums 3/1/1 = 5 > 4: high, the largest, gives one back.
		{slots: 4, shares: map[Class]int{High: 98, Normal: 1, Low: 1}, want: map[Class]int{High: 2, Normal: 1, Low: 1}},
		// Ties for a left-over slot go to the higher priority: floor 1/1/0, minimums 1/1/1.
		{slots: 4, shares: map[Class]int{High: 49, Normal: 49, Low: 2}, want: map[Class]int{High: 2, Normal: 1, Low: 1}},
		{slots: 4, shares: map[Class]int{High: 2, Normal: 49, Low: 49}, want: map[Class]int{High: 1, Normal: 2, Low: 1}},
		{slots: 3, shares: map[Class]int{High: 50, Normal: 50}, want: map[Class]int{High: 2, Normal: 1, Low: 0}},
		{slots: 1, shares: map[Class]int{High: 100}, want: map[Class]int{High: 1, Normal: 0, Low: 0}},
		{slots: 1, shares: map[Class]int{Low: 100}, want: map[Class]int{High: 0, Normal: 0, Low: 1}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d slots %v", tt.slots, tt.shares), func(t *testing.T) {
			t.Parallel()
			s, err := New(Config{Slots: tt.slots, Shares: tt.shares})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Reserved(); !maps.Equal(got, tt.want) {
				t.Fatalf("Reserved() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReservedProperties checks the rules of the package comment over many slot counts and
// share sets, so that no rounding corner escapes the table above.
func TestReservedProperties(t *testing.T) {
	t.Parallel()
	shareSets := []map[Class]int{
		DefaultShares(),
		{High: 98, Normal: 1, Low: 1},
		{High: 34, Normal: 33, Low: 33},
		{High: 1, Normal: 1, Low: 98},
		{High: 70, Normal: 30},
		{Normal: 50, Low: 50},
		{High: 100},
	}
	for _, shares := range shareSets {
		withShare := 0
		for _, share := range shares {
			if share > 0 {
				withShare++
			}
		}
		for slots := 1; slots <= 200; slots++ {
			s, err := New(Config{Slots: slots, Shares: shares})
			if err != nil {
				t.Fatal(err)
			}
			reserved := s.Reserved()
			total := 0
			for _, class := range Classes() {
				r, share := reserved[class], shares[class]
				total += r
				switch {
				case slots < withShare && r != 0:
					t.Errorf("%d slots %v: %s reserves %d, want 0 when slots < classes with a share", slots, shares, class, r)
				case slots >= withShare && share > 0 && r < 1:
					t.Errorf("%d slots %v: %s reserves %d, want at least 1", slots, shares, class, r)
				case share == 0 && r != 0:
					t.Errorf("%d slots %v: %s has share 0 but reserves %d", slots, shares, class, r)
				}
				// Rounding moves a class by less than one slot per class, plus a minimum.
				if exact := float64(slots*share) / 100; slots >= withShare && (float64(r) < exact-numClasses || float64(r) > exact+numClasses) {
					t.Errorf("%d slots %v: %s reserves %d, far from its exact %.2f", slots, shares, class, r, exact)
				}
			}
			if slots >= withShare && total != slots {
				t.Errorf("%d slots %v: reserved %v sums to %d, want %d", slots, shares, reserved, total, slots)
			}
		}
	}
}
