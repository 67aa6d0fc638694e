package scan_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"gcos"
	"gcos/daemon"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

const otherRows = `SELECT * FROM governance_candidate_state WHERE group_key <> ALL($1)`

func TestSB10_TargetedInvalidation(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 20000, Seed: 7})
	if n := b.Count(t, `SELECT count(*) FROM v_candidate_effective WHERE NOT clean`); n != 0 {
		t.Fatalf("%d groups not clean after backfill + activation", n)
	}

	t.Run("handoff dirties only its group", func(t *testing.T) {
		key := groupWhere(t, b, `effective_verdict = 'relevant'`)
		before := digestExcept(t, b, []string{key})
		n, err := b.Store.MarkDirty(b.Ctx, []string{key}, "handoff:object_born")
		if err != nil || n != 1 {
			t.Fatalf("mark dirty: n=%d err=%v", n, err)
		}
		again, err := b.Store.MarkDirty(b.Ctx, []string{key}, "handoff:object_born")
		if err != nil || again != 0 {
			t.Fatalf("re-delivered mark changed %d rows (err %v), want a no-op", again, err)
		}
		if after := digestExcept(t, b, []string{key}); after != before {
			t.Fatal("a handoff on one group changed another group's row")
		}
		if got := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE dirty`); got != 1 {
			t.Fatalf("dirty rows = %d, want 1", got)
		}
		if scanned := b.ScanAll(t, postgres.ModeEvent); scanned != 1 {
			t.Fatalf("event scan re-evaluated %d groups, want 1", scanned)
		}
		if after := digestExcept(t, b, []string{key}); after != before {
			t.Fatal("the scan of one group changed another group's row")
		}
	})

	t.Run("snapshot drift behind the tail's back is found only by the full audit", func(t *testing.T) {
		// Move births from one group to a new lifecycle status with an UPDATE: no birth is added, so no tail
		// would ever see it. Only the full audit's reconciliation can find the changed fingerprints.
		key := groupWhere(t, b, `effective_verdict = 'relevant' AND group_member_count > 10`)
		var class, coll, status string
		if err := b.Pool.QueryRow(b.Ctx, `SELECT object_class, source_registry, lifecycle_status FROM governance_group WHERE group_key = $1`, key).Scan(&class, &coll, &status); err != nil {
			t.Fatal(err)
		}
		b.Exec(t, `UPDATE birth_registry SET status = 'retired' WHERE id IN (
			SELECT id FROM birth_registry WHERE entity_type = $1 AND collection_name = $2 AND status = $3 ORDER BY id LIMIT 3)`, class, coll, status)
		affected := b.Strings(t, `SELECT group_key FROM governance_group WHERE object_class = $1 AND source_registry = $2 AND lifecycle_status IN ($3, 'retired')`, class, coll, status)
		before := digestExcept(t, b, affected)
		if scanned := b.ScanAll(t, postgres.ModeIncremental); scanned != 0 {
			t.Fatalf("incremental scan found %d groups to scan: nothing signalled the change", scanned)
		}
		res, err := scan.New(b.Store, scan.WithLedger(gate.New(b.Store, nil).Invariant)).FullAudit(b.Ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.LostSignals) == 0 {
			t.Fatal("the full audit found no lost signal")
		}
		for _, k := range res.LostSignals {
			if !slices.Contains(affected, k) {
				t.Fatalf("lost-signal group %s is not one of the changed groups %v", k, affected)
			}
		}
		if got := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'issue_event_gap' AND status = 'open' AND `+gcostest.NotHeldAnnouncement); got != 1 {
			t.Fatalf("issue_event_gap findings = %d, want 1", got)
		}
		if after := digestExcept(t, b, affected); after != before {
			t.Fatal("the full audit changed rows of groups whose fingerprint did not move")
		}
		if !res.Ledger.Closes {
			t.Fatalf("invariant does not close after the audit: %+v", res.Ledger)
		}
	})

	t.Run("idempotent re-seed", func(t *testing.T) {
		b.Backfill(t) // takes in the moved births
		before := b.Digest(t, `SELECT * FROM governance_candidate_state`)
		res := b.Backfill(t)
		if res.RowsWritten != 0 {
			t.Fatalf("re-seed wrote %d rows", res.RowsWritten)
		}
		if after := b.Digest(t, `SELECT * FROM governance_candidate_state`); after != before {
			t.Fatal("re-seed changed rows")
		}
	})
}

