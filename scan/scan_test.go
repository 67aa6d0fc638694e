package scan_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/scan"
	"gcos/world"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func seeded(t *testing.T) (*postgres.Store, context.Context) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	if _, err := world.Generate(ctx, pool, world.Options{Births: 3000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	cfg := gcos.DefaultConfig()
	cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
	cfg.Scan.StormFraction = 1
	store := postgres.New(pool, cfg, nil)
	res, err := store.Backfill(ctx, postgres.BackfillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.ActivateRuleset(ctx, res.RulesetVersion, "APR-1", "approver"); err != nil {
		t.Fatal(err)
	}
	return store, ctx
}

func dirtyKeys(t *testing.T, store *postgres.Store, ctx context.Context, n int) []string {
	t.Helper()
	rows, err := store.Pool().Query(ctx, `SELECT group_key FROM governance_candidate_state ORDER BY group_key LIMIT $1`, n)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if _, err := store.MarkDirty(ctx, keys, "handoff:object_born"); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestOnceModes: each mode's single pass drains what it owns — event and incremental scan the dirty set, the full
// audit captures a snapshot, reconciles and proves the invariant.
func TestOnceModes(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	s := &scan.Scheduler{Store: store, Config: store.Config().Scan}
	keys := dirtyKeys(t, store, ctx, 12)
	time.Sleep(30 * time.Millisecond) // past the coalesce window
	p, err := s.Once(ctx, postgres.ModeEvent)
	if err != nil || p.Scanned != len(keys) || p.Remaining != 0 {
		t.Fatalf("event pass: %+v %v, want %d scanned and nothing left", p, err, len(keys))
	}
	dirtyKeys(t, store, ctx, 5)
	if p, err = s.Once(ctx, postgres.ModeIncremental); err != nil || p.Scanned != 5 {
		t.Fatalf("incremental pass: %+v %v", p, err)
	}
	p, err = s.Once(ctx, "full")
	if err != nil || p.Audit == nil || !p.Audit.Ledger.Closes {
		t.Fatalf("full audit: %+v %v", p, err)
	}
	if _, err := s.Once(ctx, "sideways"); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("unknown mode: %v", err)
	}
}

// TestRunWakesOnDirtyMarks: the running scheduler re-evaluates a freshly dirtied group without being asked,
// woken by LISTEN/NOTIFY (polling is the fallback), and stops cleanly.
func TestRunWakesOnDirtyMarks(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	s := &scan.Scheduler{Store: store, Config: store.Config().Scan, Modes: []string{postgres.ModeEvent}}
	go func() { done <- s.Run(runCtx) }()
	keys := dirtyKeys(t, store, ctx, 3)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := store.DirtySetSize(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ticks int
		if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM queue_heartbeat WHERE executor_name = 'gcos.scan.event'`).Scan(&ticks); err != nil {
			t.Fatal(err)
		}
		if n == 0 && ticks == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d of %d groups still dirty, %d heartbeat rows", n, len(keys), ticks)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestFullAuditVerifies: the full audit ends with the verification against a from-scratch evaluation. A state that
// equals it raises nothing; a verdict altered behind GCOS's back in a way the audit does not repair (a relevant
// group recorded as covered though no owner resolves) raises verify_mismatch naming the mismatch, and the next
// clean audit closes it.
func TestFullAuditVerifies(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	s := &scan.Scheduler{Store: store, Config: store.Config().Scan}
	p, err := s.Once(ctx, "full")
	if err != nil || p.Verify == nil || !p.Verify.Clean() {
		t.Fatalf("full audit of an untouched world: %+v %v", p.Verify, err)
	}
	open := func() int {
		var n int
		if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM system_issues WHERE issue_type = 'verify_mismatch' AND status = 'open'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if open() != 0 {
		t.Fatal("a clean verification raised verify_mismatch")
	}
	var key string
	if err := store.Pool().QueryRow(ctx, `UPDATE governance_candidate_coverage SET outcome = 'covered', owner_ref = 'forged'
		WHERE candidate_ref = (SELECT min(group_key) FROM v_candidate_effective WHERE coverage_outcome = 'orphan')
		RETURNING candidate_ref`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	p, err = s.Once(ctx, "full")
	if err != nil || p.Verify == nil || p.Verify.Clean() {
		t.Fatalf("full audit after forging a coverage outcome: %+v %v", p.Verify, err)
	}
	if open() != 1 {
		t.Fatalf("verify_mismatch open %d times, want once", open())
	}
	var evidence string
	if err := store.Pool().QueryRow(ctx, `SELECT evidence_snapshot::text FROM system_issues WHERE issue_type = 'verify_mismatch'`).Scan(&evidence); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(evidence, key) {
		t.Fatalf("the finding does not name group %s: %s", key, evidence)
	}
	if _, err := store.Pool().Exec(ctx, `UPDATE governance_candidate_coverage SET outcome = 'orphan', owner_ref = NULL WHERE candidate_ref = $1`, key); err != nil {
		t.Fatal(err)
	}
	if p, err = s.Once(ctx, "full"); err != nil || !p.Verify.Clean() || open() != 0 {
		t.Fatalf("a clean audit left verify_mismatch open: %+v %v", p.Verify, err)
	}
}
