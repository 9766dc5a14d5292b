package vonagefake

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseBehaviour(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Behaviour
	}{
		{"", Behaviour{}},
		{" ; ", Behaviour{}},
		{"status=1", Behaviour{Status: "1", StatusCalls: EveryCall}},
		{"status=5:3", Behaviour{Status: "5", StatusCalls: 3}},
		{"status-for=+447700900006:6, 447700900029:29", Behaviour{NumberStatus: map[string]string{"447700900006": "6", "447700900029": "29"}}},
		{"http=500", Behaviour{HTTPStatus: 500, HTTPCalls: EveryCall}},
		{"http=503:1", Behaviour{HTTPStatus: 503, HTTPCalls: 1}},
		{"delay=2s", Behaviour{AnswerDelay: 2 * time.Second}},
		{"dlr=447700900001:failed:3,+447700900002:expired", Behaviour{Final: map[string]DLR{
			"447700900001": {Status: "failed", ErrCode: "3"}, "447700900002": {Status: "expired"}}}},
		{"dlr-first=buffered", Behaviour{First: "buffered"}},
		{"dlr-delay=250ms", Behaviour{ReceiptDelay: 250 * time.Millisecond}},
		{"dlr-method=get", Behaviour{ReceiptMethod: ReceiptGet}},
		{"dlr-lose=all", Behaviour{LoseReceipts: EveryCall}},
		{"dlr-lose=2", Behaviour{LoseReceipts: 2}},
		{"dlr-twice=1", Behaviour{DuplicateReceipts: 1}},
		{"dlr-no-retry", Behaviour{NoReceiptRetry: true}},
		{
			" status=1:2 ; dlr = 447700900001:rejected:6 ; dlr-delay=100ms;dlr-method=json; dlr-twice=all ;",
			Behaviour{Status: "1", StatusCalls: 2, Final: map[string]DLR{"447700900001": {Status: "rejected", ErrCode: "6"}},
				ReceiptDelay: 100 * time.Millisecond, ReceiptMethod: ReceiptJSON, DuplicateReceipts: EveryCall},
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
		"status", "status=0", "status=77", "status=1:0", "status=1:x",
		"status-for=447700900001", "status-for=abc:6", "status-for=447700900001:0",
		"http=200", "http=abc", "delay=-1s", "delay=2h", "delay=soon",
		"dlr=447700900001", "dlr=447700900001:lost", "dlr=447700900001:failed:x", "dlr=1:failed",
		"dlr-first=delivered", "dlr-method=put", "dlr-lose=0", "dlr-twice=some", "dlr-no-retry=1",
		"hang", "status=1; status=5",
	} {
		if b, err := ParseBehaviour(in); err == nil {
			t.Errorf("ParseBehaviour(%q) = %+v, want an error", in, b)
		}
	}
	_, err := ParseBehaviour("status=77; dlr-method=put; hang")
	if err == nil || strings.Count(err.Error(), "behaviour \"") != 3 {
		t.Errorf("ParseBehaviour with three problems = %v, want all three reported", err)
	}
}