func TestSB10_FailClosed(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 20000, Seed: 7})
	g := gate.New(b.Store, nil)
	ask := func(object, action string) gate.GateResult { return g.Gate(b.Ctx, object, action) }

	t.Run("clean relevant high-risk object covered in every scope is allowed", func(t *testing.T) {
		base, _ := b.BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND coverage_outcome = 'covered' AND risk_class = 'write_medium')`)
		obj := b.ObjectOfBase(t, base)
		if r := ask(obj, "write"); r.Decision != gcos.GateAllow {
			t.Fatalf("gate %s = %s %v, want allow", obj, r.Decision, r.Reasons)
		}
	})
	t.Run("unknown object blocks", func(t *testing.T) {
		if r := ask("no_such_collection:nothing", "write"); r.Decision != gcos.GateBlock {
			t.Fatalf("unknown object: %s", r.Decision)
		}
		if r := ask("not-an-object", "write"); r.Decision != gcos.GateBlock {
			t.Fatalf("bad object reference: %s", r.Decision)
		}
	})
	t.Run("high-risk stale blocks", func(t *testing.T) {
		key := groupWhere(t, b, `effective_verdict = 'relevant' AND risk_class = 'write_medium' AND NOT dirty`)
		obj := b.ObjectOf(t, key)
		// A birth alone would not do (no verdict rests on membership): a changed collection might.
		if _, err := b.Store.MarkDirty(b.Ctx, keysOfObjectBase(t, b, key), "handoff:collection_changed"); err != nil {
			t.Fatal(err)
		}
		r := ask(obj, "write")
		if r.Decision != gcos.GateBlock || r.EffectiveVerdict != gcos.VerdictStale {
			t.Fatalf("dirty high-risk group: %s %s %v", r.Decision, r.EffectiveVerdict, r.Reasons)
		}
	})
	t.Run("low-risk stale allows and schedules a re-scan", func(t *testing.T) {
		key := groupWhere(t, b, `risk_class = 'read_descriptive' AND effective_verdict = 'not_relevant' AND NOT dirty`)
		obj := b.ObjectOf(t, key)
		b.Exec(t, `UPDATE governance_candidate_state SET scan_time = now() - interval '2 days', stale_after = now() - interval '1 second'
			WHERE group_key IN (SELECT group_key FROM governance_group WHERE (object_class, source_registry, lifecycle_status) =
			      (SELECT object_class, source_registry, lifecycle_status FROM governance_group WHERE group_key = $1))`, key)
		r := ask(obj, "write")
		if r.Decision != gcos.GateAllow || !r.RescanScheduled {
			t.Fatalf("low-risk stale: %s rescan=%v %v", r.Decision, r.RescanScheduled, r.Reasons)
		}
		if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = $1 AND dirty AND dirty_reason = 'ttl'`, key); n != 1 {
			t.Fatal("the re-scan was not scheduled (no ttl dirty mark)")
		}
	})
	t.Run("failed recompute blocks", func(t *testing.T) {
		key := groupWhere(t, b, `effective_verdict = 'relevant' AND risk_class = 'write_medium' AND NOT dirty`)
		obj := b.ObjectOf(t, key)
		b.Exec(t, `UPDATE governance_candidate_state SET recompute_status = 'failed' WHERE group_key IN (
			SELECT group_key FROM governance_group WHERE (object_class, source_registry, lifecycle_status) =
			      (SELECT object_class, source_registry, lifecycle_status FROM governance_group WHERE group_key = $1))`, key)
		if r := ask(obj, "write"); r.Decision != gcos.GateBlock {
			t.Fatalf("failed recompute: %s %v", r.Decision, r.Reasons)
		}
	})
	t.Run("unreachable database blocks", func(t *testing.T) {
		pool := closedPool(t, b)
		closed := postgres.New(pool, b.Cfg, nil)
		key := groupWhere(t, b, `effective_verdict = 'relevant'`)
		obj := b.ObjectOf(t, key)
		if r := gate.New(closed, nil).Gate(context.Background(), obj, "read"); r.Decision != gcos.GateBlock {
			t.Fatalf("closed pool: %s", r.Decision)
		}
	})
}

