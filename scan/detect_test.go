package scan_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

// orphanGroupsSQL is the orphan set from the stored state, independently of the detections: live relevant groups
// with members whose read-time coverage is orphan.
const orphanGroupsSQL = `SELECT 'gov:coverage:orphan:' || group_key FROM v_candidate_effective
	WHERE candidate_verdict = 'relevant' AND coverage_outcome = 'orphan' AND coalesce(member_count, group_member_count) > 0
	  AND group_key IN (SELECT group_key FROM governance_group WHERE retired_at IS NULL) ORDER BY 1`

// ownerGapsSQL is the owner-gap set from the stored state: a scope and class with orphans and no covered group.
const ownerGapsSQL = `SELECT 'gov:coverage:owner.gap:' || scope || ':' || object_class FROM v_candidate_effective
	WHERE candidate_verdict = 'relevant' AND coalesce(member_count, group_member_count) > 0
	  AND group_key IN (SELECT group_key FROM governance_group WHERE retired_at IS NULL)
	GROUP BY scope, object_class
	HAVING count(*) FILTER (WHERE coverage_outcome = 'orphan') > 0 AND count(*) FILTER (WHERE coverage_outcome = 'covered') = 0
	ORDER BY 1`

// TestCoverageDetections: the scans raise one coalesced finding per orphan group, owner gap, island and phantom, and
// announce each once; an owner revoked, an exception expired and a coverage change move the set, and each fix is
// resolved by the next scan and announced as governance.coverage.gap_resolved.
func TestCoverageDetections(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 11, Config: func(cfg *gcos.Config) {
		cfg.Scan.CoalesceWindow = gcos.Duration(time.Millisecond)
		cfg.Scan.StormFraction = 1
		cfg.Scan.DetectWrites = 100_000 // each pass writes all it finds (TestDetectSpreadsOverPasses bounds it)
	}})
	s := &scan.Scheduler{Stage: scan.New(w.Store), Config: w.Store.Config().Scan}
	pass := func(mode string) scan.Pass {
		t.Helper()
		p, err := s.Once(w.Ctx, mode)
		if err != nil {
			t.Fatalf("%s pass: %v", mode, err)
		}
		return p
	}
	open := func(types ...gcos.IssueType) []string {
		t.Helper()
		var ts []string
		for _, ty := range types {
			ts = append(ts, string(ty))
		}
		return w.Strings(t, `SELECT coalesce_key FROM system_issues WHERE issue_type = ANY($1) AND status = 'open'
			AND coalesce_key NOT LIKE 'gov:coverage:orphan:object:%' ORDER BY 1`, ts)
	}
	// announced counts the captured announcements of a type about a key with a transition.
	announced := func(eventType, key, transition string) int64 {
		t.Helper()
		return w.Count(t, `SELECT count(*) FROM event_pending WHERE event_type_hint = $1
			AND capture_payload->'safe_payload'->>'coalesce_key' = $2 AND capture_payload->'safe_payload'->>'transition' = $3`,
			eventType, key, transition)
	}
	// consistent: the open findings are the conditions the stored state says hold, each open once, announced once.
	consistent := func(when string) {
		t.Helper()
		for _, c := range []struct {
			what      string
			issue     gcos.IssueType
			eventType string
			sql       string
		}{
			{"orphans", gcos.IssueCoverageOrphan, "governance.coverage.orphan", orphanGroupsSQL},
			{"owner gaps", gcos.IssueCoverageOwnerGap, "governance.coverage.owner.gap", ownerGapsSQL},
		} {
			want, got := w.Strings(t, c.sql), open(c.issue)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: open %s %v, the stored state says %v", when, c.what, got, want)
			}
			for _, key := range got {
				if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key); n != 1 {
					t.Fatalf("%s: %d open rows for %s", when, n, key)
				}
				// One announcement per open cycle: opened once, reopened once per reopening.
				reopens := w.Count(t, `SELECT reopen_count FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key)
				if n := announced(c.eventType, key, postgres.TransitionOpened) + announced(c.eventType, key, postgres.TransitionReopened); n != reopens+1 {
					t.Fatalf("%s: %s announced %d times over %d open cycles", when, key, n, reopens+1)
				}
			}
		}
	}

	p := pass(postgres.ModeIncremental)
	orphans := open(gcos.IssueCoverageOrphan)
	if len(orphans) == 0 || len(open(gcos.IssueCoverageOwnerGap)) == 0 {
		t.Fatalf("the world has %d orphans and %d owner gaps to detect, want some of each (pass %+v)", len(orphans),
			len(open(gcos.IssueCoverageOwnerGap)), p.Detections)
	}
	consistent("first pass")
	// A pass over nothing new raises nothing.
	if p = pass(postgres.ModeIncremental); p.Detections == nil || p.Detections.Raised != 0 || p.Detections.Resolved != 0 {
		t.Fatalf("a second pass over the same state: %+v", p.Detections)
	}
	consistent("second pass")

	// A person resolves an orphan that still holds: the next pass reopens it, announced once more.
	var id int64
	if err := w.Pool.QueryRow(w.Ctx, `SELECT id FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, orphans[0]).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := w.Store.InTx(w.Ctx, func(tx pgx.Tx) error {
		return postgres.ResolveFindingByIDTx(w.Ctx, tx, id, "assigned in the next planning round", gcos.Actor{Principal: "alice"})
	}); err != nil {
		t.Fatal(err)
	}
	if p = pass(postgres.ModeIncremental); p.Detections.Raised != 1 {
		t.Fatalf("the pass after a person resolved a standing orphan: %+v, want it reopened", p.Detections)
	}
	if n := w.Count(t, `SELECT reopen_count FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, orphans[0]); n != 1 {
		t.Fatalf("the orphan a person resolved is open with reopen_count %d, want 1", n)
	}
	consistent("reopened")

	// An owner revoked: every ownership row that could cover a class in a scope, so its groups become orphans, raised
	// by the event scan that judges them, and the class an owner gap.
	var scope, class string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT scope, object_class FROM v_candidate_effective
		WHERE coverage_outcome = 'covered' AND group_member_count > 0 ORDER BY scope, object_class LIMIT 1`).Scan(&scope, &class); err != nil {
		t.Fatalf("no covered group: %v", err)
	}
	owners := w.Strings(t, `SELECT id::text FROM governance_object_ownership WHERE status = 'active' AND scope_code = $1
		AND (entity_type IS NULL OR entity_type = $2)
		AND (collection_name IS NULL OR collection_name IN (SELECT source_registry FROM governance_group WHERE object_class = $2))`, scope, class)
	covered := w.Strings(t, `SELECT group_key FROM v_candidate_effective WHERE scope = $1 AND object_class = $2
		AND coverage_outcome = 'covered' AND group_member_count > 0 ORDER BY group_key`, scope, class)
	w.Exec(t, `UPDATE governance_object_ownership SET status = 'revoked' WHERE id::text = ANY($1)`, owners)
	if _, err := w.Store.MarkDirty(w.Ctx, covered, "handoff:authority_changed"); err != nil {
		t.Fatal(err)
	}
	wait.Pass(w.Ctx, 10*time.Millisecond) // past the coalesce window
	pass(postgres.ModeEvent)
	pass(postgres.ModeIncremental) // the detection pass raises what the event scan judged
	gap := gcos.CoalesceKey(gcos.IssueCoverageOwnerGap, scope+":"+class)
	// Their members moved to groups of no owner scope (a dimension), judged by the same tick.
	orphaned := w.Strings(t, `SELECT group_key FROM v_candidate_effective WHERE scope = $1 AND object_class = $2
		AND candidate_verdict = 'relevant' AND coverage_outcome = 'orphan' AND group_member_count > 0 ORDER BY group_key`, scope, class)
	if len(orphaned) == 0 {
		t.Fatal("no group of the class is an orphan after its owners were revoked")
	}
	for _, g := range orphaned {
		if !slices.Contains(open(gcos.IssueCoverageOrphan), orphanKey(g)) {
			t.Fatalf("the scans did not raise the orphan of group %s, whose owner was revoked", g)
		}
	}
	consistent("owner revoked")
	if !slices.Contains(open(gcos.IssueCoverageOwnerGap), gap) {
		t.Fatalf("no owner gap %s after its only owner was revoked", gap)
	}

	// An exception granted to one of those groups covers it; once it expires the group is an orphan again.
	excepted := orphaned[0]
	var coll string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT source_registry FROM governance_group WHERE group_key = $1`, excepted).Scan(&coll); err != nil {
		t.Fatal(err)
	}
	w.Exec(t, `INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at, status)
		VALUES ('EXC-DETECT-1', $1, $2, $3, 'APR-DETECT-1', now() + interval '1 day', 'approved')`, scope, class, coll)
	if _, err := w.Store.MarkDirty(w.Ctx, []string{excepted}, "handoff:authority_changed"); err != nil {
		t.Fatal(err)
	}
	pass(postgres.ModeEvent)
	if slices.Contains(open(gcos.IssueCoverageOrphan), orphanKey(excepted)) {
		t.Fatal("an excepted group is still an open orphan")
	}
	if announced(gcos.EventGapResolved, orphanKey(excepted), postgres.TransitionResolved) != 1 {
		t.Fatal("the orphan the exception closed was not announced resolved once")
	}
	w.Exec(t, `UPDATE governance_exception SET expires_at = now() - interval '1 second' WHERE exception_id = 'EXC-DETECT-1'`)
	pass(postgres.ModeIncremental) // expires the lapsed exception's group, re-scans it, then detects
	if !slices.Contains(open(gcos.IssueCoverageOrphan), orphanKey(excepted)) {
		t.Fatal("the group whose exception expired is not an open orphan again")
	}
	consistent("exception expired")

	// A coverage change: the collection becomes exempt, its groups are no longer relevant, their orphans close.
	exempt := w.Strings(t, `SELECT group_key FROM governance_group WHERE source_registry = $1`, coll)
	w.Exec(t, `UPDATE collection_registry SET coverage_status = 'BIRTH_EXEMPT_SYSTEM' WHERE collection_name = $1`, coll)
	if _, err := w.Store.MarkDirty(w.Ctx, exempt, "handoff:collection_changed"); err != nil {
		t.Fatal(err)
	}
	pass(postgres.ModeEvent)
	pass(postgres.ModeIncremental)
	if slices.Contains(open(gcos.IssueCoverageOrphan), orphanKey(excepted)) {
		t.Fatal("an orphan of an exempt collection is still open")
	}
	consistent("coverage change")

	// Registry rows naming what no registry holds: an island and a phantom, each once, routed by type.
	w.Exec(t, `INSERT INTO governance_object_ownership (scope_code, entity_type, owner_ref, status) VALUES ($1, 'shadow_ledger', 'team-x', 'active')`, scope)
	var island int64
	if err := w.Pool.QueryRow(w.Ctx, `SELECT max(id) FROM governance_object_ownership`).Scan(&island); err != nil {
		t.Fatal(err)
	}
	w.Exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
		VALUES ('EXC-DETECT-2', $1, $2, 'NEVER-BORN-1', 'APR-DETECT-2', now() + interval '1 day', 'ffff', 'approved')`, scope, coll)
	p = pass(postgres.ModeIncremental)
	islandKey := gcos.CoalesceKey(gcos.IssueCoverageIsland, gcos.TableOwnership+":"+strconv.FormatInt(island, 10))
	phantomKey := gcos.CoalesceKey(gcos.IssuePhantomGap, "exception:EXC-DETECT-2")
	if got := open(gcos.IssueCoverageIsland, gcos.IssuePhantomGap); !slices.Contains(got, islandKey) || !slices.Contains(got, phantomKey) {
		t.Fatalf("open islands and phantoms %v, want %s and %s (pass %+v)", got, islandKey, phantomKey, p.Detections)
	}
	if announced("governance.coverage.island.detected", islandKey, postgres.TransitionOpened) != 1 ||
		announced("governance.phantom.gap", phantomKey, postgres.TransitionOpened) != 1 {
		t.Fatal("the island and the phantom were not announced once each")
	}
	var table, ref string
	var gapType, anchor, action string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT entity_table, entity_ref, capture_payload->'safe_payload'->>'gap_type',
		capture_payload->'safe_payload'->>'coalesce_anchor', capture_payload->'safe_payload'->>'proposed_action_code'
		FROM event_pending WHERE event_type_hint = 'governance.phantom.gap'`).Scan(&table, &ref, &gapType, &anchor, &action); err != nil {
		t.Fatal(err)
	}
	if table != gcos.TableExceptions || ref != "EXC-DETECT-2" || gapType != "phantom" || anchor != phantomKey || action != gcos.ActionRevokeOrRebind {
		t.Fatalf("the phantom is announced at %s/%s with gap %q, anchor %q, action %q; want the exception's row, and the gap's terms (doc 41 §41.5)",
			table, ref, gapType, anchor, action)
	}

	// Every condition fixed: the owner restored, the rows retired, the collection required again.
	w.Exec(t, `UPDATE governance_object_ownership SET status = 'active' WHERE id::text = ANY($1)`, owners)
	w.Exec(t, `UPDATE governance_object_ownership SET status = 'retired' WHERE id = $1`, island)
	w.Exec(t, `UPDATE governance_exception SET status = 'revoked' WHERE exception_id = 'EXC-DETECT-2'`)
	if _, err := w.Store.MarkDirty(w.Ctx, covered, "handoff:authority_changed"); err != nil {
		t.Fatal(err)
	}
	pass(postgres.ModeEvent)
	pass(postgres.ModeIncremental)
	for _, key := range []string{gap, islandKey, phantomKey} {
		if slices.Contains(open(gcos.CoverageGapTypes...), key) {
			t.Fatalf("%s is still open after its condition was fixed", key)
		}
		if announced(gcos.EventGapResolved, key, postgres.TransitionResolved) != 1 {
			t.Fatalf("%s's resolution was not announced once as %s", key, gcos.EventGapResolved)
		}
	}
	consistent("fixed")
}

func orphanKey(group string) string { return gcos.CoalesceKey(gcos.IssueCoverageOrphan, group) }

// TestDetectDefersWhatAScanHolds: a detection whose finding key a scan holds is left to the next pass, never waited
// for (a pass queued behind a tick, or a tick behind a pass, is how two of them deadlock); the rest commit.
func TestDetectDefersWhatAScanHolds(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 13, Config: func(cfg *gcos.Config) {
		cfg.Scan.DetectWrites = 100_000 // one pass writes everything: only the held key waits
	}})
	orphans := w.Strings(t, orphanGroupsSQL)
	if len(orphans) < 2 {
		t.Fatalf("the world has %d orphans, want at least 2", len(orphans))
	}
	held, err := w.Pool.Begin(w.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback(w.Ctx) }()
	if _, err := held.Exec(w.Ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.finding:' || $1, 0))`, orphans[0]); err != nil {
		t.Fatal(err)
	}
	stage := scan.New(w.Store)
	det, err := stage.Detect(w.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if det.Deferred != 1 || det.Raised != det.Conditions-1 {
		t.Fatalf("a pass with one key held: %+v, want that one deferred and every other condition raised", det)
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1`, orphans[0]); n != 0 {
		t.Fatalf("the held key has %d rows, want none yet", n)
	}
	if err := held.Rollback(w.Ctx); err != nil {
		t.Fatal(err)
	}
	if det, err = stage.Detect(w.Ctx, ""); err != nil || det.Raised != 1 || det.Deferred != 0 {
		t.Fatalf("the next pass: %+v %v, want the deferred one raised", det, err)
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, orphans[0]); n != 1 {
		t.Fatalf("the deferred key has %d open rows, want 1", n)
	}
}

// TestDetectSpreadsOverPasses: a pass writes at most scan.detect_writes findings, raises before anything else; the
// next passes write the rest, so the first pass over an estate of many gaps is not one burst.
func TestDetectSpreadsOverPasses(t *testing.T) {
	t.Parallel()
	const limit = 100
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 13, Config: func(cfg *gcos.Config) {
		cfg.Scan.DetectWrites = limit
	}})
	stage := scan.New(w.Store)
	var passes, raised int
	for {
		det, err := stage.Detect(w.Ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		passes++
		raised += det.Raised
		if det.Raised > limit || det.Raised+det.Left != det.Conditions-(raised-det.Raised) {
			t.Fatalf("pass %d: %+v, want at most %d raised and the rest left", passes, det, limit)
		}
		if det.Left == 0 {
			if want := (det.Conditions + limit - 1) / limit; passes != want {
				t.Fatalf("%d conditions took %d passes of at most %d writes, want %d", det.Conditions, passes, limit, want)
			}
			break
		}
		if passes > 100 {
			t.Fatal("the passes never finish")
		}
	}
	orphans := w.Strings(t, orphanGroupsSQL)
	if open := w.Strings(t, `SELECT coalesce_key FROM system_issues WHERE issue_type = 'coverage_orphan' AND status = 'open' ORDER BY 1`); !slices.Equal(open, orphans) {
		t.Fatalf("after the passes %d orphans are open, the stored state has %d", len(open), len(orphans))
	}

	// An open orphan whose count no longer matches: brought up to date once scan.detect_refresh has passed since it
	// was last seen, with no occurrence counted; until then left as it is.
	w.Exec(t, `UPDATE system_issues SET evidence_snapshot = jsonb_set(evidence_snapshot::jsonb, '{objects}', '-1')::json
		WHERE coalesce_key = $1 AND status = 'open'`, orphans[0])
	if det, err := stage.Detect(w.Ctx, ""); err != nil || det.Refreshed != 0 {
		t.Fatalf("a pass within scan.detect_refresh: %+v %v, want nothing refreshed", det, err)
	}
	w.Exec(t, `UPDATE system_issues SET last_seen_at = now() - interval '1 day' WHERE coalesce_key = $1 AND status = 'open'`, orphans[0])
	if det, err := stage.Detect(w.Ctx, ""); err != nil || det.Refreshed != 1 || det.Raised != 0 {
		t.Fatalf("a pass past scan.detect_refresh: %+v %v, want the one count refreshed", det, err)
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open' AND occurrence_count = 1
		AND (evidence_snapshot::jsonb->>'objects')::bigint > 0`, orphans[0]); n != 1 {
		t.Fatal("the refreshed orphan does not carry its count, or counted an occurrence")
	}
}

