package telegram

import (
	"errors"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/commands"
)

// TestCheckRefusesControlCharactersInTheText: a text with ESC, BEL, DEL or a C1 control is
// refused naming payload.text (no chat shows them: it would read other than accepted); line
// breaks, tabs and right-to-left marks are text.
func TestCheckRefusesControlCharactersInTheText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"\u001b]0;X\u0007", "bell\a", "del\u007f", "c1\u009b31m"} {
		var invalid *commands.InvalidField
		if err := Check("12345", text(s)); !errors.As(err, &invalid) || invalid.Field != "payload.text" ||
			!strings.Contains(invalid.Reason, "control character") {
			t.Errorf("text %q: %v, want a refusal of payload.text naming the control character", s, err)
		}
	}
	for _, s := range []string{"line one\nline two", "a\ttab", "שלום \u200fעולם"} {
		if err := Check("12345", text(s)); err != nil {
			t.Errorf("text %q: %v, want it accepted", s, err)
		}
	}
}