func TestSB10_FailClosedDraftRuleset(t *testing.T) {
	t.Parallel()
	b := gcostest.New(t, gcostest.Options{Births: 5000, Seed: 7})
	b.Backfill(t) // under a draft: nobody approved the ruleset yet
	key := groupWhere(t, b, `risk_class = 'write_medium'`)
	obj := b.ObjectOf(t, key)
	r := gate.New(b.Store, nil).Gate(b.Ctx, obj, "write")
	if r.Decision != gcos.GateBlock || r.EffectiveVerdict != gcos.VerdictUnknown {
		t.Fatalf("verdict under a draft ruleset: %s %s %v, want block unknown", r.Decision, r.EffectiveVerdict, r.Reasons)
	}
}

// stormConfig is the storm rule of the storm tests: a tick dirtying more than a fifth of the groups is a storm,
// which throttles the scan to 25 groups a tick; unthrottled, a tick takes 60.
func stormConfig(c *gcos.Config) {
	c.Scan.StormFraction = 0.2
	c.Scan.StormBatch = 25
	c.Scan.BatchSize = 60
}

const stormOpenSQL = `SELECT count(*) FROM system_issues WHERE issue_type = 'group_invalidation_storm' AND status = 'open'`

// A wide but legitimate ruleset activation dirties every group at once, but no tick of the tail did: the scan
// drains it at its full batch, high risk first, and no storm is raised.
func TestScanWideActivationIsNoStorm(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 10000, Seed: 7, Config: stormConfig})
	groups := b.Count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)`)
	// A rule of a law with no jurisdiction row may apply anywhere: its activation dirties every group.
	b.Exec(t, `INSERT INTO measurement_registry (measurement_id, measurement_name, law_code, method, source_query, target_query,
		comparison, severity, enabled, auto_generated)
		VALUES ('MSR-STORM-WIDE', 'a rule of every group', 'LAW-STORM-NOWHERE', 1, 'SELECT 1', 'SELECT 1', 'strict_equals', 'high', true, false)`)
	rs, created, err := b.Store.ComputeRuleset(b.Ctx, "storm-test")
	if err != nil || !created {
		t.Fatalf("compute ruleset: created=%v err=%v", created, err)
	}
	if act := b.Activate(t, rs.Version); int64(act.DirtiedGroups) != groups {
		t.Fatalf("activation dirtied %d of %d groups, want all", act.DirtiedGroups, groups)
	}
	b.IntakeAll(t) // the tail hands off the activation's audit row: a ruleset change dirties no group itself
	if n := b.Count(t, stormOpenSQL); n != 0 {
		t.Fatalf("%d storm findings after a ruleset activation", n)
	}
	res, err := scan.New(b.Store).ScanTick(b.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
	if err != nil {
		t.Fatal(err)
	}
	if res.Storm || res.Claimed != 60 {
		t.Fatalf("first tick after the activation: storm=%v claimed=%d, want no storm and the full batch of 60", res.Storm, res.Claimed)
	}
	// High risk first: no low-risk group was scanned while a high-risk one waits.
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
		WHERE NOT dirty AND risk_class = 'read_descriptive'`); n != 0 {
		if high := b.Count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
			WHERE dirty AND risk_class <> 'read_descriptive'`); high > 0 {
			t.Fatalf("%d low-risk groups scanned while %d high-risk groups still dirty", n, high)
		}
	}
	b.ScanAll(t, postgres.ModeIncremental)
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'group_invalidation_storm'`); n != 0 {
		t.Fatalf("%d storm findings after the activation drained", n)
	}
}

