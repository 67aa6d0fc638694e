package evaluate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos/evaluate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/oracle"
	"gcos/postgres"
)

// TestObjectRowsFollowAGroupRetiredMeanwhile: a scan's object pass that waited for another pass over the same base
// links no row to a group that pass retired, and an object it cannot place (its base has no live group now, the
// retiring tick's count having missed it) is queued again for the tick that counts it, so the incremental state
// still equals a from-scratch evaluation. Read before the wait, the retired group looked live: the newborn's row
// was linked to it and the ledger counted the object twice (once in that row, once as a member nobody holds).
func TestObjectRowsFollowAGroupRetiredMeanwhile(t *testing.T) {
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 5})
	// A base of its own: a class whose objects have rows, in its collection, at a status no birth has.
	pair := w.Strings(t, `SELECT p.entity_type || '|' || m.registry_collection FROM governance_coverage_profile p
		JOIN meta_catalog m USING (entity_type)
		WHERE p.independently_authoritative AND m.registry_collection IS NOT NULL
		  AND NOT EXISTS (SELECT 1 FROM birth_registry b WHERE b.entity_type = p.entity_type
		                  AND b.collection_name = m.registry_collection AND b.status = 'superseded')
		ORDER BY 1 LIMIT 1`)
	if len(pair) == 0 {
		t.Fatal("no independently authoritative class with a registry collection")
	}
	class, coll, _ := strings.Cut(pair[0], "|")
	birth := func(code string) {
		w.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, 'superseded', 'birth-api', 'follow-test')`, code, coll, class)
	}
	settle := func() {
		t.Helper()
		wait.For(t, 2*time.Minute, "the intake and the scans settle", func() bool {
			w.IntakeAll(t)
			w.ScanAll(t, postgres.ModeIncremental)
			n, err := gcostest.DirtyGroups(w.Ctx, w.Pool)
			return err == nil && n == 0
		})
	}
	birth("follow-1")
	settle()
	groups := w.Strings(t, `SELECT group_key FROM governance_group WHERE object_class = $1 AND source_registry = $2
		AND lifecycle_status = 'superseded' AND retired_at IS NULL ORDER BY group_key`, class, coll)
	if len(groups) == 0 || w.Count(t, `SELECT count(*) FROM governance_candidate_object WHERE object_ref = $1 AND lifecycle_status = 'active'`, coll+":follow-1") != 1 {
		t.Fatalf("the first object of the base has no live group (%v) or no object row", groups)
	}

	// A second object is born into the base and handed off (queued for the base's pass); the first leaves it.
	birth("follow-2")
	w.IntakeAll(t)
	w.Exec(t, `UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = 'follow-1'`, coll)
	w.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by, alert_detail)
		VALUES ($1, 'follow-1', 'retire', 'registry-sync', 'follow test')`, class)

	// A tick whose count did not include the newborn retires the base's groups, re-derives the base's rows (the
	// first object's row lapses) and, holding the base's lock, has not committed yet.
	base := postgres.BirthBase{Class: class, Coll: coll, Status: "superseded"}
	tick, err := w.Pool.Begin(w.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tick.Rollback(context.Background())
	if _, err := tick.Exec(w.Ctx, `UPDATE governance_group SET member_count = 0, retired_at = now() WHERE group_key = ANY($1)`, groups); err != nil {
		t.Fatal(err)
	}
	if _, err := tick.Exec(w.Ctx, `UPDATE governance_candidate_object SET lifecycle_status = 'retired' WHERE object_ref = $1`, coll+":follow-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tick.Exec(w.Ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, evaluate.LockKey(base)); err != nil {
		t.Fatal(err)
	}

	// Another scan's pass over the same base reads the groups, then waits for the base's lock.
	passed := make(chan error, 1)
	go func() {
		passed <- pgx.BeginFunc(w.Ctx, w.Pool, func(tx pgx.Tx) error {
			rs, err := w.Store.CurrentRuleset(w.Ctx)
			if err != nil {
				return err
			}
			ev, err := evaluate.New(w.Ctx, w.Store, tx, rs)
			if err != nil {
				return err
			}
			snap, err := postgres.LatestFullSnapshotID(w.Ctx, tx)
			if err != nil {
				return err
			}
			return ev.FollowObjects(w.Ctx, tx, snap, "follow-test", map[postgres.BirthBase]bool{base: true})
		})
	}()
	wait.For(t, time.Minute, "the second pass waits for the base's lock", func() bool {
		return w.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) > 0
	})
	if err := tick.Commit(w.Ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-passed; err != nil {
		t.Fatalf("the second pass: %v", err)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_candidate_object o JOIN governance_group g USING (group_key)
		WHERE o.lifecycle_status = 'active' AND g.retired_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d active object rows are linked to a retired group", n)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_object_pending WHERE collection_name = $1 AND entity_code = 'follow-2'
		AND lifecycle_status = 'superseded'`, coll); n != 1 {
		t.Fatal("the newborn the pass could not place is not queued again for its base")
	}

	// The intake hands the first object's move off; the tick that counts the newborn (its handoff marked the base's
	// groups) places it,, and the state is the one a from-scratch evaluation gives.
	settle()
	if n := w.Count(t, `SELECT count(*) FROM governance_candidate_object o JOIN governance_group g USING (group_key)
		WHERE o.object_ref = $1 AND o.lifecycle_status = 'active' AND g.retired_at IS NULL`, coll+":follow-2"); n != 1 {
		t.Fatal("the newborn has no object row in a live group once its base is counted")
	}
	rep, err := oracle.Verify(w.Ctx, w.Store, oracle.VerifyOptions{Sample: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("%d mismatches with a from-scratch evaluation: %v", len(rep.Mismatches), rep.Mismatches[:min(10, len(rep.Mismatches))])
	}
}
