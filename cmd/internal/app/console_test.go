package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/deliveryledger/ledger/adapters/console"
	"github.com/deliveryledger/ledger/domain"
)

// The console's tests drive the real console in a headless Chromium against a real ledger.
// One browser serves every test of the file; each test has its own tab in its own browser
// context, so its sessionStorage (where the key lives) is its own.

// consoleTabTimeout bounds each test's browser work.
const consoleTabTimeout = 60 * time.Second

// Viewports of the screenshots: a laptop and a phone.
var (
	consoleDesktop = consoleViewport{"1280", 1280, 800}
	consolePhone   = consoleViewport{"390", 390, 844}
)

type consoleViewport struct {
	name          string
	width, height int64
}

// browserPaths are the names Chromium has on the systems the tests run on;
// scripts/services.sh installs Debian's chromium when none is found.
var browserPaths = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell", "headless-shell"}

// startBrowser starts the file's headless Chromium, stopped when t ends.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range browserPaths {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatalf("the console tests need Chromium and found none of %v in PATH: run scripts/services.sh "+
			"(it installs Debian's chromium) or apt-get install chromium", browserPaths)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(int(consoleDesktop.width), int(consoleDesktop.height)),
		chromedp.Flag("disable-gpu", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", path, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start within 30s", path)
	}
	return ctx
}

// screenshotDir is where the screenshots go: LEDGER_CONSOLE_SCREENSHOTS, else
// $TMPDIR/ledger-console-screenshots. It is kept after the test (each run overwrites its files),
// so that a person can look at the pages after `make test`; the test logs where it is.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("LEDGER_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "ledger-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleURL is where the browser finds the console of b: the API's own /console/ when the API
// serves it, else a server on loopback that serves console.Handler() and passes /v1/ to the API,
// so the page and the API share one origin as they do behind the real mount.
func consoleURL(t *testing.T, b *e2eBundle) string {
	t.Helper()
	resp, err := http.Get(b.base + console.Prefix)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			return b.base + console.Prefix
		}
	}
	api, err := url.Parse(b.base)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, console.Handler())
	proxy := httputil.NewSingleHostReverseProxy(api)
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		// Mostly a page that moved on and cancelled its fetch; a real failure fails the page.
		w.WriteHeader(http.StatusBadGateway)
	}
	mux.Handle("/v1/", proxy)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + console.Prefix
}

// consoleReceiver scripts the sink by path: each path answers its status (200 unless set); /slow/
// paths read the request and then sleep past the webhook timeout, so the outcome is unknown.
type consoleReceiver struct {
	mu      sync.Mutex
	answers map[string]int
}

func newConsoleReceiver(s *sink) *consoleReceiver {
	rc := &consoleReceiver{answers: map[string]int{}}
	s.script(func(r *http.Request, _ int) (int, http.Header) {
		if strings.HasPrefix(r.URL.Path, "/slow/") {
			time.Sleep(time.Second) // the test's webhook timeout is 300 ms
			return http.StatusOK, nil
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if status, ok := rc.answers[r.URL.Path]; ok {
			return status, nil
		}
		return http.StatusOK, nil
	})
	return rc
}

func (rc *consoleReceiver) answer(path string, status int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answers[path] = status
}

// consoleTab is one tab on the console, bounded by consoleTabTimeout.
type consoleTab struct {
	t     *testing.T
	ctx   context.Context
	site  string
	shots string

	mu       sync.Mutex
	problems []string // exceptions and refusals of the Content-Security-Policy
}

func newConsoleTab(t *testing.T, browser context.Context, site, shots string) *consoleTab {
	t.Helper()
	bounded, cancelBound := context.WithTimeout(browser, consoleTabTimeout)
	ctx, cancel := chromedp.NewContext(bounded, chromedp.WithNewBrowserContext())
	c := &consoleTab{t: t, ctx: ctx, site: site, shots: shots}
	if err := chromedp.Listen(ctx, c.watch); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		cancelBound()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.problems {
			t.Errorf("the page reported: %s", p)
		}
	})
	return c
}

// watch keeps the page's uncaught exceptions and the policy's refusals (an inline script or
// style, a fetch to another origin); a test fails on any of them.
func (c *consoleTab) watch(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		c.mu.Lock()
		c.problems = append(c.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text))
		c.mu.Unlock()
	case *log.EventEntryAdded:
		e := ev.Entry
		if e.Source == log.EntrySourceSecurity || strings.Contains(e.Text, "Content Security Policy") {
			c.mu.Lock()
			c.problems = append(c.problems, fmt.Sprintf("%s %s: %s", e.Source, e.Level, e.Text))
			c.mu.Unlock()
		}
	}
}

func (c *consoleTab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	if err := chromedp.Do(c.ctx, actions...); err != nil {
		c.t.Fatalf("%s: %v\npage: %s", what, err, c.pageText())
	}
}

