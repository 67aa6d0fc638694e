package intake_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/events"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
	"gcos/scan"
)

// The handoff apply step (postgres.ApplyHandoff) driven by the real intake worker over a small synthetic world: every
// expectation about which groups a change dirties is an independent selection from the source rows (births and the
// registries), never the group-registry filter the implementation itself uses.

const hoGuard = 5 * time.Millisecond

// hoEnv is a small world backfilled under an active ruleset, with the governance vocabulary registered and every
// governance.handoff.* type active; newHandoffEnv also has the intake caught up with the world's history and every
// group clean.
type hoEnv struct {
	*gcostest.World
	w     *intake.Worker
	stage *intake.Stage // the worker's: its route fallbacks are counted here
	mu    sync.Mutex
	stats []intake.HandoffStats
}

func newHandoffEnv(t *testing.T, births int, tweak func(*gcos.Config)) *hoEnv {
	t.Helper()
	e := newHandoffWorld(t, births, tweak)
	e.catchUp(t)
	e.ScanAll(t, postgres.ModeIncremental)
	if d := e.dirty(t); len(d) != 0 {
		t.Fatalf("%d groups still dirty after the baseline scan", len(d))
	}
	return e
}

// newHandoffWorld is newHandoffEnv before the intake has read anything (its cursors are created at "start").
func newHandoffWorld(t *testing.T, births int, tweak func(*gcos.Config)) *hoEnv {
	t.Helper()
	b := gcostest.New(t, gcostest.Options{Births: births, Changes: 100, Seed: 11, Config: func(cfg *gcos.Config) {
		in := &cfg.Intake
		in.PageSize = 500
		in.PollInterval = gcos.Duration(20 * time.Millisecond)
		in.HorizonGuard = gcos.Duration(hoGuard)
		in.BackoffBase, in.BackoffMax = gcos.Duration(time.Millisecond), gcos.Duration(4*time.Millisecond)
		in.MaxAttempts = 3
		if tweak != nil {
			tweak(cfg)
		}
	}})
	ctx, cfg := b.Ctx, b.Cfg
	res := b.Backfill(t)
	b.Activate(t, res.RulesetVersion)
	// These tests hand off the whole history: undo the backfill's handshake (TestBackfillHandshake covers it).
	for _, src := range res.CursorsAtHorizon {
		if _, err := intake.New(b.Store).ResetCursor(ctx, src, "start"); err != nil {
			t.Fatal(err)
		}
	}
	e := &hoEnv{World: b, stage: intake.New(b.Store)}
	e.activateTypes(t, "governance.handoff.")
	e.w = &intake.Worker{Stage: e.stage, Config: cfg.Intake, DisableMonitor: true, Apply: e.apply}
	return e
}

