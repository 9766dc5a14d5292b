package app

import (
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/telegram"
	"github.com/deliveryledger/ledger/adapters/providers/telegram/telegramfake"
	"github.com/deliveryledger/ledger/domain"
)

var telegramEnvSeq atomic.Int64

// setupTelegram starts a Bot API fake and a ledger whose one channel, telegram, sends through
// it as one bot.
func setupTelegram(t *testing.T) (*e2eBundle, *telegramfake.Server) {
	t.Helper()
	const token = "42:e2e-limit-token"
	tg, err := telegramfake.Start(telegramfake.Config{Addr: "127.0.0.1:0", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	// A variable of this test alone (t.Setenv cannot be used in a parallel test).
	env := fmt.Sprintf("TELEGRAM_E2E_%d_TOKEN", telegramEnvSeq.Add(1))
	if err := os.Setenv(env, token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(env) })
	path := writeLedgerFile(t, fmt.Sprintf(`channels:
  telegram: {providers: [bot]}
providers:
  bot: {type: telegram, base_url: %s, token_env: %s, timeout: 2s}
`, tg.URL(), env))
	return setupE2E(t, "", func(c *Config) { c.ConfigFile = path }), tg
}

// TestTelegramChatLimitSpacesOneChatOnly: with a running ledger, two messages to one chat are
// sent at least the per-chat interval apart (Telegram's one message a second per chat,
// telegram.ChatRate), the second deferred by the limiter rather than answered 429, while two
// chats of the same notification are sent at once, neither deferred.
func TestTelegramChatLimitSpacesOneChatOnly(t *testing.T) {
	t.Parallel()
	b, tg := setupTelegram(t)
	interval := time.Second / telegram.ChatRate

	acc := b.acceptNotification(t, "chats-1", map[string]any{
		"payload": map[string]any{"text": "hello"},
		"recipients": []map[string]string{
			{"channel": "telegram", "recipient": "111"},
			{"channel": "telegram", "recipient": "222"},
			{"channel": "telegram", "recipient": "333"},
		},
	})
	resp, again := b.acceptWith(t, "chats-2", map[string]any{"channel": "telegram", "recipient": "111",
		"payload": map[string]any{"text": "hello again"}})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %d", resp.StatusCode)
	}
	first, two, three := acc.Deliveries[0].ID, acc.Deliveries[1].ID, acc.Deliveries[2].ID
	started := map[string]time.Time{}
	deferred := map[string]int{}
	for _, id := range []string{first, two, three, again} {
		b.waitState(t, id, domain.StateDelivered, 15*time.Second)
		h := b.history(t, id)
		if starts := attemptStarts(h); len(starts) != 1 {
			t.Fatalf("delivery %s had %d attempts, want 1: %v", id, len(starts), types(h))
		} else {
			started[id] = starts[0]
		}
		deferred[id] = count(h, domain.EventDeferred)
	}

	t.Logf("chat 111: %s apart; chats 222 and 333: %s apart", absDuration(started[again].Sub(started[first])), absDuration(started[three].Sub(started[two])))
	// One chat: the two messages at least the interval apart (a little less allowed for the
	// time between the limiter's decision and the attempt's record), one of them deferred.
	if gap := absDuration(started[again].Sub(started[first])); gap < interval-100*time.Millisecond {
		t.Errorf("two messages to chat 111 started %s apart, want at least the per-chat interval %s", gap, interval)
	}
	if deferred[first]+deferred[again] == 0 {
		t.Errorf("neither message to chat 111 was deferred: the per-chat limit did not hold one back")
	}
	// Two chats: at once, and no deferral.
	if gap := absDuration(started[three].Sub(started[two])); gap >= interval/2 {
		t.Errorf("messages to chats 222 and 333 started %s apart, want them at once (well under %s)", gap, interval)
	}
	if deferred[two]+deferred[three] != 0 {
		t.Errorf("messages to two chats were deferred (%d, %d): one chat's limit held back another", deferred[two], deferred[three])
	}
	if n := len(tg.Messages()); n != 4 {
		t.Errorf("the Bot API sent %d messages, want 4", n)
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
