package gate_test

// The gate's in-process view answers exactly what the database answers (SPEC §12 freshness), and only while it can
// prove it is within gate.max_staleness of the database.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/scan"
)

// viewWorld is a seeded, activated world with a view attached to its store; the view is caught up by hand (its
// bound is long enough that a test's own pace never ages it out, unless the test says otherwise).
func viewWorld(t *testing.T, births int, maxStale time.Duration) (*bundle, *gate.VerdictView) {
	t.Helper()
	b := seededWorld(t, births, func(c *gcos.Config) {
		c.Gate.MaxStaleness = gcos.Duration(maxStale)
		c.Gate.ViewRefresh = gcos.Duration(maxStale / 4)
	})
	v := gate.NewVerdictView(b.gate())
	b.gate().AttachView(v)
	if err := v.CatchUp(b.ctx); err != nil {
		t.Fatal(err)
	}
	return b, v
}

// viewSample is a spread of objects: every object with a row, every child, the objects exceptions name, and every
// hundredth birth.
func (b *bundle) viewSample(t *testing.T) []string {
	t.Helper()
	return b.strs(t, `
		SELECT object_ref FROM governance_candidate_object
		UNION SELECT collection_name || ':' || entity_code FROM birth_registry WHERE parent_code IS NOT NULL OR id % 100 = 0
		UNION SELECT collection_name || ':' || entity_code FROM governance_exception WHERE entity_code IS NOT NULL
		ORDER BY 1 LIMIT 1500`)
}

// sameAnswer fails unless the view's answer is the database's, field by field (the clocks aside).
func sameAnswer(t *testing.T, object, action string, db, vw gate.GateResult) {
	t.Helper()
	strip := func(r gate.GateResult) gate.GateResult {
		r.DecidedAt, r.AsOf, r.Source, r.Token = time.Time{}, time.Time{}, "", ""
		return r
	}
	if !reflect.DeepEqual(strip(db), strip(vw)) {
		t.Fatalf("%s %s: the view answered\n  %s %q %s\n  consulted %+v\nthe database\n  %s %q %s\n  consulted %+v",
			object, action, vw.Decision, vw.Reasons, vw.Statement, vw.Consulted, db.Decision, db.Reasons, db.Statement, db.Consulted)
	}
}

// agree compares the view with the database on every sampled object and both actions, and returns how many
// answers came from the view and how many were allowed.
func agree(t *testing.T, b *bundle, v *gate.VerdictView, objects []string) (fromView, allowed int) {
	t.Helper()
	if err := v.CatchUp(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
			db := b.gate().Decide(b.ctx, obj, action)
			vw := v.Decide(b.ctx, obj, action)
			if db.Source != gate.SourceDatabase {
				t.Fatalf("%s: Decide answered from %q, want the database", obj, db.Source)
			}
			sameAnswer(t, obj, action, db, vw)
			if vw.Source == gate.SourceView {
				fromView++
			}
			if vw.Decision == gcos.GateAllow {
				allowed++
			}
		}
	}
	return fromView, allowed
}

