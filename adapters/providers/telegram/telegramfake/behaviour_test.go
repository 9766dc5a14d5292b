package telegramfake

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseBehaviour(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Behaviour
	}{
		{"", Behaviour{}},
		{" ; ", Behaviour{}},
		{"429=2:3", Behaviour{TooManyRequests: 3, RetryAfter: 2}},
		{"429=0", Behaviour{TooManyRequests: EveryCall}},
		{"429=7", Behaviour{TooManyRequests: EveryCall, RetryAfter: 7}},
		{"500=1", Behaviour{ServerErrors: 1}},
		{"500", Behaviour{ServerErrors: EveryCall}},
		{"chat-not-found=-100123,@gone", Behaviour{ChatNotFound: []string{"-100123", "@gone"}}},
		{"blocked=42", Behaviour{Blocked: []string{"42"}}},
		{"hang-after-read", Behaviour{HangAfterRead: true}},
		{
			" 429=2:3 ; chat-not-found = -100123 , @Gone_Chat ; blocked=42;500=1; hang-after-read ;",
			Behaviour{TooManyRequests: 3, RetryAfter: 2, ChatNotFound: []string{"-100123", "@Gone_Chat"},
				Blocked: []string{"42"}, ServerErrors: 1, HangAfterRead: true},
		},
	}
	for _, tt := range tests {
		got, err := ParseBehaviour(tt.in)
		if err != nil {
			t.Errorf("ParseBehaviour(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseBehaviour(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestParseBehaviourRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"429", "429=", "429=x", "429=-1", "429=2:", "429=2:0", "429=2:x",
		"500=", "500=0", "500=-1", "500=many",
		"chat-not-found", "chat-not-found=", "chat-not-found=alice", "blocked=@", "blocked=@a-b", "blocked=0",
		"hang-after-read=1",
		"404=1", "timeout",
		"500=1;500=2",
	} {
		if b, err := ParseBehaviour(in); err == nil {
			t.Errorf("ParseBehaviour(%q) = %+v, want an error", in, b)
		}
	}
	// Every problem at once.
	_, err := ParseBehaviour("429=x; 500=0; nope")
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{`"429=x"`, `"500=0"`, `"nope"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not report %s", err, want)
		}
	}
}