// bornInEveryBase inserts one trusted birth into each base (class, collection) that has an active group, or into
// the first of them only.
func bornInEveryBase(t *testing.T, b *gcostest.World, tag string, every bool) {
	t.Helper()
	limit := "ALL"
	if !every {
		limit = "1"
	}
	b.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT object_class || '-' || $1 || '-' || source_registry, source_registry, object_class, 'active', 'birth-api', 'gcos-test'
		FROM (SELECT DISTINCT object_class, source_registry FROM governance_group
		      WHERE lifecycle_status = 'active' AND object_class IS NOT NULL AND source_registry IS NOT NULL
		      ORDER BY 1, 2 LIMIT `+limit+`) g`, tag)
}

// The storm rule is a rate, counted where the tail makes its marks: a tick that dirties a few groups is no storm,
// one that dirties more than the fraction is, and it is caught even when the scan drains the burst before any of
// its ticks could see the dirty set large. The throttle holds while the burst drains and the storm ends with it.
func TestScanStormIsOneTickOfTheTail(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 10000, Seed: 7, Config: stormConfig})
	groups := b.Count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)`)
	tail := b.Daemon(t, daemon.Config{}).Intake
	// tick runs ticks of the tail until one dirties something (a tail holds back behind the clock and the
	// transactions in flight, so the first may not reach the births yet), and returns what that one dirtied.
	tick := func() int64 {
		t.Helper()
		var n int64
		wait.For(t, time.Minute, "a tick of the tail that dirties groups", func() bool {
			passes, err := tail.Once(b.Ctx)
			if err != nil {
				t.Fatalf("tail tick: %v", err)
			}
			for _, p := range passes {
				n += p.Dirtied
			}
			return n > 0
		})
		return n
	}

	// A quiet tick: one base's births.
	bornInEveryBase(t, b, "quiet", false)
	if n := tick(); n == 0 || gcos.InvalidationStorm(n, groups, 0.2) {
		t.Fatalf("the quiet tick dirtied %d of %d groups: the test needs a few", n, groups)
	}
	if n := b.Count(t, stormOpenSQL); n != 0 {
		t.Fatalf("%d storm findings after a quiet tick", n)
	}
	b.ScanAll(t, postgres.ModeEvent)

	// A burst: a birth in every base, in one tick.
	bornInEveryBase(t, b, "burst", true)
	dirtied := tick()
	if !gcos.InvalidationStorm(dirtied, groups, 0.2) {
		t.Fatalf("the burst dirtied %d of %d groups: the test needs more than a fifth", dirtied, groups)
	}
	if n := b.Count(t, stormOpenSQL); n != 1 {
		t.Fatalf("%d storm findings open after the burst, want 1", n)
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'group_invalidation_storm'
		AND (evidence_snapshot->>'dirtied')::bigint = $1 AND (evidence_snapshot->>'groups')::bigint = $2`, dirtied, groups); n != 1 {
		t.Fatalf("the storm finding does not carry the tick's %d of %d groups", dirtied, groups)
	}
	res, err := scan.New(b.Store).ScanTick(b.Ctx, scan.ScanOptions{Mode: postgres.ModeEvent})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Storm || res.Claimed != 25 {
		t.Fatalf("tick during the storm: storm=%v claimed=%d, want throttled to 25", res.Storm, res.Claimed)
	}
	b.ScanAll(t, postgres.ModeEvent)
	res, err = scan.New(b.Store).ScanTick(b.Ctx, scan.ScanOptions{Mode: postgres.ModeEvent})
	if err != nil {
		t.Fatal(err)
	}
	if res.Storm {
		t.Fatal("the storm still throttles after the burst drained")
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'group_invalidation_storm' AND status = 'resolved'`); n != 1 {
		t.Fatalf("%d resolved storm findings after the burst drained, want 1", n)
	}

	// Another burst, drained before the next look at the finding: the tail caught it when it made the marks.
	bornInEveryBase(t, b, "drained", true)
	if dirtied := tick(); !gcos.InvalidationStorm(dirtied, groups, 0.2) {
		t.Fatalf("the second burst dirtied %d of %d groups", dirtied, groups)
	}
	b.ScanAll(t, postgres.ModeEvent)
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'group_invalidation_storm' AND reopen_count = 1`); n != 1 {
		t.Fatal("the second burst did not reopen the storm finding")
	}
	if n := b.Count(t, stormOpenSQL); n != 0 {
		t.Fatal("the second storm is still open after its burst drained")
	}
}

func TestScanMultipleScannersScanEachDirtyGroupOnce(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 10000, Seed: 7, Config: func(c *gcos.Config) { c.Scan.BatchSize = 7; c.Scan.StormFraction = 1 }})
	b.Exec(t, `UPDATE governance_candidate_state SET dirty = true, dirty_reason = 'handoff:object_born', dirtied_at = now(), recompute_status = 'dirty'
		WHERE group_key IN (SELECT group_key FROM governance_candidate_state ORDER BY group_key LIMIT 300)`)
	var mu sync.Mutex
	scanned := 0
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store := postgres.New(b.Pool, b.Cfg, nil)
			for {
				res, err := scan.New(store).ScanTick(b.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				scanned += res.Scanned
				mu.Unlock()
				if res.Claimed == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if scanned != 300 {
		t.Fatalf("3 scanners scanned %d groups in total, want each of the 300 dirty groups exactly once", scanned)
	}
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE dirty`); n != 0 {
		t.Fatalf("%d groups still dirty", n)
	}
}

