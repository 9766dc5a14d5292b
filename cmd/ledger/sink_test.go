package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sinkWait bounds each wait for a line of the sink's output.
const sinkWait = 10 * time.Second

// sinkStartLine is a start-up line of `ledger sink` that names a fake and the URL it listens on.
var sinkStartLine = regexp.MustCompile(`^sink: (Twilio Messages API|Vonage SMS API|webhooks) on (http://127\.0\.0\.1:([0-9]+))`)

// sinkBundle is a `ledger sink` running through the CLI, on free loopback ports.
type sinkBundle struct {
	// urls are the base URLs the start-up lines named, by fake.
	urls map[string]string
	// lines delivers the sink's output, one line at a time; seen keeps what was read from it.
	lines <-chan string
	seen  []string
}

// setupSink runs `ledger sink` with args until the test ends, then checks that it stopped
// cleanly, and waits for the start-up lines of the webhook receiver and the SMS fakes.
func setupSink(t *testing.T, args ...string) *sinkBundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var stderr bytes.Buffer
	exit := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"sink"}, args...), pw, &stderr)
		_ = pw.Close()
		exit <- code
	}()
	t.Cleanup(func() {
		cancel()
		go func() {
			for range lines { // keep the output flowing while the fakes stop
			}
		}()
		select {
		case code := <-exit:
			if code != 0 {
				t.Errorf("ledger sink exited %d on cancel; stderr %q", code, stderr.String())
			}
		case <-time.After(sinkWait):
			t.Errorf("ledger sink still running %s after cancel", sinkWait)
		}
	})

	b := &sinkBundle{urls: map[string]string{}, lines: lines}
	for _, name := range []string{"Twilio Messages API", "Vonage SMS API", "webhooks"} {
		line := b.waitLine(t, "^sink: "+name+" on ")
		m := sinkStartLine.FindStringSubmatch(line)
		if m == nil || m[3] == "0" {
			t.Fatalf("start-up line %q does not name the bound loopback address", line)
		}
		b.urls[m[1]] = m[2]
	}
	return b
}

// waitLine returns the first line of output that matches pattern, read before or now.
func (b *sinkBundle) waitLine(t *testing.T, pattern string) string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	for _, l := range b.seen {
		if re.MatchString(l) {
			return l
		}
	}
	deadline := time.After(sinkWait)
	for {
		select {
		case l, ok := <-b.lines:
			if !ok {
				t.Fatalf("the sink stopped before printing a line like %q; it printed %q", pattern, b.seen)
			}
			b.seen = append(b.seen, l)
			if re.MatchString(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line like %q within %s; the sink printed %q", pattern, sinkWait, b.seen)
		}
	}
}

// postForm posts a form and decodes the JSON answer.
func postForm(t *testing.T, target string, form url.Values, user, pass string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	client := &http.Client{Timeout: sinkWait}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatalf("POST %s: HTTP %d, the answer is not JSON: %v", target, resp.StatusCode, err)
	}
	return resp.StatusCode, answer
}

func TestSinkRunsTwilioAndVonageFakesOnFreePorts(t *testing.T) {
	t.Parallel()
	const (
		authToken = "test-twilio-auth-token"
		apiSecret = "test-vonage-secret"
	)
	b := setupSink(t, "--addr=127.0.0.1:0", "--smtp-addr=off", "--telegram-addr=off",
		"--twilio-addr=127.0.0.1:0", "--twilio-auth-token="+authToken,
		"--vonage-addr=127.0.0.1:0", "--vonage-api-secret="+apiSecret)
	webhook := b.urls["webhooks"]

	t.Run("Twilio", func(t *testing.T) {
		create := b.urls["Twilio Messages API"] + "/2010-04-01/Accounts/" + defaultTwilioAccountSID + "/Messages.json"
		form := url.Values{"To": {"+15005550006"}, "From": {"+15005550001"}, "Body": {"hello from the sink test"},
			"StatusCallback": {webhook + "/twilio-status"}}

		// The default token is refused: the fake takes the one --twilio-auth-token gave it.
		if code, answer := postForm(t, create, form, defaultTwilioAccountSID, defaultTwilioAuthToken); code != http.StatusUnauthorized {
			t.Fatalf("create with the default token: HTTP %d %v, want 401", code, answer)
		}
		code, answer := postForm(t, create, form, defaultTwilioAccountSID, authToken)
		sid, _ := answer["sid"].(string)
		if code != http.StatusCreated || !strings.HasPrefix(sid, "SM") {
			t.Fatalf("create: HTTP %d %v, want 201 with a message sid", code, answer)
		}
		b.waitLine(t, "^twilio: twiliofake: created "+sid+" ")
		// Its status callbacks reach the callback it was given: here, the sink's own receiver.
		b.waitLine(t, "^webhook: #[0-9]+ /twilio-status ")
		b.waitLine(t, "^twilio: twiliofake: called back [a-z]+ of "+sid+": HTTP 200$")
	})

	t.Run("Vonage", func(t *testing.T) {
		send := b.urls["Vonage SMS API"] + "/sms/json"
		form := url.Values{"api_key": {defaultVonageAPIKey}, "api_secret": {defaultVonageAPISecret},
			"from": {"Ledger"}, "to": {"15005550006"}, "text": {"hello from the sink test"},
			"callback": {webhook + "/vonage-receipt?token=test-callback-token"}}

		status := func(answer map[string]any) string {
			messages, _ := answer["messages"].([]any)
			if len(messages) != 1 {
				return ""
			}
			m, _ := messages[0].(map[string]any)
			s, _ := m["status"].(string)
			return s
		}
		// The default secret is refused (status 4, Bad Credentials): the fake takes the one
		// --vonage-api-secret gave it.
		if code, answer := postForm(t, send, form, "", ""); code != http.StatusOK || status(answer) != "4" {
			t.Fatalf("send with the default secret: HTTP %d %v, want 200 with status 4", code, answer)
		}
		form.Set("api_secret", apiSecret)
		code, answer := postForm(t, send, form, "", "")
		if code != http.StatusOK || status(answer) != "0" {
			t.Fatalf("send: HTTP %d %v, want 200 with status 0", code, answer)
		}
		id, _ := answer["messages"].([]any)[0].(map[string]any)["message-id"].(string)
		b.waitLine(t, "^vonage: vonagefake: accepted message "+id+" ")
		b.waitLine(t, "^webhook: #[0-9]+ /vonage-receipt ")
		b.waitLine(t, "^vonage: vonagefake: sent the delivered receipt .* of message "+id+" .*: HTTP 200$")
	})
}