// TestDetectAcrossARulesetActivation: between a ruleset's activation and the scans that judge the groups it dirtied,
// a pass resolves none of the orphans and owner gaps that were open (they would reopen once judged); after the
// scans the open set is again what the stored state says.
func TestDetectAcrossARulesetActivation(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 13, Config: func(cfg *gcos.Config) {
		cfg.Scan.CoalesceWindow = gcos.Duration(time.Millisecond)
		cfg.Scan.StormFraction = 1
		cfg.Scan.DetectWrites = 100_000
	}})
	stage := scan.New(w.Store)
	openGaps := func() []string {
		t.Helper()
		return w.Strings(t, `SELECT coalesce_key FROM system_issues WHERE issue_type IN ('coverage_orphan', 'coverage_owner_gap')
			AND status = 'open' AND coalesce_key NOT LIKE 'gov:coverage:orphan:object:%' ORDER BY 1`)
	}
	if _, err := stage.Detect(w.Ctx, ""); err != nil {
		t.Fatal(err)
	}
	before := openGaps()
	if len(before) == 0 {
		t.Fatal("the world opened no orphan or owner gap")
	}

	// A new ruleset (a class's coverage requirement flipped), activated and not scanned yet.
	w.Exec(t, `UPDATE governance_coverage_profile SET coverage_required = NOT coalesce(coverage_required, true)
		WHERE entity_type = (SELECT min(entity_type) FROM governance_coverage_profile)`)
	rs, _, err := w.Store.ComputeRuleset(w.Ctx, "test-proposer")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Store.ActivateRuleset(w.Ctx, rs.Version, "APR-UNDECIDED", "test-approver"); err != nil {
		t.Fatal(err)
	}
	// The activation carries every group's row to the new ruleset (the groups it affects dirty): no verdict is
	// missing, and none may be read as covered meanwhile.
	if n := w.Count(t, `SELECT count(*) FROM v_candidate_effective WHERE candidate_verdict = 'relevant' AND coverage_outcome IS NULL`); n != 0 {
		t.Fatalf("after the activation %d relevant groups have no coverage", n)
	}
	if n := w.Count(t, `SELECT count(*) FROM v_candidate_effective WHERE dirty`); n == 0 {
		t.Fatal("the activation dirtied no group: the test reaches nothing the new ruleset has not judged")
	}
	det, err := stage.Detect(w.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if det.Resolved != 0 {
		t.Fatalf("a pass before the new ruleset's scans: %+v, want nothing resolved", det)
	}
	if after := openGaps(); !slices.Equal(after, before) {
		t.Fatalf("a pass before the new ruleset's scans changed the open gaps: %d before, %d after", len(before), len(after))
	}

	// The scans judge every group; the next pass brings the open set to what the stored state says.
	drained := false
	for range 1000 {
		res, err := stage.ScanTick(w.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed == 0 || res.Scanned+res.Seeded == 0 {
			drained = true
			break
		}
	}
	if !drained {
		t.Fatal("the scans did not drain")
	}
	if _, err := stage.Detect(w.Ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got, want := w.Strings(t, `SELECT coalesce_key FROM system_issues WHERE issue_type = 'coverage_orphan' AND status = 'open'
		AND coalesce_key NOT LIKE 'gov:coverage:orphan:object:%' ORDER BY 1`), w.Strings(t, orphanGroupsSQL); !slices.Equal(got, want) {
		t.Fatalf("after the scans %d orphans are open, the stored state has %d", len(got), len(want))
	}
	if got, want := w.Strings(t, `SELECT coalesce_key FROM system_issues WHERE issue_type = 'coverage_owner_gap' AND status = 'open' ORDER BY 1`),
		w.Strings(t, ownerGapsSQL); !slices.Equal(got, want) {
		t.Fatalf("after the scans %d owner gaps are open, the stored state has %d", len(got), len(want))
	}
}