func TestScanTTLExpiry(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	b := gcostest.Ready(t, gcostest.Options{Births: 5000, Seed: 7, Config: func(c *gcos.Config) {
		for k := range c.TTL {
			c.TTL[k] = gcos.Duration(ttl)
		}
	}})
	// Every verdict carries the configured TTL as its own expiry.
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE stale_after - scan_time <> $1::interval`, ttl); n != 0 {
		t.Fatalf("%d rows do not expire exactly one TTL after their scan", n)
	}
	// Wait (about one TTL) until the newest verdict has expired by the database clock: no write happens in between.
	wait.For(t, ttl+time.Minute, "every verdict expires by the database clock", func() bool {
		return b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE stale_after > now()`) == 0
	})
	if n := b.Count(t, `SELECT count(*) FROM v_candidate_effective WHERE clean`); n != 0 {
		t.Fatalf("%d groups still clean past their TTL: verdicts must decay on their own", n)
	}
	expired, err := scan.New(b.Store).ExpireStale(b.Ctx)
	if err != nil || expired == 0 {
		t.Fatalf("expire: %d %v", expired, err)
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'candidate_stale' AND status = 'open'`); n == 0 {
		t.Fatal("no candidate_stale finding for expired high-risk rows")
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'candidate_stale' AND status = 'open'
		AND coalesce_key LIKE '%' || (SELECT group_key FROM governance_candidate_state WHERE risk_class = 'read_descriptive' LIMIT 1)`); n != 0 {
		t.Fatal("candidate_stale raised for a low-risk row")
	}
	b.ScanAll(t, postgres.ModeIncremental)
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'candidate_stale' AND status = 'open'`); n != 0 {
		t.Fatalf("%d candidate_stale findings still open after a fresh scan", n)
	}
}

// TestScanKilledAtRandomPointsLosesAndDuplicatesNothing cancels scan ticks at random points (≥ 20 times, sometimes
// two scanners at once): a claim lives in the transaction that writes the verdicts, so a killed tick leaves its
// groups dirty (nothing lost) and a finished one is committed once (nothing duplicated).
func TestScanKilledAtRandomPointsLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 5000, Seed: 7, Config: func(c *gcos.Config) { c.Scan.BatchSize = 40; c.Scan.StormFraction = 1 }})
	rows := b.Count(t, `SELECT count(*) FROM governance_candidate_state`)
	b.Exec(t, `UPDATE governance_candidate_state SET dirty = true, dirty_reason = 'input', dirtied_at = now(), recompute_status = 'dirty'`)
	var mu sync.Mutex
	killed := 0
	for i := 0; killed < 24 && i < 200; i++ {
		ctx, cancel := context.WithTimeout(b.Ctx, time.Duration(1+i%25)*time.Millisecond)
		var wg sync.WaitGroup
		for range 1 + i%2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := scan.New(b.Store).ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeIncremental}); err != nil {
					mu.Lock()
					killed++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	if killed < 20 {
		t.Fatalf("only %d ticks were killed", killed)
	}
	b.ScanAll(t, postgres.ModeIncremental)
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE dirty OR recompute_status <> 'ok'`); n != 0 {
		t.Fatalf("%d groups lost their re-scan", n)
	}
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state`); n != rows {
		t.Fatalf("candidate rows %d → %d: a killed scan duplicated or lost rows", rows, n)
	}
	if n := b.Count(t, `SELECT count(*) FROM v_candidate_effective WHERE NOT clean`); n != 0 {
		t.Fatalf("%d groups not clean after the kills and a final scan", n)
	}
}

// TestEventDebounce: in event mode a group whose last scan is older than the coalesce window is re-scanned as soon
// as it is marked (leading edge), while a group scanned within the window waits until its mark is as old as the
// window (trailing edge): however many marks arrive, one group is scanned at most once per window.
func TestEventDebounce(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	b := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 7, Config: func(c *gcos.Config) { c.Scan.CoalesceWindow = gcos.Duration(window); c.Scan.StormFraction = 1 }})
	var cold, hot string
	if err := b.Pool.QueryRow(b.Ctx, `SELECT min(group_key), max(group_key) FROM governance_candidate_state`).Scan(&cold, &hot); err != nil {
		t.Fatal(err)
	}
	// hot was scanned just now; cold's last scan is older than the window.
	if _, err := b.Pool.Exec(b.Ctx, `UPDATE governance_candidate_state SET scan_time = now() - interval '1 hour', stale_after = now() + interval '1 day'
		WHERE group_key = $1`, cold); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(b.Ctx, `UPDATE governance_candidate_state SET scan_time = now() WHERE group_key = $1`, hot); err != nil {
		t.Fatal(err)
	}
	event := func() scan.ScanResult {
		t.Helper()
		res, err := scan.New(b.Store).ScanTick(b.Ctx, scan.ScanOptions{Mode: postgres.ModeEvent, Debounce: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for range 3 { // repeated marks collapse into the one pending mark
		if _, err := b.Store.MarkDirty(b.Ctx, []string{cold, hot}, "handoff:object_born"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if res := event(); res.Scanned != 1 || res.Remaining != 1 {
		t.Fatalf("first tick: scanned %d, remaining %d; want the cold group at once and the hot one held", res.Scanned, res.Remaining)
	}
	if dirty := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE dirty AND group_key = '`+hot+`'`); dirty != 1 {
		t.Fatalf("the hot group was scanned inside its window")
	}
	if time.Since(start) < window-200*time.Millisecond {
		if res := event(); res.Scanned != 0 {
			t.Fatalf("a second tick inside the window scanned %d groups", res.Scanned)
		}
	}
	wait.Pass(b.Ctx, time.Until(start.Add(window+100*time.Millisecond))) // the coalesce window closes
	if res := event(); res.Scanned != 1 || res.Remaining != 0 {
		t.Fatalf("after the window: scanned %d, remaining %d; want the hot group", res.Scanned, res.Remaining)
	}
}

