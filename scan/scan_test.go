package scan_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/scan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func seeded(t *testing.T) (*postgres.Store, context.Context) {
	t.Helper()
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 5, Config: func(cfg *gcos.Config) {
		cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.StormFraction = 1
	}})
	return w.Store, w.Ctx
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
	s := &scan.Scheduler{Stage: scan.New(store, scan.WithLedger(gate.New(store, nil).Invariant)), Config: store.Config().Scan}
	keys := dirtyKeys(t, store, ctx, 12)
	wait.Pass(ctx, 30*time.Millisecond) // past the coalesce window
	p, err := s.Once(ctx, postgres.ModeEvent)
	if err != nil || p.Scanned != len(keys) || p.Remaining != 0 {
		t.Fatalf("event pass: %+v %v, want %d scanned and nothing left", p, err, len(keys))
	}
	// Every row a tick wrote records when its count was read: inside the tick, after its start (scan_time). A
	// pending mark no older than that instant is settled by the row (postgres.ApplyPendingMarks).
	var written, counted int
	if err := store.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE counted_at >= scan_time AND counted_at <= now())
		FROM governance_candidate_state WHERE group_key = ANY($1)`, keys).Scan(&written, &counted); err != nil {
		t.Fatal(err)
	}
	if written != len(keys) || counted != written {
		t.Fatalf("%d of %d rows the event pass wrote record when they were counted", counted, written)
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
	// The run ledger records how long each run took: a tick's run opens and closes in one transaction, so its end
	// is the clock's, not the transaction's start.
	var runs, timeless int
	if err := store.Pool().QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE finished_at <= started_at)
		FROM candidate_scan_run WHERE status = 'succeeded'`).Scan(&runs, &timeless); err != nil {
		t.Fatal(err)
	}
	if runs < 4 || timeless != 0 {
		t.Errorf("%d succeeded runs, %d of them with no duration; want every one timed", runs, timeless)
	}
}

