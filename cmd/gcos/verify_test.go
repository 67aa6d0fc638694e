package main

import (
	"encoding/json"
	"strings"
	"testing"

	"gcos/gcostest"
	"gcos/oracle"
	"gcos/postgres/pgtest"
)

// TestVerifyCommand: `gcos verify` exits 0 on a state that equals the reference and 1, naming the group and the
// field, once a verdict is altered behind GCOS's back; --json prints the report.
func TestVerifyCommand(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 3})
	ctx, pool := w.Ctx, w.Pool
	dsn := pgtest.DSN(pool)
	if code, stdout, stderr := runGate(t, "--database-url", dsn, "verify", "--sample", "300"); code != 0 {
		t.Fatalf("verify of a freshly backfilled world: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// A group marked dirty (its scan pending) differs in flight: listed apart, exit 0; --strict counts it.
	var moving string
	if err := pool.QueryRow(ctx, `UPDATE governance_candidate_state SET candidate_verdict = 'not_relevant', dirty = true,
			dirty_reason = 'axis', dirtied_at = now()
		WHERE group_key = (SELECT max(group_key) FROM governance_candidate_state WHERE candidate_verdict = 'relevant')
		RETURNING group_key`).Scan(&moving); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runGate(t, "--database-url", dsn, "verify", "--sample", "300", "--settle-timeout", "5s")
	if code != 0 || !strings.Contains(stdout, "in flight") || !strings.Contains(stdout, "group "+moving) ||
		!strings.Contains(stdout, "everything settled equals the reference") {
		t.Fatalf("verify with group %s dirty: exit %d, want 0 listing it in flight\n%s\n%s", moving, code, stdout, stderr)
	}
	if code, stdout, stderr := runGate(t, "--database-url", dsn, "verify", "--sample", "300", "--strict"); code != 1 {
		t.Fatalf("verify --strict with group %s dirty: exit %d, want 1\n%s\n%s", moving, code, stdout, stderr)
	}

	var key string
	if err := pool.QueryRow(ctx, `UPDATE governance_candidate_state SET candidate_verdict = 'not_relevant'
		WHERE group_key = (SELECT min(group_key) FROM governance_candidate_state WHERE candidate_verdict = 'relevant')
		RETURNING group_key`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runGate(t, "--database-url", dsn, "verify", "--sample", "300", "--settle-timeout", "5s")
	if code != 1 || !strings.Contains(stdout, "group "+key) || !strings.Contains(stdout, "verdict: incremental not_relevant, reference relevant") {
		t.Fatalf("verify after altering group %s: exit %d, want 1 naming it\n%s\n%s", key, code, stdout, stderr)
	}
	code, stdout, _ = runGate(t, "--database-url", dsn, "verify", "--sample", "0", "--json", "--settle-timeout", "5s")
	var rep oracle.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 1 || rep.Settled() || len(rep.InFlight) == 0 {
		t.Fatalf("verify --json: exit %d, report %+v (%v)\n%s", code, rep, err, stdout)
	}
}
