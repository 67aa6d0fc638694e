package gcos_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

// writeConfig writes doc to a config file in a fresh directory and returns its path.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gcos.json")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultConfigValidates(t *testing.T) {
	t.Parallel()
	c, err := gcos.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gcos.DefaultConfig(), c); diff != "" {
		t.Fatalf("LoadConfig(\"\") differs from the defaults (-want +got):\n%s", diff)
	}
	p, err := c.VerdictPolicy.Load()
	if err != nil || p.Validate() != nil {
		t.Fatalf("default verdict policy: %v", err)
	}
}

func TestConfigDumpReloads(t *testing.T) {
	t.Parallel()
	b, err := json.MarshalIndent(gcos.DefaultConfig(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	c, err := gcos.LoadConfig(writeConfig(t, string(b)))
	if err != nil {
		t.Fatalf("a dumped default config must load: %v\n%s", err, b)
	}
	if diff := cmp.Diff(gcos.DefaultConfig(), c); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestLoadConfigOverrides(t *testing.T) {
	t.Parallel()
	c, err := gcos.LoadConfig(writeConfig(t, `{
		"ttl": {"write_high": "12h", "experimental": "30m"},
		"gate": {"low_risk_classes": ["read_descriptive", "read_low"]},
		"scan": {"batch_size": 50, "retry_base": "250ms"},
		"intake": {"changelog_kinds": [{"entity_type": "thing", "action": "zap", "kind": "object_retired"}], "registries": [],
		           "read_ahead": false}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.TTL.TTLFor("write_high"); got != 12*time.Hour {
		t.Errorf("write_high TTL = %s", got)
	}
	if got := c.TTL.TTLFor("read_descriptive"); got != 168*time.Hour {
		t.Errorf("read_descriptive TTL = %s: entries not in the file keep their defaults", got)
	}
	if got := c.TTL.TTLFor("experimental"); got != 30*time.Minute {
		t.Errorf("experimental TTL = %s", got)
	}
	if c.Scan.BatchSize != 50 || c.Scan.RetryBase.Duration() != 250*time.Millisecond || c.Scan.RetryMax.Duration() != 5*time.Minute {
		t.Errorf("scan = %+v", c.Scan)
	}
	if diff := cmp.Diff([]string{"read_descriptive", "read_low"}, c.Gate.LowRiskClasses); diff != "" {
		t.Errorf("low risk classes (-want +got):\n%s", diff)
	}
	if k, ok := c.Intake.KindFor("thing", "ZAP"); !ok || k != gcos.ChangeObjectRetired {
		t.Errorf("KindFor(thing, ZAP) = %q, %v", k, ok)
	}
	if _, ok := c.Intake.KindFor("collection", "update"); ok {
		t.Error("a file's changelog_kinds replace the defaults")
	}
	if c.Intake.ReadAhead || !gcos.DefaultConfig().Intake.ReadAhead || c.Intake.PageSize != gcos.DefaultConfig().Intake.PageSize {
		t.Errorf("intake.read_ahead is on by default and a file turns it off, leaving the page size: %+v", c.Intake)
	}
}

func TestLoadConfigErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"bad duration", `{"scan":{"retry_base":"5x"}}`, `scan.retry_base: cannot use "5x" as a duration`},
		{"duration as number", `{"intake":{"poll_interval":200}}`, `intake.poll_interval: cannot use 200 as a duration`},
		{"bad ttl entry", `{"ttl":{"write_high":"soon"}}`, `ttl.write_high: cannot use "soon" as a duration`},
		{"wrong type", `{"scan":{"batch_size":"ten"}}`, "scan.batch_size: cannot use string as int"},
		{"negative size", `{"scan":{"batch_size":-1}}`, "scan.batch_size: must be > 0, got -1"},
		{"no proof batch", `{"scan":{"verify_batch_objects":0}}`, "scan.verify_batch_objects: must be > 0, got 0"},
		{"zero page", `{"intake":{"page_size":0}}`, "intake.page_size: must be > 0"},
		{"negative duration", `{"snapshot":{"statement_timeout":"-5s"}}`, "snapshot.statement_timeout: must be > 0"},
		{"negative guard", `{"intake":{"horizon_guard":"-1ms"}}`, "intake.horizon_guard: must be >= 0"},
		{"unknown top-level key", `{"scna":{}}`, "scna: unknown key"},
		{"unknown nested key", `{"scan":{"bogus":1}}`, "scan.bogus: unknown key"},
		{"unknown key in a list", `{"intake":{"changelog_kinds":[{"kind":"object_born","verb":"x"}]}}`,
			"intake.changelog_kinds[0].verb: unknown key"},
		{"unknown change kind", `{"intake":{"changelog_kinds":[{"action":"x","kind":"object_born"},{"action":"y","kind":"born"}]}}`,
			`intake.changelog_kinds[1].kind: unknown change kind "born"`},
		{"bad glob", `{"intake":{"changelog_kinds":[{"action":"[","kind":"object_born"}]}}`,
			`intake.changelog_kinds[0].action: bad glob pattern: pattern "[": unclosed [`},
		{"storm fraction zero", `{"scan":{"storm_fraction":0}}`, "scan.storm_fraction: must be in (0, 1]"},
		{"negative probe", `{"intake":{"probe_interval":"-1ms"}}`, "intake.probe_interval: must be >= 0 (0: off), got -1ms"},
		{"no dedup window", `{"events":{"signal_key_keep":"0s"}}`, "events.signal_key_keep: must be > 0"},
		{"negative quiet rows", `{"intake":{"probe_quiet_rows":-1}}`, "intake.probe_quiet_rows: must not be negative, got -1"},
		{"storm fraction above one", `{"scan":{"storm_fraction":1.5}}`, "scan.storm_fraction: must be in (0, 1]"},
		{"retry max below base", `{"scan":{"retry_base":"10s","retry_max":"1s"}}`, "scan.retry_max: must be >= scan.retry_base"},
		{"silent gap too short", `{"intake":{"silent_gap_threshold":"5s"}}`, "intake.silent_gap_threshold: must be > intake.heartbeat_interval"},
		{"unknown risk cannot be low", `{"gate":{"low_risk_classes":["read_descriptive","unknown"]}}`,
			`gate.low_risk_classes[1]: "unknown" cannot be low risk`},
		{"ttl without default", `{"ttl":{"default":"0s"}}`, "ttl.default: must be > 0"},
		{"view refresh too slow for its bound", `{"gate":{"max_staleness":"100ms","view_refresh":"60ms"}}`,
			"gate.view_refresh: must be under half of gate.max_staleness (100ms)"},
		{"binding injection", `{"source_binding":{"scope":{"table":"x; drop table y","column":"c"}}}`,
			"source_binding.scope.table: want a table name"},
		{"binding column", `{"source_binding":{"birth":{"born_at":""}}}`, "source_binding.birth.born_at: want a column name"},
		{"insecure off loopback", `{"http":{"listen":"0.0.0.0:8080","insecure_no_auth":true}}`,
			"http.insecure_no_auth: only allowed on a loopback listen address"},
		{"insecure on all interfaces", `{"http":{"listen":":8080","insecure_no_auth":true}}`, "http.insecure_no_auth"},
		{"bad listen", `{"http":{"listen":"localhost"}}`, `http.listen: want host:port`},
		{"unknown pooling", `{"database":{"pooling":"statement"}}`, `database.pooling: "statement" is not "session" or "transaction"`},
		{"no store pool", `{"database":{"pool_conns":0}}`, "database.pool_conns: must be > 0, got 0"},
		{"catch-up page below the page", `{"intake":{"page_size":1000,"catch_up_page_size":999}}`,
			"intake.catch_up_page_size: must be 0 (intake.page_size throughout) or at least intake.page_size (1000), got 999"},
		{"negative memory limit", `{"process":{"memory_limit_mib":-1}}`, "process.memory_limit_mib: must be >= 0 (0: no limit), got -1"},
		{"empty token", `{"http":{"reader_tokens":["ok",""]}}`, "http.reader_tokens[1]: must not be empty"},
		{"event domain", `{"events":{"domain":"other"}}`, "events"},
		{"bad inline policy", `{"verdict_policy":{"document":{"version":1,"rules":[{"name":"x","verdict":"relevant"}]}}}`,
			"verdict_policy: verdict policy: rules[0]"},
		{"policy path and document", `{"verdict_policy":{"path":"p.json","document":{}}}`, "verdict_policy: set either path or document"},
		{"missing policy file", `{"verdict_policy":{"path":"nope.json"}}`, "verdict_policy: path:"},
		{"not an object", `[1]`, "one JSON object"},
		{"not json", `{"scan":`, "not valid JSON"},
		{"trailing data", `{} {}`, "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := gcos.LoadConfig(writeConfig(t, tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v\nwant containing %q", err, tt.want)
			}
			if gcos.ErrorCode(err) != gcos.EINVALID {
				t.Fatalf("code = %s, want EINVALID", gcos.ErrorCode(err))
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	t.Parallel()
	if _, err := gcos.LoadConfig(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Fatal("a configured file that does not exist must be an error")
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c := gcos.DefaultConfig()
	c.Scan.BatchSize, c.Snapshot.RetentionCycles = 0, 0
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "scan.batch_size") || !strings.Contains(err.Error(), "snapshot.retention_cycles") {
		t.Fatalf("error = %v, want both keys", err)
	}
}

func TestVerdictPolicyFromFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc := strings.Replace(string(gcos.DefaultVerdictPolicyJSON()), `"version": 1`, `"version": 7`, 1)
	if err := os.WriteFile(filepath.Join(dir, "policy.json"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gcos.json")
	if err := os.WriteFile(cfg, []byte(`{"verdict_policy":{"path":"policy.json"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := gcos.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.VerdictPolicy.Load()
	if err != nil || p.Version != 7 {
		t.Fatalf("policy = %+v, %v; want version 7 from the file next to the config", p.Version, err)
	}
}

func TestListenLoopbackForInsecure(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"127.0.0.1:8080", "localhost:0", "[::1]:9000", "127.0.0.2:80"} {
		c := gcos.DefaultConfig()
		c.HTTP.Listen, c.HTTP.InsecureNoAuth = listen, true
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", listen, err)
		}
	}
}

func TestTTLFor(t *testing.T) {
	t.Parallel()
	ttl := gcos.DefaultConfig().TTL
	tests := []struct {
		risk string
		want time.Duration
	}{
		{"write_high", 24 * time.Hour},
		{"write_medium", 72 * time.Hour},
		{"read_descriptive", 168 * time.Hour},
		{"unknown", time.Hour},
		{"", time.Hour},
		{"brand_new_class", 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := ttl.TTLFor(tt.risk); got != tt.want {
			t.Errorf("TTLFor(%q) = %s, want %s", tt.risk, got, tt.want)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	c := gcos.DefaultConfig()
	c.HTTP.ReaderTokens = []string{"from-file"}
	env := map[string]string{"GCOS_READER_TOKEN": " r1, ,r2 ", "GCOS_OPERATOR_TOKEN": "op1"}
	c.ApplyEnv(func(k string) string { return env[k] })
	if diff := cmp.Diff([]string{"from-file", "r1", "r2"}, c.HTTP.ReaderTokens); diff != "" {
		t.Errorf("reader tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"op1"}, c.HTTP.OperatorTokens); diff != "" {
		t.Errorf("operator tokens (-want +got):\n%s", diff)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestKindFor(t *testing.T) {
	t.Parallel()
	in := gcos.DefaultConfig().Intake
	tests := []struct {
		entityType, action string
		want               gcos.ChangeKind
		ok                 bool
	}{
		{"governance_ruleset", "activate", "ruleset_changed", true},
		{"governance_ruleset", "propose", "", false},
		{"governance_snapshot", "capture", "", false}, // our own echo
		{"governance_intake", "batch", "", false},
		{"collection", "count_changed", "count_changed", true},
		{"collection", "update", "collection_changed", true},
		{"collection", "retire", "collection_changed", true},
		{"route", "retire", "object_retired", true},
		{"route", "SUPERSEDE", "object_retired", true},
		{"route", "merge", "object_retired", true},
		{"route", "source_changed", "source_changed", true},
		{"route", "migrate", "source_changed", true},
		{"route", "owner_assigned", "authority_changed", true},
		{"route", "approval_granted", "authority_changed", true},
		{"route", "exception_expired", "authority_changed", true},
		{"pivot", "create", "axis_introduced", true},
		{"axis", "update", "axis_introduced", true},
		{"law", "law_amended", "policy_changed", true},
		{"measurement", "measurement_enabled", "policy_changed", true},
		{"route", "register", "object_registered", true},
		{"route", "update", "object_registered", true},
		{"law_jurisdiction", "update", "policy_changed", true},
		{"ownership", "owner_changed", "authority_changed", true},
		{"exception", "exception_changed", "authority_changed", true},
		{"source", "source_changed", "source_changed", true},
		{"route", "archive", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		got, ok := in.KindFor(tt.entityType, tt.action)
		if got != tt.want || ok != tt.ok {
			t.Errorf("KindFor(%q, %q) = %q, %v; want %q, %v", tt.entityType, tt.action, got, ok, tt.want, tt.ok)
		}
	}
	if !in.Trusted("birth-api") || in.Trusted("") {
		t.Error("Trusted: by default every named source system is trusted and an empty one never")
	}
	in.TrustedSources = []string{"birth-*", "registry-sync"}
	if !in.Trusted("birth-api") || !in.Trusted("registry-sync") || in.Trusted("import-2024") {
		t.Error("Trusted: a narrowed list must trust only matching source systems")
	}
}

func TestValidateEventsAndPrincipals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		set   func(*gcos.Config)
		field string
	}{
		{"rule without a pattern", func(c *gcos.Config) { c.Events.Rules = []gcos.EventRule{{Cooldown: gcos.Duration(time.Second)}} }, "events.rules[0].types"},
		{"ceiling without a window", func(c *gcos.Config) { c.Events.Rules = []gcos.EventRule{{Types: "governance.*", Ceiling: 5}} }, "events.rules[0].window"},
		{"negative ceiling", func(c *gcos.Config) { c.Events.Rules = []gcos.EventRule{{Types: "governance.*", Ceiling: -1}} }, "events.rules[0].ceiling"},
		{"negative cooldown", func(c *gcos.Config) {
			c.Events.Rules = []gcos.EventRule{{Types: "governance.*", Cooldown: gcos.Duration(-time.Second)}}
		}, "events.rules[0].cooldown"},
		{"unknown severity", func(c *gcos.Config) { c.Events.Escalation.Severities = []string{"fatal"} }, "events.escalation.severities[0]"},
		{"empty council pattern", func(c *gcos.Config) { c.Events.CouncilTypes = []string{""} }, "events.council_types[0]"},
		{"principal without a name", func(c *gcos.Config) { c.Principals = []gcos.Principal{{Roles: []string{"reader"}}} }, "principals[0].name"},
		{"principal twice", func(c *gcos.Config) { c.Principals = []gcos.Principal{{Name: "a"}, {Name: "a"}} }, "principals[1].name"},
		{"unknown role", func(c *gcos.Config) { c.Principals = []gcos.Principal{{Name: "a", Roles: []string{"root"}}} }, "principals[0].roles[0]"},
		{"token without a role", func(c *gcos.Config) { c.Principals = []gcos.Principal{{Name: "a", Tokens: []string{"t-1"}}} }, "principals[0].roles"},
		{"empty principal token", func(c *gcos.Config) {
			c.Principals = []gcos.Principal{{Name: "a", Roles: []string{"reader"}, Tokens: []string{" t "}}}
		}, "principals[0].tokens[0]"},
		{"one token, two principals", func(c *gcos.Config) {
			c.Principals = []gcos.Principal{{Name: "a", Roles: []string{"reader"}, Tokens: []string{"t-1"}},
				{Name: "b", Roles: []string{"operator"}, Tokens: []string{"t-1"}}}
		}, "principals[1].tokens[0]: the same token is configured at principals[0].tokens[0]"},
		{"a principal's token also plain", func(c *gcos.Config) {
			c.Principals = []gcos.Principal{{Name: "a", Roles: []string{"reader"}, Tokens: []string{"t-1"}}}
			c.HTTP.OperatorTokens = []string{"t-1"}
		}, "http.operator_tokens[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := gcos.DefaultConfig()
			tc.set(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want a problem with %s", err, tc.field)
			}
		})
	}
	if err := gcos.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// TestIntakePages: a page read ahead holds intake.catch_up_page_size rows, never fewer than a poll's page.
func TestIntakePages(t *testing.T) {
	for _, tc := range []struct{ page, catchUp, wantPage, wantCatchUp int }{
		{25_000, 100_000, 25_000, 100_000},
		{25_000, 0, 25_000, 25_000},
		{0, 0, 10_000, 10_000},
		{0, 50_000, 10_000, 50_000},
		{500, 100, 500, 500},
	} {
		page, catchUp := gcos.IntakeConfig{PageSize: tc.page, CatchUpPageSize: tc.catchUp}.Pages()
		if page != tc.wantPage || catchUp != tc.wantCatchUp {
			t.Errorf("page_size %d, catch_up_page_size %d: pages %d and %d, want %d and %d", tc.page, tc.catchUp, page,
				catchUp, tc.wantPage, tc.wantCatchUp)
		}
	}
}