// TestRunWakesOnDirtyMarks: the running scheduler re-evaluates a freshly dirtied group without being asked,
// woken by LISTEN/NOTIFY (polling is the fallback), and stops cleanly.
func TestRunWakesOnDirtyMarks(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	s := &scan.Scheduler{Stage: scan.New(store), Config: store.Config().Scan, Modes: []string{postgres.ModeEvent}}
	go func() { done <- s.Run(runCtx) }()
	keys := dirtyKeys(t, store, ctx, 3)
	var n int64
	var ticks int
	if !wait.Until(10*time.Second, func() bool {
		var err error
		if n, err = gcostest.DirtyGroups(ctx, store.Pool()); err != nil {
			t.Fatal(err)
		}
		if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM queue_heartbeat WHERE executor_name = 'gcos.scan.event'`).Scan(&ticks); err != nil {
			t.Fatal(err)
		}
		return n == 0 && ticks == 1
	}) {
		t.Fatalf("after 10 s: %d of %d groups still dirty, %d heartbeat rows", n, len(keys), ticks)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestFullAuditProvesTheCoverInTurn: each full audit proves one slice of the rotating cover (plus the collections
// scanned since the previous proof) against a from-scratch evaluation, and records it on its run. A coverage outcome
// forged behind GCOS's back in a collection outside the next audits' slices is named at once by the whole
// verification (gcos verify), by no audit that does not cover it, and by the audit whose slice covers it, under the
// collection's name; once repaired, only a clean proof of that slice closes the finding.
func TestFullAuditProvesTheCoverInTurn(t *testing.T) {
	t.Parallel()
	seededStore, ctx := seeded(t)
	cfg := seededStore.Config()
	cfg.Scan.VerifySlices = 4
	cfg.Scan.VerifyBatchObjects = 5 // the object rows are proven in batches
	store := postgres.New(seededStore.Pool(), cfg, nil)
	s := &scan.Scheduler{Stage: scan.New(store), Config: cfg.Scan}
	pool := store.Pool()
	type proof struct {
		slice       int
		collections []string
	}
	audit := func() (scan.Pass, proof) {
		t.Helper()
		p, err := s.Once(ctx, "full")
		if err != nil || p.Verify == nil {
			t.Fatalf("full audit: %+v %v", p.Verify, err)
		}
		var pr proof
		if err := pool.QueryRow(ctx, `SELECT verify_slice, verify_collections FROM candidate_scan_run WHERE run_id = $1`,
			p.RunID).Scan(&pr.slice, &pr.collections); err != nil {
			t.Fatalf("the audit recorded no proof: %v", err)
		}
		return p, pr
	}
	open := func(subject string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`,
			gcos.CoalesceKey(gcos.IssueVerifyMismatch, subject)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var collections int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT collection_name) FROM birth_registry`).Scan(&collections); err != nil {
		t.Fatal(err)
	}
	// Before any proof, everything scanned since the backfill is proven: the whole estate.
	p, first := audit()
	if !p.Verify.Clean() || first.slice != 0 || len(first.collections) < collections {
		t.Fatalf("first audit: slice %d, %d collections of %d, mismatches %v", first.slice, len(first.collections), collections, p.Verify.Mismatches)
	}
	// Forge an orphan group's coverage in a collection outside the next audit's slice (1).
	var key, coll string
	if err := pool.QueryRow(ctx, `SELECT v.group_key, v.source_registry FROM v_candidate_effective v
		WHERE v.coverage_outcome = 'orphan' ORDER BY v.group_key`).Scan(&key, &coll); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT v.group_key, v.source_registry FROM v_candidate_effective v
		WHERE v.coverage_outcome = 'orphan' ORDER BY v.group_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, c string
		if err := rows.Scan(&k, &c); err != nil {
			t.Fatal(err)
		}
		if gcos.CoverSlice(c, 4) != 1 {
			key, coll = k, c
			break
		}
	}
	rows.Close()
	if gcos.CoverSlice(coll, 4) == 1 {
		t.Fatal("every orphan group is in slice 1")
	}
	if _, err := pool.Exec(ctx, `UPDATE governance_candidate_coverage SET outcome = 'covered', owner_ref = 'forged' WHERE candidate_ref = $1`, key); err != nil {
		t.Fatal(err)
	}
	whole, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(whole.Mismatches, func(m oracle.Mismatch) bool { return m.Key == key && m.Collection == coll }) {
		t.Fatalf("gcos verify does not name group %s: %v", key, whole.Mismatches)
	}
	// The first audit proved the estate in batches, and together they proved what the whole verification does.
	if v := p.Verify; v.Batches < 2 || v.Groups != whole.Groups || v.Objects != whole.Objects || v.Births != whole.Births {
		t.Fatalf("first audit's proof: %d batches, %d groups, %d object rows, %d births; the whole: %d groups, %d object rows, %d births",
			v.Batches, v.Groups, v.Objects, v.Births, whole.Groups, whole.Objects, whole.Births)
	}
	// The next audits prove slices 1, 2, 3 and 0 in turn; only the one covering the forged collection names it.
	target, proven := gcos.CoverSlice(coll, 4), false
	for want := 1; want <= 4; want++ {
		p, pr := audit()
		if pr.slice != want%4 {
			t.Fatalf("audit proved slice %d, want %d", pr.slice, want%4)
		}
		covers := slices.Contains(pr.collections, coll)
		if covers != (pr.slice == target) {
			t.Fatalf("slice %d (forged collection %s in slice %d) proved %v", pr.slice, coll, target, pr.collections)
		}
		if named := slices.ContainsFunc(p.Verify.Mismatches, func(m oracle.Mismatch) bool { return m.Key == key }); named != covers {
			t.Fatalf("slice %d: names the forged group %v, covers it %v: %v", pr.slice, named, covers, p.Verify.Mismatches)
		}
		proven = proven || covers
		if (open(coll) == 1) != proven {
			t.Fatalf("after slice %d: verify_mismatch on %s open %d times", pr.slice, coll, open(coll))
		}
		for _, c := range pr.collections {
			if gcos.CoverSlice(c, 4) != pr.slice {
				t.Fatalf("slice %d proved %s, of slice %d, though nothing was scanned", pr.slice, c, gcos.CoverSlice(c, 4))
			}
		}
	}
	// A turn of the cover is complete: the status says since when every slice has been proven.
	sum, err := store.Summary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := sum.Cover; c == nil || c.Slices != 4 || c.Slice != 0 || c.Proven != 4 || c.WholeSince == nil {
		t.Fatalf("status of the cover after a turn: %+v", sum.Cover)
	}
	var evidence string
	if err := pool.QueryRow(ctx, `SELECT evidence_snapshot::text FROM system_issues WHERE coalesce_key = $1`,
		gcos.CoalesceKey(gcos.IssueVerifyMismatch, coll)).Scan(&evidence); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(evidence, key) {
		t.Fatalf("the finding does not name group %s: %s", key, evidence)
	}
	// Repaired: the finding stays open through the other slices' clean proofs, and closes with its own.
	if _, err := pool.Exec(ctx, `UPDATE governance_candidate_coverage SET outcome = 'orphan', owner_ref = NULL WHERE candidate_ref = $1`, key); err != nil {
		t.Fatal(err)
	}
	for {
		p, pr := audit()
		if !p.Verify.Clean() {
			t.Fatalf("slice %d after the repair: %v", pr.slice, p.Verify.Mismatches)
		}
		if pr.slice == target {
			if open(coll) != 0 {
				t.Fatal("a clean proof of the slice left verify_mismatch open")
			}
			break
		}
		if open(coll) != 1 {
			t.Fatalf("slice %d's clean proof closed the finding on %s (slice %d)", pr.slice, coll, target)
		}
	}
}
