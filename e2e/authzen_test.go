package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gcos"
	"gcos/gcostest/wait"
)

// The OpenID AuthZEN working group's interop runner (a client GCOS did not write) against a running `gcos up`:
// every case's expected value is the gate's own consistency=full answer, every batch's the standard's semantics
// applied to those answers, written here by hand rather than by the code under test.

// interopRunner finds the runner: GCOS_AUTHZEN_INTEROP, else the workplace's shared copy beside the repository or at
// /work/shared. Outside CI a machine without it (or without node) skips, saying so; in CI it fails.
func interopRunner(t *testing.T) (node, dir string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("the AuthZEN interop test needs %s (.ci/run installs nodejs; the runner is ../shared/authzen-interop)", what)
		}
		t.Skipf("skipped: no %s on this machine", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	candidates := []string{os.Getenv("GCOS_AUTHZEN_INTEROP"), filepath.Join("..", "..", "shared", "authzen-interop"), "/work/shared/authzen-interop"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(c, "runner.js")); err == nil {
			// shared/ is read-only: the runner reads its decisions file from beside itself, so run a copy.
			dir = t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(c)); err != nil {
				t.Fatal(err)
			}
			return node, dir
		}
	}
	missing("AuthZEN interop runner (GCOS_AUTHZEN_INTEROP)")
	return "", ""
}

type interopCase struct {
	Request  map[string]any `json:"request"`
	Expected any            `json:"expected"`
}

type interopDecisions struct {
	Evaluation  []interopCase `json:"evaluation"`
	Evaluations []interopCase `json:"evaluations"`
}

var runnerLine = regexp.MustCompile(`(?m)^(?:\x1b\[[0-9;]*m)?(PASS|FAIL|ERROR)\b`)

// runInterop writes the decisions file and runs the runner against api; it returns the count of each verdict and
// the output.
func runInterop(ctx context.Context, t *testing.T, node, dir, api, token string, d interopDecisions) (map[string]int, string) {
	t.Helper()
	doc, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "decisions-gcos.json"), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "runner.js", api, "gcos", "console")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AUTHZEN_PDP_API_KEY=Bearer "+token, "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node runner.js: %v\n%s", err, out)
	}
	counts := map[string]int{}
	for _, m := range runnerLine.FindAllStringSubmatch(string(out), -1) {
		counts[m[1]]++
	}
	return counts, string(out)
}

