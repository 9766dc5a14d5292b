package telegram

import (
	"net/url"
	"testing"
)

// TestTraceURLHasNoToken: the URL a trace records of a Bot API call names the method, never
// the token, whatever base URL the bot was given.
func TestTraceURLHasNoToken(t *testing.T) {
	for raw, want := range map[string]string{
		"https://api.telegram.org/bot123456:AAE-secret_part/sendMessage":       "https://api.telegram.org/bot{token}/sendMessage",
		"http://127.0.0.1:8081/proxy/tg/bot123456:AAE-secret_part/sendMessage": "http://127.0.0.1:8081/proxy/tg/bot{token}/sendMessage",
		"http://127.0.0.1:8081/odd":                                            "http://127.0.0.1:8081",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := withoutToken(u); got != want {
			t.Errorf("withoutToken(%s) = %s, want %s", raw, got, want)
		}
	}
}
