package scan_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos/gate"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/scan"
)

// TestAMovedBirthIsNeverCountedTwice: a retirement moves a birth from its active base to its retired one. Both
// groups of each scope are dirty, and another transaction holds the groups the birth left (a tick scanning them,
// or any holder of their rows). No tick may write the group the birth joined meanwhile: at its commit the ledger
// would count that birth in both groups. The ticks leave it for later, every ledger closes while the rows are
// held, and once they are free the ticks write both groups of each scope together.
func TestAMovedBirthIsNeverCountedTwice(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	pool := store.Pool()
	stage := scan.New(store)
	worker := &intake.Worker{Stage: intake.New(store), Config: store.Config().Intake, DisableMonitor: true}

	var class, coll, code string
	if err := pool.QueryRow(ctx, `SELECT b.entity_type, b.collection_name, b.entity_code FROM birth_registry b
		WHERE b.status = 'active' AND b.parent_code IS NULL
		  AND NOT EXISTS (SELECT 1 FROM birth_registry c WHERE c.collection_name = b.collection_name AND c.parent_code = b.entity_code)
		ORDER BY b.id LIMIT 1`).Scan(&class, &coll, &code); err != nil {
		t.Fatal(err)
	}
	groupsOf := func(status string) []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT group_key FROM governance_group
			WHERE object_class = $1 AND source_registry = $2 AND lifecycle_status = $3 AND retired_at IS NULL ORDER BY 1`, class, coll, status)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	// counted is the count the ledger holds for each group (its candidate row's, else its registry row's).
	counted := func(keys []string) map[int64]int {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT coalesce(c.member_count, g.member_count) FROM governance_group g
			LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)
			WHERE g.group_key = ANY($1)`, keys)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]int{}
		for _, n := range ns {
			out[n]++
		}
		return out
	}
	left := groupsOf("active")
	var before int64
	for n := range counted(left) {
		before = n
	}
	if len(left) == 0 || len(counted(left)) != 1 {
		t.Fatalf("the active groups of %s/%s: %v, counted %v; want one count in every scope", class, coll, left, counted(left))
	}
	closes := func(when string) { t.Helper(); ledgerCloses(t, store, when) }
	closes("at rest")

	// The source retires the birth and reports it; the intake hands the change off.
	if _, err := pool.Exec(ctx, `UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ($1, $2, 'retire', 'ops:test')`,
		class, code); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Once(ctx); err != nil {
		t.Fatal(err)
	}
	joined := groupsOf("retired")
	joinedBefore := counted(joined)
	if len(joined) == 0 || len(joinedBefore) != 1 {
		t.Fatalf("the groups of the retired base: %v, counted %v; want one count in every scope", joined, joinedBefore)
	}
	var had int64
	for n := range joinedBefore {
		had = n
	}

	for _, hold := range []struct{ name, sql string }{
		{"their candidate rows", `SELECT 1 FROM governance_candidate_state WHERE group_key = ANY($1) FOR UPDATE`},
		{"their group rows", `SELECT 1 FROM governance_group WHERE group_key = ANY($1) FOR NO KEY UPDATE`},
	} {
		t.Run("another transaction holds "+hold.name, func(t *testing.T) {
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback(ctx) }()
			if _, err := holder.Exec(ctx, hold.sql, left); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				res, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeEvent})
				if err != nil {
					t.Fatal(err)
				}
				closes("a tick while the groups the birth left are held")
				if got := counted(joined); len(got) != 1 || got[had] != len(joined) {
					t.Fatalf("tick %d (%+v) wrote the groups the birth joined: counted %v, before %v", i, res, got, joinedBefore)
				}
			}
		})
	}

	// Free: the ticks write both groups of each scope, and the state is what a from-scratch evaluation gives.
	for range 10 {
		res, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeEvent})
		if err != nil {
			t.Fatal(err)
		}
		closes("a tick once the rows are free")
		if res.Claimed == 0 {
			break
		}
	}
	if got := counted(left); len(got) != 1 || got[before-1] != len(left) {
		t.Errorf("the groups the birth left count %v, want %d in each", got, before-1)
	}
	if got := counted(joined); len(got) != 1 || got[had+1] != len(joined) {
		t.Errorf("the groups the birth joined count %v, want %d in each", got, had+1)
	}
	// A tick that reaches its commit after another transaction committed a count there runs again: another scan
	// counted a birth of the collection twice (here, one more in a group the birth joined) while the tick, which
	// judges a group the birth left, waited for the count lock. Committing on top would keep the ledger open; the
	// tick counts again instead, takes the group counted too high and writes it.
	var scope string
	if err := pool.QueryRow(ctx, `SELECT coalesce(scope, '') FROM governance_group WHERE group_key = $1`, left[0]).Scan(&scope); err != nil {
		t.Fatal(err)
	}
	var other string
	if err := pool.QueryRow(ctx, `SELECT group_key FROM governance_group WHERE group_key = ANY($1) AND coalesce(scope, '') = $2`, joined, scope).Scan(&other); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.counts:' || $1 || chr(31) || $2, 0))`, coll, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MarkDirty(ctx, []string{left[0]}, "handoff:object_born"); err != nil {
		t.Fatal(err)
	}
	type tickResult struct {
		res scan.ScanResult
		err error
	}
	done := make(chan tickResult, 1)
	go func() {
		res, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeEvent})
		done <- tickResult{res, err}
	}()
	wait.For(t, time.Minute, "the tick waits for the count lock", func() bool {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
	if _, err := holder.Exec(ctx, `UPDATE governance_candidate_state SET member_count = member_count + 1
		WHERE group_key = $1 AND ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)`, other); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.res.Scanned < 2 {
		t.Fatalf("the tick after the count moved: %+v %v; want it to judge the group it claimed and the one counted too high", r.res, r.err)
	}
	closes("a tick that committed after another count moved")
	if got := counted([]string{other}); got[had+1] != 1 {
		t.Errorf("the group counted too high counts %v, want %d", got, had+1)
	}

	rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("the state differs from a from-scratch evaluation: %v", rep.Mismatches[:min(10, len(rep.Mismatches))])
	}
}