func TestAuthZENInteropRunner(t *testing.T) {
	node, runnerDir := interopRunner(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := buildGCOS(ctx, t, dir)
	db := newPrivateDB(ctx, t, filepath.Join(dir, "pg"), "authzen")
	const token = "authzen-reader-token-0123456789"
	conf := daemonTestConfig()
	conf.HTTP.ReaderTokens = []string{token}
	db.seedWorld(ctx, t, conf, 3000, 23)
	config := writeConfig(t, dir, conf)

	logPath := filepath.Join(dir, "gcos.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "up", "--database-url", db.dsn, "--config", config, "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("gcos up log (tail):\n%s", tailLines(string(b), 40))
		}
	})
	wait.For(t, 90*time.Second, "gcos up starts serving", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), `msg="gcos up"`)
	})
	api := listenURL(t, logPath)

	// The gate's own answers, at full consistency, are the expected values.
	gateSays := func(object, action string) bool {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", api+"/v1/gate?consistency=full&object="+url.QueryEscape(object)+"&action="+action, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a gcos.GateAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 {
			t.Fatalf("gate %s %s: %d %v", object, action, resp.StatusCode, err)
		}
		return a.Allowed()
	}
	rows, err := db.pool.Query(ctx, `SELECT collection_name, entity_code FROM birth_registry WHERE id % 61 = 0 ORDER BY id LIMIT 44`)
	if err != nil {
		t.Fatal(err)
	}
	type object struct{ coll, code string }
	var objects []object
	for rows.Next() {
		var o object
		if err := rows.Scan(&o.coll, &o.code); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	objects = append(objects, object{"no_such_collection", "nothing"}, object{objects[0].coll, "no-such-code"})
	resource := func(o object) map[string]any { return map[string]any{"type": o.coll, "id": o.code} }
	subject := map[string]any{"type": "pipeline", "id": "deploy-42", "properties": map[string]any{"team": "payments"}}

	var d interopDecisions
	var allow, deny []int // objects by their write decision
	writeAllowed := make([]bool, len(objects))
	for i, o := range objects {
		action := []string{gcos.ActionWrite, gcos.ActionRead}[i%2]
		req := map[string]any{"subject": subject, "action": map[string]any{"name": action}, "resource": resource(o),
			"context": map[string]any{"pipeline_run": i}}
		if i%5 == 0 {
			req["options"] = map[string]any{"consistency": "full"}
		}
		d.Evaluation = append(d.Evaluation, interopCase{Request: req, Expected: gateSays(o.coll+":"+o.code, action)})
		writeAllowed[i] = gateSays(o.coll+":"+o.code, gcos.ActionWrite)
		if writeAllowed[i] {
			allow = append(allow, i)
		} else {
			deny = append(deny, i)
		}
	}
	// An action the gate does not answer is a deny.
	d.Evaluation = append(d.Evaluation, interopCase{Request: map[string]any{"subject": subject, "action": map[string]any{"name": "can_delete"},
		"resource": resource(objects[allow[0]])}, Expected: false})
	if len(allow) < 3 || len(deny) < 3 {
		t.Fatalf("%d objects allowed and %d denied for write: the sample proves nothing", len(allow), len(deny))
	}

	// Batches: each item writes to an object; the expected answers are written out as the standard gives them.
	plain := func(b bool) map[string]any { return map[string]any{"decision": b} }
	batch := func(semantic string, idx []int, expected []any) interopCase {
		var items []any
		for _, i := range idx {
			items = append(items, map[string]any{"resource": resource(objects[i])})
		}
		req := map[string]any{"subject": subject, "action": map[string]any{"name": "write"}, "evaluations": items}
		if semantic != "" {
			req["options"] = map[string]any{"evaluations_semantic": semantic}
		}
		return interopCase{Request: req, Expected: expected}
	}
	// The runner compares JSON.stringify of both, so member order counts: the standard's example order, as written.
	stopDeny := json.RawMessage(`{"decision": false, "context": {"code": "200", "reason": "deny_on_first_deny"}}`)
	a0, a1, a2, n0, n1 := allow[0], allow[1], allow[2], deny[0], deny[1]
	unknown := len(objects) - 2 // no_such_collection:nothing, a deny
	d.Evaluations = []interopCase{
		batch("", []int{a0, n0, a1, unknown}, []any{plain(true), plain(false), plain(true), plain(false)}),
		batch("execute_all", []int{n0, a0, n1, a1, a2}, []any{plain(false), plain(true), plain(false), plain(true), plain(true)}),
		batch("deny_on_first_deny", []int{a0, a1, n0, a2}, []any{plain(true), plain(true), stopDeny}),
		batch("deny_on_first_deny", []int{a0, a1, a2}, []any{plain(true), plain(true), plain(true)}),
		batch("deny_on_first_deny", []int{unknown, a0}, []any{stopDeny}),
		batch("permit_on_first_permit", []int{n0, n1, a0, a1}, []any{plain(false), plain(false), plain(true)}),
		batch("permit_on_first_permit", []int{n0, unknown, n1}, []any{plain(false), plain(false), plain(false)}),
	}
	// Per-item overrides of the defaults: a read of one object, a write of another.
	d.Evaluations = append(d.Evaluations, interopCase{Request: map[string]any{"subject": subject, "action": map[string]any{"name": "write"},
		"evaluations": []any{
			map[string]any{"resource": resource(objects[1]), "action": map[string]any{"name": "read"}},
			map[string]any{"resource": resource(objects[a0]), "subject": map[string]any{"type": "user", "id": "alice"}},
		}}, Expected: []any{plain(d.Evaluation[1].Expected.(bool)), plain(true)}})

	counts, out := runInterop(ctx, t, node, runnerDir, api, token, d)
	total := len(d.Evaluation) + len(d.Evaluations)
	if counts["PASS"] != total || counts["FAIL"]+counts["ERROR"] > 0 {
		t.Fatalf("the runner: %v of %d cases\n%s", counts, total, out)
	}
	t.Logf("the AuthZEN interop runner: %d single and %d batch cases, all PASS", len(d.Evaluation), len(d.Evaluations))

	// The runner can fail: a deliberately wrong expectation, single and batch, is each one FAIL.
	d.Evaluation[allow[0]].Expected = !d.Evaluation[allow[0]].Expected.(bool)
	d.Evaluations[1].Expected = []any{plain(true)}
	counts, out = runInterop(ctx, t, node, runnerDir, api, token, d)
	if counts["FAIL"] != 2 || counts["PASS"] != total-2 {
		t.Fatalf("with two wrong expectations the runner says %v\n%s", counts, out)
	}
	t.Logf("with two wrong expectations: %v", fmt.Sprint(counts))
}
