package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliveryledger/ledger/domain"
)

// alertsFile is the operator's rules file, from this package's directory, and promConfigFile
// the Prometheus configuration that loads it.
var (
	alertsFile     = filepath.Join("..", "..", "..", "deploy", "prometheus", "alerts.yaml")
	promConfigFile = filepath.Join("..", "..", "..", "deploy", "prometheus", "prometheus.yml")
)

// promConfig is deploy/prometheus/prometheus.yml as a test runs it: the same file with the
// ledger job's target replaced by target, its intervals at one second (a test cannot wait 15 s
// per scrape), and its rule files made absolute (they are relative to the file's directory,
// and the test's copy lives elsewhere). Everything else (the job's name and path, the rule
// files it names) is the committed file's, so a change there that breaks scraping the ledger or
// loading its alerts fails the test.
func promConfig(t *testing.T, target string) []byte {
	t.Helper()
	raw, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", promConfigFile, err)
	}
	global, _ := cfg["global"].(map[string]any)
	if global == nil {
		global = map[string]any{}
		cfg["global"] = global
	}
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	dir, err := filepath.Abs(filepath.Dir(promConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := cfg["rule_files"].([]any)
	for i, r := range rules {
		if name, ok := r.(string); ok && !filepath.IsAbs(name) {
			rules[i] = filepath.Join(dir, name)
		}
	}
	if len(rules) == 0 {
		t.Fatalf("%s loads no rule files", promConfigFile)
	}
	var jobs int
	scrapes, _ := cfg["scrape_configs"].([]any)
	for _, sc := range scrapes {
		job, _ := sc.(map[string]any)
		if job["job_name"] != "ledger" {
			continue
		}
		jobs++
		statics, _ := job["static_configs"].([]any)
		if len(statics) != 1 {
			t.Fatalf("%s: job ledger has %d static_configs, want the one local ledger", promConfigFile, len(statics))
		}
		static, _ := statics[0].(map[string]any)
		if targets, _ := static["targets"].([]any); len(targets) != 1 {
			t.Fatalf("%s: job ledger scrapes %v, want the one local ledger", promConfigFile, static["targets"])
		}
		static["targets"] = []any{target}
	}
	if jobs != 1 {
		t.Fatalf("%s has %d jobs named ledger, want 1 (the rules select job=\"ledger\")", promConfigFile, jobs)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// promWait bounds every wait on Prometheus: its start, a scrape, a rule evaluation.
const promWait = 30 * time.Second

// promServer is a Prometheus of a test's own, on a loopback port of its own.
type promServer struct {
	base   string
	client *http.Client
	// exited is closed when the process ends; log holds its output.
	exited chan struct{}
	mu     sync.Mutex
	log    bytes.Buffer
}

func (p *promServer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *promServer) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// prometheusBinary finds prometheus on PATH, or fails the test saying how to install it.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not on PATH: install it (Debian: apt-get install prometheus; scripts/services.sh does)")
	}
	return bin
}

// startPrometheus runs the prometheus at bin with the repository's prometheus.yml (promConfig:
// scraping target, and evaluating alerts.yaml, every second) until the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, promConfig(t, target), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &promServer{base: "http://" + addr, client: &http.Client{Timeout: 2 * time.Second}, exited: make(chan struct{})}
	cmd := exec.Command(bin, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.output())
		}
	})
	return p
}

// get decodes the data of an answer of Prometheus' HTTP API into data; an error means "not
// yet" (Prometheus still starting) as much as a failure.
func (p *promServer) get(path string, query url.Values, data any) error {
	resp, err := p.client.Get(p.base + path + "?" + query.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if answer.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, answer.Error)
	}
	return json.Unmarshal(answer.Data, data)
}

// poll calls check until it reports done, Prometheus exits, or promWait passes.
func (p *promServer) poll(t *testing.T, what string, check func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(promWait)
	for {
		done, state := check()
		if done {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("prometheus exited while waiting for %s (%s)", what, state)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, promWait, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitValue polls an instant query until its single sample has the value want.
func (p *promServer) waitValue(t *testing.T, query string, want float64) {
	t.Helper()
	p.poll(t, query+" = "+strconv.FormatFloat(want, 'g', -1, 64), func() (bool, string) {
		var data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		if err := p.get("/api/v1/query", url.Values{"query": {query}}, &data); err != nil {
			return false, err.Error()
		}
		if len(data.Result) != 1 {
			return false, fmt.Sprintf("%d samples", len(data.Result))
		}
		s, _ := data.Result[0].Value[1].(string)
		got, err := strconv.ParseFloat(s, 64)
		return err == nil && got == want, "value " + s
	})
}

// promRule is a rule as /api/v1/rules reports it.
type promRule struct {
	Name           string    `json:"name"`
	Type           string    `json:"type"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// alertNames lists the alerts of alerts.yaml's ledger group, as an operator's Prometheus reads it.
func alertNames(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var names []string
	for _, g := range file.Groups {
		if g.Name != "ledger" {
			t.Fatalf("%s: group %q, want only ledger", alertsFile, g.Name)
		}
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s has no alerts", alertsFile)
	}
	slices.Sort(names)
	return names
}

// TestPrometheusScrapesTheLedgerAndEvaluatesItsAlerts runs a real Prometheus, configured by
// deploy/prometheus/prometheus.yml (promConfig), against a running ledger: it scrapes /metrics
// (the accepted count reaches it), and it loads deploy/prometheus's rules and evaluates every
// one of them over the ledger's real series without an error.
func TestPrometheusScrapesTheLedgerAndEvaluatesItsAlerts(t *testing.T) {
	t.Parallel()
	bin := prometheusBinary(t)
	b := setupE2E(t, "")
	if b.app.MetricsAddr() == "" {
		t.Fatal("the ledger serves no /metrics")
	}
	prom := startPrometheus(t, bin, b.app.MetricsAddr())

	const accepted = 3
	for i := range accepted {
		id := b.accept(t, fmt.Sprintf("prom-%d", i), b.sink.URL+"/prom", domain.PriorityNormal)
		b.waitState(t, id, domain.StateDelivered, 20*time.Second)
	}
	prom.waitValue(t, `sum(ledger_accepted_deliveries_total{job="ledger"})`, accepted)
	prom.waitValue(t, `up{job="ledger"}`, 1)
	scraped := time.Now()

	want := alertNames(t)
	prom.poll(t, "every rule evaluated after the scrape, healthy", func() (bool, string) {
		var data struct {
			Groups []struct {
				Name  string     `json:"name"`
				File  string     `json:"file"`
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		}
		if err := prom.get("/api/v1/rules", nil, &data); err != nil {
			return false, err.Error()
		}
		var got []string
		for _, g := range data.Groups {
			if g.Name != "ledger" {
				t.Fatalf("unexpected rule group %q from %s", g.Name, g.File)
			}
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Fatalf("rule %s fails on the ledger's series: %s", r.Name, r.LastError)
				}
				if r.Type != "alerting" {
					t.Fatalf("rule %s is %s, want alerting", r.Name, r.Type)
				}
				if r.Health != "ok" || r.LastEvaluation.Before(scraped) {
					return false, fmt.Sprintf("rule %s: health %q, last evaluated %s", r.Name, r.Health, r.LastEvaluation)
				}
				got = append(got, r.Name)
			}
		}
		if len(got) == 0 {
			return false, "no rules loaded yet"
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("prometheus loaded the rules %v, want %v", got, want)
		}
		return true, ""
	})
}