// activateTypes registers the governance vocabulary and activates every type whose name starts with prefix.
func (e *hoEnv) activateTypes(t *testing.T, prefix string) {
	t.Helper()
	if _, err := events.New(e.Store).RegisterVocabulary(e.Ctx); err != nil {
		t.Fatal(err)
	}
	types, err := events.New(e.Store).ListEventTypes(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range types {
		if strings.HasPrefix(ty.EventType, prefix) && !ty.Active {
			if _, err := events.New(e.Store).ActivateEventType(e.Ctx, ty.EventType, "APR-TEST-EVENTS", "test-approver"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// apply is the worker's apply step: the store's handoff apply, with its stats kept for the test.
func (e *hoEnv) apply(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
	failures, st, err := e.stage.ApplyHandoff(ctx, tx, rows)
	if err == nil {
		e.mu.Lock()
		e.stats = append(e.stats, st)
		e.mu.Unlock()
	}
	return failures, err
}

// takeStats returns the stats of the apply calls since the last takeStats.
func (e *hoEnv) takeStats() []intake.HandoffStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.stats
	e.stats = nil
	return out
}

// catchUp lets the rows committed so far fall below the horizon and runs one full intake pass.
func (e *hoEnv) catchUp(t *testing.T) []intake.SourceTick {
	t.Helper()
	wait.Pass(e.Ctx, 4*hoGuard) // the horizon guard
	ticks, err := e.w.Once(e.Ctx)
	if err != nil {
		t.Fatalf("intake: %v", err)
	}
	return ticks
}

// dirty returns the dirty groups under the current ruleset and their reasons.
func (e *hoEnv) dirty(t *testing.T) map[string]string {
	t.Helper()
	return e.Pairs(t, `SELECT c.group_key, c.dirty_reason FROM governance_candidate_state c
		JOIN v_current_ruleset cr USING (ruleset_version) WHERE c.dirty`)
}

// hoBases is every birth with the base group it belongs to (its anchor's, for an inherited child), read straight
// from birth_registry: the independent source of "which groups does this change affect".
const hoBases = `
WITH x AS (
    SELECT b.id, b.entity_code AS code, b.source_system AS src,
           coalesce(p.entity_type, b.entity_type) AS c, coalesce(p.collection_name, b.collection_name) AS k,
           coalesce(p.status, b.status) AS s
    FROM birth_registry b
    LEFT JOIN birth_registry p ON b.parent_code IS NOT NULL AND p.collection_name = b.collection_name
                              AND p.entity_code = b.parent_code)
`

// groupsOfBirths returns the group keys (every scope) of the base groups of the births selected by cond on x.
func (e *hoEnv) groupsOfBirths(t *testing.T, cond string, args ...any) []string {
	t.Helper()
	return e.Strings(t, hoBases+`SELECT DISTINCT g.group_key FROM governance_group g
		JOIN x ON (g.object_class, g.source_registry, g.lifecycle_status) = (x.c, x.k, x.s) WHERE `+cond, args...)
}

// signalIDs returns the ids of the handoff signals (heartbeats aside) in the outbox.
func (e *hoEnv) signalIDs(t *testing.T) []string {
	t.Helper()
	return e.Strings(t, `SELECT id::text FROM event_outbox WHERE event_type LIKE 'governance.handoff.%'
		AND event_type <> 'governance.handoff.heartbeat'`)
}

type hoSignal struct {
	eventType, kind, groupKey, subject, source, corr string
}

// newSignals returns the handoff signals emitted since before (a signalIDs result).
func (e *hoEnv) newSignals(t *testing.T, before []string) []hoSignal {
	t.Helper()
	rows, err := e.Pool.Query(e.Ctx, `SELECT event_type, coalesce(safe_payload->>'change_kind', ''),
		coalesce(safe_payload->>'group_key', ''), coalesce(event_subject_ref, ''), source_system, correlation_id
		FROM event_outbox WHERE event_type LIKE 'governance.handoff.%' AND event_type <> 'governance.handoff.heartbeat'
		  AND NOT (id::text = ANY($1)) ORDER BY created_at, id`, before)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hoSignal, error) {
		var s hoSignal
		err := r.Scan(&s.eventType, &s.kind, &s.groupKey, &s.subject, &s.source, &s.corr)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// clean re-scans the dirty set so the next case starts from a clean store.
func (e *hoEnv) clean(t *testing.T) {
	t.Helper()
	e.ScanAll(t, postgres.ModeIncremental)
	if d := e.dirty(t); len(d) != 0 {
		t.Fatalf("%d groups still dirty after the scan", len(d))
	}
}

func sameSet(got map[string]string, want []string) (missing, extra []string) {
	w := map[string]bool{}
	for _, k := range want {
		w[k] = true
		if _, ok := got[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !w[k] {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
}

// expectDirty fails unless exactly want is dirty, every group with reason.
func (e *hoEnv) expectDirty(t *testing.T, what string, want []string, reason string) {
	t.Helper()
	got := e.dirty(t)
	if missing, extra := sameSet(got, want); len(missing)+len(extra) > 0 {
		t.Fatalf("%s: dirtied %d groups, want %d: %d missing %v, %d not affected but dirtied %v", what, len(got),
			len(want), len(missing), head(missing), len(extra), head(extra))
	}
	for k, r := range got {
		if r != reason {
			t.Fatalf("%s: group %s dirty_reason %q, want %q", what, k, r, reason)
		}
	}
}

func head(xs []string) []string {
	if len(xs) > 5 {
		return xs[:5]
	}
	return xs
}

// TestHandoffApply drives the handoff apply step through the intake worker: births and every changelog kind of the
// default mapping dirty exactly the groups they provably affect with the right reason, GCOS's own audit rows are
// skipped except a ruleset activation, and an unmappable row is retried and dead-lettered while later rows flow.
func TestHandoffApply(t *testing.T) {
	t.Parallel()
	const bucket = 20
	e := newHandoffEnv(t, 800, func(c *gcos.Config) { c.Intake.SignalBucket = bucket })
	scopes := e.Count(t, `SELECT count(*) FROM governance_responsibility_scope`)
	if scopes < 2 {
		t.Fatalf("the world has %d scopes; the test needs several", scopes)
	}

	t.Run("births map to their group in every scope, a child to its anchor's, coalesced per page", func(t *testing.T) {
		var c1, k1, c2, k2 string
		if err := e.Pool.QueryRow(e.Ctx, `SELECT a.object_class, a.source_registry, b.object_class, b.source_registry
			FROM (SELECT object_class, source_registry FROM governance_group WHERE lifecycle_status = 'active'
			      GROUP BY 1, 2 ORDER BY sum(member_count) DESC, 1 LIMIT 2) a
			CROSS JOIN LATERAL (SELECT object_class, source_registry FROM governance_group
			      WHERE lifecycle_status = 'active' AND object_class <> a.object_class GROUP BY 1, 2 ORDER BY 1 LIMIT 1) b
			LIMIT 1`).Scan(&c1, &k1, &c2, &k2); err != nil {
			t.Fatal(err)
		}
		// A container whose class and collection have no 'pending' group: its pending children must land in the
		// container's (active) group, never in a group of their own.
		var c3, k3, container string
		if err := e.Pool.QueryRow(e.Ctx, `SELECT b.entity_type, b.collection_name, b.entity_code FROM birth_registry b
			WHERE b.parent_code IS NULL AND b.status = 'active' AND b.entity_type NOT IN ($1, $2)
			  AND NOT EXISTS (SELECT 1 FROM governance_group g WHERE g.object_class = b.entity_type
			                  AND g.source_registry = b.collection_name AND g.lifecycle_status = 'pending')
			ORDER BY b.id LIMIT 1`, c1, c2).Scan(&c3, &k3, &container); err != nil {
			t.Fatal(err)
		}
		// Start the new births on a fresh signal bucket.
		var first int64
		if err := e.Pool.QueryRow(e.Ctx, `SELECT setval(pg_get_serial_sequence('birth_registry', 'id'),
			(SELECT (max(id) / $1 + 1) * $1 + $1 - 1 FROM birth_registry)) + 1`, bucket).Scan(&first); err != nil {
			t.Fatal(err)
		}
		before := e.signalIDs(t)
		cur, err := intake.New(e.Store).GetCursor(e.Ctx, "birth_registry")
		if err != nil {
			t.Fatal(err)
		}
		pos := cur.Position
		e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			SELECT 'ho-b-' || g, CASE WHEN g % 3 = 0 THEN $3 ELSE $1 END, CASE WHEN g % 3 = 0 THEN $4 ELSE $2 END,
			       'active', 'birth-api', 'birth-gateway'
			FROM generate_series(1, 70) g`, k1, c1, k2, c2)
		e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, parent_code, source_system, actor_ref)
			SELECT $3 || '-c' || g, $1, $2, 'pending', $3, 'birth-api', 'birth-gateway' FROM generate_series(1, 3) g`, k3, c3, container)
		e.takeStats()
		e.catchUp(t)

		want := e.groupsOfBirths(t, `x.id >= $1`, first)
		if int64(len(want)) != 3*scopes {
			t.Fatalf("independent selection found %d groups for 3 base groups in %d scopes", len(want), scopes)
		}
		e.expectDirty(t, "births", want, "handoff:object_born")
		anchor := e.groupsOfBirths(t, `x.k = $1 AND x.code = $2`, k3, container)
		for _, k := range anchor {
			if !slices.Contains(want, k) {
				t.Fatalf("the children's groups %v do not include their anchor's group %s", want, k)
			}
		}
		if n := e.Count(t, `SELECT count(*) FROM governance_group WHERE object_class = $1 AND source_registry = $2
			AND lifecycle_status = 'pending'`, c3, k3); n != 0 {
			t.Fatalf("inherited children created %d groups of their own", n)
		}

		// One page: one dirty mark per group, one signal per (base group, id bucket).
		var page *intake.HandoffStats
		for _, st := range e.takeStats() {
			if st.Kinds[string(gcos.ChangeObjectBorn)] > 0 {
				if page != nil {
					t.Fatalf("the births were applied over several pages: %+v and %+v", *page, st)
				}
				page = &st
			}
		}
		wantSignals := e.Count(t, hoBases+`SELECT count(DISTINCT (x.c, x.k, x.s, x.id / $2, x.src)) FROM x WHERE x.id >= $1`, first, bucket)
		if page == nil || page.Dirtied != int64(len(want)) || int64(page.Signals) != wantSignals || int64(page.Emitted) != wantSignals {
			t.Fatalf("page stats %+v: want %d groups dirtied, %d signals emitted", page, len(want), wantSignals)
		}
		sigs := e.newSignals(t, before)
		if int64(len(sigs)) != wantSignals {
			t.Fatalf("%d new signals in the outbox, want %d", len(sigs), wantSignals)
		}
		corrs := map[string]bool{}
		for _, s := range sigs {
			if s.eventType != gcos.ChangeObjectBorn.EventType() || s.kind != string(gcos.ChangeObjectBorn) ||
				!slices.Contains(want, s.groupKey) || s.source != "birth-api" || corrs[s.corr] {
				t.Fatalf("signal %+v", s)
			}
			corrs[s.corr] = true
		}

		// Re-delivering the same page (a replay) marks nothing again and emits nothing again.
		dirtyBefore := e.Digest(t, `SELECT * FROM governance_candidate_state`)
		if _, err := intake.New(e.Store).ResetCursor(e.Ctx, "birth_registry", pos); err != nil {
			t.Fatal(err)
		}
		e.takeStats()
		e.catchUp(t)
		if got := e.newSignals(t, before); len(got) != len(sigs) {
			t.Fatalf("replay emitted %d more signals", len(got)-len(sigs))
		}
		if e.Digest(t, `SELECT * FROM governance_candidate_state`) != dirtyBefore {
			t.Fatal("replaying the page changed candidate state")
		}
		for _, st := range e.takeStats() {
			if st.Dirtied != 0 || st.Emitted+st.Captured != 0 {
				t.Fatalf("replayed page: %+v, want nothing dirtied or emitted again", st)
			}
		}
		e.clean(t)
	})

	var coll, otherColl string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT (SELECT collection_name FROM birth_registry GROUP BY 1 ORDER BY count(*) DESC, 1 OFFSET 1 LIMIT 1),
		(SELECT collection_name FROM birth_registry GROUP BY 1 ORDER BY count(*) DESC, 1 OFFSET 2 LIMIT 1)`).Scan(&coll, &otherColl); err != nil {
		t.Fatal(err)
	}
	var pivot, pivotClass string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT pivot_code, entity_type FROM pivot_definitions ORDER BY pivot_code LIMIT 1`).Scan(&pivot, &pivotClass); err != nil {
		t.Fatal(err)
	}
	var objID int64
	var objClass, objCode string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT id, entity_type, entity_code FROM birth_registry
		WHERE parent_code IS NULL AND status = 'active' AND entity_type <> $1 ORDER BY id DESC LIMIT 1`, pivotClass).Scan(&objID, &objClass, &objCode); err != nil {
		t.Fatal(err)
	}
	var ownerID string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT o.id::text FROM governance_object_ownership o
		WHERE o.collection_name IS NOT NULL AND EXISTS (SELECT 1 FROM birth_registry b WHERE b.collection_name = o.collection_name)
		ORDER BY o.id LIMIT 1`).Scan(&ownerID); err != nil {
		t.Fatal(err)
	}
	var exceptionID string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT x.exception_id FROM governance_exception x
		WHERE EXISTS (SELECT 1 FROM birth_registry b WHERE b.collection_name = x.collection_name OR b.entity_type = x.entity_type)
		ORDER BY x.exception_id LIMIT 1`).Scan(&exceptionID); err != nil {
		t.Fatal(err)
	}
	// Three other active objects of the class, each moved to a terminal status by its retire, supersede or merge.
	movers := e.Strings(t, `SELECT b.collection_name || ':' || b.entity_code FROM birth_registry b
		WHERE b.parent_code IS NULL AND b.status = 'active' AND b.entity_type = $1 AND b.id <> $2
		  AND NOT EXISTS (SELECT 1 FROM birth_registry c WHERE c.collection_name = b.collection_name AND c.parent_code = b.entity_code)
		ORDER BY b.id DESC LIMIT 3`, objClass, objID)
	if len(movers) < 3 {
		t.Fatalf("the world has %d other active %s objects; the test needs 3", len(movers), objClass)
	}
	move := func(i int, status string) func(t *testing.T) {
		return func(t *testing.T) {
			coll, code, _ := strings.Cut(movers[i], ":")
			e.Exec(t, `UPDATE birth_registry SET status = $3 WHERE collection_name = $1 AND entity_code = $2`, coll, code, status)
		}
	}
	// A lifecycle move dirties the group it is in and every live group of its class in its registry (the one it left
	// is among them: the row does not say which, and comparing counts races a scan, intake.movedBases), in every
	// scope, and nothing else.
	moved := func(i int, status string) func(t *testing.T) []string {
		return func(t *testing.T) []string {
			coll, _, _ := strings.Cut(movers[i], ":")
			return e.Strings(t, `SELECT g.group_key FROM governance_group g
				WHERE g.object_class = $1 AND g.source_registry = $2
				  AND (g.retired_at IS NULL OR g.lifecycle_status = $3)
				  AND EXISTS (SELECT 1 FROM governance_candidate_state c WHERE c.group_key = g.group_key)`, objClass, coll, status)
		}
	}
	moverCode := func(i int) string { _, code, _ := strings.Cut(movers[i], ":"); return code }
	type row struct{ entityType, code, action string }
	for i, tc := range []struct {
		name   string
		rows   []row
		kind   gcos.ChangeKind
		reason string
		want   func(t *testing.T) []string
		write  func(t *testing.T) // the substrate change the rows report, when there is one
	}{
		{"collection update", []row{{"collection", coll, "update"}}, gcos.ChangeCollection, "handoff:collection_changed",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.k = $1`, coll) }, nil},
		{"collection create", []row{{"collection", otherColl, "create"}}, gcos.ChangeCollection, "handoff:collection_changed",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.k = $1`, otherColl) }, nil},
		{"collection count_changed", []row{{"collection", coll, "count_changed"}}, gcos.ChangeCount, "handoff:count_changed",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.k = $1`, coll) }, nil},
		{"source source_changed", []row{{"source", otherColl, "source_changed"}}, gcos.ChangeSource, "handoff:source_changed",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.k = $1`, otherColl) }, nil},
		{"pivot axis_introduced", []row{{"pivot", pivot, "axis_introduced"}}, gcos.ChangeAxisIntroduced, gcos.DirtyAxis,
			func(t *testing.T) []string {
				return e.groupsOfBirths(t, `x.c = (SELECT entity_type FROM pivot_definitions WHERE pivot_code = $1)`, pivot)
			}, nil},
		{"pivot update", []row{{"pivot", pivot, "update"}}, gcos.ChangeAxisIntroduced, gcos.DirtyAxis,
			func(t *testing.T) []string {
				return e.groupsOfBirths(t, `x.c = (SELECT entity_type FROM pivot_definitions WHERE pivot_code = $1)`, pivot)
			}, nil},
		// A rule change dirties nothing at intake: the verdicts stand under the active ruleset until a new one is
		// activated, whose diff dirties exactly the changed rules' scope (TestSB12_TargetedRulesetInvalidation).
		{"law_jurisdiction policy_changed", []row{{"law_jurisdiction", "DIEU-01", "policy_changed"}}, gcos.ChangePolicy, "",
			func(t *testing.T) []string { return nil }, nil},
		{"measurement update", []row{{"measurement", "MSR-0001", "update"}}, gcos.ChangePolicy, "",
			func(t *testing.T) []string { return nil }, nil},
		{"ownership owner_changed", []row{{"ownership", ownerID, "owner_changed"}}, gcos.ChangeAuthority, gcos.DirtyAuthority,
			func(t *testing.T) []string {
				return e.Strings(t, hoBases+`SELECT DISTINCT g.group_key FROM governance_group g
					JOIN x ON (g.object_class, g.source_registry, g.lifecycle_status) = (x.c, x.k, x.s)
					JOIN governance_object_ownership o ON o.id::text = $1
					WHERE g.scope = o.scope_code AND (x.k = o.collection_name OR x.c = o.entity_type)`, ownerID)
			}, nil},
		{"exception exception_changed", []row{{"exception", exceptionID, "exception_changed"}}, gcos.ChangeAuthority, gcos.DirtyAuthority,
			func(t *testing.T) []string {
				return e.Strings(t, hoBases+`SELECT DISTINCT g.group_key FROM governance_group g
					JOIN x ON (g.object_class, g.source_registry, g.lifecycle_status) = (x.c, x.k, x.s)
					JOIN governance_exception o ON o.exception_id = $1
					WHERE g.scope = o.scope_code AND (x.k = o.collection_name OR x.c = o.entity_type)`, exceptionID)
			}, nil},
		{"<class> retire", []row{{objClass, moverCode(0), "retire"}}, gcos.ChangeObjectRetired, "handoff:object_retired",
			moved(0, "retired"), move(0, "retired")},
		{"<class> supersede", []row{{objClass, moverCode(1), "supersede"}}, gcos.ChangeObjectRetired, "handoff:object_retired",
			moved(1, "superseded"), move(1, "superseded")},
		{"<class> merge", []row{{objClass, moverCode(2), "merge"}}, gcos.ChangeObjectRetired, "handoff:object_retired",
			moved(2, "merged"), move(2, "merged")},
		{"<class> create", []row{{objClass, objCode, "create"}}, gcos.ChangeObjectRegistered, "handoff:object_registered",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.id = $1`, objID) }, nil},
		{"<class> register", []row{{objClass, objCode, "register"}}, gcos.ChangeObjectRegistered, "handoff:object_registered",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.id = $1`, objID) }, nil},
		{"<class> update", []row{{objClass, objCode, "update"}}, gcos.ChangeObjectRegistered, "handoff:object_registered",
			func(t *testing.T) []string { return e.groupsOfBirths(t, `x.id = $1`, objID) }, nil},
		// An object the inventory does not hold cannot be placed in a group: fail closed, every group of its class.
		{"<class> register of an unborn object", []row{{objClass, "not-born-yet", "register"}}, gcos.ChangeObjectRegistered,
			"handoff:object_registered", func(t *testing.T) []string { return e.groupsOfBirths(t, `x.c = $1`, objClass) }, nil},
	} {
		t.Run("changelog "+tc.name, func(t *testing.T) {
			before := e.signalIDs(t)
			actor := fmt.Sprintf("ops:case-%d", i)
			rowsBefore := e.candidateRows(t)
			if tc.write != nil {
				tc.write(t)
			}
			for _, r := range tc.rows {
				e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ($1, $2, $3, $4)`,
					r.entityType, r.code, r.action, actor)
			}
			e.catchUp(t)
			want := tc.want(t)
			if tc.reason != "" && len(want) == 0 {
				t.Fatal("the independent selection is empty: the case proves nothing")
			}
			e.expectDirty(t, tc.name, want, tc.reason)
			t.Logf("%s: %d groups dirtied, exactly the affected ones", tc.name, len(want))
			sigs := e.newSignals(t, before)
			if len(sigs) != len(tc.rows) {
				t.Fatalf("%d signals, want %d: %+v", len(sigs), len(tc.rows), sigs)
			}
			for _, s := range sigs {
				if s.eventType != tc.kind.EventType() || s.kind != string(tc.kind) || s.source != actor ||
					(len(want) > 0) != (s.groupKey != "") || (s.groupKey != "" && !slices.Contains(want, s.groupKey)) {
					t.Fatalf("signal %+v, want kind %s from %s naming one of the %d groups", s, tc.kind, actor, len(want))
				}
			}
			e.clean(t)
			// Δ other groups = 0: once scanned, no row but the affected groups' changed.
			after := e.candidateRows(t)
			for k, r := range rowsBefore {
				if !slices.Contains(want, k) && after[k] != r {
					t.Fatalf("%s: group %s is not affected but its row changed:\n%s\n→ %s", tc.name, k, r, after[k])
				}
			}
		})
	}

	// Only the row about an object the inventory does not hold fell back to its whole class.
	if n := e.stage.RouteFallbacks(); n != 1 {
		t.Errorf("route fallbacks = %d, want 1 (the register of an unborn object)", n)
	}

	// Rows shaped like GCOS's audit rows (governance_*) but not written by it: the shipped rules skip them, except a
	// ruleset activation, which maps to ruleset_changed once (TestIntakeEchoTrustUnmapped covers the echo by id).
	t.Run("governance_* rows are skipped by rule, a ruleset activation maps to ruleset_changed once", func(t *testing.T) {
		before := e.signalIDs(t)
		var pos string
		if c, err := intake.New(e.Store).GetCursor(e.Ctx, "registry_changelog"); err != nil {
			t.Fatal(err)
		} else {
			pos = c.Position
		}
		e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES
			('governance_snapshot', '42', 'capture', 'gcos:snapshot'),
			('governance_dlq', 'birth_registry:7', 'dead_letter', 'gcos:intake'),
			('governance_ruleset', 'gov-rs-test000000', 'activate', 'gcos:test-approver')`)
		e.catchUp(t)
		e.expectDirty(t, "own audit rows", nil, "")
		check := func(what string) {
			t.Helper()
			sigs := e.newSignals(t, before)
			if len(sigs) != 1 || sigs[0].kind != string(gcos.ChangeRuleset) || sigs[0].subject != "gov-rs-test000000" {
				t.Fatalf("%s: signals %+v, want one ruleset_changed", what, sigs)
			}
		}
		check("first delivery")
		if _, err := intake.New(e.Store).ResetCursor(e.Ctx, "registry_changelog", pos); err != nil {
			t.Fatal(err)
		}
		e.catchUp(t)
		check("replay")
		e.expectDirty(t, "own audit rows replayed", nil, "")
	})

	t.Run("an unmappable row is retried, dead-lettered and visible while later rows flow", func(t *testing.T) {
		var poison int64
		if err := e.Pool.QueryRow(e.Ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
			VALUES ('mystery_registry', 'M-1', 'update', 'ops:poison') RETURNING id`).Scan(&poison); err != nil {
			t.Fatal(err)
		}
		e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ('collection', $1, 'update', 'ops:after-poison')`, coll)
		ticks := e.catchUp(t)
		if ticks[1].Failed != 1 {
			t.Fatalf("changelog pass: %+v, want the poison row on the retry lane", ticks[1])
		}
		e.expectDirty(t, "the row after the poison row", e.groupsOfBirths(t, `x.k = $1`, coll), "handoff:collection_changed")
		wait.For(t, 10*time.Second, "the poison row is dead-lettered", func() bool {
			if e.Count(t, `SELECT count(*) FROM event_pending WHERE entity_table = 'registry_changelog' AND entity_ref = ($1::bigint)::text
				AND dead_lettered_at IS NOT NULL`, poison) > 0 {
				return true
			}
			e.catchUp(t)
			return false
		})
		var attempts int
		var lastErr, hint string
		if err := e.Pool.QueryRow(e.Ctx, `SELECT error_count, last_error, event_type_hint FROM event_pending
			WHERE entity_table = 'registry_changelog' AND entity_ref = ($1::bigint)::text`, poison).Scan(&attempts, &lastErr, &hint); err != nil {
			t.Fatal(err)
		}
		if attempts != e.Cfg.Intake.MaxAttempts || !strings.Contains(lastErr, "neither a registry word nor a known class") ||
			hint != "governance.handoff.retry" {
			t.Fatalf("dead letter: %d attempts, last error %q, hint %q", attempts, lastErr, hint)
		}
		if open, err := gcostest.FindingOpen(e.Ctx, e.Pool, gcos.IssueHandoffDLQ); err != nil || !open {
			t.Fatalf("handoff_dlq open = %v (%v)", open, err)
		}
		if n := e.Count(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_dlq' AND entity_code = $1`,
			fmt.Sprintf("registry_changelog:%d", poison)); n != 1 {
			t.Fatalf("%d audit rows for the dead letter, want 1", n)
		}
		if c, err := intake.New(e.Store).GetCursor(e.Ctx, "registry_changelog"); err != nil || c.DeadLettered != 1 {
			t.Fatalf("cursor %+v (%v), want one dead letter counted", c, err)
		}
		e.clean(t)
		// Intake continues after the dead letter.
		e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ('source', $1, 'source_changed', 'ops:after-dlq')`, otherColl)
		e.catchUp(t)
		e.expectDirty(t, "a row after the dead letter", e.groupsOfBirths(t, `x.k = $1`, otherColl), "handoff:source_changed")
		e.clean(t)
	})
}

// TestHandoffUntrustedSource: with trusted_sources narrowed, a birth from another source system is quarantined — a
// needs_input object row (untrusted_source) held by an open input finding — and dirties, signals and seeds nothing:
// its group cannot become relevant through that signal, while the same birth from a trusted source would make a new
// group relevant. A replay quarantines nothing twice.
func TestHandoffUntrustedSource(t *testing.T) {
	t.Parallel()
	e := newHandoffEnv(t, 800, func(c *gcos.Config) {
		c.Intake.TrustedSources = []string{"import-*", "birth-api", "registry-sync"}
	})
	// Two classes whose active group is relevant and that have no 'pending' group yet.
	rows, err := e.Pool.Query(e.Ctx, `SELECT object_class, source_registry FROM v_candidate_effective v
		WHERE effective_verdict = 'relevant' AND lifecycle_status = 'active'
		  AND NOT EXISTS (SELECT 1 FROM governance_group g WHERE g.object_class = v.object_class
		                  AND g.source_registry = v.source_registry AND g.lifecycle_status = 'pending')
		GROUP BY 1, 2 ORDER BY 1 LIMIT 2`)
	if err != nil {
		t.Fatal(err)
	}
	type cls struct{ class, coll string }
	picks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cls, error) {
		var c cls
		return c, r.Scan(&c.class, &c.coll)
	})
	if err != nil || len(picks) != 2 {
		t.Fatalf("need two relevant classes without a pending group: %v %v", picks, err)
	}
	rogue, trusted := picks[0], picks[1]
	// Everything but the member count: a quarantined birth is counted in its group at once, and changes nothing else.
	activeRows := `SELECT c.group_key, c.ruleset_version, c.candidate_verdict, c.input_quality_state, c.dirty, c.dirty_reason,
		    c.scan_time, c.stale_after, c.recompute_status, c.evidence_fingerprint, c.coverage_required, c.updated_at
		FROM governance_candidate_state c JOIN governance_group g USING (group_key)
		WHERE g.object_class = '` + rogue.class + `' AND g.lifecycle_status = 'active'`
	activeCount := `SELECT sum(c.member_count) FROM governance_candidate_state c JOIN governance_group g USING (group_key)
		WHERE g.object_class = '` + rogue.class + `' AND g.source_registry = '` + rogue.coll + `' AND g.lifecycle_status = 'active' AND c.ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)`
	activeGroups := `SELECT count(*) FROM governance_group g WHERE g.object_class = '` + rogue.class + `' AND g.source_registry = '` + rogue.coll + `' AND g.lifecycle_status = 'active' AND g.retired_at IS NULL`
	activeBefore, countBefore := e.Digest(t, activeRows), e.Count(t, activeCount)
	before := e.signalIDs(t)
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref) VALUES
		('rogue-1', $1, $2, 'pending', 'rogue-loader', 'mallory'),
		('rogue-2', $1, $2, 'active', 'rogue-loader', 'mallory'),
		('rogue-3', $1, $2, 'active', NULL, 'mallory'),
		('trusted-1', $3, $4, 'pending', 'birth-api', 'birth-gateway')`, rogue.coll, rogue.class, trusted.coll, trusted.class)
	e.catchUp(t)

	e.expectDirty(t, "untrusted births", nil, "")
	sigs := e.newSignals(t, before)
	if len(sigs) != 1 || sigs[0].kind != string(gcos.ChangeObjectBorn) {
		t.Fatalf("signals %+v, want only the trusted birth's", sigs)
	}
	if e.Digest(t, activeRows) != activeBefore {
		t.Fatal("an untrusted birth touched the verdict rows of its (existing) group")
	}
	// rogue-2 and rogue-3 are active: counted once in the active group of every scope.
	if got, want := e.Count(t, activeCount), countBefore+2*e.Count(t, activeGroups); got != want {
		t.Fatalf("members of the rogue class's active groups = %d, want %d (two quarantined births counted in every scope)", got, want)
	}
	objects := `SELECT candidate_key, candidate_verdict || '/' || input_quality_state || '/' || materialization_reason
		FROM governance_candidate_object WHERE object_ref LIKE $1 || ':rogue-%'`
	got := e.Pairs(t, objects, rogue.coll)
	if len(got) != 3 {
		t.Fatalf("object rows %v, want one per untrusted birth", got)
	}
	for k, v := range got {
		if v != "needs_input/untrusted_source/open_finding" {
			t.Fatalf("object %s: %s", k, v)
		}
		f := e.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'input.untrusted_source' AND status = 'open'
			AND occurrence_count = 1 AND coalesce_key = $1`, gcos.CoalesceKey(gcos.InputIssue(gcos.InputUntrustedSource), k))
		if f != 1 {
			t.Fatalf("object %s: want one open input.untrusted_source finding", k)
		}
	}
	// Each quarantined row refers to its open finding (input_quality_ref, doc 40 §40.4).
	linked := `SELECT count(*) FROM governance_candidate_object o JOIN system_issues s ON s.id = o.input_quality_ref
		WHERE o.object_ref LIKE $1 || ':rogue-%' AND s.issue_type = 'input.untrusted_source' AND s.status = 'open'`
	if n := e.Count(t, linked, rogue.coll); n != 3 {
		t.Fatalf("%d quarantined object rows refer to their open finding, want 3", n)
	}
	objectDigest := e.Digest(t, `SELECT * FROM governance_candidate_object`)

	e.ScanAll(t, postgres.ModeIncremental)
	verdicts := func(c cls) map[string]string {
		return e.Pairs(t, `SELECT group_key, effective_verdict FROM v_candidate_effective
			WHERE object_class = $1 AND source_registry = $2 AND lifecycle_status = 'pending'`, c.class, c.coll)
	}
	rv, tv := verdicts(rogue), verdicts(trusted)
	if len(rv) == 0 || len(tv) == 0 {
		t.Fatalf("pending groups: untrusted %v, trusted %v", rv, tv)
	}
	for k, v := range rv {
		if v != string(gcos.VerdictNeedsInput) {
			t.Fatalf("the untrusted-only group %s became %s", k, v)
		}
	}
	relevant := 0
	for _, v := range tv {
		if v == string(gcos.VerdictRelevant) {
			relevant++
		}
	}
	if relevant == 0 {
		t.Fatalf("control: the trusted birth's new group never became relevant (%v), so the test proves nothing", tv)
	}
	for _, obj := range []string{rogue.coll + ":rogue-1", rogue.coll + ":rogue-2"} {
		if g := gate.New(e.Store, nil).Gate(e.Ctx, obj, "write"); g.Decision != "block" {
			t.Fatalf("gate %s: %s (%v), want block", obj, g.Decision, g.Reasons)
		}
	}

	// A replay of the same births quarantines nothing twice.
	if _, err := intake.New(e.Store).ResetCursor(e.Ctx, "birth_registry", "start"); err != nil {
		t.Fatal(err)
	}
	e.catchUp(t)
	if n := e.Count(t, `SELECT max(occurrence_count) FROM system_issues WHERE issue_type = 'input.untrusted_source'`); n != 1 {
		t.Fatalf("a replay raised the untrusted-source findings again (occurrences %d)", n)
	}
	if e.Digest(t, `SELECT * FROM governance_candidate_object`) != objectDigest {
		t.Fatal("a replay rewrote the quarantined object rows")
	}
	// Closing a finding clears the reference to it.
	if closed, err := e.Store.ResolveFinding(e.Ctx, gcos.InputIssue(gcos.InputUntrustedSource), rogue.coll+":rogue-1", ""); err != nil || !closed {
		t.Fatalf("resolve: %v (closed %v)", err, closed)
	}
	if n := e.Count(t, linked, rogue.coll); n != 2 {
		t.Fatalf("%d object rows still refer to an open finding, want 2", n)
	}
	if n := e.Count(t, `SELECT count(*) FROM governance_candidate_object WHERE object_ref = $1 AND input_quality_ref IS NOT NULL`, rogue.coll+":rogue-1"); n != 0 {
		t.Fatal("input_quality_ref still points at the closed finding")
	}
}

// candidateRows is every candidate row under the current ruleset, as text, by group key.
func (e *hoEnv) candidateRows(t *testing.T) map[string]string {
	t.Helper()
	return e.Pairs(t, `SELECT c.group_key, c::text FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)`)
}

// keptCountsDiffer counts the base groups of kept collections whose kept member count differs from the source's
// (a collection with a pending recount request is not read by any scan and not compared).
func (e *hoEnv) keptCountsDiffer(t *testing.T) int64 {
	t.Helper()
	return e.Count(t, hoBases+`, src AS (SELECT c, k, s, count(*) AS n FROM x GROUP BY 1, 2, 3)
		SELECT count(*) FROM (SELECT b.object_class, b.source_registry, b.lifecycle_status, b.members FROM governance_base_count b) kb
		FULL JOIN src ON (src.c, src.k, src.s) = (kb.object_class, kb.source_registry, kb.lifecycle_status)
		WHERE coalesce(kb.source_registry, src.k) IN (SELECT source_registry FROM governance_collection_count)
		  AND coalesce(kb.source_registry, src.k) NOT IN (SELECT source_registry FROM governance_recount_request)
		  AND kb.members IS DISTINCT FROM src.n`)
}

// retireAndHandOff retires one object with its changelog row and hands off the change ledger alone, whose handoff
// must count the collection again rather than file a recount request.
func (e *hoEnv) retireAndHandOff(t *testing.T, coll, class, code string) {
	t.Helper()
	e.Exec(t, `UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code)
	e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ($1, $2, 'retire', 'ops:kept')`, class, code)
	wait.Pass(e.Ctx, 4*hoGuard)
	if _, err := e.stage.PollTail(e.Ctx, postgres.ChangelogTailSource(), e.Cfg.Intake, e.apply); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(t, `SELECT count(*) FROM governance_recount_request`); n != 0 {
		t.Fatalf("the retire filed %d recount requests instead of counting its collection again", n)
	}
}

// TestReadAheadPageAfterARecount: a births page read ahead before a change's handoff counted its collection again
// (RecountKept) is applied after it. Its rows may show a birth in the base group it has since left, so the page
// places that collection's births again as the source holds them now (by id) instead of adding them as read: the
// counts stay exact, and the collection is not counted from the source a second time.
func TestReadAheadPageAfterARecount(t *testing.T) {
	t.Parallel()
	e := newHandoffEnv(t, 600, nil)
	births := postgres.BirthTailSource(e.Cfg.SourceBinding)
	var coll, class string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT collection_name, entity_type FROM birth_registry
		WHERE status = 'active' AND parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class); err != nil {
		t.Fatal(err)
	}
	// A full page, then a page that holds the birth the change moves.
	page := e.Cfg.Intake.PageSize
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT 'ahead-' || g, $1, $2, 'active', 'birth-api', 'tester' FROM generate_series(1, $3::int) g ORDER BY g`, coll, class, page+50)
	wait.Pass(e.Ctx, 4*hoGuard)
	first, err := e.stage.PollTail(e.Ctx, births, e.Cfg.Intake, e.apply)
	if err != nil || !first.PageFull {
		t.Fatalf("the first page: %+v, %v", first, err)
	}
	intake.WaitReadAhead(e.stage, births.Name) // the next page is read: 'ahead-<page+25>' is active in it
	moved := fmt.Sprintf("ahead-%d", page+25)
	e.retireAndHandOff(t, coll, class, moved)
	countedAt := func() (at time.Time) {
		if err := e.Pool.QueryRow(e.Ctx, `SELECT counted_at FROM governance_collection_count WHERE source_registry = $1`, coll).Scan(&at); err != nil {
			t.Fatalf("the counts of %s are not kept: %v", coll, err)
		}
		return at
	}
	recounted := countedAt()
	second, err := e.stage.PollTail(e.Ctx, births, e.Cfg.Intake, e.apply)
	if err != nil || !second.ReadAhead || second.Read != 50 {
		t.Fatalf("the second page was not the one read ahead: %+v, %v", second, err)
	}
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after a page read before the recount", n)
	}
	if at := countedAt(); !at.Equal(recounted) {
		t.Fatalf("the page counted %s from the source again (counted_at %s, the recount's %s)", coll, at, recounted)
	}
}

