package sms

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
)

// TestCheckRefusesControlCharactersInTheText: a text with ESC, BEL, DEL or a C1 control is
// refused naming payload.text (no SMS alphabet carries them to a phone); line breaks, tabs and
// the characters of any script are text.
func TestCheckRefusesControlCharactersInTheText(t *testing.T) {
	t.Parallel()
	payload := func(s string) json.RawMessage {
		b, err := json.Marshal(map[string]string{"text": s})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, text := range []string{"\u001b]0;X\u0007", "bell\a", "del\u007f", "c1\u0085", "nul\u0000"} {
		var invalid *commands.InvalidField
		if err := Check("+14155550100", payload(text)); !errors.As(err, &invalid) || invalid.Field != "payload.text" ||
			!strings.Contains(invalid.Reason, "control character") {
			t.Errorf("text %q: %v, want a refusal of payload.text naming the control character", text, err)
		}
	}
	for _, text := range []string{"line one\nline two", "a\ttab", "windows\r\nbreak", "مرحبا \u200fبالعالم", "über 😀"} {
		if err := Check("+14155550100", payload(text)); err != nil {
			t.Errorf("text %q: %v, want it accepted", text, err)
		}
	}
}