// eval evaluates a JavaScript expression in the page.
func consoleEval[T any](c *consoleTab, expr string) T {
	c.t.Helper()
	v, err := chromedp.Run(c.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		c.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds. It evaluates the expression from the
// DevTools side every 50 ms rather than with chromedp.Poll, whose helper builds a function
// from a string, which the console's policy (no 'unsafe-eval') rightly refuses.
func (c *consoleTab) waitFor(what, cond string) {
	c.t.Helper()
	for {
		ok, err := chromedp.Run(c.ctx, chromedp.Evaluate[bool]("Boolean("+cond+")"))
		if err == nil && ok {
			return
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("waiting for %s (%s): %v\npage: %s", what, cond, context.Cause(c.ctx), c.pageText())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pageText is the page's visible text, for failure messages.
func (c *consoleTab) pageText() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 2*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	if len(text) > 3000 {
		text = text[:3000] + "…"
	}
	return strings.Join(strings.Fields(text), " ")
}

// open shows a route of the console (a hash such as "#/dlq"), and waits for its heading.
func (c *consoleTab) open(route, heading string) {
	c.t.Helper()
	c.do("open "+route, chromedp.Navigate(c.site+route))
	c.waitHeading(heading)
}

func (c *consoleTab) waitHeading(heading string) {
	c.t.Helper()
	c.waitFor("the heading "+heading, fmt.Sprintf(`document.querySelector("main h1")?.textContent === %q`, heading))
}

// signIn enters key on the login screen.
func (c *consoleTab) signIn(key, shot string) {
	c.t.Helper()
	c.do("open the console", chromedp.Navigate(c.site))
	c.waitHeading("Sign in to the console")
	c.do("enter the key", chromedp.SendKeys(chromedp.CSS("#api-key"), key))
	if shot != "" {
		c.screenshot(shot, consoleDesktop)
		c.checkTabOrder("the login", "api-key", "sign-in")
	}
	// Enter in the field signs in, as a keyboard user would.
	c.do("sign in", chromedp.SendKeys(chromedp.CSS("#api-key"), kb.Enter))
	c.waitHeading("Overview")
	if href := consoleEval[string](c, "location.href"); strings.Contains(href, key) {
		c.t.Fatalf("the key is in the URL %s", href)
	}
}

// screenshot saves the whole page at a consoleViewport as <name>-<width>.png, after checking that the
// page's controls are labelled, that its text is readable and that it fits a phone.
func (c *consoleTab) screenshot(name string, v consoleViewport) {
	c.t.Helper()
	c.checkLabels(name)
	c.checkContrast(name)
	c.checkFitsPhone(name)
	c.do("resize to "+v.name, chromedp.EmulateViewport(v.width, v.height))
	// Let the layout settle at the new width before the capture.
	c.waitFor("the layout at "+v.name, fmt.Sprintf("document.documentElement.clientWidth === %d", v.width))
	png, err := chromedp.Run(c.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		c.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(c.shots, name+"-"+v.name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("screenshot %s", path)
	if v != consoleDesktop {
		c.do("resize back", chromedp.EmulateViewport(consoleDesktop.width, consoleDesktop.height))
	}
}

// checkLabels fails the test for a form control with no label and a link or button with no
// text: a keyboard or screen reader user could not tell what they do.
func (c *consoleTab) checkLabels(page string) {
	c.t.Helper()
	unlabelled := consoleEval[[]string](c, `[...document.querySelectorAll("input, select, textarea")]
		.filter(e => e.labels.length === 0 && !e.getAttribute("aria-label"))
		.map(e => e.outerHTML.slice(0, 80))
		.concat([...document.querySelectorAll("a, button")]
			.filter(e => e.offsetParent !== null && !e.textContent.trim() && !e.getAttribute("aria-label"))
			.map(e => e.outerHTML.slice(0, 80)))`)
	for _, u := range unlabelled {
		c.t.Errorf("%s: %s has no label", page, u)
	}
}

// contrastCheck lists the page's visible text whose colour is below WCAG AA contrast with the
// background it is drawn on (4.5:1; 3:1 for large text: 24 px, or 18.66 px bold), computed in the
// page from the computed styles: the background is the first opaque one of the element and its
// ancestors, with the translucent ones in between blended over it. Disabled controls are exempt,
// as WCAG exempts inactive components.
const contrastCheck = `(() => {
	const parse = (c) => {
		const m = /rgba?\(([^)]+)\)/.exec(c || "");
		if (!m) return null;
		const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
		return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
	};
	const blend = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
	const lum = (c) => {
		const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
		return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
	};
	const background = (el) => {
		const layers = [];
		for (let e = el; e; e = e.parentElement) {
			const c = parse(getComputedStyle(e).backgroundColor);
			if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
		}
		let bg = [255, 255, 255, 1];
		for (let i = layers.length - 1; i >= 0; i--) bg = blend(layers[i], bg);
		return bg;
	};
	const bad = [];
	const seen = new Set();
	const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let n = walk.nextNode(); n; n = walk.nextNode()) {
		const el = n.parentElement;
		if (!n.textContent.trim() || !el || seen.has(el)) continue;
		seen.add(el);
		if (el.closest("option, :disabled, [hidden], noscript, title, desc") || el.getClientRects().length === 0) continue;
		const st = getComputedStyle(el);
		if (st.visibility !== "visible") continue;
		const bg = background(el);
		const raw = parse(el.closest("svg") ? st.fill : st.color);
		if (!raw) continue;
		const fg = blend(raw, bg);
		const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
		const ratio = (hi + 0.05) / (lo + 0.05);
		const size = parseFloat(st.fontSize), bold = Number(st.fontWeight) >= 700;
		const need = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
		if (ratio < need) {
			bad.push(ratio.toFixed(2) + ":1 (want " + need + ":1) for " + JSON.stringify(n.textContent.trim().slice(0, 40)) +
				" in <" + el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ? " class=" + el.className : "") +
				"> " + st.color + " on rgb(" + bg.slice(0, 3).map(Math.round).join(", ") + ")");
		}
	}
	return bad;
})()`

// checkContrast fails the test for each text of the page below WCAG AA contrast.
func (c *consoleTab) checkContrast(page string) {
	c.t.Helper()
	for _, b := range consoleEval[[]string](c, contrastCheck) {
		c.t.Errorf("%s: contrast %s", page, b)
	}
}

// checkFitsPhone fails the test when the page is wider than a phone's 390 px viewport, which
// would make a phone user scroll sideways; it names the elements that stick out.
func (c *consoleTab) checkFitsPhone(page string) {
	c.t.Helper()
	c.do("resize to "+consolePhone.name, chromedp.EmulateViewport(consolePhone.width, consolePhone.height))
	defer c.do("resize back", chromedp.EmulateViewport(consoleDesktop.width, consoleDesktop.height))
	c.waitFor("the layout at "+consolePhone.name, fmt.Sprintf("document.documentElement.clientWidth === %d", consolePhone.width))
	// The chart is drawn again 100 ms after a resize: give the page a moment to settle.
	const fits = `document.documentElement.scrollWidth <= window.innerWidth`
	deadline := time.Now().Add(3 * time.Second)
	for !consoleEval[bool](c, fits) {
		if time.Now().After(deadline) {
			wide := consoleEval[[]string](c, `[...document.querySelectorAll("body *")]
				.filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5 && !e.closest(".skip-link"))
				.slice(0, 5).map(e => e.outerHTML.slice(0, 100))`)
			c.t.Errorf("%s: %d px wide at a %d px viewport; too wide: %v", page,
				consoleEval[int](c, "document.documentElement.scrollWidth"), consolePhone.width, wide)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkTabOrder presses Tab from the top of the page (the skip link) and fails the test unless
// the keyboard reaches each of the controls, given by id, in this order.
func (c *consoleTab) checkTabOrder(page string, ids ...string) {
	c.t.Helper()
	c.do("focus the skip link", chromedp.Evaluate[chromedp.Void](`document.querySelector("#skip-link").focus()`))
	var reached []string
	next := 0
	for range 60 {
		if next == len(ids) {
			return
		}
		c.do("press Tab", chromedp.KeyEvent(kb.Tab))
		id := consoleEval[string](c, `document.activeElement ? (document.activeElement.id || document.activeElement.tagName.toLowerCase()) : ""`)
		reached = append(reached, id)
		if id == ids[next] {
			next++
		}
	}
	if next < len(ids) {
		c.t.Errorf("%s: Tab does not reach #%s after %v (want %v in order); it went through %v", page, ids[next], ids[:next], ids, reached)
	}
}

// typeInto replaces the value of a field by typing.
func (c *consoleTab) typeInto(sel, text string) {
	c.t.Helper()
	// chromedp.SetValue cannot set "": it takes the empty answer for a failure.
	c.do("clear "+sel, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).value = ""`, sel)))
	c.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text))
}

func (c *consoleTab) click(sel string) {
	c.t.Helper()
	c.do("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// waitListed waits until the view lists id at path (an API list with its filters): the lists
// lag the log a little, the console's pages do not wait for them.
func (b *e2eBundle) waitListed(t *testing.T, path string, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, body := b.do(t, "GET", path, "", nil)
		var list struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &list) == nil {
			seen := map[string]bool{}
			for _, it := range list.Items {
				seen[it.ID] = true
			}
			all := true
			for _, id := range ids {
				all = all && seen[id]
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not list %v after 20s: %d %s", path, ids, resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// threeDead accepts three deliveries to the receiver's path, which answers 404 (a 410 would put
// the path on the suppression list, and the next two would be suppressed), and returns the
// recipient and their ids once each is dead and listed in the DLQ view.
func threeDead(t *testing.T, b *e2eBundle, rc *consoleReceiver, path, keyPrefix string) (string, []string) {
	t.Helper()
	rc.answer(path, http.StatusNotFound)
	recipient := b.sink.URL + path
	var ids []string
	for i := range 3 {
		ids = append(ids, b.accept(t, fmt.Sprintf("%s-%d", keyPrefix, i), recipient, domain.PriorityNormal))
	}
	for _, id := range ids {
		b.waitState(t, id, domain.StateDead, 20*time.Second)
	}
	b.waitListed(t, "/v1/dlq?"+url.Values{"recipient": {recipient}}.Encode(), ids...)
	return recipient, ids
}

func TestConsole(t *testing.T) {
	t.Parallel()
	browser := startBrowser(t)
	shots := screenshotDir(t)
	// Replay jobs in pages of one with a pause between them longer than the console's poll, so
	// that the bulk replay's progress shows between pages.
	b := setupE2E(t, "", func(c *Config) {
		c.WebhookTimeout = 300 * time.Millisecond
		c.ReplayJobPage, c.ReplayJobPause = 1, 2500*time.Millisecond
	})
	rc := newConsoleReceiver(b.sink)
	site := consoleURL(t, b)
	t.Logf("console at %s, screenshots in %s", site, shots)

	// An accepted delivery is watched on its page until a worker delivers it. This test has a
	// ledger of its own that runs no relay and no worker at first, so the page shows the
	// delivery accepted before it shows it delivered.
	t.Run("SignInAndWatchADeliveryBecomeDelivered", func(t *testing.T) {
		t.Parallel()
		own := setupE2E(t, "api,projector")
		tab := newConsoleTab(t, browser, consoleURL(t, own), shots)

		// A wrong key is refused with the API's problem, and nothing is kept.
		tab.do("open the console", chromedp.Navigate(tab.site))
		tab.waitHeading("Sign in to the console")
		tab.do("enter a wrong key", chromedp.SendKeys(chromedp.CSS("#api-key"), "wrong-key"+kb.Enter))
		tab.waitFor("the refusal", `document.querySelector("#login-form .problem-title")?.textContent === "Unauthorized (401)" &&
			document.querySelector("#login-form .problem-field")?.textContent === "Field: Authorization"`)
		if n := consoleEval[int](tab, "sessionStorage.length"); n != 0 {
			t.Fatalf("sessionStorage holds %d items after a refused key", n)
		}
		tab.signIn("acme-key", "console-login")
		id := own.accept(t, "console-watch-1", own.sink.URL+"/watched", domain.PriorityNormal)

		tab.open("#/deliveries/"+id, "Delivery")
		tab.waitFor("the accepted state", `document.querySelector("#delivery-state")?.dataset.state === "accepted"`)
		tab.waitFor("the note that the page follows the delivery", `document.querySelector("#live")?.textContent.includes("refreshing every second")`)
		if consoleEval[int](tab, `document.querySelectorAll("#actions form").length`) != 0 {
			t.Fatal("an accepted delivery offers an action")
		}
		tab.waitFor("the payload", `document.querySelector("#payload-json")?.textContent.includes('"k": "console-watch-1"')`)

		workers := own.cfg
		workers.Roles = "relay,worker"
		startApp(t, own.schema, workers)
		tab.waitFor("the delivered state", `document.querySelector("#delivery-state")?.dataset.state === "delivered"`)
		tab.waitFor("the delivery in the timeline", `document.querySelector('#timeline li[data-type="delivery.delivered"]')?.textContent.includes("200")`)
		types := consoleEval[[]string](tab, `[...document.querySelectorAll("#timeline li")].map(li => li.dataset.type)`)
		want := "delivery.accepted,delivery.queued,delivery.attempt_started,delivery.delivered"
		if got := strings.Join(types, ","); got != want {
			t.Fatalf("timeline %s, want %s", got, want)
		}
		tab.screenshot("console-delivery", consoleDesktop)
		tab.screenshot("console-delivery", consolePhone)

		// The same delivery found by its Idempotency-Key.
		tab.open("#/deliveries", "Deliveries")
		tab.typeInto("#lookup-input", "console-watch-1")
		tab.click("#lookup-key")
		tab.waitFor("the request's deliveries", fmt.Sprintf(`document.querySelector('#request-table tr[data-id=%q]')`, id))

		tab.click("#sign-out")
		tab.waitHeading("Sign in to the console")
		if n := consoleEval[int](tab, "sessionStorage.length"); n != 0 {
			t.Fatalf("sessionStorage holds %d items after sign out", n)
		}
	})

	// A dead delivery is replayed from its page with a reason; its timeline gains the replay and
	// the delivery.
	t.Run("ReplayADeadDelivery", func(t *testing.T) {
		t.Parallel()
		rc.answer("/replay/moved", http.StatusNotFound)
		id := b.accept(t, "console-replay-1", b.sink.URL+"/replay/moved", domain.PriorityNormal)
		b.waitState(t, id, domain.StateDead, 20*time.Second)

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		tab.open("#/deliveries/"+id, "Delivery")
		tab.waitFor("the replay form", `document.querySelector("#replay-form")`)
		if consoleEval[bool](tab, `!!document.querySelector("#reconcile-form")`) {
			t.Fatal("a dead delivery offers to reconcile")
		}
		tab.waitFor("the dead letter in the timeline", `document.querySelector('#timeline li[data-type="delivery.dead_lettered"]')?.textContent.includes("404")`)
		tab.screenshot("console-delivery-dead", consoleDesktop)
		tab.checkTabOrder("the dead delivery", "replay-reason", "replay-actor", "replay-submit")

		rc.answer("/replay/moved", http.StatusOK)
		tab.typeInto("#replay-reason", "receiver moved back")
		tab.click("#replay-submit")
		tab.waitFor("the replay in the timeline", `document.querySelector('#timeline li[data-type="delivery.replayed"]')?.textContent.includes("receiver moved back")`)
		tab.waitFor("the delivered state", `document.querySelector("#delivery-state")?.dataset.state === "delivered"`)
		tab.waitFor("the delivery in the timeline", `document.querySelector('#timeline li[data-type="delivery.delivered"]')`)
		if consoleEval[bool](tab, `!!document.querySelector("#actions form")`) {
			t.Fatal("a delivered delivery offers an action")
		}
		tab.screenshot("console-delivery-replayed", consoleDesktop)
		if got := strings.Join(states(b.history(t, id)), ","); got != "accepted,queued,processing,dead,queued,processing,delivered" {
			t.Fatalf("history states %s", got)
		}
		// No actor named: the replay is the key's tenant's.
		if replays := eventsOfType(b.history(t, id), domain.EventReplayed); len(replays) != 1 || !strings.Contains(string(replays[0].Data), `"actor":"tenant:acme"`) {
			t.Fatalf("replays %+v, want one by tenant:acme", replays)
		}
	})

	// An unknown outcome (the receiver answered after the timeout) is reconciled with evidence.
	t.Run("ReconcileAnUnknownOutcome", func(t *testing.T) {
		t.Parallel()
		id := b.accept(t, "console-unknown-1", b.sink.URL+"/slow/unknown", domain.PriorityNormal)
		b.waitState(t, id, domain.StateUnknown, 20*time.Second)

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		tab.open("#/deliveries/"+id, "Delivery")
		tab.waitFor("the reconcile form", `document.querySelector("#reconcile-form")`)
		if consoleEval[bool](tab, `!!document.querySelector("#replay-form")`) {
			t.Fatal("an unknown delivery offers a replay")
		}
		tab.screenshot("console-delivery-unknown", consoleDesktop)
		tab.checkTabOrder("the unknown delivery", "outcome-delivered", "reconcile-evidence", "reconcile-actor", "reconcile-submit")

		tab.typeInto("#reconcile-evidence", "receiver log: 200 at 12:00:01 for this webhook-id")
		tab.typeInto("#reconcile-actor", "ops@acme")
		tab.click("#outcome-delivered")
		tab.click("#reconcile-submit")
		tab.waitFor("the reconciliation in the timeline",
			`document.querySelector('#timeline li[data-type="delivery.reconciled_delivered"]')?.textContent.includes("receiver log: 200")`)
		tab.waitFor("the delivered state", `document.querySelector("#delivery-state")?.dataset.state === "delivered"`)
		tab.screenshot("console-delivery-reconciled", consoleDesktop)
		events := eventsOfType(b.history(t, id), domain.EventReconciledDelivered)
		if len(events) != 1 || !strings.Contains(string(events[0].Data), "receiver log: 200") || !strings.Contains(string(events[0].Data), `"actor":"ops@acme"`) {
			t.Fatalf("reconciliations %+v, want one with the evidence, by the actor named", events)
		}
	})

	// A scheduled delivery offers a cancel, and only that; the cancel is recorded with its reason
	// and the delivery is never sent.
	t.Run("CancelAScheduledDelivery", func(t *testing.T) {
		t.Parallel()
		id, _ := b.acceptAt(t, "console-cancel-scheduled", b.sink.URL+"/cancel/later", time.Now().Add(time.Hour))
		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		tab.open("#/deliveries/"+id, "Delivery")
		tab.waitFor("the cancel form", `document.querySelector("#cancel-form")`)
		if consoleEval[bool](tab, `!!document.querySelector("#replay-form") || !!document.querySelector("#reconcile-form")`) {
			t.Fatal("a scheduled delivery offers a replay or a reconciliation")
		}
		tab.typeInto("#cancel-reason", "campaign withdrawn")
		tab.click("#cancel-submit")
		tab.waitFor("the cancelled state", `document.querySelector("#delivery-state")?.dataset.state === "cancelled"`)
		if consoleEval[bool](tab, `!!document.querySelector("#actions form")`) {
			t.Fatal("a cancelled delivery offers an action")
		}
		tab.screenshot("console-delivery-cancelled", consoleDesktop)
		events := eventsOfType(b.history(t, id), domain.EventCancelled)
		if len(events) != 1 || !strings.Contains(string(events[0].Data), "campaign withdrawn") || b.sink.count(id) != 0 {
			t.Fatalf("cancels %+v, %d calls; want one with the reason and no call", events, b.sink.count(id))
		}
	})

	// The list filtered by state shows that state only.
	t.Run("FilterTheListByState", func(t *testing.T) {
		t.Parallel()
		rc.answer("/filter/gone", http.StatusNotFound)
		dead := b.accept(t, "console-filter-dead", b.sink.URL+"/filter/gone", domain.PriorityNormal)
		delivered := b.accept(t, "console-filter-ok", b.sink.URL+"/filter/ok", domain.PriorityNormal)
		paged := b.sink.URL + "/filter/paged"
		older := b.accept(t, "console-filter-paged-1", paged, domain.PriorityNormal)
		newer := b.accept(t, "console-filter-paged-2", paged, domain.PriorityNormal)
		b.waitState(t, dead, domain.StateDead, 20*time.Second)
		b.waitState(t, delivered, domain.StateDelivered, 20*time.Second)
		b.waitListed(t, "/v1/deliveries?"+url.Values{"recipient": {paged}}.Encode(), older, newer)
		b.waitListed(t, "/v1/deliveries?state=dead", dead)
		b.waitListed(t, "/v1/deliveries?state=delivered", delivered)

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		tab.open("#/deliveries", "Deliveries")
		tab.waitFor("both deliveries in the list", fmt.Sprintf(`document.querySelector('#deliveries-table tr[data-id=%q]') && document.querySelector('#deliveries-table tr[data-id=%q]')`, dead, delivered))
		tab.do("choose dead", chromedp.SetValue(chromedp.CSS("#filters-state"), "dead"))
		tab.click(`#filters button[type="submit"]`)
		tab.waitFor("the filter in the address", `location.hash === "#/deliveries?state=dead"`)
		tab.waitFor("the dead delivery", fmt.Sprintf(`document.querySelector('#deliveries-table tr[data-id=%q]')`, dead))
		if got := consoleEval[[]string](tab, `[...document.querySelectorAll("#deliveries-table tbody tr[data-state]")].map(tr => tr.dataset.state)`); len(got) == 0 ||
			strings.Trim(strings.ReplaceAll(strings.Join(got, ","), "dead", ""), ",") != "" {
			t.Fatalf("rows of the dead filter are in states %v", got)
		}
		if consoleEval[bool](tab, fmt.Sprintf(`!!document.querySelector('#deliveries-table tr[data-id=%q]')`, delivered)) {
			t.Fatal("the dead filter lists a delivered delivery")
		}
		tab.screenshot("console-deliveries", consoleDesktop)
		tab.checkTabOrder("the deliveries", "lookup-input", "filters-state", "filters-channel")

		// Pages of one row, newest first: the next page has the older one and no next page.
		onlyRow := `document.querySelectorAll("#deliveries-table tbody tr[data-id]").length === 1 &&
			document.querySelector("#deliveries-table tbody tr[data-id]").dataset.id === %q`
		tab.open("#/deliveries?"+url.Values{"recipient": {paged}, "limit": {"1"}}.Encode(), "Deliveries")
		tab.waitFor("the first page", fmt.Sprintf(onlyRow+` && document.querySelector("#next-page")`, newer))
		tab.click("#next-page")
		tab.waitFor("the second page", fmt.Sprintf(onlyRow+` && location.hash.includes("cursor=") && document.querySelector("#first-page") &&
			!document.querySelector("#next-page")`, older))
		tab.click("#first-page")
		tab.waitFor("the first page again", fmt.Sprintf(onlyRow+` && !location.hash.includes("cursor=")`, newer))

		// A bad filter is the API's problem, shown with its field.
		tab.open("#/deliveries?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "Deliveries")
		tab.waitFor("the problem", `document.querySelector("#results .problem-field")?.textContent === "Field: until"`)
	})

	// Another tenant's key sees nothing of acme's.
	t.Run("AnotherTenantSeesNone", func(t *testing.T) {
		t.Parallel()
		id := b.accept(t, "console-acme-only", b.sink.URL+"/acme/only", domain.PriorityNormal)
		b.waitState(t, id, domain.StateDelivered, 20*time.Second)
		b.waitListed(t, "/v1/deliveries", id)

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("globex-key", "")
		tab.waitFor("globex's counters", `document.querySelector("#card-total .figure")?.textContent === "0"`)
		tab.open("#/deliveries", "Deliveries")
		tab.waitFor("the empty list", `document.querySelector("#no-rows")`)
		tab.screenshot("console-deliveries-globex", consoleDesktop)
		tab.open("#/deliveries/"+id, "Delivery")
		tab.waitFor("not found", `document.querySelector("#delivery-problems .problem-title")?.textContent.includes("404")`)
		tab.open("#/dlq", "Dead-letter queue")
		tab.waitFor("the empty DLQ", `document.querySelector("#dlq-results #no-rows")`)
		tab.open("#/deliveries", "Deliveries")
		tab.typeInto("#lookup-input", "console-acme-only")
		tab.click("#lookup-key")
		tab.waitFor("no such request", `document.querySelector("#lookup-result .problem-title")?.textContent.includes("404")`)
	})

	// The overview's counters and chart.
	t.Run("Overview", func(t *testing.T) {
		t.Parallel()
		var ids []string
		for i := range 3 {
			id := b.accept(t, fmt.Sprintf("console-overview-%d", i), b.sink.URL+"/overview/ok", domain.PriorityNormal)
			b.waitState(t, id, domain.StateDelivered, 20*time.Second)
			ids = append(ids, id)
		}
		b.waitListed(t, "/v1/deliveries?state=delivered", ids...)

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		tab.waitFor("the chart", `document.querySelector('#chart-svg polyline[data-series="accepted"]')`)
		tab.waitFor("the counters", `document.querySelector('#stats-table tr[data-channel="webhook"] td[data-state="delivered"]')`)
		if n := consoleEval[int](tab, `Number(document.querySelector('#stats-table tr[data-channel="webhook"] td[data-state="delivered"]').textContent.replace(/\D/g, ""))`); n < 3 {
			t.Errorf("the overview shows %d delivered webhooks, want at least 3", n)
		}
		if n := consoleEval[int](tab, `Number(document.querySelector('[data-total="accepted"]').textContent.replace(/\D/g, ""))`); n < 3 {
			t.Errorf("the chart counts %d accepts in the last hour, want at least 3", n)
		}
		if n := consoleEval[int](tab, `Number(document.querySelector('[data-total="delivered"]').textContent.replace(/\D/g, ""))`); n < 3 {
			t.Errorf("the chart counts %d deliveries in the last hour, want at least 3", n)
		}
		tab.waitFor("the lag card", `/\d+ events/.test(document.querySelector("#card-lag .figure")?.textContent)`)
		tab.screenshot("console-overview", consoleDesktop)
		tab.screenshot("console-overview", consolePhone)
		tab.checkTabOrder("the overview", "refresh")
	})

	// The DLQ's filtered set replayed in bulk: the count first, then the job's progress.
	t.Run("BulkReplayFromTheDLQ", func(t *testing.T) {
		t.Parallel()
		const path = "/bulk/gone"
		recipient, ids := threeDead(t, b, rc, path, "console-bulk")

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		// The failure class is filtered by the server.
		tab.open("#/dlq?"+url.Values{"recipient": {recipient}, "state": {"dead"}, "failure_class": {"permanent"}}.Encode(), "Dead-letter queue")
		tab.waitFor("the three dead letters", `document.querySelectorAll("#dlq-table tbody tr[data-id]").length === 3`)
		if got := consoleEval[[]string](tab, `[...document.querySelectorAll("#dlq-table tbody tr[data-id]")].map(tr => tr.dataset.failureClass)`); strings.Join(got, ",") != "permanent,permanent,permanent" {
			t.Fatalf("failure classes %v, want permanent", got)
		}
		tab.screenshot("console-dlq", consoleDesktop)
		tab.checkTabOrder("the DLQ", "dlq-filters-state", "dlq-filters-class", "bulk-reason", "bulk-actor", "bulk-review")

		rc.answer(path, http.StatusOK)
		tab.typeInto("#bulk-reason", "receiver fixed")
		tab.click("#bulk-review")
		tab.waitFor("the count", `document.querySelector("#bulk-count")?.textContent === "This will replay 3 deliveries."`)
		tab.screenshot("console-dlq-confirm", consoleDesktop)
		// Counting replays nothing: the job starts on the confirmation only.
		for _, id := range ids {
			if n := len(eventsOfType(b.history(t, id), domain.EventReplayed)); n != 0 {
				t.Fatalf("delivery %s was replayed %d times before the confirmation", id, n)
			}
		}
		// The job goes through the deliveries a page of one at a time, pausing between pages:
		// the page shows it part-way, two of three handled, before it ends.
		tab.click("#bulk-confirm")
		tab.waitFor("the job's page", `location.hash.startsWith("#/replays/")`)
		tab.waitHeading("Replay job")
		tab.waitFor("the job part-way", `document.querySelector("#job-state")?.dataset.state === "running" &&
			document.querySelector("#job-replayed")?.textContent === "2" &&
			document.querySelector('label[for="job-progress"]')?.textContent === "2 of 3 handled" &&
			document.querySelector("#job-progress")?.value === 2 &&
			document.querySelector("#live")?.textContent.includes("running")`)
		tab.screenshot("console-replay-job-running", consoleDesktop)
		tab.waitFor("the job done", `document.querySelector("#job-state")?.dataset.state === "done"`)
		if got := consoleEval[string](tab, `document.querySelector("#job-actor").textContent`); got != "tenant:acme" {
			t.Errorf("the job's actor is %q, want the key's tenant", got)
		}
		if got := consoleEval[string](tab, `["matched", "replayed", "skipped"].map(k => document.querySelector("#job-" + k).textContent).join(",")`); got != "3,3,0" {
			t.Fatalf("job matched,replayed,skipped = %s, want 3,3,0", got)
		}
		tab.screenshot("console-replay-job", consoleDesktop)
		for _, id := range ids {
			b.waitState(t, id, domain.StateDelivered, 20*time.Second)
			if replays := eventsOfType(b.history(t, id), domain.EventReplayed); len(replays) != 1 || !strings.Contains(string(replays[0].Data), "receiver fixed (replay job ") ||
				!strings.Contains(string(replays[0].Data), `"actor":"tenant:acme"`) {
				t.Fatalf("delivery %s replays %+v, want one with the reason and the job, by tenant:acme", id, replays)
			}
		}
	})

	// The suppressions page lists the entries with their evidence linked to its delivery, adds one
	// and searches for it, and removes it with a reason; a suppressed delivery's page says what
	// stopped it: the entry, its evidence and the provider's code, or the category opted out of.
	// A ledger of its own, whose file declares a category.
	t.Run("SuppressionsAndASuppressedDelivery", func(t *testing.T) {
		t.Parallel()
		config := filepath.Join(t.TempDir(), "ledger.yaml")
		if err := os.WriteFile(config, []byte("channels:\n  webhook: {providers: [hook]}\nproviders:\n  hook: {type: webhook, timeout: 300ms}\n"+
			"categories:\n  marketing: {}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		own := setupE2E(t, "", func(c *Config) { c.ConfigFile = config })
		orc := newConsoleReceiver(own.sink)

		// The evidence: a delivery the recipient answered 410 Gone, and the entry it stands for,
		// added as the dead letter's transaction adds it (or found there already).
		gone := own.sink.URL + "/supp/gone"
		orc.answer("/supp/gone", http.StatusGone)
		evidenceID := own.accept(t, "console-supp-evidence", gone, domain.PriorityNormal)
		own.waitState(t, evidenceID, domain.StateDead, 20*time.Second)
		h := own.history(t, evidenceID)
		entry, _, err := own.app.suppression.Store.AddSuppression(context.Background(), domain.Suppression{
			Tenant: "acme", Channel: "webhook", Recipient: own.app.channels.Normalize("webhook", gone), Source: domain.SuppressionByProvider,
			Reason: "410 Gone", CreatedAt: time.Now(),
			Evidence: domain.SuppressionEvidence{DeliveryID: evidenceID, EventVersion: h[len(h)-1].Version, Provider: "webhook", ProviderCode: "410"},
		})
		if err != nil {
			t.Fatal(err)
		}
		blocked := own.accept(t, "console-supp-blocked", gone, domain.PriorityNormal)
		optedOut := own.sink.URL + "/supp/opted-out"
		if resp, raw := own.do(t, "PUT", "/v1/preferences", "", map[string]any{"channel": "webhook", "recipient": optedOut,
			"category": "marketing", "opted_out": true}); resp.StatusCode != http.StatusOK {
			t.Fatalf("opt out: %d %s", resp.StatusCode, raw)
		}
		resp, raw := own.do(t, "POST", "/v1/deliveries", "console-supp-pref", map[string]any{"channel": "webhook", "recipient": optedOut,
			"category": "marketing", "payload": map[string]any{"k": "news"}})
		var byPref struct {
			ID    string `json:"id"`
			State string `json:"state"`
		}
		if err := json.Unmarshal(raw, &byPref); err != nil || resp.StatusCode != http.StatusAccepted || byPref.State != "suppressed" {
			t.Fatalf("accept to an opted-out recipient: %d %s", resp.StatusCode, raw)
		}

		tab := newConsoleTab(t, browser, consoleURL(t, own), shots)
		tab.signIn("acme-key", "")
		tab.open("#/suppressions", "Suppressions")
		row := fmt.Sprintf(`#suppressions-table tr[data-id=%q]`, entry.ID)
		tab.waitFor("the provider's entry with its evidence", fmt.Sprintf(`document.querySelector('%s')?.dataset.source === %q &&
			document.querySelector('%s a[href="#/deliveries/%s"]') && document.querySelector('%s').textContent.includes(%q)`,
			row, entry.Source, row, entry.Evidence.DeliveryID, row, entry.Evidence.ProviderCode))
		tab.screenshot("console-suppressions", consoleDesktop)
		tab.checkTabOrder("the suppressions", "supp-filters-channel", "supp-filters-recipient", "supp-search", "add-channel", "add-recipient", "add-reason", "add-submit")

		// Added by hand, then found by a search on its channel and recipient.
		manual := own.sink.URL + "/supp/manual"
		tab.typeInto("#add-channel", "webhook")
		tab.typeInto("#add-recipient", manual)
		tab.typeInto("#add-reason", "asked by phone")
		tab.click("#add-submit")
		tab.waitFor("the entry added", `document.querySelector("#add-done")?.textContent.startsWith("Added: ")`)
		manualID := consoleEval[string](tab, `document.querySelector("#add-done a").textContent`)
		tab.waitFor("the new entry in the list", fmt.Sprintf(`document.querySelector('#suppressions-table tr[data-id=%q]')?.dataset.source === "manual"`, manualID))
		tab.click("#add-submit") // the recipient is kept out of the field: nothing to add
		tab.waitFor("the refusal of an empty recipient", `document.querySelector("#add-result .problem")`)
		tab.typeInto("#supp-filters-channel", "webhook")
		tab.typeInto("#supp-filters-recipient", manual)
		tab.click("#supp-search")
		tab.waitFor("the search in the address", `location.hash.startsWith("#/suppressions?") && location.hash.includes("recipient=")`)
		tab.waitFor("only that entry", fmt.Sprintf(`document.querySelectorAll("#suppressions-table tbody tr[data-id]").length === 1 &&
			document.querySelector('#suppressions-table tr[data-id=%q]')?.textContent.includes("asked by phone")`, manualID))

		// Removed on its page, with a reason.
		tab.click(fmt.Sprintf(`#suppressions-table tr[data-id=%q] a`, manualID))
		tab.waitHeading("Suppression")
		tab.waitFor("the entry in force", `document.querySelector("#entry-state")?.dataset.state === "active" && document.querySelector("#remove-form")`)
		tab.click("#remove-submit")
		tab.waitFor("the refusal without a reason", `document.querySelector("#remove-form .problem")`)
		tab.typeInto("#remove-reason", "sent by mistake")
		tab.click("#remove-submit")
		tab.waitFor("the entry removed", `document.querySelector("#entry-state")?.dataset.state === "removed" && !document.querySelector("#remove-form") &&
			document.querySelector("#entry-removed-reason")?.textContent === "sent by mistake"`)
		tab.screenshot("console-suppression-removed", consoleDesktop)
		var removed domain.Suppression
		if resp, raw := own.do(t, "GET", "/v1/suppressions/"+manualID, "", nil); resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &removed) != nil ||
			removed.RemovedAt == nil || removed.RemovedReason != "sent by mistake" || removed.RemovedBy != "tenant:acme" {
			t.Fatalf("the entry after the removal: %d %s", resp.StatusCode, raw)
		}

		// A delivery suppressed by the list: the entry, its evidence, the provider's code; the page
		// does not poll a terminal state.
		tab.open("#/deliveries/"+blocked, "Delivery")
		tab.waitFor("the suppressed state explained", fmt.Sprintf(`document.querySelector("#delivery-state")?.dataset.state === "suppressed" &&
			document.querySelector("#suppression")?.dataset.by === "suppression" &&
			document.querySelector("#suppressed-entry")?.getAttribute("href") === "#/suppressions/%s" &&
			document.querySelector("#suppressed-evidence")?.getAttribute("href") === "#/deliveries/%s" &&
			document.querySelector("#suppressed-code")?.textContent === %q &&
			document.querySelector("#suppression-why").textContent.includes("at its accept")`, entry.ID, entry.Evidence.DeliveryID, entry.Evidence.ProviderCode))
		if live := consoleEval[string](tab, `document.querySelector("#live").textContent`); live != "" {
			t.Errorf("a suppressed delivery's page says %q: it should not follow a terminal state", live)
		}
		tab.screenshot("console-delivery-suppressed", consoleDesktop)
		tab.click("#suppressed-entry")
		tab.waitHeading("Suppression")
		tab.waitFor("the entry's evidence", fmt.Sprintf(`document.querySelector("#entry-source")?.textContent === %q &&
			document.querySelector("#entry-evidence")?.getAttribute("href") === "#/deliveries/%s"`, entry.Source, entry.Evidence.DeliveryID))

		// A delivery suppressed by a preference: the category.
		tab.open("#/deliveries/"+byPref.ID, "Delivery")
		tab.waitFor("the opt-out explained", `document.querySelector("#suppression")?.dataset.by === "preference" &&
			document.querySelector("#suppressed-category")?.textContent === "marketing"`)
		if n := own.sink.count(blocked) + own.sink.count(byPref.ID); n != 0 {
			t.Fatalf("the sink had %d calls for suppressed deliveries", n)
		}
	})

	// A running job cancelled from its page stops at its next page: the page shows it cancelled,
	// the action goes away, and the deliveries it had not reached stay dead.
	t.Run("CancelAReplayJob", func(t *testing.T) {
		t.Parallel()
		recipient, ids := threeDead(t, b, rc, "/cancel/gone", "console-cancel")
		resp, raw := b.do(t, "POST", "/v1/replays", "console-cancel-job", map[string]any{"reason": "oops", "recipient": recipient})
		var job replayJobAnswer
		if err := json.Unmarshal(raw, &job); err != nil || resp.StatusCode != http.StatusAccepted || job.Matched != 3 {
			t.Fatalf("create: %d %s", resp.StatusCode, raw)
		}

		tab := newConsoleTab(t, browser, site, shots)
		tab.signIn("acme-key", "")
		tab.open("#/replays/"+job.ID, "Replay job")
		// Pages of one with a 2.5 s pause: the cancel lands in the pause after the first.
		tab.waitFor("the job running, one or two handled", `document.querySelector("#job-state")?.dataset.state === "running" &&
			["1", "2"].includes(document.querySelector("#job-replayed")?.textContent) && !document.querySelector("#job-cancel").hidden`)
		tab.click("#job-cancel")
		tab.waitFor("the job cancelled", `document.querySelector("#job-state")?.dataset.state === "cancelled" &&
			document.querySelector("#job-cancel").hidden && document.querySelector("#live")?.textContent.includes("cancelled")`)
		tab.screenshot("console-replay-job-cancelled", consoleDesktop)
		_, raw = b.do(t, "GET", "/v1/replays/"+job.ID, "", nil)
		// The click meant for the first pause may land in the second on a loaded machine: the
		// job must stop at the page after it either way, short of the third.
		if err := json.Unmarshal(raw, &job); err != nil || job.State != "cancelled" || job.Replayed < 1 || job.Replayed > 2 {
			t.Fatalf("after the cancel: %s, want cancelled with one or two replayed", raw)
		}
		replayed, stillDead := 0, 0
		for _, id := range ids {
			h := b.history(t, id)
			n := len(eventsOfType(h, domain.EventReplayed))
			replayed += n
			if n == 0 && h[len(h)-1].Type == string(domain.EventDeadLettered) {
				stillDead++
			}
		}
		if replayed != job.Replayed || stillDead != 3-job.Replayed {
			t.Fatalf("%d replays and %d still dead after a cancel with %d replayed, want the rest dead", replayed, stillDead, job.Replayed)
		}
	})
}