// TestHandoffKeepsMemberCounts: the births handoff keeps every collection's base-group counts equal to the
// source's, however the history is paged; the handoff of a lifecycle move counts its collection again at once, so
// the counts stay kept and exact; a cursor reset (a replay) drops the counts instead of counting births twice.
func TestHandoffKeepsMemberCounts(t *testing.T) {
	t.Parallel()
	e := newHandoffEnv(t, 1500, nil)
	kept := func() int64 { return e.Count(t, `SELECT count(*) FROM governance_collection_count`) }
	if kept() == 0 {
		t.Fatal("the handoff of the history kept no counts")
	}
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after the history", n)
	}
	var coll, class, code string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT collection_name, entity_type, entity_code FROM birth_registry
		WHERE status = 'active' AND parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class, &code); err != nil {
		t.Fatal(err)
	}
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT 'kept-' || g, $1, $2, 'active', 'birth-api', 'tester' FROM generate_series(1, 30) g`, coll, class)
	e.catchUp(t)
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after 30 births", n)
	}
	// A retire moves a birth between base groups: the change's handoff counts the collection again, and its counts
	// are exact (and kept, so scans read them) when it commits, before any births page.
	countedAt := func() (at time.Time) {
		if err := e.Pool.QueryRow(e.Ctx, `SELECT counted_at FROM governance_collection_count WHERE source_registry = $1`, coll).Scan(&at); err != nil {
			t.Fatalf("the counts of %s are not kept: %v", coll, err)
		}
		return at
	}
	before := countedAt()
	e.retireAndHandOff(t, coll, class, code)
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after the retire's handoff", n)
	}
	if !countedAt().After(before) {
		t.Fatal("the retire's handoff did not count its collection again")
	}
	e.catchUp(t)
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('kept-after-retire', $1, $2, 'active', 'birth-api', 'tester')`, coll, class)
	e.catchUp(t)
	if n := e.Count(t, `SELECT count(*) FROM governance_recount_request`); n != 0 {
		t.Fatalf("%d recount requests left after a births page", n)
	}
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after a retire and a recount", n)
	}
	// A replay of the last births drops every kept count rather than counting them twice.
	cur, err := intake.New(e.Store).GetCursor(e.Ctx, "birth_registry")
	if err != nil {
		t.Fatal(err)
	}
	var back string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT to_char(born_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM birth_registry
		WHERE entity_code LIKE 'kept-%' ORDER BY born_at, id LIMIT 1`).Scan(&back); err != nil {
		t.Fatal(err)
	}
	if _, err := intake.New(e.Store).ResetCursor(e.Ctx, "birth_registry", back); err != nil {
		t.Fatalf("reset from %s to %s: %v", cur.Position, back, err)
	}
	if kept() != 0 {
		t.Fatal("a cursor reset kept the counts")
	}
	e.catchUp(t)
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after a replay", n)
	}
	// The scans read the kept counts: every group's member count is its base's count at the source.
	e.ScanAll(t, postgres.ModeIncremental)
	if n := e.Count(t, hoBases+`, src AS (SELECT c, k, s, count(*) AS n FROM x GROUP BY 1, 2, 3)
		SELECT count(*) FROM v_candidate_effective v JOIN src ON (src.c, src.k, src.s) = (v.object_class, v.source_registry, v.lifecycle_status)
		WHERE v.member_count <> src.n AND v.lifecycle_status IS NOT NULL AND v.group_member_count > 0`); n != 0 {
		t.Fatalf("%d groups' member counts differ from the source after the scans", n)
	}
	// A replay from the start keeps every collection's counts, at zero: nothing is handed off through the start.
	colls := kept()
	if _, err := intake.New(e.Store).ResetCursor(e.Ctx, "birth_registry", "start"); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(t, `SELECT count(*) FROM governance_base_count`); n != 0 || kept() != colls || colls == 0 {
		t.Fatalf("a reset to the start left %d base counts and %d of %d collections kept, want 0 and all", n, kept(), colls)
	}
	e.catchUp(t)
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source after a replay from the start", n)
	}
}

// groupCountsDiffer counts the groups with members whose member count (what the gate and the ledger read) differs
// from their base's count at the source, a base with no births counting 0.
func (e *hoEnv) groupCountsDiffer(t *testing.T) int64 {
	t.Helper()
	return e.Count(t, hoBases+`, src AS (SELECT c, k, s, count(*) AS n FROM x GROUP BY 1, 2, 3)
		SELECT count(*) FROM v_candidate_effective v
		LEFT JOIN src ON (src.c, src.k, src.s) = (v.object_class, v.source_registry, v.lifecycle_status)
		WHERE coalesce(v.member_count, v.group_member_count) > 0 AND v.lifecycle_status IS NOT NULL
		  AND coalesce(src.n, 0) <> coalesce(v.member_count, v.group_member_count)`)
}

// TestFullAuditCorrectsCountsAfterSilentChanges: changes that reach the births with no change row and leave a base
// group's content as the previous audit saw it (a handed-off birth retired or deleted behind the tail's back) are
// invisible to a comparison of two snapshots; the audit still corrects every member count the incremental state
// holds and every count the handoff keeps.
func TestFullAuditCorrectsCountsAfterSilentChanges(t *testing.T) {
	t.Parallel()
	e := newHandoffEnv(t, 800, nil)
	audit := func(what string) {
		t.Helper()
		if _, err := scan.New(e.Store).FullAudit(e.Ctx, nil); err != nil {
			t.Fatalf("%s: full audit: %v", what, err)
		}
		if n := e.groupCountsDiffer(t); n != 0 {
			t.Fatalf("%s: %d groups' member counts differ from the source after the audit", what, n)
		}
		if n := e.keptCountsDiffer(t); n != 0 {
			t.Fatalf("%s: %d kept base counts differ from the source after the audit", what, n)
		}
	}
	audit("baseline")
	var coll, class string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT collection_name, entity_type FROM birth_registry
		WHERE status = 'active' AND parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class); err != nil {
		t.Fatal(err)
	}
	birth := func(code, status string) {
		e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, $4, 'birth-api', 'tester')`, code, coll, class, status)
		e.catchUp(t)
	}

	// A birth handed off and scanned, then retired silently: the active group holds what the baseline saw again.
	birth("silent-1", "active")
	e.ScanAll(t, postgres.ModeIncremental)
	e.Exec(t, `UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = 'silent-1'`, coll)
	audit("a scanned birth retired silently")

	// A birth handed off (added to the kept counts) but not scanned yet, then deleted silently.
	birth("silent-2", "active")
	e.Exec(t, `DELETE FROM birth_registry WHERE collection_name = $1 AND entity_code = 'silent-2'`, coll)
	audit("a handed-off birth deleted silently")

	// A birth that made a group of its own, scanned, then deleted silently: that group has no member left.
	var status string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT s FROM unnest(ARRAY['draft', 'pending', 'merged', 'superseded']) s
		WHERE NOT EXISTS (SELECT 1 FROM birth_registry WHERE collection_name = $1 AND entity_type = $2 AND status = s) LIMIT 1`,
		coll, class).Scan(&status); err != nil {
		t.Fatal(err)
	}
	birth("silent-3", status)
	e.ScanAll(t, postgres.ModeIncremental)
	e.Exec(t, `DELETE FROM birth_registry WHERE collection_name = $1 AND entity_code = 'silent-3'`, coll)
	audit("the only member of a group deleted silently")
}

// TestReadAheadPlanHandsOffTheSame: births pages planned while the page before was applied (birthPlan, made by the
// read-ahead) are handed off exactly as pages the apply plans in its own transaction: the same signals, dirty marks,
// pending marks with their births, queued objects and kept counts. Pages read ahead at a catch-up size cut the
// births into other pages: they hand off the same but for the pending marks, which hold, per group, the births of
// the pages after the one that marked it dirty, so where the pages are cut decides them.
func TestReadAheadPlanHandsOffTheSame(t *testing.T) {
	t.Parallel()
	handOff := func(readAhead bool, catchUp int) (map[string]map[string]string, int64) {
		e := newHandoffWorld(t, 1_500, func(cfg *gcos.Config) {
			cfg.Intake.ReadAhead, cfg.Intake.PageSize, cfg.Intake.CatchUpPageSize = readAhead, 200, catchUp
		})
		births := postgres.BirthTailSource(e.Cfg.SourceBinding)
		wait.Pass(e.Ctx, 4*hoGuard)
		for polls := 0; ; polls++ {
			if polls > 100 {
				t.Fatal("the births tail never caught up")
			}
			intake.WaitReadAhead(e.stage, births.Name) // taken, not called off for want of a connection
			res, err := e.stage.PollTail(e.Ctx, births, e.Cfg.Intake, e.apply)
			if err != nil {
				t.Fatal(err)
			}
			if !res.PageFull {
				break
			}
		}
		// A signal is one per correlation and source system: births of one base and bucket from two sources share a
		// correlation, so both are in the key (a map by correlation alone keeps whichever row the scan returns last).
		state := map[string]map[string]string{
			"signals": e.Pairs(t, `SELECT correlation_id || ' ' || source_system, event_type || ' ' || (safe_payload - 'occurred_at')::text
				FROM event_outbox WHERE event_type LIKE 'governance.handoff.%' AND event_type <> 'governance.handoff.heartbeat'`),
			"signal keys": e.Pairs(t, `SELECT correlation_id || ' ' || source_system, event_type FROM governance_signal_key
				WHERE event_type LIKE 'governance.handoff.%'`),
			"dirty": e.dirty(t),
			"pending marks": e.Pairs(t, `SELECT u.key, string_agg(u.reason || ' ' || coalesce(u.births, '-'), ', ' ORDER BY u.reason, u.births)
				FROM governance_pending_mark m, unnest(m.group_keys, m.reasons, m.births) AS u(key, reason, births) GROUP BY u.key`),
			"queued objects": e.Pairs(t, `SELECT collection_name || ':' || entity_code, object_class || ' ' || lifecycle_status
				FROM governance_object_pending`),
			"kept counts": e.Pairs(t, `SELECT source_registry || ' ' || object_class || ' ' || lifecycle_status, members::text
				FROM governance_base_count`),
		}
		return state, intake.PlansTaken(e.stage)
	}
	inline, none := handOff(false, 0)
	if none != 0 {
		t.Fatalf("%d pages took a read-ahead's plan with read_ahead off", none)
	}
	for _, tc := range []struct {
		name      string
		catchUp   int
		taken     int64 // pages that took the read-ahead's plan: all but the first
		pageBound bool  // the pages are cut elsewhere than the apply's: the pending marks differ
	}{{"pages of 200", 0, 7, false}, {"pages of 200, then 250 read ahead", 250, 6, true}} {
		planned, taken := handOff(true, tc.catchUp)
		if taken != tc.taken {
			t.Fatalf("%s: %d pages took the read-ahead's plan, want %d (all but the first)", tc.name, taken, tc.taken)
		}
		for aspect, want := range inline {
			got := planned[aspect]
			if len(want) == 0 {
				t.Fatalf("no %s to compare", aspect)
			}
			if tc.pageBound && aspect == "pending marks" {
				continue
			}
			if !maps.Equal(got, want) {
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s: %s of %s: planned ahead %q, planned in the apply %q", tc.name, aspect, k, got[k], v)
						break
					}
				}
				t.Fatalf("%s: %s: %d planned ahead, %d planned in the apply, differing", tc.name, aspect, len(got), len(want))
			}
		}
	}
}