func TestVerdictView_AnswersAsTheDatabaseThroughChanges(t *testing.T) {
	t.Parallel()
	b, v := viewWorld(t, 20000, time.Hour)
	objects := b.viewSample(t)
	obj, scope, key, _ := b.orphanInOneScope(t)
	objects = append(objects, obj, "nosuch:object")
	fromView, allowed := agree(t, b, v, objects)
	if fromView < len(objects) || allowed == 0 || allowed == 2*len(objects) {
		t.Fatalf("%d of %d answers from the view, %d allowed: the sample shows nothing", fromView, 2*len(objects), allowed)
	}

	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"an exception granted and scanned in", func(t *testing.T) {
			coll, code, _ := strings.Cut(obj, ":")
			b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
				VALUES ('EXC-T-VIEW', $1, $2, $3, 'APR-T', '2030-01-01T00:00:00Z', $4, 'approved')`, scope, coll, code, b.objectFingerprint(t, obj))
			if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
			b.world().ScanAll(t, postgres.ModeIncremental)
		}},
		{"the exception revoked in the registry (no scan)", func(t *testing.T) {
			b.exec(t, `UPDATE governance_exception SET expires_at = now() - interval '1 minute' WHERE exception_id = 'EXC-T-VIEW'`)
		}},
		{"groups marked dirty", func(t *testing.T) {
			if _, err := b.store.MarkDirty(b.ctx, []string{key}, gcos.DirtyAuthority); err != nil {
				t.Fatal(err)
			}
		}},
		{"objects retired, handed off and scanned", func(t *testing.T) {
			for _, o := range objects[:40] {
				coll, code, _ := strings.Cut(o, ":")
				b.exec(t, `UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code)
				b.exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
					SELECT entity_type, entity_code, 'retire', 'registry-sync' FROM birth_registry WHERE collection_name = $1 AND entity_code = $2`, coll, code)
			}
			b.world().IntakeAll(t)
			b.world().ScanAll(t, postgres.ModeIncremental)
		}},
		{"a full audit", func(t *testing.T) {
			if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, s := range steps {
		s.do(t)
		fromView, allowed := agree(t, b, v, objects)
		if allowed == 0 || fromView < len(objects) {
			t.Fatalf("after %s: %d answers from the view, %d allowed", s.name, fromView, allowed)
		}
		t.Logf("after %s: %d of %d answers from the view, %d allowed", s.name, fromView, 2*len(objects), allowed)
	}
	if st := v.Stats(); st.Reloads != 1 {
		t.Fatalf("the view reloaded %d times, want once (at its start): catch-ups read the feed", st.Reloads)
	}
}

// Past its bound the view answers nothing: the gate reads through and says so.
func TestVerdictView_PastItsBoundReadsThrough(t *testing.T) {
	t.Parallel()
	b, v := viewWorld(t, 5000, 200*time.Millisecond)
	obj := b.viewSample(t)[0]
	if err := v.CatchUp(b.ctx); err != nil {
		t.Fatal(err)
	}
	wait.For(t, time.Minute, "the view ages past its bound", func() bool { return !v.Stats().Fresh })
	r := v.Decide(b.ctx, obj, gcos.ActionWrite)
	if r.Source != gate.SourceDatabase {
		t.Fatalf("a view past its bound answered from %q", r.Source)
	}
	sameAnswer(t, obj, gcos.ActionWrite, b.gate().Decide(b.ctx, obj, gcos.ActionWrite), r)
	if err := v.CatchUp(b.ctx); err != nil {
		t.Fatal(err)
	}
	if r := v.Decide(b.ctx, obj, gcos.ActionWrite); r.Source != gate.SourceView && v.Stats().Fresh {
		t.Fatalf("a view just caught up answered from %q", r.Source)
	}
	if r := b.gate().GateWith(b.ctx, obj, gcos.ActionWrite, gate.GateOptions{Consistency: gate.ConsistencyFull}); r.Source != gate.SourceDatabase {
		t.Fatalf("consistency=full answered from %q", r.Source)
	}
	if r := b.gate().GateWith(b.ctx, obj, gcos.ActionWrite, gate.GateOptions{Consistency: "eventual"}); r.Decision != gcos.GateBlock ||
		!strings.Contains(fmt.Sprint(r.Reasons), "consistency") {
		t.Fatalf("an unknown consistency answered %s %q, want a block naming it", r.Decision, r.Reasons)
	}
}

// A question passing a consistency token reads at least the state it names and every source write before the
// question (the gate's settle: the database's present once the intake has handed off what committed before it): the
// view answers once it has caught up past that, and the database until then.
func TestVerdictView_AtLeastATokenReadsThrough(t *testing.T) {
	t.Parallel()
	b, v := viewWorld(t, 3000, time.Hour)
	obj, _, key, _ := b.orphanInOneScope(t)
	ask := func(token string) gate.GateResult {
		t.Helper()
		return b.gate().GateWith(b.ctx, obj, gcos.ActionWrite, gate.GateOptions{AtLeast: token})
	}
	first := ask("")
	if first.Source != gate.SourceView || first.Token == "" {
		t.Fatalf("no token asked: answered from %q with token %q, want the view's", first.Source, first.Token)
	}
	own, err := gcos.ParseConsistencyToken(first.Token)
	if err != nil {
		t.Fatal(err)
	}
	if r := ask(first.Token); r.Decision != first.Decision {
		t.Fatalf("the view's own token: %s from %q, want %s", r.Decision, r.Source, first.Decision)
	} else if got, err := gcos.ParseConsistencyToken(r.Token); err != nil || !got.Covers(own) {
		t.Fatalf("the view's own token: answered at %q, want a state covering %s", r.Token, first.Token)
	}
	// A write (a dirty mark), and the token a writer takes after its commit.
	if _, err := b.store.MarkDirty(b.ctx, []string{key}, gcos.DirtyAuthority); err != nil {
		t.Fatal(err)
	}
	written, err := b.store.ConsistencyToken(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := gcos.ParseConsistencyToken(written)
	if err != nil {
		t.Fatal(err)
	}
	r := ask(written)
	got, err := gcos.ParseConsistencyToken(r.Token)
	if r.Source != gate.SourceDatabase || err != nil || !got.Covers(want) {
		t.Fatalf("a token past the view: answered from %q at %q, want the database at a state covering %s", r.Source, r.Token, written)
	}
	sameAnswer(t, obj, gcos.ActionWrite, b.gate().Decide(b.ctx, obj, gcos.ActionWrite), r)
	// The question settles at the database's present, whose transaction ids are the cluster's: another test's
	// commit between the catch-up and the question puts the present past the view again, and the database answers
	// (rightly). So the view is caught up and asked until it answers.
	wait.For(t, time.Minute, "the view, caught up past the token, answers", func() bool {
		if err := v.CatchUp(b.ctx); err != nil {
			t.Fatal(err)
		}
		r = ask(written)
		return r.Source == gate.SourceView
	})
	if got, err := gcos.ParseConsistencyToken(r.Token); err != nil || !got.Covers(want) {
		t.Fatalf("caught up past the token: answered from the view at %q, want a state covering %s", r.Token, written)
	}
	sameAnswer(t, obj, gcos.ActionWrite, b.gate().Decide(b.ctx, obj, gcos.ActionWrite), r)
	for _, bad := range []string{"soon", "3:1:", "1:9:12"} {
		if r := ask(bad); r.Decision != gcos.GateBlock || r.Source != "" || !strings.Contains(fmt.Sprint(r.Reasons), "consistency token") {
			t.Fatalf("token %q: %s from %q %q, want a block naming the token", bad, r.Decision, r.Source, r.Reasons)
		}
	}
}

// Verdicts flip allow ⇄ block through real scans (an owner granted and withdrawn in the orphan's scope) while eight
// callers ask the gate, the view running as gcos up runs it; its catch-ups' connections are killed along the way. No decision that started more than gate.max_staleness after a block committed (and before
// the next allow began) may answer allow.
func TestVerdictView_NeverAllowsPastItsBoundAfterABlock(t *testing.T) {
	t.Parallel()
	const maxStale = 100 * time.Millisecond
	b, _ := viewWorld(t, 20000, maxStale)
	// The gate runs on a store opened as gcos up opens one (its own gate pool): the test kills those connections,
	// never its own.
	opened, err := postgres.Open(b.ctx, postgres.Databases{URL: pgtest.DSN(b.pool)}, b.cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	g := gate.New(opened, nil, gate.WithHandOff(b.world().HandOff(t)))
	v := gate.NewVerdictView(g)
	g.AttachView(v)
	obj, scope, key, _ := b.orphanInOneScope(t)
	var class, coll string
	if err := b.pool.QueryRow(b.ctx, `SELECT object_class, source_registry FROM governance_group WHERE group_key = $1`, key).Scan(&class, &coll); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	go func() { _ = v.Run(ctx) }()

	// After each block commits, blockedFrom holds the instant (on the test's monotonic clock) from which no decision
	// may allow; it is cleared before the next allow begins. A caller reads it when its decision starts and again
	// when it ends: set, passed at the start and unchanged at the end, no allow had begun while the decision ran
	// (one that had may be answered, its read coming after it), so an allow is a breach.
	epoch := time.Now()
	var blockedFrom atomic.Int64
	var calls, fromView, allows, blocks, breaches atomic.Int64
	var breach atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				wait.Pace(ctx, 100*time.Microsecond) // a busy pipeline, not a benchmark: the other tests share the cores
				start := time.Since(epoch)
				from := blockedFrom.Load()
				r := g.Gate(ctx, obj, gcos.ActionWrite)
				calls.Add(1)
				if r.Source == gate.SourceView {
					fromView.Add(1)
				}
				if r.Decision != gcos.GateAllow {
					blocks.Add(1)
					continue
				}
				allows.Add(1)
				if from != 0 && int64(start) > from && blockedFrom.Load() == from {
					breaches.Add(1)
					breach.CompareAndSwap(nil, fmt.Sprintf("a decision started %s after the bound answered allow (from the %s)",
						start-time.Duration(from), r.Source))
				}
			}
		}()
	}
	// waitFor polls the gate (a caller's view of it) until it answers want, scanning what is dirty meanwhile as the
	// daemon would: a caller that saw the group stale while the test's scan ran may have marked it dirty again (its
	// follow-up) after that scan cleared it.
	waitFor := func(want string) {
		t.Helper()
		wait.For(t, time.Minute, "the gate answers "+want+" for "+obj, func() bool {
			if g.Gate(b.ctx, obj, gcos.ActionWrite).Decision == want {
				return true
			}
			b.world().ScanAll(t, postgres.ModeIncremental)
			return false
		})
	}
	rescan := func() {
		t.Helper()
		if _, err := b.store.MarkDirty(b.ctx, []string{key}, gcos.DirtyAuthority); err != nil {
			t.Fatal(err)
		}
		b.world().ScanAll(t, postgres.ModeIncremental)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 36))
	for i := range 12 {
		blockedFrom.Store(0)
		b.exec(t, `INSERT INTO governance_object_ownership (scope_code, entity_type, collection_name, owner_ref, status)
			VALUES ($1, $2, $3, 'owner-view-test', 'active')`, scope, class, coll)
		rescan()
		waitFor(gcos.GateAllow)
		wait.Pace(ctx, time.Duration(rng.IntN(100))*time.Millisecond) // a random moment to take the owner away

		b.exec(t, `DELETE FROM governance_object_ownership WHERE owner_ref = 'owner-view-test'`)
		rescan() // the block has committed when it returns
		blockedFrom.Store(int64(time.Since(epoch) + maxStale))
		if i%2 == 1 { // the catch-ups' (and the read-throughs') connections die
			b.exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name IN ('gcos-gate', 'gcos-gate-view') AND datname = current_database()`)
		}
		wait.Pace(ctx, time.Duration(rng.IntN(200))*time.Millisecond) // the readers go on meanwhile
		waitFor(gcos.GateBlock)
	}
	cancel()
	wg.Wait()

	if n := breaches.Load(); n > 0 {
		t.Fatalf("%d allows past the bound after a block, the first: %s", n, breach.Load())
	}
	t.Logf("%d decisions (%d from the view), %d allowed, %d blocked, over 12 flips each way", calls.Load(), fromView.Load(), allows.Load(), blocks.Load())
	if fromView.Load() == 0 || allows.Load() == 0 || blocks.Load() == 0 {
		t.Fatalf("%d decisions from the view, %d allowed, %d blocked: the test saw nothing", fromView.Load(), allows.Load(), blocks.Load())
	}
}

