package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/daemon"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/httpapi"
	"gcos/postgres/pgtest"
)

// TestCommandsReachTheDaemon: `gcos up` publishes its API's URL and a run token (0600) in the data dir; a command
// run beside it with the same data dir and database asks the daemon (--verbose says so) and prints what the
// database path prints; a command for another database does not use it; once the daemon stops, the files are gone
// and commands read the database again.
func TestCommandsReachTheDaemon(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 5})
	dsn := pgtest.DSN(w.Pool)
	dir := t.TempDir()

	stop := startUp(t, "--database-url", dsn, "--data-dir", dir, "up", "--listen", "127.0.0.1:0")
	if st, err := os.Stat(filepath.Join(dir, "api.token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("api.token: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	run := func(args ...string) (int, string, string) {
		return runGate(t, append([]string{"--database-url", dsn, "--data-dir", dir, "--verbose"}, args...)...)
	}
	viaAPI := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := run(args...)
		if !strings.Contains(stderr, "through the daemon's API") {
			t.Errorf("gcos %v did not go through the daemon (exit %d):\n%s", args, code, stderr)
		}
		if code != 0 && code != exitBlock {
			t.Errorf("gcos %v: exit %d\n%s\n%s", args, code, stdout, stderr)
		}
		return stdout
	}
	// The same answers as the database path, decoded into the same types. The daemon keeps working meanwhile (a
	// heartbeat, a finding, an age), so what is compared is what does not move in a world without churn.
	direct := func(args ...string) string {
		t.Helper()
		_, stdout, _ := runGate(t, append([]string{"--database-url", dsn, "--data-dir", t.TempDir()}, args...)...)
		return stdout
	}
	decode := func(args []string, s string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatalf("gcos %v: %v\n%s", args, err, s)
		}
	}
	group := w.Strings(t, `SELECT min(group_key) FROM governance_candidate_state WHERE candidate_verdict = 'relevant'`)[0]
	object := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`)[0]

	args := []string{"invariant", "--json"}
	var invDB, invAPI httpapi.InvariantView
	decode(args, direct(args...), &invDB)
	decode(args, viaAPI(args...), &invAPI)
	if invAPI.AsOf == nil || len(invAPI.Ledgers) != len(invDB.Ledgers) || invAPI.Closes != invDB.Closes || len(invDB.Ledgers) == 0 ||
		invAPI.Ledgers[0].Scope != invDB.Ledgers[0].Scope || invAPI.Ledgers[0].Total != invDB.Ledgers[0].Total {
		t.Errorf("invariant through the API %+v, through the database %+v", invAPI, invDB)
	}
	args = []string{"findings", "--json"}
	var fDB, fAPI findingList
	decode(args, direct(args...), &fDB)
	decode(args, viaAPI(args...), &fAPI)
	ids := map[int64]bool{}
	for _, f := range fAPI.Findings {
		ids[f.ID] = true
	}
	for _, f := range fDB.Findings { // read first: every one of them is still listed
		if !ids[f.ID] {
			t.Errorf("finding %d listed by the database path is missing through the API", f.ID)
		}
	}
	args = []string{"ruleset", "list", "--json"}
	if got, want := viaAPI(args...), direct(args...); got != want {
		t.Errorf("gcos %v through the API:\n%s\nthrough the database:\n%s", args, got, want)
	}
	args = []string{"explain", "--group", group, "--json"}
	var exDB, exAPI gate.Explanation
	decode(args, direct(args...), &exDB)
	decode(args, viaAPI(args...), &exAPI)
	if exAPI.Subject != exDB.Subject || len(exAPI.Rows) != len(exDB.Rows) || len(exAPI.Rows) == 0 ||
		exAPI.Rows[0].Effective.Verdict != exDB.Rows[0].Effective.Verdict {
		t.Errorf("explain through the API %+v, through the database %+v", exAPI, exDB)
	}
	viaAPI("status")
	var ans gcos.GateAnswer
	if err := json.Unmarshal([]byte(viaAPI("gate", "--object", object, "--json")), &ans); err != nil || ans.Source == "" {
		t.Fatalf("gate through the daemon: %v %+v", err, ans)
	}
	if want := gate.New(w.Store, nil).Decide(w.Ctx, object, gcos.ActionWrite).Decision; ans.Decision != want {
		t.Errorf("gate through the daemon: %s, the database says %s", ans.Decision, want)
	}
	if out := viaAPI("gate", "--object", object, "--explain"); !strings.Contains(out, "statement:") {
		t.Errorf("gate --explain through the daemon printed no statement:\n%s", out)
	}
	// Bad input the API refuses is bad input here too: exit 2, nothing changed.
	if code, _, stderr := run("ruleset", "activate", "gov-rs-000000000000", "--approval", "A-1", "--by", "someone"); code != 1 && code != exitUsage ||
		!strings.Contains(stderr, "through the daemon's API") {
		t.Errorf("activate an unknown version through the daemon: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := run("explain", "--object", "nocolon"); code != exitUsage {
		t.Errorf("explain of a malformed object through the daemon: exit %d, want %d\n%s", code, exitUsage, stderr)
	}
	// Another database: not this daemon's.
	other := strings.Replace(dsn, "/"+w.Strings(t, `SELECT current_database()`)[0], "/postgres", 1)
	if _, _, stderr := runGate(t, "--database-url", other, "--data-dir", dir, "-v", "findings"); !strings.Contains(stderr, "not this command's database") {
		t.Errorf("a command for another database used the daemon:\n%s", stderr)
	}

	// A second `gcos up` on the same data dir, or on the daemon's port, exits 1 naming the running daemon and
	// changes nothing: no world generated, no snapshot, no ruleset written before it refused.
	running, _, err := daemon.Discover(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	const written = `SELECT (SELECT count(*) FROM evolution_snapshots) + (SELECT count(*) FROM birth_registry) + (SELECT count(*) FROM governance_ruleset)`
	before := w.Count(t, written)
	code, _, stderr := runGate(t, "--database-url", dsn, "--data-dir", dir, "up", "--demo", "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("pid %d", running.PID)) || !strings.Contains(stderr, running.URL) {
		t.Errorf("a second gcos up on the data dir: exit %d, want 1 naming pid %d and %s\n%s", code, running.PID, running.URL, stderr)
	}
	code, _, stderr = runGate(t, "--database-url", dsn, "--data-dir", t.TempDir(), "up", "--listen", strings.TrimPrefix(running.URL, "http://"))
	if code != 1 || !strings.Contains(stderr, "listen") {
		t.Errorf("a second gcos up on the daemon's port: exit %d, want 1\n%s", code, stderr)
	}
	if after := w.Count(t, written); after != before {
		t.Errorf("a refused gcos up wrote: %d births, snapshots and rulesets before, %d after", before, after)
	}

	if code, upErr := stop(); code != 0 {
		t.Fatalf("gcos up: exit %d\n%s", code, upErr)
	}
	for _, f := range []string{"api.json", "api.token"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s after the daemon stopped: %v", f, err)
		}
	}
	if code, _, stderr := run("findings"); code != 0 || !strings.Contains(stderr, "through the database") {
		t.Errorf("with the daemon stopped: exit %d\n%s", code, stderr)
	}
	// A run file a killed daemon left behind is not followed.
	if _, err := daemon.Publish(dir, daemon.Running{URL: "http://127.0.0.1:1", PID: 1 << 22, Database: "embedded"}, "t"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := daemon.Discover(context.Background(), dir); err != daemon.ErrNotRunning {
		t.Errorf("a dead daemon's run file: %v, want ErrNotRunning", err)
	}
}

// startUp runs `gcos args…` (an up) in the background until it publishes its API in the data dir, and returns what
// stops it and reports its exit status and stderr; the test's cleanup stops it too.
func startUp(t *testing.T, args ...string) (stop func() (int, string)) {
	t.Helper()
	dir := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--data-dir" {
			dir = args[i+1]
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var upErr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- newApp(&bytes.Buffer{}, &upErr).execute(ctx, args) }()
	code, stopped := 0, false
	stop = func() (int, string) {
		if !stopped {
			cancel()
			code, stopped = <-done, true
		}
		return code, upErr.String()
	}
	t.Cleanup(func() { stop() })
	published := wait.Until(2*time.Minute, func() bool {
		select {
		case c := <-done:
			code, stopped = c, true
			t.Fatalf("gcos up exited %d before publishing its API:\n%s", c, upErr.String())
		default:
		}
		_, err := os.Stat(filepath.Join(dir, "api.json"))
		return err == nil
	})
	if !published {
		t.Fatalf("gcos up published no api.json:\n%s", upErr.String())
	}
	return stop
}
