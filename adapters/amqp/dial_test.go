package amqp_test

import (
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/adapters/amqp"
	"github.com/deliveryledger/ledger/adapters/amqp/amqptest"
)

// TestDialTakesTheNodeThatAnswers: of a cluster's addresses, Dial connects to one that answers,
// whichever it starts at, and reports every address's failure when none does.
func TestDialTakesTheNodeThatAnswers(t *testing.T) {
	t.Parallel()
	// 127.0.0.1:1 refuses at once: a node that is down.
	urls := "amqp://guest:guest@127.0.0.1:1/, " + amqptest.URL()
	for range 4 { // each Dial starts one address further on: both orders are tried
		conn, err := amqp.Dial(urls)
		if err != nil {
			t.Fatalf("dial %s: %v", urls, err)
		}
		conn.Close()
	}
	if _, err := amqp.Dial("amqp://guest:guest@127.0.0.1:1/,amqp://guest:guest@127.0.0.1:2/"); err == nil ||
		!strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Fatalf("no node answers: %v, want both failures", err)
	}
	if err := amqp.ValidateURLs("amqp://guest:secret@127.0.0.1:5672/,http://x/"); err == nil ||
		strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "http://x/") {
		t.Fatalf("validate: %v, want the bad address named and no password", err)
	}
}