// TestFullAuditFindsRegistryDrift: a registry that feeds verdicts changed behind the tail's back (no change row) is
// found by the full audit, which re-scans exactly the groups whose inputs from it drifted and names the registry
// and the count in an issue_event_gap; the same change signalled by a change row raises nothing.
func TestFullAuditFindsRegistryDrift(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 7})
	if _, err := scan.New(b.Store).FullAudit(b.Ctx, nil); err != nil { // a baseline snapshot that records the inputs
		t.Fatal(err)
	}
	var coll, status string
	if err := b.Pool.QueryRow(b.Ctx, `SELECT c.collection_name, c.coverage_status FROM collection_registry c
		WHERE EXISTS (SELECT 1 FROM governance_group g WHERE g.source_registry = c.collection_name AND g.retired_at IS NULL)
		ORDER BY c.collection_name LIMIT 1`).Scan(&coll, &status); err != nil {
		t.Fatal(err)
	}
	flipped := "BIRTH_EXEMPT_SYSTEM"
	if status == flipped {
		flipped = "BIRTH_REQUIRED"
	}
	affected := b.Strings(t, `SELECT group_key FROM governance_group WHERE source_registry = $1 AND retired_at IS NULL`, coll)
	before := digestExcept(t, b, affected)
	b.Exec(t, `UPDATE collection_registry SET coverage_status = $2 WHERE collection_name = $1`, coll, flipped)
	res, err := scan.New(b.Store).FullAudit(b.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	drift := res.RegistryDrift[gcos.InputCollections]
	if drift.Groups != len(affected) || drift.Unsignalled != len(affected) {
		t.Fatalf("collection_registry drift %+v, want %d groups, all unsignalled (audit %+v)", drift, len(affected), res.RegistryDrift)
	}
	if len(res.RegistryDrift) != 1 {
		t.Fatalf("drift reported in %v, want collection_registry only", res.RegistryDrift)
	}
	var evidence struct {
		Registry string `json:"registry"`
		Groups   int    `json:"groups"`
	}
	if err := b.Pool.QueryRow(b.Ctx, `SELECT evidence_snapshot FROM system_issues WHERE issue_type = 'issue_event_gap'
		AND status = 'open' AND coalesce_key = $1`, gcos.CoalesceKey(gcos.IssueIssueEventGap, "registry-drift:"+gcos.InputCollections)).Scan(&evidence); err != nil {
		t.Fatalf("no open issue_event_gap naming collection_registry: %v", err)
	}
	if evidence.Registry != gcos.InputCollections || evidence.Groups != len(affected) {
		t.Fatalf("finding evidence %+v, want registry %s and %d groups", evidence, gcos.InputCollections, len(affected))
	}
	// The drifted groups were re-scanned under the new coverage; no other group's row moved.
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = ANY($1) AND dirty`, affected); n != 0 {
		t.Fatalf("%d drifted groups still dirty after the audit", n)
	}
	if n := b.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = ANY($1) AND last_run_id = $2`, affected, res.RunID); n != int64(len(affected)) {
		t.Fatalf("the audit re-scanned %d of the %d drifted groups", n, len(affected))
	}
	if after := digestExcept(t, b, affected); after != before {
		t.Fatal("the audit changed rows of groups whose inputs did not drift")
	}

	// Signalled: the same kind of change with its change row, handed off before the audit, raises nothing new.
	b.Exec(t, `UPDATE system_issues SET status = 'resolved', resolved_at = now() WHERE issue_type = 'issue_event_gap'`)
	b.Exec(t, `UPDATE collection_registry SET coverage_status = $2 WHERE collection_name = $1`, coll, status)
	if _, err := b.Store.MarkDirty(b.Ctx, affected, "handoff:collection_changed"); err != nil {
		t.Fatal(err)
	}
	res, err = scan.New(b.Store).FullAudit(b.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if drift := res.RegistryDrift[gcos.InputCollections]; drift.Groups != len(affected) || drift.Unsignalled != 0 {
		t.Fatalf("signalled drift %+v, want %d groups, none unsignalled", drift, len(affected))
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'issue_event_gap' AND status = 'open' AND `+gcostest.NotHeldAnnouncement); n != 0 {
		t.Fatalf("%d issue_event_gap findings for a signalled change", n)
	}
}

// TestScanEarlyCutoff: a re-scan whose result equals the stored one moves only the row's qualification (scan time,
// snapshot, ruleset), raises nothing and is counted as unchanged in its run.
func TestScanEarlyCutoff(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 7})
	key := groupWhere(t, b, `effective_verdict = 'unknown' OR effective_verdict = 'relevant'`)
	b.ScanAll(t, postgres.ModeIncremental) // settle the first counts
	if _, err := b.Store.MarkDirty(b.Ctx, []string{key}, gcos.DirtyTTL); err != nil {
		t.Fatal(err)
	}
	b.ScanAll(t, postgres.ModeIncremental)
	findings := b.Count(t, `SELECT coalesce(sum(occurrence_count), 0) FROM system_issues WHERE `+gcostest.NotHeldAnnouncement)
	if _, err := b.Store.MarkDirty(b.Ctx, []string{key}, gcos.DirtyTTL); err != nil {
		t.Fatal(err)
	}
	// The row as the mark left it: the scan may move its qualification only.
	var updated, scanned time.Time
	if err := b.Pool.QueryRow(b.Ctx, `SELECT c.updated_at, c.scan_time FROM governance_candidate_state c
		JOIN v_current_ruleset USING (ruleset_version) WHERE c.group_key = $1`, key).Scan(&updated, &scanned); err != nil {
		t.Fatal(err)
	}
	res, err := scan.New(b.Store).ScanTick(b.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scanned != 1 || res.Unchanged != 1 || res.VerdictChanges != 0 {
		t.Fatalf("re-scan: scanned %d, unchanged %d, verdict changes %d; want 1, 1, 0", res.Scanned, res.Unchanged, res.VerdictChanges)
	}
	var updated2, scanned2 time.Time
	var dirty bool
	if err := b.Pool.QueryRow(b.Ctx, `SELECT c.updated_at, c.scan_time, c.dirty FROM governance_candidate_state c
		JOIN v_current_ruleset USING (ruleset_version) WHERE c.group_key = $1`, key).Scan(&updated2, &scanned2, &dirty); err != nil {
		t.Fatal(err)
	}
	if dirty || !scanned2.After(scanned) {
		t.Fatalf("the qualification did not move: dirty %v, scan_time %v → %v", dirty, scanned, scanned2)
	}
	if !updated2.Equal(updated) {
		t.Fatalf("an unchanged result rewrote the row: updated_at %v → %v", updated, updated2)
	}
	if n := b.Count(t, `SELECT coalesce(sum(occurrence_count), 0) FROM system_issues WHERE `+gcostest.NotHeldAnnouncement); n != findings {
		t.Fatalf("an unchanged result raised findings: occurrences %d → %d", findings, n)
	}
	if n := b.Count(t, `SELECT groups_unchanged FROM candidate_scan_run WHERE run_id = $1`, res.RunID); n != 1 {
		t.Fatalf("run %s counts %d unchanged scans, want 1", res.RunID, n)
	}
	// The run is audited once and announced on both streams it served.
	if n := b.Count(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_scan_run' AND entity_code = $1
		AND action = 'succeeded' AND alert_detail::jsonb ->> 'mode' = 'incremental'`, res.RunID); n != 1 {
		t.Fatalf("%d audit rows of run %s, want 1", n, res.RunID)
	}
	if got := b.Strings(t, `SELECT event_type_hint FROM event_pending WHERE capture_payload ->> 'correlation_id' = 'run:' || $1
		ORDER BY event_type_hint`, res.RunID); !slices.Equal(got, []string{"governance.candidate.scan_completed",
		"governance.coverage.scan_completed"}) {
		t.Fatalf("run %s announced %v", res.RunID, got)
	}
}
