package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"gcos"
	"gcos/gcostest"
	"gcos/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// runGate runs `gcos <args>` in-process and returns its exit status and output.
func runGate(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = newApp(&out, &errb).execute(context.Background(), args)
	return code, out.String(), errb.String()
}

// decodeBlock decodes a --json gate answer and fails unless it is a block whose reasons mention want.
func decodeBlock(t *testing.T, stdout, want string) {
	t.Helper()
	var res gcos.GateAnswer
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json output is not a gate decision: %v\n%s", err, stdout)
	}
	if res.Decision != gcos.GateBlock {
		t.Fatalf("decision %q, want block:\n%s", res.Decision, stdout)
	}
	if !strings.Contains(res.Reason, want) {
		t.Fatalf("reason %q does not mention %q", res.Reason, want)
	}
}

// TestGateCommandExitsThreeUnlessAllowed: `gcos gate` exits 0 only for allow; a block, an unreachable database or any
// other runtime error exits 3, a usage error exits 2, and --json prints a block decision whose reason is the error.
func TestGateCommandExitsThreeUnlessAllowed(t *testing.T) {
	t.Parallel()
	unreachable := "postgres://gcos@127.0.0.1:1/none?connect_timeout=5"

	t.Run("unreachable database", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runGate(t, "--database-url", unreachable, "gate", "--object", "commerce_orders:order-0000001", "--json")
		if code != exitBlock {
			t.Fatalf("exit %d, want %d:\n%s", code, exitBlock, stdout)
		}
		decodeBlock(t, stdout, "127.0.0.1")
	})
	t.Run("unreachable database, text output", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runGate(t, "--database-url", unreachable, "gate", "--object", "commerce_orders:order-0000001")
		if code != exitBlock || !strings.Contains(stdout, "BLOCK") {
			t.Fatalf("exit %d, want %d and a BLOCK decision:\n%s\n%s", code, exitBlock, stdout, stderr)
		}
	})
	t.Run("missing --object", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runGate(t, "--database-url", unreachable, "gate", "--json")
		if code != exitUsage {
			t.Fatalf("exit %d, want %d", code, exitUsage)
		}
		decodeBlock(t, stdout, "--object")
	})
	t.Run("unknown flag", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runGate(t, "--database-url", unreachable, "gate", "--json", "--object", "a:b", "--scope", "x")
		if code != exitUsage {
			t.Fatalf("exit %d, want %d", code, exitUsage)
		}
		decodeBlock(t, stdout, "--scope")
	})
	t.Run("bad configuration", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runGate(t, "--database-url", unreachable, "--config", t.TempDir()+"/missing.json", "gate", "--json", "--object", "a:b")
		if code != exitUsage {
			t.Fatalf("exit %d, want %d", code, exitUsage)
		}
		decodeBlock(t, stdout, "missing.json")
	})

	t.Run("allow exits 0, block exits 3", func(t *testing.T) {
		t.Parallel()
		w := gcostest.Ready(t, gcostest.Options{Births: 20000, Seed: 7})
		ctx, pool := w.Ctx, w.Pool
		object := func(having string) string {
			var ref string
			if err := pool.QueryRow(ctx, `
				SELECT min(b.collection_name || ':' || b.entity_code) FROM birth_registry b
				JOIN (SELECT object_class, source_registry, lifecycle_status FROM v_candidate_effective
				      WHERE object_class NOT IN (SELECT object_type FROM governance_candidate_object)
				      GROUP BY 1, 2, 3 HAVING `+having+` ORDER BY 1, 2, 3 LIMIT 1) x
				  ON (b.entity_type, b.collection_name, b.status) = (x.object_class, x.source_registry, x.lifecycle_status)
				WHERE b.parent_code IS NULL`).Scan(&ref); err != nil {
				t.Fatal(err)
			}
			return ref
		}
		dsn := pgtest.DSN(pool)
		allowed := object(`bool_and(clean AND effective_verdict = 'relevant' AND coverage_outcome = 'covered' AND risk_class = 'write_medium')`)
		if code, stdout, stderr := runGate(t, "--database-url", dsn, "gate", "--object", allowed); code != 0 {
			t.Fatalf("allowed object %s: exit %d, want 0:\n%s\n%s", allowed, code, stdout, stderr)
		}
		orphan := object(`bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'write_medium') AND bool_or(coverage_outcome = 'orphan')`)
		code, stdout, _ := runGate(t, "--database-url", dsn, "gate", "--object", orphan, "--json")
		if code != exitBlock {
			t.Fatalf("orphan object %s: exit %d, want %d:\n%s", orphan, code, exitBlock, stdout)
		}
		decodeBlock(t, stdout, "orphan")
		if code, stdout, _ := runGate(t, "--database-url", dsn, "gate", "--object", "no_such_collection:x"); code != exitBlock {
			t.Fatalf("unknown object: exit %d, want %d:\n%s", code, exitBlock, stdout)
		}
	})
}
