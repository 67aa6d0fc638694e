package httpapi_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"gcos"
	"gcos/daemon"
	"gcos/gcostest"
	"gcos/httpapi"
	"gcos/intake"
)

// scrape reads /metrics from srv and returns the text and its families.
func scrape(t *testing.T, srv *httptest.Server) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+readerToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return buf.Bytes(), families
}

// sample is the sum of the family's series whose labels include want (nil: none); a histogram counts samples.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) *float64 {
	f := families[name]
	if f == nil {
		return nil
	}
	var total *float64
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue series
			}
		}
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		}
		if total == nil {
			total = new(float64)
		}
		*total += v
	}
	return total
}

// TestMetricsForOperators: /metrics passes promlint with zero problems, and carries what operators alert on, read
// from a real store after a backfill, an intake pass, gate questions over HTTP and from the CLI, and a dead letter:
// the ledger per scope and bucket and whether it closes, intake lag and cursor age per source, scan runs by mode
// and outcome with durations, snapshot age, the dead-letter size, gate decisions by decision, source and channel.
func TestMetricsForOperators(t *testing.T) {
	t.Parallel()
	w := gcostest.New(t, gcostest.Options{Births: 3000, Seed: 11, Config: func(cfg *gcos.Config) {
		cfg.HTTP.ReaderTokens = []string{readerToken}
	}})
	w.Activate(t, w.Backfill(t).RulesetVersion)
	// The daemon's own assembly, its parts driven one pass at a time: an intake pass and a full audit.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // the test serves the daemon's handler itself
	d := w.Daemon(t, daemon.Config{Listener: ln, Version: "test"})
	if _, err := d.Intake.Once(w.Ctx); err != nil {
		t.Fatalf("intake pass: %v", err)
	}
	if _, err := d.Scan.Once(w.Ctx, "full"); err != nil {
		t.Fatalf("full audit: %v", err)
	}
	// A poison entry an operator must look at.
	w.Exec(t, `INSERT INTO event_pending (event_domain, event_type_hint, entity_table, entity_ref, canonical_address, actor_ref,
		error_count, last_error, dead_lettered_at) VALUES ($1, 'tail_retry', 'birth_registry', '42', 'x:y', 'w', 5, 'bad', now())`, intake.RetryDomain)
	h := d.API.Handler
	srv := httptest.NewServer(h)
	defer srv.Close()
	object := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`)[0]
	for _, ua := range []string{"pipeline/2", "gcos-cli/1"} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/gate?object="+object, nil)
		req.Header.Set("Authorization", "Bearer "+readerToken)
		req.Header.Set("User-Agent", ua)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	text, families := scrape(t, srv)
	linter := promlint.New(bytes.NewReader(text))
	// Stricter than this promlint, as promtool's older linters are: no metric type in any name (a gauge named
	// …_summary_up fails them).
	linter.AddCustomValidations(func(mf *dto.MetricFamily) []error {
		for _, typ := range dto.MetricType_name {
			if typ = "_" + strings.ToLower(typ); strings.Contains(mf.GetName()+"_", typ+"_") {
				return []error{fmt.Errorf("metric name should not include type '%s'", typ[1:])}
			}
		}
		return nil
	})
	problems, err := linter.Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	scopes := w.Strings(t, `SELECT DISTINCT scope FROM v_invariant_ledger ORDER BY 1`)
	if len(scopes) == 0 {
		t.Fatal("no ledger to export")
	}
	sources := w.Strings(t, `SELECT source FROM gov_worker_cursor ORDER BY 1`)
	type want struct {
		name   string
		labels map[string]string
		check  func(float64) bool
		what   string
	}
	positive, zero, one, any := func(v float64) bool { return v > 0 }, func(v float64) bool { return v == 0 },
		func(v float64) bool { return v == 1 }, func(float64) bool { return true }
	wants := []want{
		{"gcos_state_up", nil, one, "1"},
		{"gcos_scan_runs_total", map[string]string{"mode": "backfill", "outcome": "succeeded"}, positive, "> 0"},
		{"gcos_scan_runs_total", map[string]string{"mode": "full_audit", "outcome": "succeeded"}, one, "1"},
		{"gcos_scan_runs_total", map[string]string{"mode": "incremental", "outcome": "failed"}, zero, "0 (present before any run)"},
		{"gcos_audit_last_proof_timestamp_seconds", nil, positive, "a time"},
		{"gcos_audit_last_proof_mismatches", nil, zero, "0"},
		{"gcos_scan_run_duration_seconds", map[string]string{"mode": "backfill"}, positive, "observed"},
		{"gcos_snapshot_age_seconds", nil, func(v float64) bool { return v >= 0 }, ">= 0"},
		{"gcos_dead_letters", map[string]string{"domain": intake.RetryDomain, "table": "birth_registry"}, one, "1"},
		{"gcos_dead_letters", map[string]string{"domain": intake.RetryDomain, "table": "registry_changelog"}, zero, "0 (present while empty)"},
		{"gcos_gate_decisions_total", map[string]string{"channel": "cli", "source": "database"}, one, "1"},
		{"gcos_gate_decisions_total", map[string]string{"channel": "http", "source": "database"}, one, "1"},
		{"gcos_gate_duration_seconds", map[string]string{"kind": "single"}, positive, "observed"},
		{"gcos_open_findings", map[string]string{"type": string(gcos.IssueVerifyMismatch)}, zero, "0 (present while none is open)"},
		{"gcos_scan_last_finished_timestamp_seconds", map[string]string{"mode": "backfill", "status": "succeeded"}, positive, "a time"},
	}
	for _, scope := range scopes {
		wants = append(wants,
			want{"gcos_ledger_closes", map[string]string{"scope": scope}, one, "1"},
			want{"gcos_ledger_total_objects", map[string]string{"scope": scope}, positive, "> 0"},
			want{"gcos_ledger_objects", map[string]string{"scope": scope, "bucket": "covered"}, any, "present"},
			want{"gcos_groups", map[string]string{"scope": scope, "verdict": "relevant"}, any, "present"},
			want{"gcos_group_objects", map[string]string{"scope": scope, "verdict": "stale"}, any, "present"})
	}
	for _, src := range sources {
		wants = append(wants,
			want{"gcos_intake_lag_seconds", map[string]string{"source": src}, func(v float64) bool { return v >= 0 }, ">= 0"},
			want{"gcos_intake_cursor_age_seconds", map[string]string{"source": src}, func(v float64) bool { return v >= 0 }, ">= 0"},
			want{"gcos_intake_rows_total", map[string]string{"source": src, "outcome": "dead_lettered"}, any, "present"})
	}
	for _, wt := range wants {
		v := sample(families, wt.name, wt.labels)
		switch {
		case v == nil:
			t.Errorf("%s%v: absent, want %s", wt.name, wt.labels, wt.what)
		case !wt.check(*v):
			t.Errorf("%s%v = %v, want %s", wt.name, wt.labels, *v, wt.what)
		}
	}
	// Each scope's ledger in /metrics is the ledger: the buckets sum to the total.
	for _, scope := range scopes {
		var sum float64
		for _, m := range families["gcos_ledger_objects"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "scope" && l.GetValue() == scope {
					sum += m.GetGauge().GetValue()
				}
			}
		}
		if total := sample(families, "gcos_ledger_total_objects", map[string]string{"scope": scope}); total == nil || *total != sum {
			t.Errorf("scope %s: buckets sum to %v, total %v", scope, sum, total)
		}
	}
	// Where Prometheus's own tool is installed, it agrees (it lints with its own, older rules).
	if promtool, err := exec.LookPath("promtool"); err == nil {
		check := exec.Command(promtool, "check", "metrics")
		check.Stdin = bytes.NewReader(text)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
		if out, err := exec.Command(promtool, "check", "rules", "../deploy/alerts.yml").CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	}
	// docs/REFERENCE.md lists every family and every route.
	reference, err := os.ReadFile("../docs/REFERENCE.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range families {
		if strings.HasPrefix(name, "gcos_") && !strings.Contains(string(reference), "| `"+name+"` |") {
			t.Errorf("docs/REFERENCE.md does not list the metric %s", name)
		}
	}
	for _, rt := range httpapi.Routes() {
		if !strings.Contains(string(reference), "| `"+rt.Method+" "+rt.Path+"` |") {
			t.Errorf("docs/REFERENCE.md does not list the route %s %s", rt.Method, rt.Path)
		}
	}
	if strings.Contains(string(text), "gcos_summary_up") {
		t.Error("gcos_summary_up is still exported")
	}

	// The shipped alert rules parse as Prometheus parses them, and every metric they name is one GCOS exports
	// (up is Prometheus's own).
	promql := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile("../deploy/alerts.yml", false, model.UTF8Validation, promql, nil)
	for _, err := range errs {
		t.Errorf("deploy/alerts.yml: %v", err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatal("deploy/alerts.yml has no rule group")
	}
	alerts := 0
	for _, g := range groups.Groups {
		for _, rule := range g.Rules {
			alerts++
			expr, err := promql.ParseExpr(rule.Expr)
			if err != nil {
				t.Errorf("alert %s: %v", rule.Alert, err)
				continue
			}
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				if vs, ok := node.(*parser.VectorSelector); ok && vs.Name != "up" && families[vs.Name] == nil {
					t.Errorf("alert %s names %s, which /metrics does not export", rule.Alert, vs.Name)
				}
				return nil
			})
		}
	}
	for _, want := range []string{"GCOSInvariantDoesNotClose", "GCOSIntakeLagging", "GCOSFullAuditOverdue", "GCOSDeadLettersGrowing",
		"GCOSGateBlockRateHigh", "GCOSVerifyMismatch"} {
		if !slices.ContainsFunc(groups.Groups[0].Rules, func(r rulefmt.Rule) bool { return r.Alert == want }) {
			t.Errorf("deploy/alerts.yml has no %s alert", want)
		}
	}
	// The scrape configuration loads that rule file and scrapes /metrics with a bearer token.
	var promConfig struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			MetricsPath   string `yaml:"metrics_path"`
			Authorization struct {
				Type            string `yaml:"type"`
				CredentialsFile string `yaml:"credentials_file"`
			} `yaml:"authorization"`
		} `yaml:"scrape_configs"`
	}
	raw, err := os.ReadFile("../deploy/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &promConfig); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}
	if !slices.Contains(promConfig.RuleFiles, "alerts.yml") || len(promConfig.ScrapeConfigs) != 1 ||
		promConfig.ScrapeConfigs[0].MetricsPath != "/metrics" || promConfig.ScrapeConfigs[0].Authorization.Type != "Bearer" {
		t.Errorf("deploy/prometheus.yml: %+v", promConfig)
	}
}
