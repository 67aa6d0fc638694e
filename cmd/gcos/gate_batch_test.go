package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/httpapi"
	"gcos/postgres/pgtest"
)

// runGateIn runs `gcos <args>` with stdin.
func runGateIn(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	a.stdin = strings.NewReader(stdin)
	code = a.execute(context.Background(), args)
	return code, out.String(), errb.String()
}

// batchOut decodes a --json batch answer.
func batchOut(t *testing.T, stdout string) gcos.GateBatchAnswer {
	t.Helper()
	var out gcos.GateBatchAnswer
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("--json output is not a batch answer: %v\n%s", err, stdout)
	}
	return out
}

// TestGateObjectsFrom: `gcos gate --objects-from` exits 0 only when every object is allowed, answers in the file's
// order from one instant, on the database and through a running server (--server), and blocks every object of a
// file it cannot decide.
func TestGateObjectsFrom(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 7})
	dsn := pgtest.DSN(w.Pool)
	objects := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE id % 31 = 0 ORDER BY id DESC LIMIT 40`)
	var allowed, blocked []string
	for _, o := range objects {
		if gate.New(w.Store, nil).Decide(w.Ctx, o, gcos.ActionWrite).Decision == gcos.GateAllow {
			allowed = append(allowed, o)
		} else {
			blocked = append(blocked, o)
		}
	}
	if len(allowed) < 2 || len(blocked) < 1 {
		t.Fatalf("%d allowed, %d blocked: the sample shows nothing", len(allowed), len(blocked))
	}
	mixed := fmt.Sprintf("# a change's objects\n%s\n\n%s write\n%s read\n%s\n", allowed[0], blocked[0], allowed[1], allowed[1])
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	allowedFile := write("allowed", allowed[0]+"\n"+allowed[1]+" write\n")
	mixedFile := write("mixed", mixed)

	h, err := httpapi.New(httpapi.Config{Store: w.Store, HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:0", ReaderTokens: []string{"cli-reader-token-0123"}},
		Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tokenFile := write("reader-token", "cli-reader-token-0123\n")
	down := httptest.NewServer(nil)
	down.Close()

	for _, path := range []struct {
		name string
		args []string
	}{
		{"database", []string{"--database-url", dsn}},
		{"server", []string{"--server", srv.URL, "--token-file", tokenFile}},
	} {
		t.Run(path.name, func(t *testing.T) {
			gate := func(stdin string, args ...string) (int, string, string) {
				return runGateIn(t, stdin, append(append([]string{"gate"}, args...), path.args...)...)
			}
			if code, stdout, stderr := gate("", "--objects-from", allowedFile); code != 0 || !strings.Contains(stdout, "ALLOW") {
				t.Fatalf("allowed objects: exit %d, want 0:\n%s\n%s", code, stdout, stderr)
			}
			code, stdout, _ := gate("", "--objects-from", mixedFile, "--json")
			out := batchOut(t, stdout)
			want := []gcos.GateCheck{{Object: allowed[0], Action: "write"}, {Object: blocked[0], Action: "write"}, {Object: allowed[1], Action: "read"}, {Object: allowed[1], Action: "write"}}
			if code != exitBlock || out.Decision != gcos.GateBlock || len(out.Decisions) != len(want) || out.Token == "" {
				t.Fatalf("mixed: exit %d:\n%s", code, stdout)
			}
			for i, d := range out.Decisions {
				if d.Object != want[i].Object || d.Action != want[i].Action {
					t.Fatalf("decision %d is for %s %s, line %d asked %s %s", i, d.Object, d.Action, i, want[i].Object, want[i].Action)
				}
			}
			if out.Decisions[1].Decision != gcos.GateBlock || out.Decisions[0].Decision != gcos.GateAllow {
				t.Fatalf("mixed: %s", stdout)
			}
			// stdin
			if code, stdout, _ := gate(allowed[0]+"\n", "--objects-from", "-", "--json"); code != 0 || batchOut(t, stdout).Allowed != 1 {
				t.Fatalf("stdin: exit %d:\n%s", code, stdout)
			}
			// A line that is not OBJECT [ACTION]: nothing is asked, every check blocks, exit 2 (invalid input).
			for _, bad := range []struct{ text, want string }{
				{allowed[0] + "\nnocolon\n", "line 2"},
				{allowed[0] + " delete\n", "line 1: action"},
				{allowed[0] + " write now\n", "line 1: 3 fields"},
				{"# nothing\n\n", "no objects"},
			} {
				code, stdout, _ := gate(bad.text, "--objects-from", "-", "--json")
				if code != exitUsage || !strings.Contains(stdout, bad.want) || batchOut(t, stdout).Decision != gcos.GateBlock {
					t.Errorf("%q: exit %d, want %d naming %q:\n%s", bad.text, code, exitUsage, bad.want, stdout)
				}
			}
			// Over the limit: every object blocked, the limit named, exit 2 (invalid input).
			var many strings.Builder
			for i := 0; i <= w.Store.Config().Gate.BatchMax; i++ {
				fmt.Fprintln(&many, allowed[i%len(allowed)])
			}
			code, stdout, _ = gate(many.String(), "--objects-from", "-", "--json")
			if out := batchOut(t, stdout); code != exitUsage || out.Allowed != 0 || out.Blocked != w.Store.Config().Gate.BatchMax+1 ||
				!strings.Contains(stdout, "more than the limit") {
				t.Errorf("over the limit: exit %d, %d allowed, %d blocked:\n%.300s", code, out.Allowed, out.Blocked, stdout)
			}
		})
	}

	t.Run("server down", func(t *testing.T) {
		code, stdout, _ := runGateIn(t, "", "--server", down.URL, "gate", "--objects-from", allowedFile, "--json")
		if out := batchOut(t, stdout); code != exitBlock || out.Blocked != 2 || out.Allowed != 0 || !strings.Contains(stdout, "fails closed") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
		code, stdout, _ = runGateIn(t, "", "--server", down.URL, "gate", "--object", allowed[0], "--json")
		if code != exitBlock {
			t.Fatalf("single, server down: exit %d:\n%s", code, stdout)
		}
		decodeBlock(t, stdout, "fails closed")
	})
	t.Run("server single", func(t *testing.T) {
		if code, stdout, stderr := runGateIn(t, "", "--server", srv.URL, "gate", "--object", allowed[0], "--token-file", tokenFile); code != 0 || !strings.Contains(stdout, "ALLOW") {
			t.Fatalf("exit %d:\n%s\n%s", code, stdout, stderr)
		}
		code, stdout, _ := runGateIn(t, "", "--server", srv.URL, "gate", "--object", blocked[0], "--token-file", tokenFile, "--json")
		if code != exitBlock {
			t.Fatalf("blocked object: exit %d:\n%s", code, stdout)
		}
		var a gcos.GateAnswer
		if err := json.Unmarshal([]byte(stdout), &a); err != nil || a.Decision != gcos.GateBlock || a.Reason == "" || a.Token == "" {
			t.Fatalf("blocked object: %v\n%s", err, stdout)
		}
		// A token the server refuses is a block.
		code, stdout, _ = runGateIn(t, "", "--server", srv.URL, "gate", "--object", allowed[0], "--token-file", write("token", "wrong-token\n"), "--json")
		if code != exitBlock {
			t.Fatalf("wrong token: exit %d:\n%s", code, stdout)
		}
		decodeBlock(t, stdout, "401")
	})
	t.Run("both --object and --objects-from", func(t *testing.T) {
		code, stdout, _ := runGateIn(t, "", "--database-url", dsn, "gate", "--object", allowed[0], "--objects-from", allowedFile, "--json")
		if code != exitUsage || !strings.Contains(stdout, "not both") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
	})
}
