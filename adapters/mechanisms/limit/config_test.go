package limit

import (
	"errors"
	"maps"
	"math"
	"strings"
	"testing"
)

func TestParseHostRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    map[string]Rule
		wantErr []string // substrings the error must contain; nil means no error
	}{
		{name: "empty", in: "", want: nil},
		{name: "only separators", in: " , ,", want: nil},
		{name: "concurrency only", in: "example.com=4", want: map[string]Rule{"example.com": {Concurrency: 4}}},
		{
			name: "all fields and several hosts",
			in:   "host=4:10:20,host2=1:0.5",
			want: map[string]Rule{"host": {Concurrency: 4, Rate: 10, Burst: 20}, "host2": {Concurrency: 1, Rate: 0.5}},
		},
		{
			name: "spaces, case, trailing dot and trailing comma",
			in:   " API.Example.com. = 2 : 5 : 7 ,",
			want: map[string]Rule{"api.example.com": {Concurrency: 2, Rate: 5, Burst: 7}},
		},
		{name: "empty field is zero", in: "h=:5", want: map[string]Rule{"h": {Rate: 5}}},
		{name: "zero exempts", in: "internal=0", want: map[string]Rule{"internal": {}}},
		{
			name: "ports and IPv6",
			in:   "example.com:8443=2,[::1]:8080=3",
			want: map[string]Rule{"example.com:8443": {Concurrency: 2}, "[::1]:8080": {Concurrency: 3}},
		},
		{name: "no equals sign", in: "example.com", wantErr: []string{`"example.com"`, "want host="}},
		{name: "empty host", in: "=4", wantErr: []string{"empty host"}},
		{name: "empty rule", in: "h=", wantErr: []string{"empty rule"}},
		{name: "bad concurrency", in: "h=x", wantErr: []string{`concurrency "x" is not an integer`}},
		{name: "bad rate", in: "h=4:y", wantErr: []string{`rate "y" is not a number`}},
		{name: "bad burst", in: "h=4:1:z", wantErr: []string{`burst "z" is not an integer`}},
		{name: "too many fields", in: "h=4:1:2:3", wantErr: []string{"4 fields"}},
		{name: "negative concurrency", in: "h=-1", wantErr: []string{"concurrency must not be negative"}},
		{name: "infinite rate", in: "h=1:Inf", wantErr: []string{"finite"}},
		{name: "burst without rate", in: "h=4:0:5", wantErr: []string{"no effect without a rate"}},
		{name: "duplicate host", in: "h=4,H=5", wantErr: []string{"given twice"}},
		{
			name:    "every bad item is reported",
			in:      "a=x,ok=1,b=-2,c",
			wantErr: []string{`"a=x"`, `"b=-2"`, `"c"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseHostRules(tt.in)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("ParseHostRules(%q) = %v, want an error", tt.in, got)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("ParseHostRules(%q) error %q does not mention %q", tt.in, err, want)
					}
				}
				if got != nil {
					t.Errorf("ParseHostRules(%q) returned rules %v along with an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHostRules(%q): %v", tt.in, err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("ParseHostRules(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestConfigValidateJoinsProblems(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Providers:   map[string]Rule{"webhook": {Concurrency: -1}, "": {}},
		DefaultHost: Rule{Rate: -2, Burst: -3},
		Hosts: map[string]Rule{
			"a.example": {Rate: math.NaN()},
			"b.example": {Burst: 4},
			"C.example": {},
			"c.example": {},
		},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted an invalid config")
	}
	wants := []string{
		`provider "webhook": concurrency must not be negative, got -1`,
		"provider rule with an empty provider name",
		"default host: rate must not be negative, got -2",
		"default host: burst must not be negative, got -3",
		`host "a.example": rate must be a finite number`,
		`host "b.example": burst 4 has no effect without a rate`,
		"name the same host",
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error does not mention %q:\n%v", want, err)
		}
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != len(wants) {
		t.Errorf("Validate returned %v, want %d joined problems", err, len(wants))
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig is invalid: %v", err)
	}
	if got, want := cfg.DefaultHost, (Rule{Concurrency: 64}); got != want {
		t.Errorf("default host rule = %+v, want %+v", got, want)
	}
	// Each call returns its own maps, so one caller's edits cannot leak into another's config.
	cfg.Providers[testProvider] = Rule{Concurrency: 1}
	if _, shared := DefaultConfig().Providers[testProvider]; shared {
		t.Error("DefaultConfig shares its Providers map between calls")
	}
}

func TestRuleDefaultBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   Rule
		want int
	}{
		{Rule{Rate: 5}, 5},
		{Rule{Rate: 2.5}, 3},
		{Rule{Rate: 0.1}, 1},
		{Rule{Rate: 5, Burst: 2}, 2},
		{Rule{Concurrency: 3}, 0},
	}
	for _, tt := range tests {
		if got := tt.in.withDefaults().Burst; got != tt.want {
			t.Errorf("%+v: burst = %d, want %d", tt.in, got, tt.want)
		}
	}
}
