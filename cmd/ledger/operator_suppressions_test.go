package main

import (
	"encoding/csv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliveryledger/ledger/cmd/internal/app"
)

// suppressionsOf reads a tenant's suppression list back as `suppressions export` writes it, by
// recipient.
func (b *opBundle) suppressionsOf(t *testing.T, apiKey string, includeRemoved bool) map[string]map[string]string {
	t.Helper()
	args := []string{"suppressions", "export"}
	if includeRemoved {
		args = append(args, "--include-removed")
	}
	code, out, errOut := b.cli(t, apiKey, args...)
	if code != 0 {
		t.Fatalf("export: exit %d\n%s", code, errOut)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("export is not CSV with a header (%v):\n%s", err, out)
	}
	if got := strings.Join(rows[0], ","); got != "id,channel,recipient,source,reason,provider,provider_code,delivery_id,actor,created_at,removed_at" {
		t.Fatalf("export header %s", got)
	}
	byRecipient := map[string]map[string]string{}
	for _, r := range rows[1:] {
		m := map[string]string{}
		for i, name := range rows[0] {
			m[name] = r[i]
		}
		byRecipient[m["recipient"]] = m
	}
	return byRecipient
}

// TestOperatorSuppressionsRoundTrip: entries added and removed with the CLI are exported as CSV
// and imported into another tenant, where they say source import; a second import adds nothing;
// a file with a bad row reports the row's line and the API's field, exits 1, and adds the good
// rows.
func TestOperatorSuppressionsRoundTrip(t *testing.T) {
	t.Parallel()
	b := setupLedger(t)
	a, bee, cee := b.receiver.URL+"/a", b.receiver.URL+"/b", b.receiver.URL+"/c"

	code, out, errOut := b.cli(t, acmeKey, "suppressions", "add", "webhook", a, "--reason", "asked, by phone", "--actor", "bob")
	if code != 0 || !strings.HasPrefix(out, "added ") || !strings.Contains(out, "bob") {
		t.Fatalf("add: exit %d\n%s%s", code, out, errOut)
	}
	id := strings.Fields(out)[1]
	code, out, errOut = b.cli(t, acmeKey, "suppressions", "add", "webhook", a)
	if code != 0 || !strings.HasPrefix(out, "already suppressed "+id+"\n") {
		t.Fatalf("add again: exit %d\n%s%s", code, out, errOut)
	}
	for _, r := range []string{bee, cee} {
		if code, out, errOut := b.cli(t, acmeKey, "suppressions", "add", "webhook", r); code != 0 {
			t.Fatalf("add %s: exit %d\n%s%s", r, code, out, errOut)
		}
	}
	cID := b.suppressionsOf(t, acmeKey, false)[cee]["id"]
	code, out, errOut = b.cli(t, acmeKey, "suppressions", "remove", cID, "--reason", "moved back")
	if code != 0 || !strings.HasPrefix(out, "removed "+cID) || !strings.Contains(out, "moved back") {
		t.Fatalf("remove: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = b.cli(t, acmeKey, "suppressions", "add", "fax", "x")
	if code != 1 {
		t.Fatalf("add on an unknown channel: exit %d, want 1\n%s", code, out)
	}

	// The list: the entries in force, unless --include-removed; --limit stops early.
	code, out, errOut = b.cli(t, acmeKey, "suppressions", "list")
	if h := fields(strings.SplitN(out, "\n", 2)[0]); code != 0 || strings.Join(h, ",") != "ID,CHANNEL,RECIPIENT,SOURCE,REASON,EVIDENCE,CREATED,REMOVED" {
		t.Fatalf("list: exit %d header %q\n%s", code, h, errOut)
	}
	if f := fields(lineOf(out, id)); len(f) != 8 || f[2] != a || f[3] != "manual" || f[4] != "asked, by phone" || f[5] != "by bob" || f[7] != "-" ||
		lineOf(out, cID) != "" {
		t.Fatalf("list:\n%s", out)
	}
	if _, out, _ = b.cli(t, acmeKey, "suppressions", "list", "--include-removed"); len(fields(lineOf(out, cID))) != 8 || fields(lineOf(out, cID))[7] == "-" {
		t.Fatalf("list --include-removed:\n%s", out)
	}
	if _, out, _ = b.cli(t, acmeKey, "suppressions", "list", "--limit", "1", "--json"); strings.Count(out, `"id"`) != 1 {
		t.Fatalf("list --limit 1 --json:\n%s", out)
	}

	// Export, every entry: the removed one has its removed_at.
	file := filepath.Join(t.TempDir(), "acme.csv")
	if code, out, errOut := b.cli(t, acmeKey, "suppressions", "export", "--include-removed", "-o", file); code != 0 || out != "" ||
		!strings.Contains(errOut, "wrote 3 rows to "+file) {
		t.Fatalf("export -o: exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"asked, by phone"`) {
		t.Fatalf("the reason with a comma is not quoted:\n%s", raw)
	}
	acme := b.suppressionsOf(t, acmeKey, true)
	if len(acme) != 3 || acme[cee]["removed_at"] == "" || acme[a]["removed_at"] != "" || acme[a]["actor"] != "bob" || acme[a]["source"] != "manual" {
		t.Fatalf("acme's export: %v", acme)
	}

	// Imported into globex: the two in force, as import; the removed one skipped.
	code, out, errOut = b.cli(t, globexKey, "suppressions", "import", file)
	if code != 0 || out != "added 2, already suppressed 0, refused 0, skipped 1 removed\n" {
		t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
	}
	globex := b.suppressionsOf(t, globexKey, true)
	if len(globex) != 2 || globex[a]["source"] != "import" || globex[a]["reason"] != "asked, by phone" || globex[bee]["source"] != "import" ||
		globex[a]["actor"] != "tenant:globex" || globex[a]["id"] == acme[a]["id"] {
		t.Fatalf("globex after the import: %v", globex)
	}
	code, out, errOut = b.cli(t, globexKey, "suppressions", "import", file)
	if code != 0 || out != "added 0, already suppressed 2, refused 0, skipped 1 removed\n" {
		t.Fatalf("second import: exit %d\n%s%s", code, out, errOut)
	}
	if n := len(b.suppressionsOf(t, globexKey, true)); n != 2 {
		t.Fatalf("globex has %d entries after the second import, want 2", n)
	}

	// A file of its own, columns in another order and one extra, ignored, that holds a cell of two
	// lines: the row on an unknown channel is refused by its line, the others are added.
	d, e := b.receiver.URL+"/d", b.receiver.URL+"/e"
	bad := filepath.Join(t.TempDir(), "bad.csv")
	body := "recipient,note,channel,reason\n" +
		d + ",\"two\nlines\",webhook,asked\n" +
		"+15005550006,y,fax,nope\n" +
		e + ",z,webhook,\n"
	if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = b.cli(t, globexKey, "suppressions", "import", bad, "--reason", "imported list")
	if code != 1 || !strings.HasPrefix(out, "added 2, already suppressed 0, refused 1\n") ||
		!strings.Contains(out, "line 4: 400 ") || !strings.Contains(out, "field channel") || !strings.Contains(out, `"fax"`) ||
		!strings.Contains(errOut, "1 of the rows") {
		t.Fatalf("import with a bad row: exit %d\n%s%s", code, out, errOut)
	}
	globex = b.suppressionsOf(t, globexKey, false)
	if globex[d]["reason"] != "asked" || globex[e]["reason"] != "imported list" || len(globex) != 4 {
		t.Fatalf("globex after the file with a bad row: %v", globex)
	}
	// The API takes manual and import as a source, never provider: that is the ledger's own.
	req, err := http.NewRequest(http.MethodPost, b.base+"/v1/suppressions", strings.NewReader(
		`{"channel":"webhook","recipient":"`+b.receiver.URL+`/f","source":"provider"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+globexKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	problem, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(problem), `"field":"source"`) {
		t.Fatalf("a source of provider: %d %s", resp.StatusCode, problem)
	}

	// Standard input, and a file without the required columns.
	if code, _, errOut := b.cli(t, globexKey, "suppressions", "import", "-"); code != 1 || !strings.Contains(errOut, "empty") {
		t.Fatalf("import of an empty standard input: exit %d\n%s", code, errOut)
	}
	if err := os.WriteFile(bad, []byte("address,reason\nx,y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := b.cli(t, globexKey, "suppressions", "import", bad); code != 1 || !strings.Contains(errOut, "no channel column") {
		t.Fatalf("import without a channel column: exit %d\n%s", code, errOut)
	}
}

// TestOperatorPreferences: a recipient opted out of a category and back in, and refused for a
// required category.
func TestOperatorPreferences(t *testing.T) {
	t.Parallel()
	config := filepath.Join(t.TempDir(), "ledger.yaml")
	if err := os.WriteFile(config, []byte("channels:\n  webhook: {providers: [hook]}\nproviders:\n  hook: {type: webhook, timeout: 300ms}\n"+
		"categories:\n  marketing: {}\n  account: {required: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setupLedger(t, func(c *app.Config) { c.ConfigFile = config })
	r := b.receiver.URL + "/prefs"

	code, out, errOut := b.cli(t, acmeKey, "preferences", "get", "webhook", r)
	if code != 0 || !strings.Contains(out, "no preferences") {
		t.Fatalf("get before: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = b.cli(t, acmeKey, "preferences", "set", "webhook", r, "marketing", "--opted-out=true", "--actor", "ann")
	if f := fields(lineOf(out, "marketing")); code != 0 || len(f) != 7 || f[3] != "true" || f[4] != "api" || f[5] != "ann" {
		t.Fatalf("set: exit %d %q\n%s%s", code, f, out, errOut)
	}
	code, out, _ = b.cli(t, acmeKey, "preferences", "get", "webhook", r)
	if f := fields(lineOf(out, "marketing")); code != 0 || len(f) != 7 || f[3] != "true" {
		t.Fatalf("get: exit %d\n%s", code, out)
	}
	code, out, _ = b.cli(t, acmeKey, "preferences", "set", "webhook", r, "marketing", "--opted-out=false")
	if f := fields(lineOf(out, "marketing")); code != 0 || f[3] != "false" {
		t.Fatalf("set back in: exit %d\n%s", code, out)
	}
	code, _, errOut = b.cli(t, acmeKey, "preferences", "set", "webhook", r, "account", "--opted-out=true")
	if code != 1 || !strings.Contains(errOut, "field:   category") || !strings.Contains(errOut, "required") {
		t.Fatalf("set on a required category: exit %d\n%s", code, errOut)
	}
	code, _, errOut = b.cli(t, acmeKey, "preferences", "set", "webhook", r, "marketing")
	if code != 2 || !strings.Contains(errOut, "--opted-out") {
		t.Fatalf("set without --opted-out: exit %d\n%s", code, errOut)
	}
}

// TestSuppressionsCommandsExplainTheirFlags: every command has its help, with the connection
// flags.
func TestSuppressionsCommandsExplainTheirFlags(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"suppressions", "list"}, {"suppressions", "add"}, {"suppressions", "remove"},
		{"suppressions", "export"}, {"suppressions", "import"}, {"preferences", "get"}, {"preferences", "set"}} {
		code, _, help := runCLI(append(cmd, "--help")...)
		if code != 0 || !strings.Contains(help, "DESCRIPTION") || !strings.Contains(help, "-api-key") {
			t.Errorf("%v --help: exit %d\n%s", cmd, code, help)
		}
	}
	if code, _, errOut := runCLI("suppressions", "add", "webhook", "--api-key=k"); code != 2 || !strings.Contains(errOut, "name a channel and a recipient") {
		t.Errorf("add with one operand: exit %d\n%s", code, errOut)
	}
}

// TestHistoryExplainsASuppressedDelivery: `deliveries show` says what suppressed a delivery, the
// list's entry with its evidence or the category opted out of.
func TestHistoryExplainsASuppressedDelivery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		data string
		want []string
	}{
		{`{"by":"suppression","suppression_id":"e1","source":"provider","reason":"gone","from":"accepted",` +
			`"evidence":{"delivery_id":"d0","event_version":4,"provider":"smtp","provider_code":"550 5.1.1"}}`,
			[]string{"on the suppression list: entry e1 (provider)", "reason: gone", "evidence: smtp 550 5.1.1, delivery d0 event 4"}},
		{`{"by":"suppression","suppression_id":"e2","source":"manual","from":"queued","attempt":2,"evidence":{"actor":"bob"}}`,
			[]string{"entry e2 (manual)", "added by bob"}},
		{`{"by":"preference","category":"marketing","from":"accepted"}`, []string{"the recipient opted out of category marketing"}},
	} {
		f := eventFacts("d1", eventDoc{Version: 2, Type: "delivery.suppressed", State: "suppressed", Data: []byte(c.data)})
		for _, w := range c.want {
			if !strings.Contains(f.detail, w) {
				t.Errorf("%s: detail %q, want %q in it", c.data, f.detail, w)
			}
		}
	}
}
