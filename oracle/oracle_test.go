package oracle_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/daemon"
	"gcos/gcostest"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// TestMain keeps the differential test's default run short (a few sequences) unless -rapid.checks or RAPID_CHECKS
// asks for a soak.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !set && !env {
		_ = flag.Set("rapid.checks", strconv.Itoa(defaultChecks))
	}
	pgtest.Main(m)
}

// fresh returns a store over a backfilled world whose ruleset is active and fully scanned.
func fresh(t *testing.T, births int) (*postgres.Store, context.Context) {
	t.Helper()
	w := gcostest.Ready(t, gcostest.Options{Births: births, Seed: 11, Config: func(cfg *gcos.Config) {
		cfg.Scan.CoalesceWindow = gcos.Duration(10 * time.Millisecond)
		cfg.Scan.StormFraction = 1
	}})
	ctx, store := w.Ctx, w.Store
	if _, err := w.Daemon(t, daemon.Config{}).Scan.Once(ctx, postgres.ModeIncremental); err != nil {
		t.Fatal(err)
	}
	return store, ctx
}

func TestVerifyFreshWorld(t *testing.T) {
	store, ctx := fresh(t, 3000)
	rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 500, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("groups %d objects %d gate checks %d", rep.Groups, rep.Objects, rep.GateChecks)
	for i, m := range rep.Mismatches {
		if i > 40 {
			break
		}
		t.Log(m)
	}
	if !rep.Clean() {
		t.Fatalf("%d mismatches", len(rep.Mismatches))
	}
}

// TestVerifyNamesTampering: the judge is not vacuous. A verdict, a coverage outcome and an object row altered behind
// GCOS's back are each named, with the field, the incremental value and the reference value.
func TestVerifyNamesTampering(t *testing.T) {
	store, ctx := fresh(t, 3000)
	pool := store.Pool()
	var relevant, orphanKey, object string
	if err := pool.QueryRow(ctx, `SELECT group_key FROM v_candidate_effective WHERE candidate_verdict = 'relevant'
		AND coverage_outcome = 'covered' ORDER BY group_key LIMIT 1`).Scan(&relevant); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT group_key FROM v_candidate_effective WHERE candidate_verdict = 'relevant'
		AND coverage_outcome = 'orphan' ORDER BY group_key LIMIT 1`).Scan(&orphanKey); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT candidate_key FROM governance_candidate_object WHERE lifecycle_status = 'active'
		ORDER BY candidate_key LIMIT 1`).Scan(&object); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE governance_candidate_state SET candidate_verdict = 'not_relevant', coverage_required = false WHERE group_key = '` + relevant + `'`,
		`UPDATE governance_candidate_coverage SET outcome = 'covered', owner_ref = 'forged' WHERE candidate_ref = '` + orphanKey + `'`,
		`UPDATE governance_candidate_object SET lifecycle_status = 'retired' WHERE candidate_key = '` + object + `'`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[[3]string]bool{
		{"group", relevant, "verdict"}:   false,
		{"group", orphanKey, "coverage"}: false,
		{"object", object, "exists"}:     false,
	}
	ledger := false
	for _, m := range rep.Mismatches {
		if _, ok := want[[3]string{m.Kind, m.Key, m.Field}]; ok {
			want[[3]string{m.Kind, m.Key, m.Field}] = true
		}
		ledger = ledger || m.Kind == "ledger"
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("verify did not name %v; it said %v", k, rep.Mismatches)
		}
	}
	if !ledger {
		t.Errorf("a forged verdict and coverage leave the ledger as the reference has it: %v", rep.Mismatches)
	}
}

// TestVerifyInFlight: on a live system a verification lists apart the differences of what was moving at its
// instant, and only those: a group marked dirty at the instant, and a group a transaction that committed after the
// instant wrote (noted in the change feed), are in flight with what reads them; a group forged with nothing moving is
// a settled mismatch. Without InFlight every one of them is a mismatch.
func TestVerifyInFlight(t *testing.T) {
	store, ctx := fresh(t, 3000)
	pool := store.Pool()
	var keys []string
	rows, err := pool.Query(ctx, `SELECT group_key FROM v_candidate_effective WHERE candidate_verdict = 'relevant'
		ORDER BY group_key LIMIT 3`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if rows.Close(); len(keys) < 3 {
		t.Fatalf("want 3 relevant groups, got %v (%v)", keys, rows.Err())
	}
	dirty, written, forged := keys[0], keys[1], keys[2]
	for _, sql := range []string{
		`UPDATE governance_candidate_state SET candidate_verdict = 'not_relevant', dirty = true, dirty_reason = 'axis',
			dirtied_at = now() WHERE group_key = '` + dirty + `'`,
		`UPDATE governance_candidate_state SET candidate_verdict = 'not_relevant' WHERE group_key IN ('` + written + `', '` + forged + `')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	settles := 0
	rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 200, Seed: 1, InFlight: true,
		Settle: func(ctx context.Context, at time.Time) error {
			settles++
			// A scan that commits after the instant writes this group.
			_, err := pool.Exec(ctx, `UPDATE governance_candidate_state SET scan_time = now() WHERE group_key = $1`, written)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	groupIn := func(list []oracle.Mismatch, key string) bool {
		for _, m := range list {
			if m.Kind == "group" && m.Key == key {
				return true
			}
		}
		return false
	}
	if settles != 1 {
		t.Errorf("Settle called %d times, want 1", settles)
	}
	if !groupIn(rep.InFlight, dirty) || !groupIn(rep.InFlight, written) || groupIn(rep.InFlight, forged) {
		t.Errorf("in flight: want groups %s (dirty) and %s (written after), not %s (forged): %v", dirty, written, forged, rep.InFlight)
	}
	if !groupIn(rep.Mismatches, forged) || groupIn(rep.Mismatches, dirty) || groupIn(rep.Mismatches, written) {
		t.Errorf("settled: want group %s only: %v", forged, rep.Mismatches)
	}
	if rep.Settled() || rep.Clean() {
		t.Error("a forged settled group: Settled() and Clean() must be false")
	}
	if m := rep.Moving; m == nil || m.DirtyGroups != 1 || m.WrittenGroups < 1 {
		t.Errorf("moving = %+v, want 1 dirty group and the written one", m)
	}
	scopeOf := func(key string) (scope string) {
		if err := pool.QueryRow(ctx, `SELECT scope FROM governance_group WHERE group_key = $1`, key).Scan(&scope); err != nil {
			t.Fatal(err)
		}
		return scope
	}
	moving := map[string]bool{scopeOf(dirty): true, scopeOf(written): true}
	for _, m := range rep.Mismatches {
		if m.Kind == "ledger" && moving[m.Key] {
			t.Errorf("a ledger whose scope has a group in flight is in flight: %v", m)
		}
	}

	strict, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(strict.InFlight) != 0 || !groupIn(strict.Mismatches, dirty) || !groupIn(strict.Mismatches, written) || !groupIn(strict.Mismatches, forged) {
		t.Errorf("without InFlight every difference is a mismatch: %v / %v", strict.Mismatches, strict.InFlight)
	}

	// The intake did not hand off what the instant held. With no sign that it runs, that is no excuse: the forged
	// group stays a settled mismatch (fail closed). An intake that runs but is behind (ErrBehind) leaves the proof
	// inconclusive: every difference is in flight, since a row still waiting may move anything.
	unknown, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 200, Seed: 1, InFlight: true,
		Settle: func(context.Context, time.Time) error { return errors.New("no intake moved") }})
	if err != nil {
		t.Fatal(err)
	}
	if unknown.NotHandedOff == "" || unknown.Inconclusive || !groupIn(unknown.Mismatches, forged) {
		t.Errorf("not handed off, no intake known to run: want %s settled, conclusive: %+v", forged, unknown)
	}
	behind, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 200, Seed: 1, InFlight: true,
		Settle: func(context.Context, time.Time) error { return fmt.Errorf("%w: rows wait", oracle.ErrBehind) }})
	if err != nil {
		t.Fatal(err)
	}
	if !behind.Inconclusive || len(behind.Mismatches) != 0 || !groupIn(behind.InFlight, forged) || !groupIn(behind.InFlight, dirty) {
		t.Errorf("the intake behind: want an inconclusive proof with %s and %s in flight: %+v", forged, dirty, behind)
	}
}