// The feed keeps a note gate.feed_retention after its transaction ended, then drops it with its partition; a view
// whose last snapshot lies below what was dropped reloads everything instead of missing notes, and still answers as
// the database does.
func TestVerdictView_FeedIsPrunedAndALaggardReloads(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 5000, func(c *gcos.Config) {
		c.Gate.MaxStaleness, c.Gate.ViewRefresh = gcos.Duration(time.Hour), gcos.Duration(time.Minute)
		c.Gate.FeedRetention, c.Gate.FeedPartition = gcos.Duration(300*time.Millisecond), gcos.Duration(100*time.Millisecond)
	})
	keep := gate.NewVerdictView(b.gate()) // catches up all along: prunes
	laggard := gate.NewVerdictView(b.gate())
	for _, v := range []*gate.VerdictView{keep, laggard} {
		if err := v.CatchUp(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	key := b.strs(t, `SELECT group_key FROM governance_candidate_state ORDER BY 1 LIMIT 1`)[0]
	notes := func() int64 { return b.count(t, `SELECT count(*) FROM gcos_change_feed`) }
	if _, err := b.store.MarkDirty(b.ctx, []string{key}, gcos.DirtyAuthority); err != nil {
		t.Fatal(err)
	}
	if notes() == 0 {
		t.Fatal("a dirty mark left no note in the change feed")
	}
	wait.For(t, time.Minute, "the feed prunes its notes past their retention", func() bool {
		if err := keep.CatchUp(b.ctx); err != nil {
			t.Fatal(err)
		}
		return notes() == 0
	})
	if err := laggard.CatchUp(b.ctx); err != nil {
		t.Fatal(err)
	}
	if r := laggard.Stats().Reloads; r != 2 {
		t.Fatalf("a view behind the pruned feed reloaded %d times in all, want 2 (its start and now)", r)
	}
	b.gate().AttachView(laggard)
	obj := b.world().ObjectOf(t, key)
	for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
		vw := laggard.Decide(b.ctx, obj, action)
		if vw.Source != gate.SourceView {
			t.Fatalf("the reloaded view read through (%q)", vw.Source)
		}
		sameAnswer(t, obj, action, b.gate().Decide(b.ctx, obj, action), vw)
	}
}