// TestAGroupNoScanJudgedIsStaleAfterAnAudit: a birth is born into a base no group held, and the intake records its
// group before any scan judges it. A full audit captures the source with that group in it and leaves it to the
// scans (it seeds only groups the registry does not hold). Until a scan judges it, its members are unknown: the
// ledger counts them as stale and closes, in every sample, including those taken between the audit's commit and
// the scan (here held there by another transaction's count lock).
func TestAGroupNoScanJudgedIsStaleAfterAnAudit(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	pool := store.Pool()
	stage := scan.New(store)
	worker := &intake.Worker{Stage: intake.New(store), Config: store.Config().Intake, DisableMonitor: true}

	// A class and collection with active births and no superseded one: a superseded birth there opens a new base.
	var class, coll string
	if err := pool.QueryRow(ctx, `SELECT b.entity_type, b.collection_name FROM birth_registry b
		WHERE b.status = 'active'
		  AND NOT EXISTS (SELECT 1 FROM birth_registry r WHERE r.collection_name = b.collection_name AND r.entity_type = b.entity_type AND r.status = 'superseded')
		ORDER BY b.id LIMIT 1`).Scan(&class, &coll); err != nil {
		t.Fatal(err)
	}
	closes := func(when string) { t.Helper(); ledgerCloses(t, store, when) }
	closes("at rest")
	if _, err := pool.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('unjudged-1', $1, $2, 'superseded', 'birth-api', 'scan-test')`, coll, class); err != nil {
		t.Fatal(err)
	}
	var joined, scope string
	wait.For(t, 2*time.Minute, "the intake hands the birth off and records its group", func() bool {
		if _, err := worker.Once(ctx); err != nil {
			t.Fatal(err)
		}
		err := pool.QueryRow(ctx, `SELECT g.group_key, coalesce(g.scope, '') FROM governance_group g
			WHERE g.object_class = $1 AND g.source_registry = $2 AND g.lifecycle_status = 'superseded' AND g.retired_at IS NULL
			ORDER BY 1 LIMIT 1`, class, coll).Scan(&joined, &scope)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		return err == nil
	})
	var judged bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM governance_candidate_state WHERE group_key = $1)`, joined).Scan(&judged); err != nil || judged {
		t.Fatalf("the intake recorded the new group %s judged (%v): %v", joined, judged, err)
	}
	closes("the new group recorded, before any scan")

	// Another transaction holds the count lock of the collection in one scope: the audit records its snapshot, and
	// its scan of the new group waits before it commits.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.counts:' || $1 || chr(31) || $2, 0))`, coll, scope); err != nil {
		t.Fatal(err)
	}
	type auditResult struct {
		res scan.AuditResult
		err error
	}
	done := make(chan auditResult, 1)
	go func() {
		res, err := stage.FullAudit(ctx, nil)
		done <- auditResult{res, err}
	}()
	wait.For(t, 2*time.Minute, "the audit recorded its snapshot and its scan waits for the count lock", func() bool {
		var ready bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM evolution_snapshots WHERE scope = 'governance.audit' AND metrics -> 'groups' ? $1)
			AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			            AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, joined).Scan(&ready); err != nil {
			t.Fatal(err)
		}
		return ready
	})
	var seededNow bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM governance_candidate_state WHERE group_key = $1)`, joined).Scan(&seededNow); err != nil {
		t.Fatal(err)
	}
	if seededNow {
		t.Fatalf("the audit judged the new group %s itself; this test needs it left to a scan", joined)
	}
	closes("after the audit's snapshot, before a scan judged the new group")
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatalf("the audit: %v", r.err)
	}
	closes("once the audit's scan judged the new group")
	if rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("after the audit: %v %+v", err, rep.Mismatches)
	}
}

// ledgerCloses fails the test when the ledger of a scope does not close (when: the moment, for the message).
func ledgerCloses(t *testing.T, store *postgres.Store, when string) {
	t.Helper()
	rep, err := gate.New(store, nil).Invariant(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Closes {
		t.Fatalf("%s: the ledger does not close: %+v", when, rep.Ledgers)
	}
}

// TestAnAuditKeepsTheRowOfAnObjectBornAfterItsCut: an object of a class whose objects have rows is born into a
// new base after a full audit's snapshot was cut, and a scan gives the object its row before the audit records
// (the audit is held at its settle, between its capture and its record). The audit cannot judge that object (its
// base has no group in the snapshot) and must leave the row as the scan wrote it: it used to retire it as lapsed,
// and the row stayed missing until the next audit.
func TestAnAuditKeepsTheRowOfAnObjectBornAfterItsCut(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	pool := store.Pool()
	stage := scan.New(store)
	worker := &intake.Worker{Stage: intake.New(store), Config: store.Config().Intake, DisableMonitor: true}
	var class, coll string
	if err := pool.QueryRow(ctx, `SELECT p.entity_type, m.registry_collection FROM governance_coverage_profile p
		JOIN meta_catalog m USING (entity_type)
		WHERE p.independently_authoritative AND m.registry_collection IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM birth_registry b WHERE b.entity_type = p.entity_type
		                  AND b.collection_name = m.registry_collection AND b.status = 'superseded')
		ORDER BY 1 LIMIT 1`).Scan(&class, &coll); err != nil {
		t.Fatal(err)
	}
	rowOf := func() string {
		t.Helper()
		var state string
		if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT lifecycle_status FROM governance_candidate_object
			WHERE object_ref = $1 || ':after-cut-1' AND ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)), 'none')`, coll).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state
	}

	// The audit captures its snapshot, then waits at its settle (as it waits for the intake to hand off what its
	// cut saw) until the object has its row.
	cut, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	auditor := scan.New(store, scan.WithSettle(func(ctx context.Context, _ time.Time) error {
		once.Do(func() {
			close(cut)
			<-resume
		})
		return nil
	}))
	done := make(chan error, 1)
	go func() {
		_, err := auditor.FullAudit(ctx, nil)
		done <- err
	}()
	release := sync.OnceFunc(func() { close(resume) })
	defer release() // a failed test never leaves the audit waiting
	select {
	case <-cut:
	case err := <-done:
		t.Fatalf("the audit ended before its first batch: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('after-cut-1', $1, $2, 'superseded', 'birth-api', 'scan-test')`, coll, class); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 2*time.Minute, "the intake hands the birth off and a scan gives the object its row", func() bool {
		if _, err := worker.Once(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeEvent}); err != nil {
			t.Fatal(err)
		}
		return rowOf() == "active"
	})
	release()
	if err := <-done; err != nil {
		t.Fatalf("the audit: %v", err)
	}
	if got := rowOf(); got != "active" {
		t.Fatalf("after the audit the object born after its cut has its row %s, want active", got)
	}
	if rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{}); err != nil || !rep.Clean() {
		t.Fatalf("after the audit: %v %+v", err, rep.Mismatches)
	}
}