// TestSliceVerifiesWhatTheWholeDoes: a verification limited to some collections (a slice of the audit's rotating
// cover) counts and compares exactly what the whole verification does for those collections. Forged in three
// collections (a verdict, a coverage outcome, a retired object row), each collection alone names its own mismatches
// and only them; the slices together hold every group and object row of the whole.
func TestSliceVerifiesWhatTheWholeDoes(t *testing.T) {
	store, ctx := fresh(t, 3000)
	pool := store.Pool()
	for _, sql := range []string{
		`UPDATE governance_candidate_state SET candidate_verdict = 'not_relevant', coverage_required = false WHERE group_key =
			(SELECT min(group_key) FROM v_candidate_effective WHERE candidate_verdict = 'relevant' AND coverage_outcome = 'covered')`,
		`UPDATE governance_candidate_coverage SET outcome = 'covered', owner_ref = 'forged' WHERE candidate_ref =
			(SELECT max(group_key) FROM v_candidate_effective WHERE candidate_verdict = 'relevant' AND coverage_outcome = 'orphan')`,
		`UPDATE governance_candidate_object SET lifecycle_status = 'retired' WHERE candidate_key =
			(SELECT min(candidate_key) FROM governance_candidate_object WHERE lifecycle_status = 'active')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	whole, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 0, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	byCollection := map[string][]string{}
	for _, m := range whole.Mismatches {
		if m.Kind == "group" || m.Kind == "object" {
			byCollection[m.Collection] = append(byCollection[m.Collection], m.String())
		}
	}
	if len(byCollection) < 2 {
		t.Fatalf("the forgeries landed in %d collections: %v", len(byCollection), whole.Mismatches)
	}
	rows, err := pool.Query(ctx, `SELECT DISTINCT collection_name FROM birth_registry ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	collections, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	groups, objects := 0, 0
	for _, c := range collections {
		part, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Only: []string{c}, Sample: 5, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		groups, objects = groups+part.Groups, objects+part.Objects
		var got []string
		for _, m := range part.Mismatches {
			if m.Collection != c {
				t.Errorf("the slice of %s names a mismatch in %q: %s", c, m.Collection, m)
			}
			if m.Kind == "group" || m.Kind == "object" {
				got = append(got, m.String())
			}
		}
		if !slices.Equal(got, byCollection[c]) {
			t.Errorf("%s alone: %v; the whole said %v", c, got, byCollection[c])
		}
	}
	if groups != whole.Groups || objects != whole.Objects {
		t.Errorf("the slices hold %d groups and %d object rows; the whole %d and %d", groups, objects, whole.Groups, whole.Objects)
	}
}
