package postgres_test

// Acceptance tests of SB-10 (doc 40 §40.10, SPEC §3.2, §4, §7, §11, §12): the candidate-state store against a real
// PostgreSQL. TestSB10_TargetedInvalidation and TestSB10_FailClosed (clauses 4 and 5) live in scan/tick_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/world"
)

// sb10ExecErr runs a statement that must be refused and returns its SQLSTATE.
func (b *bundle) sb10ExecErr(t *testing.T, sql string, args ...any) string {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	if err == nil {
		t.Fatalf("%s: accepted, want it refused", sql)
	}
	return sb12SQLState(err)
}

// sb10NewRuleset adds an enabled rule and computes the draft it makes (proposed by someone other than the
// approver the tests activate with).
func (b *bundle) sb10NewRuleset(t *testing.T, ruleID string) string {
	t.Helper()
	var law string
	if err := b.pool.QueryRow(b.ctx, `SELECT min(law_code) FROM law_jurisdiction`).Scan(&law); err != nil {
		t.Fatal(err)
	}
	b.sb12AddRule(t, ruleID, law)
	rs, created, err := b.store.ComputeRuleset(b.ctx, "sb10-proposer")
	if err != nil || !created || rs.Status != gcos.RulesetDraft {
		t.Fatalf("compute ruleset after adding %s: %+v created=%v err=%v", ruleID, rs, created, err)
	}
	return rs.Version
}

// sb10Active returns the active ruleset version.
func (b *bundle) sb10Active(t *testing.T) string {
	t.Helper()
	rs, err := postgres.ActiveRuleset(b.store, b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rs.Version
}

// sb10Effective reads one group's line of v_candidate_effective.
type sb10Eff struct {
	clean     bool
	effective string
	reasons   []string
	snapshot  bool
}

func (b *bundle) sb10Effective(t *testing.T, key string) sb10Eff {
	t.Helper()
	var e sb10Eff
	if err := b.pool.QueryRow(b.ctx, `SELECT clean, effective_verdict, reasons, snapshot_exists FROM v_candidate_effective WHERE group_key = $1`,
		key).Scan(&e.clean, &e.effective, &e.reasons, &e.snapshot); err != nil {
		t.Fatalf("effective state of %s: %v", key, err)
	}
	return e
}

// sb10RowVersion is the physical version of a candidate row (xmin, ctid): it moves with any write.
func (b *bundle) sb10RowVersion(t *testing.T, key, ruleset string) string {
	t.Helper()
	var v string
	if err := b.pool.QueryRow(b.ctx, `SELECT xmin::text || '/' || ctid::text FROM governance_candidate_state
		WHERE group_key = $1 AND ruleset_version = $2`, key, ruleset).Scan(&v); err != nil {
		t.Fatalf("row version of %s: %v", key, err)
	}
	return v
}

// sb10CandidateRow reads a stored candidate row as the decay reads it.
func (b *bundle) sb10CandidateRow(t *testing.T, key, ruleset string) gcos.CandidateRow {
	t.Helper()
	var r gcos.CandidateRow
	var snap int32
	if err := b.pool.QueryRow(b.ctx, `
		SELECT group_key, source_snapshot_ref, ruleset_version, scan_time, candidate_verdict, input_quality_state, dirty,
		       dirty_reason, stale_after, recompute_status, risk_class, coverage_required, coverage_scan_ref, owner_scope,
		       lifecycle_status, member_count
		FROM governance_candidate_state WHERE group_key = $1 AND ruleset_version = $2`, key, ruleset).Scan(
		&r.GroupKey, &snap, &r.RulesetVersion, &r.ScanTime, &r.Verdict, &r.InputQualityState, &r.Dirty, &r.DirtyReason,
		&r.StaleAfter, &r.RecomputeStatus, &r.RiskClass, &r.CoverageRequired, &r.CoverageScanRef, &r.OwnerScope,
		&r.LifecycleStatus, &r.MemberCount); err != nil {
		t.Fatalf("candidate row %s/%s: %v", key, ruleset, err)
	}
	r.SnapshotRef = int64(snap)
	return r
}

// sb10Now is the database clock.
func (b *bundle) sb10Now(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := b.pool.QueryRow(b.ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// sb10StateDigest covers everything a backfill or a handoff may write, so "changed nothing" means nothing.
func (b *bundle) sb10StateDigest(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, q := range map[string]string{
		"groups":     `SELECT * FROM governance_group`,
		"candidates": `SELECT * FROM governance_candidate_state`,
		"objects":    `SELECT * FROM governance_candidate_object`,
		"coverage":   `SELECT * FROM governance_candidate_coverage`,
		"snapshots":  `SELECT id, scope, metrics, delta_previous FROM evolution_snapshots`,
		"rulesets":   `SELECT * FROM governance_ruleset`,
		"findings":   `SELECT * FROM system_issues`,
		"outbox":     `SELECT * FROM event_outbox`,
		"pending":    `SELECT * FROM event_pending`,
		"signals":    `SELECT * FROM governance_signal_key`,
	} {
		out[name] = fmt.Sprintf("%d:%s", b.count(t, `SELECT count(*) FROM (`+q+`) x`), b.digest(t, q))
	}
	return out
}

func sb10DiffDigests(before, after map[string]string) []string {
	var changed []string
	for k, v := range before {
		if after[k] != v {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	return changed
}

// sb10Object returns an active, parent-less birth (collection:code) and its group, the group chosen by a condition
// on v_candidate_effective among classes no object row holds, so the group alone represents the object.
func (b *bundle) sb10Object(t *testing.T, cond string) (ref, key string) {
	t.Helper()
	key = b.groupWhere(t, cond)
	return b.world().ObjectOf(t, key), key
}

// ---------------------------------------------------------------------------------------------------------------
// §40.10 1: no "checked forever".

func TestSB10_NoCheckedForever(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 5000, nil)
	r1 := b.sb10Active(t)

	// The schema cannot say "governed regardless of snapshot, ruleset and time".
	for _, table := range []string{"governance_candidate_state", "governance_candidate_object"} {
		bools := b.strs(t, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 AND data_type = 'boolean' ORDER BY 1`, table)
		if strings.Join(bools, ",") != "coverage_required,dirty" {
			t.Fatalf("%s boolean columns = %v, want only coverage_required and dirty", table, bools)
		}
		nullable := b.pairs(t, `SELECT column_name, is_nullable FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1`, table)
		for _, col := range []string{"source_snapshot_ref", "ruleset_version", "scan_time", "stale_after", "candidate_verdict"} {
			if nullable[col] != "NO" {
				t.Fatalf("%s.%s is_nullable = %q, want NOT NULL", table, col, nullable[col])
			}
		}
		for col := range nullable {
			for _, word := range []string{"checked", "governed", "verified", "clean", "is_"} {
				if strings.Contains(col, word) {
					t.Fatalf("%s.%s looks like a checked-forever column", table, col)
				}
			}
		}
	}

	key := b.groupWhere(t, `clean AND candidate_verdict NOT IN ('unknown', 'needs_input')`)
	if e := b.sb10Effective(t, key); !e.clean || e.effective == string(gcos.VerdictStale) {
		t.Fatalf("group %s not clean after backfill + activation: %+v", key, e)
	}

	t.Run("a verdict cannot be made timeless", func(t *testing.T) {
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_state SET stale_after = scan_time WHERE group_key = $1`, key); code != "23514" {
			t.Fatalf("stale_after = scan_time: SQLSTATE %s, want 23514 (check_violation)", code)
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_state SET stale_after = scan_time - interval '1 day' WHERE group_key = $1`, key); code != "23514" {
			t.Fatalf("stale_after before scan_time: SQLSTATE %s, want 23514", code)
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_state SET stale_after = NULL WHERE group_key = $1`, key); code != "23502" {
			t.Fatalf("stale_after NULL: SQLSTATE %s, want 23502 (not_null_violation)", code)
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_state SET source_snapshot_ref = NULL WHERE group_key = $1`, key); code != "23502" {
			t.Fatalf("source_snapshot_ref NULL: SQLSTATE %s, want 23502", code)
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_state SET scan_time = NULL WHERE group_key = $1`, key); code != "23502" {
			t.Fatalf("scan_time NULL: SQLSTATE %s, want 23502", code)
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_state SET candidate_verdict = 'governed' WHERE group_key = $1`, key); code != "23514" {
			t.Fatalf("verdict outside the vocabulary: SQLSTATE %s, want 23514", code)
		}
		if e := b.sb10Effective(t, key); !e.clean {
			t.Fatalf("a refused update changed the row: %+v", e)
		}
		objects := b.strs(t, `SELECT candidate_key FROM governance_candidate_object ORDER BY 1 LIMIT 1`)
		if len(objects) != 1 {
			t.Fatal("no object row to check the object table's constraints on")
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_object SET stale_after = scan_time WHERE candidate_key = $1`, objects[0]); code != "23514" {
			t.Fatalf("object stale_after = scan_time: SQLSTATE %s, want 23514", code)
		}
		if code := b.sb10ExecErr(t, `UPDATE governance_candidate_object SET stale_after = NULL WHERE candidate_key = $1`, objects[0]); code != "23502" {
			t.Fatalf("object stale_after NULL: SQLSTATE %s, want 23502", code)
		}
	})

	t.Run("a verdict past stale_after decays with no write", func(t *testing.T) {
		b.exec(t, `UPDATE governance_candidate_state SET scan_time = now() - interval '2 days', stale_after = now() - interval '1 second'
			WHERE group_key = $1 AND ruleset_version = $2`, key, r1)
		version := b.sb10RowVersion(t, key, r1)
		e := b.sb10Effective(t, key)
		if e.clean || e.effective != string(gcos.VerdictStale) || !contains(e.reasons, gcos.ReasonExpired) {
			t.Fatalf("expired row: %+v, want not clean, effective stale, reason expired", e)
		}
		ex, err := b.gate().ExplainGroup(b.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(ex.Rows) != 1 || ex.Rows[0].Effective.Clean || ex.Rows[0].Effective.Verdict != gcos.VerdictStale {
			t.Fatalf("explain of an expired row: %+v", ex.Rows)
		}
		if n := b.count(t, `SELECT count(*) FROM v_invariant_ledger`); n == 0 {
			t.Fatal("no ledger")
		}
		if after := b.sb10RowVersion(t, key, r1); after != version {
			t.Fatalf("reading the decayed verdict wrote the row (%s → %s): decay must need no write", version, after)
		}
	})

	t.Run("a decayed object row is re-derived, never left stale", func(t *testing.T) {
		obj := b.strs(t, `SELECT candidate_key FROM governance_candidate_object WHERE lifecycle_status = 'active'
			AND candidate_verdict NOT IN ('unknown', 'needs_input') ORDER BY 1 LIMIT 1`)
		if len(obj) != 1 {
			t.Fatal("no active object row")
		}
		effective := func() string {
			return b.pairs(t, `SELECT candidate_key, effective_verdict FROM v_candidate_object_effective WHERE candidate_key = $1`, obj[0])[obj[0]]
		}
		clean := effective()
		b.exec(t, `UPDATE governance_candidate_object SET scan_time = now() - interval '2 days', stale_after = now() - interval '1 second'
			WHERE candidate_key = $1`, obj[0])
		if e := effective(); e != string(gcos.VerdictStale) {
			t.Fatalf("expired object row reads as %q, want stale", e)
		}
		// No scan re-evaluates object rows: the next backfill must, or the row would stay stale for good.
		if res := b.backfill(t); res.ObjectsMaterialized != 1 {
			t.Fatalf("backfill re-derived %d object rows, want the expired one", res.ObjectsMaterialized)
		}
		if e := effective(); e != clean {
			t.Fatalf("re-derived object row reads as %q, want %q again", e, clean)
		}
	})

	t.Run("a dangling snapshot is never clean", func(t *testing.T) {
		other := b.groupWhere(t, `clean AND group_key <> '`+key+`'`)
		b.exec(t, `UPDATE governance_candidate_state SET source_snapshot_ref = 2147483000 WHERE group_key = $1 AND ruleset_version = $2`, other, r1)
		e := b.sb10Effective(t, other)
		if e.clean || e.snapshot || e.effective == string(gcos.VerdictRelevant) || !contains(e.reasons, gcos.ReasonSnapshotDangling) {
			t.Fatalf("row on a pruned snapshot: %+v, want not clean, reason snapshot_dangling", e)
		}
		if e.effective != string(gcos.VerdictStale) && e.effective != string(gcos.VerdictUnknown) {
			t.Fatalf("row on a pruned snapshot reads as %s", e.effective)
		}
	})

	t.Run("a superseded ruleset is never clean", func(t *testing.T) {
		h := b.groupWhere(t, `clean`)
		old := b.sb10CandidateRow(t, h, r1)
		r2 := b.sb10NewRuleset(t, "MSR-SB10-SUPERSEDE")
		b.activate(t, r2)
		var status string
		if err := b.pool.QueryRow(b.ctx, `SELECT status FROM governance_ruleset WHERE ruleset_version = $1`, r1).Scan(&status); err != nil || status != gcos.RulesetSuperseded {
			t.Fatalf("%s status %q (%v), want superseded", r1, status, err)
		}
		// The row computed under r1 is still stored, byte for byte, as history; it is never clean again.
		stored := b.sb10CandidateRow(t, h, r1)
		if !stored.ScanTime.Equal(old.ScanTime) || stored.Verdict != old.Verdict || stored.StaleAfter == nil || !stored.StaleAfter.Equal(*old.StaleAfter) {
			t.Fatalf("the superseded row was rewritten: %+v → %+v", old, stored)
		}
		eff := gcos.Effective(stored, b.sb10Now(t), gcos.RulesetState{ActiveVersion: r2, RowRulesetStatus: status}, true, true)
		if eff.Clean || !contains(eff.Reasons, gcos.ReasonRulesetSuperseded) {
			t.Fatalf("row under a superseded ruleset: %+v, want not clean (ruleset_superseded)", eff)
		}
		if n := b.count(t, `SELECT count(*) FROM v_candidate_effective WHERE ruleset_version <> $1`, r2); n != 0 {
			t.Fatalf("%d groups read under a ruleset other than the active one", n)
		}
		// Take h's row under r2 away (into a draft nobody approved): the superseded r1 row is all that remains
		// under an approved ruleset, and it does not make the group clean.
		r3 := b.sb10NewRuleset(t, "MSR-SB10-DRAFT")
		b.exec(t, `UPDATE governance_candidate_state SET ruleset_version = $3 WHERE group_key = $1 AND ruleset_version = $2`, h, r2, r3)
		e := b.sb10Effective(t, h)
		if e.clean || e.effective != string(gcos.VerdictUnknown) || !contains(e.reasons, "never_seeded") {
			t.Fatalf("group with only a superseded (and a draft) row: %+v, want not clean, unknown", e)
		}
		b.exec(t, `UPDATE governance_candidate_state SET ruleset_version = $2 WHERE group_key = $1 AND ruleset_version = $3`, h, r2, r3)
	})
}

// ---------------------------------------------------------------------------------------------------------------
// §40.10 2: no explosion, at the live size.

func TestSB10_NoExplosion(t *testing.T) {
	if testing.Short() {
		t.Skip("the full 1,037,724-birth world: skipped with -short")
	}
	t.Parallel()
	start := time.Now()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	sum, err := world.Generate(ctx, pool, world.Options{Seed: 1, Changes: -1})
	if err != nil {
		t.Fatalf("generate world: %v", err)
	}
	cfg := gcos.DefaultConfig()
	b := &bundle{ctx: ctx, pool: pool, store: postgres.New(pool, cfg, nil), cfg: cfg}
	generated := time.Since(start)
	births := b.count(t, `SELECT count(*) FROM birth_registry`)
	if births != 1_037_724 {
		t.Fatalf("births = %d (%+v), want the live 1,037,724", births, sum)
	}

	t0 := time.Now()
	res := b.backfill(t)
	first := time.Since(t0)
	groups := b.count(t, `SELECT count(*) FROM governance_group`)
	rows := b.count(t, `SELECT count(*) FROM governance_candidate_state`)
	tuples := b.count(t, `SELECT count(*) FROM (SELECT DISTINCT object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope FROM governance_group) x`)
	// Independently of the group registry: one group per (class, registry, lifecycle) of the parent-less births,
	// in every responsibility scope.
	bases := b.count(t, `SELECT count(*) FROM (SELECT DISTINCT entity_type, collection_name, status FROM birth_registry WHERE parent_code IS NULL) x`)
	scopes := b.count(t, `SELECT count(*) FROM governance_responsibility_scope`)
	if rows != groups || rows != tuples || rows != int64(res.Groups) || rows != bases*scopes {
		t.Fatalf("candidate rows %d, groups %d, distinct tuples %d, backfill groups %d, bases×scopes %d×%d: want one row per group",
			rows, groups, tuples, res.Groups, bases, scopes)
	}
	if rows < 1_000 || rows > 20_000 {
		t.Fatalf("%d candidate rows for %d births: want thousands, not millions", rows, births)
	}
	objects := b.count(t, `SELECT count(*) FROM governance_candidate_object`)
	if objects*10 > births {
		t.Fatalf("%d object rows for %d births: materialization is not selective", objects, births)
	}
	var maxSnap int64
	if err := pool.QueryRow(ctx, `SELECT max(id) FROM evolution_snapshots`).Scan(&maxSnap); err != nil {
		t.Fatal(err)
	}

	t1 := time.Now()
	container, err := world.AddChildren(ctx, pool, 100_000, 1)
	if err != nil {
		t.Fatalf("add children: %v", err)
	}
	added := time.Since(t1)
	var cClass, cColl, cStatus string
	if err := pool.QueryRow(ctx, `SELECT entity_type, collection_name, status FROM birth_registry WHERE collection_name = $1 AND entity_code = $2`,
		container.Collection, container.EntityCode).Scan(&cClass, &cColl, &cStatus); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM birth_registry WHERE collection_name = $1 AND parent_code = $2`, container.Collection, container.EntityCode); n != 100_000 {
		t.Fatalf("children under %s = %d, want 100,000", container, n)
	}

	t2 := time.Now()
	again := b.backfill(t)
	second := time.Since(t2)
	if again.SnapshotReused || again.SnapshotID <= maxSnap {
		t.Fatalf("the backfill after the children reused snapshot %d", again.SnapshotID)
	}
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_state`); n != rows {
		t.Fatalf("Δ candidate rows = %d after 100,000 inherited children, want 0", n-rows)
	}
	if n := b.count(t, `SELECT count(*) FROM governance_group`); n != groups {
		t.Fatalf("Δ groups = %d after 100,000 inherited children, want 0", n-groups)
	}
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_object`); n != objects {
		t.Fatalf("Δ object rows = %d after 100,000 inherited children, want 0", n-objects)
	}

	// The snapshot delta flags the container's base group only: one key per scope, each with the 100,000 children.
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT delta_previous FROM evolution_snapshots WHERE id = $1`, again.SnapshotID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var delta postgres.SnapshotDelta
	if err := json.Unmarshal(raw, &delta); err != nil {
		t.Fatal(err)
	}
	var flagged []string
	for k, d := range delta.Groups {
		if d.FingerprintChanged || d.Appeared || d.Vanished || d.CountDelta != 0 {
			flagged = append(flagged, k)
			if d.CountDelta != 100_000 || d.Appeared || d.Vanished {
				t.Fatalf("flagged group %s: %+v, want count_delta 100000", k, d)
			}
		}
	}
	if len(flagged) != int(scopes) {
		t.Fatalf("delta flags %d groups %v, want the container's base group in each of %d scopes", len(flagged), flagged, scopes)
	}
	seenScopes := map[string]bool{}
	for _, k := range flagged {
		var class, coll, status, scope string
		if err := pool.QueryRow(ctx, `SELECT object_class, source_registry, lifecycle_status, scope FROM governance_group WHERE group_key = $1`, k).Scan(&class, &coll, &status, &scope); err != nil {
			t.Fatal(err)
		}
		if class != cClass || coll != cColl || status != cStatus {
			t.Fatalf("flagged group %s is (%s, %s, %s), not the container's base (%s, %s, %s)", k, class, coll, status, cClass, cColl, cStatus)
		}
		if seenScopes[scope] {
			t.Fatalf("two flagged keys in scope %s", scope)
		}
		seenScopes[scope] = true
	}
	t.Logf("full world: generate %s, backfill %s (%d groups, %d object rows), +100,000 children %s, backfill %s; total %s",
		generated.Round(time.Millisecond), first.Round(time.Millisecond), rows, objects, added.Round(time.Millisecond),
		second.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// ---------------------------------------------------------------------------------------------------------------
// §40.10 3: object materialization is selective.

func TestSB10_SelectiveMaterialization(t *testing.T) {
	t.Parallel()
	objectRisk := []string{"write_high"}
	b := seededWorld(t, 20000, func(c *gcos.Config) {
		c.Gate.ObjectRiskClasses = objectRisk
		c.Intake.TrustedSources = []string{"import-*", "birth-api", "registry-sync"}
	})
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_object`); n == 0 {
		t.Fatal("no object row at all: the class criteria select nothing in this world, the test would prove little")
	}
	// Objects of classes no class criterion selects, each in a group that alone represents it.
	plain := `object_class IN (SELECT entity_type FROM governance_coverage_profile WHERE NOT independently_authoritative
		AND NOT (write_path AND risk_class = 'write_high')) AND lifecycle_status = 'active'`
	excRef, _ := b.sb10Object(t, `effective_verdict = 'relevant' AND `+plain)
	findRef, _ := b.sb10Object(t, `effective_verdict = 'relevant' AND `+plain+` AND source_registry <> '`+strings.Split(excRef, ":")[0]+`'`)

	// 1. An untrusted-source birth handed off through the intake's apply step.
	var rogueColl, rogueClass string
	if err := b.pool.QueryRow(b.ctx, `SELECT source_registry, object_class FROM v_candidate_effective WHERE `+plain+`
		AND effective_verdict = 'relevant' ORDER BY group_key DESC LIMIT 1`).Scan(&rogueColl, &rogueClass); err != nil {
		t.Fatal(err)
	}
	b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('sb10-rogue-1', $1, $2, 'active', 'rogue-loader', 'mallory')`, rogueColl, rogueClass)
	rogueRef := rogueColl + ":sb10-rogue-1"
	tail := b.sb10TailRows(t, `entity_code = 'sb10-rogue-1'`)
	b.sb10Apply(t, tail)
	// 2. An input finding raised directly on an object.
	if _, err := b.store.RaiseFinding(b.ctx, gcos.NewFinding(gcos.InputIssue(gcos.InputInvalidSchema), findRef, "", "", map[string]any{"object_ref": findRef})); err != nil {
		t.Fatal(err)
	}
	// 3. An approved exception on one object.
	excColl, excCode, _ := strings.Cut(excRef, ":")
	b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
		VALUES ('EXC-SB10-SEL', 'policy', $1, $2, 'APR-SB10', now() + interval '1 year', $3, 'approved')`, excColl, excCode,
		b.objectFingerprint(t, excRef))
	// An inherited child of an independently authoritative object is represented by its anchor's group.
	var authColl, authClass, authCode string
	if err := b.pool.QueryRow(b.ctx, `SELECT b.collection_name, b.entity_type, b.entity_code FROM birth_registry b
		JOIN governance_coverage_profile p ON p.entity_type = b.entity_type AND p.independently_authoritative
		WHERE b.parent_code IS NULL AND b.status = 'active' ORDER BY b.id LIMIT 1`).Scan(&authColl, &authClass, &authCode); err != nil {
		t.Fatalf("no independently authoritative birth: %v", err)
	}
	b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, parent_code, source_system, actor_ref)
		SELECT $3 || '-sb10c' || g, $1, $2, 'active', $3, 'birth-api', 'birth-gateway' FROM generate_series(1, 25) g`, authColl, authClass, authCode)

	res := b.backfill(t)
	if res.RulesetStatus != gcos.RulesetActive {
		t.Fatalf("backfill ran under a %s ruleset", res.RulesetStatus)
	}

	// Every active object row is explained by exactly one criterion, derived here from the registries alone.
	expected := b.pairs(t, `
		WITH crit AS (
		    SELECT b.collection_name || ':' || b.entity_code AS key,
		           CASE WHEN p.independently_authoritative THEN 'independently_authoritative' ELSE 'high_risk_write_path' END AS reason
		    FROM birth_registry b JOIN governance_coverage_profile p ON p.entity_type = b.entity_type
		    WHERE b.parent_code IS NULL AND (p.independently_authoritative OR (p.write_path AND p.risk_class = ANY($1)))
		), exc AS (
		    SELECT collection_name || ':' || entity_code AS key, 'exception' AS reason FROM governance_exception
		    WHERE entity_code IS NOT NULL AND collection_name IS NOT NULL AND status = 'approved'
		      AND coalesce(approval_ref, '') <> '' AND (expires_at IS NULL OR expires_at > now())
		), fnd AS (
		    SELECT substr(coalesce_key, length('gov:input:') + position(':' IN substr(coalesce_key, length('gov:input:') + 1)) + 1) AS key,
		           'open_finding' AS reason
		    FROM system_issues WHERE status = 'open' AND coalesce_key LIKE 'gov:input:%'
		)
		SELECT key, coalesce((SELECT reason FROM fnd WHERE fnd.key = k.key), (SELECT reason FROM exc WHERE exc.key = k.key),
		                     (SELECT reason FROM crit WHERE crit.key = k.key))
		FROM (SELECT key FROM crit UNION SELECT key FROM exc UNION SELECT key FROM fnd) k
		WHERE k.key IN (SELECT collection_name || ':' || entity_code FROM birth_registry)`, objectRisk)
	got := b.pairs(t, `SELECT candidate_key, materialization_reason FROM governance_candidate_object WHERE lifecycle_status = 'active'`)
	for k, want := range expected {
		if got[k] != want {
			t.Fatalf("object %s: row reason %q, want %q", k, got[k], want)
		}
	}
	for k, reason := range got {
		if _, ok := expected[k]; !ok {
			t.Fatalf("object %s has a row (%s) no criterion selects", k, reason)
		}
	}
	// Outside the criteria classes only the objects named one by one (exceptions, findings) have rows.
	named := b.strs(t, `SELECT o.candidate_key FROM governance_candidate_object o
		JOIN governance_coverage_profile p ON p.entity_type = o.object_type
		WHERE o.lifecycle_status = 'active' AND NOT p.independently_authoritative
		  AND NOT (p.write_path AND p.risk_class = ANY($1)) ORDER BY 1`, objectRisk)
	for _, k := range named {
		if r := got[k]; r != "exception" && r != "open_finding" {
			t.Fatalf("object %s of a class no criterion selects has a row (%s)", k, r)
		}
	}
	if len(named) < 3 {
		t.Fatalf("named object rows %v, want at least the exception, the finding and the untrusted birth", named)
	}
	births := b.count(t, `SELECT count(*) FROM birth_registry`)
	t.Logf("%d object rows for %d births (%d named one by one; the rest by class, with %v opted in)", len(got), births, len(named), objectRisk)
	for ref, want := range map[string]string{
		rogueRef: "needs_input/untrusted_source/open_finding",
		findRef:  "needs_input/invalid_schema/open_finding",
		excRef:   "relevant/accepted_for_candidate_scan/exception",
	} {
		if v := b.pairs(t, `SELECT candidate_key, candidate_verdict || '/' || input_quality_state || '/' || materialization_reason
			FROM governance_candidate_object WHERE candidate_key = $1 AND lifecycle_status = 'active'`, ref)[ref]; v != want {
			t.Fatalf("object %s: %q, want %q", ref, v, want)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_object WHERE candidate_key LIKE $1`, authColl+":"+authCode+"-sb10c%"); n != 0 {
		t.Fatalf("%d inherited children of %s:%s got object rows: children collapse to their anchor's group", n, authColl, authCode)
	}
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_object o JOIN governance_candidate_coverage c
		ON c.candidate_ref = 'object:' || o.candidate_key AND c.ruleset_version = o.ruleset_version
		WHERE o.candidate_key = $1 AND c.outcome = 'approved_exception' AND c.exception_id = 'EXC-SB10-SEL'`, excRef); n != 1 {
		t.Fatal("the excepted object's coverage is not the approved exception")
	}
	for _, ref := range []string{rogueRef, findRef} {
		g := b.gate().Gate(b.ctx, ref, "write")
		if g.Decision != gcos.GateBlock || len(g.Consulted) < 2 || g.Consulted[0].Source != gcos.GateSourceObject ||
			g.Consulted[0].Decision != gcos.GateBlock || g.EffectiveVerdict != gcos.VerdictNeedsInput {
			t.Fatalf("gate %s: %s %s, consulted %+v: want block on the object's own row, its groups consulted too",
				ref, g.Decision, g.EffectiveVerdict, g.Consulted)
		}
	}
	if l, err := b.gate().Invariant(b.ctx, ""); err != nil || !l.Closes {
		t.Fatalf("invariant with object rows: %+v %v", l, err)
	}

	t.Run("the open finding lapses", func(t *testing.T) {
		if ok, err := b.store.ResolveFinding(b.ctx, gcos.InputIssue(gcos.InputInvalidSchema), findRef, ""); err != nil || !ok {
			t.Fatalf("resolve: %v %v", ok, err)
		}
		again := b.backfill(t)
		if again.ObjectsRetired != 1 {
			t.Fatalf("retired %d object rows, want the one whose finding closed", again.ObjectsRetired)
		}
		if v := b.pairs(t, `SELECT candidate_key, lifecycle_status FROM governance_candidate_object WHERE candidate_key = ANY($1)`,
			[]string{findRef, rogueRef}); v[findRef] != gcos.LifecycleRetired || v[rogueRef] != gcos.LifecycleActive {
			t.Fatalf("after the finding closed: %v, want %s retired and %s still held", v, findRef, rogueRef)
		}
	})

	t.Run("count>1 alone creates no object row, no owner requirement, no finding", func(t *testing.T) {
		// A class whose profile requires no coverage: many more members change nothing but the member count.
		var class, coll, key string
		if err := b.pool.QueryRow(b.ctx, `SELECT e.object_class, e.source_registry, e.group_key FROM v_candidate_effective e
			JOIN governance_coverage_profile p ON p.entity_type = e.object_class
			WHERE NOT p.coverage_required AND NOT p.independently_authoritative AND NOT (p.write_path AND p.risk_class = 'write_high')
			  AND e.lifecycle_status = 'active' AND e.candidate_verdict = 'not_relevant' AND e.group_member_count > 1
			ORDER BY e.group_key LIMIT 1`).Scan(&class, &coll, &key); err != nil {
			t.Fatalf("no multi-member not-relevant group: %v", err)
		}
		before := b.sb10CandidateRow(t, key, b.sb10Active(t))
		objects := b.count(t, `SELECT count(*) FROM governance_candidate_object`)
		findings := b.digest(t, `SELECT id, coalesce_key, status FROM system_issues`)
		coverage := b.count(t, `SELECT count(*) FROM governance_candidate_coverage`)
		b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			SELECT $2 || '-sb10m' || g, $1, $2, 'active', 'birth-api', 'birth-gateway' FROM generate_series(1, 300) g`, coll, class)
		b.backfill(t)
		after := b.sb10CandidateRow(t, key, b.sb10Active(t))
		if after.MemberCount != before.MemberCount+300 {
			t.Fatalf("member count %d → %d, want +300", before.MemberCount, after.MemberCount)
		}
		if after.Verdict != before.Verdict || after.CoverageRequired || after.RiskClass != before.RiskClass {
			t.Fatalf("multiplicity changed the verdict: %+v → %+v", before, after)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_object`); n != objects {
			t.Fatalf("%d object rows appeared for multiplicity alone", n-objects)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_coverage`); n != coverage {
			t.Fatalf("%d owner requirements (coverage rows) appeared for multiplicity alone", n-coverage)
		}
		if d := b.digest(t, `SELECT id, coalesce_key, status FROM system_issues`); d != findings {
			t.Fatal("multiplicity alone raised a finding (or opened or closed one)")
		}
		// Across the whole store: an owner is required exactly where the class profile requires it of an
		// undecided or relevant group, whatever the member count.
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state c JOIN governance_group g USING (group_key)
			LEFT JOIN governance_coverage_profile p ON p.entity_type = g.object_class
			WHERE c.ruleset_version = $1 AND c.coverage_required <> (coalesce(p.coverage_required, true)
			      AND c.candidate_verdict NOT IN ('not_relevant', 'class_0', 'deferred_birth', 'retired'))`, b.sb10Active(t)); n != 0 {
			t.Fatalf("%d groups whose owner requirement is not their class profile's", n)
		}
	})
}

// sb10TailRows reads births as the intake's tail hands them to the apply step.
func (b *bundle) sb10TailRows(t *testing.T, cond string) []postgres.TailRow {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT id, born_at, entity_code, collection_name, entity_type, status, coalesce(parent_code, ''),
		coalesce(canonical_address, ''), coalesce(source_system, ''), coalesce(actor_ref, '') FROM birth_registry WHERE `+cond+` ORDER BY born_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (postgres.TailRow, error) {
		x := postgres.TailRow{Source: postgres.BirthTailSource(b.cfg.SourceBinding).Name}
		err := r.Scan(&x.ID, &x.TS, &x.EntityCode, &x.CollectionName, &x.EntityType, &x.Status, &x.ParentCode,
			&x.CanonicalAddress, &x.SourceSystem, &x.ActorRef)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no births where %s", cond)
	}
	return out
}

// sb10Apply applies tailed rows in one transaction, as the intake's poll does.
func (b *bundle) sb10Apply(t *testing.T, rows []postgres.TailRow) intake.HandoffStats {
	t.Helper()
	var st intake.HandoffStats
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		failures, s, err := intake.New(b.store).ApplyHandoff(b.ctx, tx, rows)
		if err != nil {
			return err
		}
		if len(failures) != 0 {
			return fmt.Errorf("apply failures: %+v", failures)
		}
		st = s
		return nil
	})
	if err != nil {
		t.Fatalf("apply handoff: %v", err)
	}
	return st
}

// ---------------------------------------------------------------------------------------------------------------
// §40.10 6: the invariant closes, and a ledger that does not close is drift.

func TestSB10_InvariantCloses(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)

	t.Run("the SQL bucket is gcos.BucketFor", func(t *testing.T) {
		verdicts := []gcos.Verdict{gcos.VerdictRelevant, gcos.VerdictNotRelevant, gcos.VerdictClass0, gcos.VerdictDeferredBirth,
			gcos.VerdictRetired, gcos.VerdictNeedsInput, gcos.VerdictUnknown, gcos.VerdictStale, "governed_forever"}
		outcomes := []gcos.CoverageOutcome{gcos.CoverageCovered, gcos.CoverageOrphan, gcos.CoverageApprovedException, ""}
		for _, v := range verdicts {
			for _, c := range outcomes {
				var got *string
				if err := b.pool.QueryRow(b.ctx, `SELECT gcos_invariant_bucket($1, nullif($2, ''))`, string(v), string(c)).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if want := gcos.BucketFor(v, c); got == nil || *got != string(want) {
					t.Errorf("gcos_invariant_bucket(%q, %q) = %v, gcos.BucketFor = %q", v, c, got, want)
				}
			}
		}
	})

	births := b.count(t, `SELECT count(*) FROM birth_registry`)
	scopes := b.strs(t, `SELECT scope_code FROM governance_responsibility_scope ORDER BY 1`)
	closes := func(t *testing.T) gcos.LedgerReport {
		t.Helper()
		rep, err := b.gate().Invariant(b.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Closes || len(rep.Ledgers) != len(scopes) {
			t.Fatalf("ledger does not close over %d scopes: %+v", len(scopes), rep)
		}
		for _, l := range rep.Ledgers {
			if l.Total != births || l.Sum() != l.Total {
				t.Fatalf("scope %s: total %d, sum %d, births %d", l.Scope, l.Total, l.Sum(), births)
			}
		}
		return rep
	}
	rep := closes(t)
	// Every bucket the world can produce is in use somewhere, so closing is not a trivial 0 = 0.
	var covered, orphans, retired, stale, deferred, class0 int64
	for _, l := range rep.Ledgers {
		covered, orphans, retired, stale, deferred, class0 = covered+l.Covered, orphans+l.Orphans, retired+l.RetiredOrIgnored,
			stale+l.Stale, deferred+l.DeferredBirth, class0+l.Class0
	}
	if covered == 0 || orphans == 0 || retired == 0 || stale == 0 || deferred == 0 || class0 == 0 {
		t.Fatalf("some bucket is empty in every scope: %+v", rep.Ledgers)
	}
	active := b.sb10Active(t)

	// tamper breaks scope's ledger by exactly diff objects; repair restores it.
	check := func(t *testing.T, scope string, diff int64, tamper, repair func()) {
		t.Helper()
		tamper()
		rep, err := b.gate().Invariant(b.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Closes {
			t.Fatalf("ledger closes after tampering with scope %s", scope)
		}
		for _, l := range rep.Ledgers {
			switch {
			case l.Scope == scope && l.Difference() != diff:
				t.Fatalf("scope %s: difference %d, want %d (%+v)", scope, l.Difference(), diff, l)
			case l.Scope != scope && !l.Closes():
				t.Fatalf("scope %s does not close, but only %s was tampered with", l.Scope, scope)
			}
		}
		var evidence []byte
		var status string
		if err := b.pool.QueryRow(b.ctx, `SELECT status, evidence_snapshot::text FROM system_issues WHERE coalesce_key = $1`,
			gcos.CoalesceKey(gcos.IssueGovernanceSchemaDrift, scope)).Scan(&status, &evidence); err != nil || status != "open" {
			t.Fatalf("governance_schema_drift for %s: status %q (%v), want open", scope, status, err)
		}
		var ev struct {
			Difference int64  `json:"difference"`
			Scope      string `json:"scope"`
		}
		if err := json.Unmarshal(evidence, &ev); err != nil || ev.Difference != diff || ev.Scope != scope {
			t.Fatalf("finding evidence %s, want difference %d for %s", evidence, diff, scope)
		}
		if n := b.count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'governance_schema_drift' AND status = 'open'`); n != 1 {
			t.Fatalf("%d open schema-drift findings, want only %s's", n, scope)
		}
		repair()
		closes(t)
		if n := b.count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'governance_schema_drift' AND status = 'open'`); n != 0 {
			t.Fatal("schema-drift finding still open after the ledger closed again")
		}
	}
	// How many objects of a group its own row places (its member count less its materialized objects).
	placedBy := func(t *testing.T, key string) (scope string, n int64) {
		t.Helper()
		if err := b.pool.QueryRow(b.ctx, `SELECT g.scope, g.member_count - (SELECT count(*) FROM governance_candidate_object o
			WHERE o.group_key = g.group_key AND o.lifecycle_status = 'active') FROM governance_group g WHERE g.group_key = $1`, key).Scan(&scope, &n); err != nil {
			t.Fatal(err)
		}
		if n <= 0 {
			t.Fatalf("group %s places no object", key)
		}
		return scope, n
	}

	t.Run("a candidate row moved to another ruleset", func(t *testing.T) {
		key := b.groupWhere(t, `clean AND group_member_count > 5`)
		scope, n := placedBy(t, key)
		draft := b.sb10NewRuleset(t, "MSR-SB10-LEDGER")
		check(t, scope, n,
			func() {
				b.exec(t, `UPDATE governance_candidate_state SET ruleset_version = $3 WHERE group_key = $1 AND ruleset_version = $2`, key, active, draft)
			},
			func() {
				b.exec(t, `UPDATE governance_candidate_state SET ruleset_version = $2 WHERE group_key = $1 AND ruleset_version = $3`, key, active, draft)
			})
	})

	t.Run("a relevant group's coverage row deleted", func(t *testing.T) {
		key := b.groupWhere(t, `clean AND effective_verdict = 'relevant' AND coverage_outcome = 'covered' AND group_member_count > 5`)
		scope, n := placedBy(t, key)
		check(t, scope, n,
			func() {
				b.exec(t, `DELETE FROM governance_candidate_coverage WHERE candidate_ref = $1 AND ruleset_version = $2`, key, active)
			},
			func() {
				// The product's own repair: a backfill re-derives the missing outcome (and writes nothing else).
				res := b.backfill(t)
				if res.RowsWritten != 0 {
					t.Fatalf("repair backfill rewrote %d candidate rows", res.RowsWritten)
				}
				if n := b.count(t, `SELECT count(*) FROM governance_candidate_coverage WHERE candidate_ref = $1 AND ruleset_version = $2`, key, active); n != 1 {
					t.Fatal("the backfill did not restore the coverage outcome")
				}
			})
	})
}

// ---------------------------------------------------------------------------------------------------------------
// §40.10 7: idempotency under live data.

func TestSB10_IdempotentKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, 20000)
	b.cfg.Gate.ObjectRiskClasses = []string{"write_high"}
	b.cfg.Intake.TrustedSources = []string{"import-*", "birth-api", "registry-sync"}
	b.store = postgres.New(b.pool, b.cfg, nil)

	// candidate_key = collection_name:entity_code is unique in every registry; canonical_address is NULL everywhere.
	var total, distinct, colls, canonical int64
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*), count(DISTINCT collection_name || ':' || entity_code), count(DISTINCT collection_name),
		count(canonical_address) FROM birth_registry`).Scan(&total, &distinct, &colls, &canonical); err != nil {
		t.Fatal(err)
	}
	if total != 20000 || distinct != total || colls != 78 || canonical != 0 {
		t.Fatalf("births %d, distinct keys %d, registries %d, canonical addresses %d: want 20000 unique keys over 78 registries, no address",
			total, distinct, colls, canonical)
	}
	if bad := b.strs(t, `SELECT collection_name FROM birth_registry GROUP BY 1
		HAVING count(*) <> count(DISTINCT collection_name || ':' || entity_code)`); len(bad) != 0 {
		t.Fatalf("registries with colliding keys: %v", bad)
	}

	res := b.backfill(t)
	b.activate(t, res.RulesetVersion)
	keyed := b.count(t, `SELECT count(*) FROM governance_candidate_object`)
	if keyed == 0 {
		t.Fatal("no object rows: the key test would prove nothing")
	}
	// Every object row is keyed by its birth's collection:code (the COALESCE of doc 40 §40.5 over a NULL address).
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_object o
		LEFT JOIN birth_registry b ON b.collection_name = split_part(o.candidate_key, ':', 1)
		                          AND b.collection_name || ':' || b.entity_code = o.candidate_key
		WHERE b.id IS NULL OR o.candidate_key <> o.object_ref
		   OR o.candidate_key <> coalesce(b.canonical_address, b.collection_name || ':' || b.entity_code)`); n != 0 {
		t.Fatalf("%d object rows not keyed by collection_name:entity_code", n)
	}
	keys := b.digest(t, `SELECT candidate_key, ruleset_version FROM governance_candidate_object`)

	t.Run("re-running the backfill twice commits nothing", func(t *testing.T) {
		before := b.sb10StateDigest(t)
		runs := b.count(t, `SELECT count(*) FROM candidate_scan_run`)
		for i := range 2 {
			again := b.backfill(t)
			if !again.SnapshotReused || again.RowsWritten != 0 || again.ObjectsMaterialized != 0 || again.ObjectsRetired != 0 {
				t.Fatalf("re-run %d: %+v, want a reused snapshot and nothing written", i+1, again)
			}
		}
		if changed := sb10DiffDigests(before, b.sb10StateDigest(t)); len(changed) != 0 {
			t.Fatalf("re-running the backfill changed %v", changed)
		}
		if n := b.count(t, `SELECT count(*) FROM candidate_scan_run`); n != runs+2 {
			t.Fatalf("scan runs %d → %d, want one ledger row per run", runs, n)
		}
		if d := b.digest(t, `SELECT candidate_key, ruleset_version FROM governance_candidate_object`); d != keys {
			t.Fatal("object keys moved on a re-run")
		}
	})

	t.Run("a replayed handoff changes nothing the second time", func(t *testing.T) {
		var coll, class, anchor string
		if err := b.pool.QueryRow(b.ctx, `SELECT collection_name, entity_type, entity_code FROM birth_registry
			WHERE parent_code IS NULL AND status = 'active' ORDER BY id LIMIT 1`).Scan(&coll, &class, &anchor); err != nil {
			t.Fatal(err)
		}
		b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, parent_code, source_system, actor_ref) VALUES
			('sb10-replay-1', $1, $2, 'active', NULL, 'birth-api', 'birth-gateway'),
			('sb10-replay-2', $1, $2, 'pending', NULL, 'registry-sync', 'registry-sync-bot'),
			('sb10-replay-3', $1, $2, 'active', $3, 'birth-api', 'birth-gateway'),
			('sb10-replay-4', $1, $2, 'active', NULL, 'rogue-loader', 'mallory')`, coll, class, anchor)
		rows := b.sb10TailRows(t, `entity_code LIKE 'sb10-replay-%'`)
		first := b.sb10Apply(t, rows)
		if first.Dirtied == 0 || first.Untrusted != 1 {
			t.Fatalf("first delivery: %+v, want groups dirtied and one untrusted birth", first)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_object WHERE candidate_key = $1 AND materialization_reason = 'open_finding'`, coll+":sb10-replay-4"); n != 1 {
			t.Fatal("the untrusted birth was not quarantined")
		}
		const groupsButSeen = `SELECT group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope,
			member_count, first_seen_at, depends_on FROM governance_group`
		before := b.sb10StateDigest(t)
		groups := b.digest(t, groupsButSeen)
		seen := b.digest(t, `SELECT group_key, last_seen_at FROM governance_group`)
		second := b.sb10Apply(t, rows)
		if second.Dirtied != 0 || second.Emitted != 0 || second.Captured != 0 {
			t.Fatalf("replay: %+v, want nothing dirtied, emitted or captured", second)
		}
		after := b.sb10StateDigest(t)
		before["groups"], after["groups"] = "", "" // compared below, column by column
		if changed := sb10DiffDigests(before, after); len(changed) != 0 {
			t.Fatalf("a replayed handoff changed %v", changed)
		}
		if b.digest(t, groupsButSeen) != groups {
			t.Fatal("a replayed handoff changed the group registry")
		}
		if b.digest(t, `SELECT group_key, last_seen_at FROM governance_group`) != seen {
			t.Errorf("a replayed handoff rewrote governance_group.last_seen_at (recordNewGroups: ON CONFLICT DO UPDATE SET last_seen_at = now()): " +
				"a replay must change nothing")
		}
	})
}

// ---------------------------------------------------------------------------------------------------------------
// §40.10 8: retire is a reversible tombstone; nothing is hard-deleted.

func TestSB10_TombstoneReversible(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 5000, nil)
	ref, group := b.sb10Object(t, `effective_verdict = 'relevant' AND clean`)
	coll, code, _ := strings.Cut(ref, ":")
	scopes := b.count(t, `SELECT count(*) FROM governance_responsibility_scope`)
	// sources counts the object rows and group rows the gate consulted: the groups in every scope always, and the
	// object's own row while one is materialized (SPEC §12: never the object row alone).
	sources := func(t *testing.T) (objects, groups int64) {
		t.Helper()
		g := b.gate().Gate(b.ctx, ref, "read")
		for _, c := range g.Consulted {
			switch c.Source {
			case gcos.GateSourceObject:
				objects++
			case gcos.GateSourceGroup:
				groups++
			default:
				t.Fatalf("gate consulted %+v", c)
			}
		}
		return objects, groups
	}
	if o, g := sources(t); o != 0 || g != scopes {
		t.Fatalf("before any exception the gate consults %d object and %d group rows, want 0 and %d", o, g, scopes)
	}
	row := func(t *testing.T) (lifecycle, reason string, created time.Time) {
		t.Helper()
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_object WHERE candidate_key = $1`, ref); n != 1 {
			t.Fatalf("%d rows for %s, want exactly one", n, ref)
		}
		if err := b.pool.QueryRow(b.ctx, `SELECT lifecycle_status, materialization_reason, created_at FROM governance_candidate_object
			WHERE candidate_key = $1`, ref).Scan(&lifecycle, &reason, &created); err != nil {
			t.Fatal(err)
		}
		return lifecycle, reason, created
	}
	invariant := func(t *testing.T) {
		t.Helper()
		if rep, err := b.gate().Invariant(b.ctx, ""); err != nil || !rep.Closes {
			t.Fatalf("invariant: %+v %v", rep, err)
		}
	}

	b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
		VALUES ('EXC-SB10-TOMB', 'policy', $1, $2, 'APR-SB10', now() + interval '1 year', 'fp', 'approved')`, coll, code)
	if res := b.backfill(t); res.ObjectsMaterialized != 1 || res.ObjectsRetired != 0 {
		t.Fatalf("backfill under the exception: %+v", res)
	}
	lifecycle, reason, created := row(t)
	if lifecycle != gcos.LifecycleActive || reason != "exception" {
		t.Fatalf("excepted object: %s/%s", lifecycle, reason)
	}
	if o, g := sources(t); o != 1 || g != scopes {
		t.Fatalf("under the exception the gate consults %d object and %d group rows, want the object's own and %d", o, g, scopes)
	}
	invariant(t)

	t.Run("the exception expires: tombstone, the group represents the object again", func(t *testing.T) {
		b.exec(t, `UPDATE governance_exception SET expires_at = now() - interval '1 second' WHERE exception_id = 'EXC-SB10-TOMB'`)
		if res := b.backfill(t); res.ObjectsRetired != 1 || res.ObjectsMaterialized != 0 {
			t.Fatalf("backfill after expiry: %+v, want one row retired", res)
		}
		if l, _, _ := row(t); l != gcos.LifecycleRetired {
			t.Fatalf("expired exception: lifecycle %s, want retired", l)
		}
		if o, g := sources(t); o != 0 || g != scopes {
			t.Fatalf("after expiry the gate consults %d object and %d group rows, want only the object's group in each of %d scopes", o, g, scopes)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = $1`, group); n == 0 {
			t.Fatal("the group row is gone")
		}
		invariant(t)
		if res := b.backfill(t); res.ObjectsRetired != 0 || res.ObjectsMaterialized != 0 {
			t.Fatalf("a second backfill touched the tombstone: %+v", res)
		}
	})

	t.Run("the exception returns: the same row is re-activated", func(t *testing.T) {
		b.exec(t, `UPDATE governance_exception SET expires_at = now() + interval '1 year' WHERE exception_id = 'EXC-SB10-TOMB'`)
		if res := b.backfill(t); res.ObjectsMaterialized != 1 || res.ObjectsRetired != 0 {
			t.Fatalf("backfill after restoring: %+v", res)
		}
		l, r, c := row(t)
		if l != gcos.LifecycleActive || r != "exception" || !c.Equal(created) {
			t.Fatalf("restored: %s/%s created %s (was %s), want the same row active again", l, r, c, created)
		}
		if o, g := sources(t); o != 1 || g != scopes {
			t.Fatalf("after restoring the gate consults %d object and %d group rows", o, g)
		}
		invariant(t)
	})

	t.Run("nothing is ever hard-deleted", func(t *testing.T) {
		states := b.count(t, `SELECT count(*) FROM governance_candidate_state`)
		objects := b.count(t, `SELECT count(*) FROM governance_candidate_object`)
		for _, sql := range []string{
			`DELETE FROM governance_candidate_state WHERE group_key = '` + group + `'`,
			`DELETE FROM governance_candidate_state`,
			`DELETE FROM governance_candidate_object WHERE candidate_key = '` + ref + `'`,
			`DELETE FROM governance_candidate_object`,
		} {
			if code := b.sb10ExecErr(t, sql); code != "23001" {
				t.Fatalf("%s: SQLSTATE %s, want 23001 (restrict_violation)", sql, code)
			}
		}
		if b.count(t, `SELECT count(*) FROM governance_candidate_state`) != states || b.count(t, `SELECT count(*) FROM governance_candidate_object`) != objects {
			t.Fatal("rows vanished")
		}
	})
}

// ---------------------------------------------------------------------------------------------------------------
// The reproducible statement (SPEC §12, gcos explain).

func TestSB10_ExplainStatement(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 5000, nil)
	key := b.groupWhere(t, `clean AND effective_verdict = 'relevant'`)
	obj := b.world().ObjectOf(t, key)

	type stored struct {
		verdict, ruleset, scope string
		snapshot                int64
		snapshotAt, scan, valid time.Time
	}
	read := func(t *testing.T, where string, args ...any) map[string]stored {
		t.Helper()
		rows, err := b.pool.Query(b.ctx, `SELECT c.group_key, c.candidate_verdict, c.ruleset_version, g.scope, c.source_snapshot_ref,
			s.snapshot_at, c.scan_time, c.stale_after
			FROM governance_candidate_state c JOIN governance_group g USING (group_key)
			JOIN evolution_snapshots s ON s.id = c.source_snapshot_ref
			JOIN v_current_ruleset cr ON cr.ruleset_version = c.ruleset_version WHERE `+where, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]stored{}
		for rows.Next() {
			var k string
			var s stored
			if err := rows.Scan(&k, &s.verdict, &s.ruleset, &s.scope, &s.snapshot, &s.snapshotAt, &s.scan, &s.valid); err != nil {
				t.Fatal(err)
			}
			out[k] = s
		}
		return out
	}
	rfc := func(ts time.Time) string { return ts.UTC().Format(time.RFC3339) }
	mustState := func(t *testing.T, statement string, s stored) {
		t.Helper()
		for _, part := range []string{
			"was " + s.verdict,
			"under ruleset " + s.ruleset + " (active)",
			fmt.Sprintf("snapshot %d (captured %s)", s.snapshot, rfc(s.snapshotAt)),
			"scanned " + rfc(s.scan),
			"valid until " + rfc(s.valid),
		} {
			if !strings.Contains(statement, part) {
				t.Fatalf("statement %q lacks %q", statement, part)
			}
		}
	}

	t.Run("group", func(t *testing.T) {
		ex, err := b.gate().ExplainGroup(b.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		want := read(t, `c.group_key = $1`, key)[key]
		if len(ex.Statements) != 1 || len(ex.Rows) != 1 {
			t.Fatalf("explain group: %+v", ex)
		}
		mustState(t, ex.Statements[0], want)
		if !strings.HasPrefix(ex.Statements[0], "object group "+key+" ") && !strings.Contains(ex.Statements[0], key) {
			t.Fatalf("statement %q does not name the group", ex.Statements[0])
		}
		r := ex.Rows[0]
		if r.Row == nil || r.Row.RulesetVersion != want.ruleset || r.Row.SnapshotRef != want.snapshot || !r.Row.ScanTime.Equal(want.scan) ||
			r.Snapshot == nil || !r.Snapshot.Equal(want.snapshotAt) || !r.Effective.Clean || r.Effective.Verdict != gcos.Verdict(want.verdict) {
			t.Fatalf("explained row %+v does not carry the stored values %+v", r, want)
		}
		wait.Pass(b.ctx, 1100*time.Millisecond) // a second later, the same statement
		again, err := b.gate().ExplainGroup(b.ctx, key)
		if err != nil || strings.Join(again.Statements, "\n") != strings.Join(ex.Statements, "\n") {
			t.Fatalf("the statement is not reproducible: %q then %q (%v)", ex.Statements, again.Statements, err)
		}
	})

	t.Run("object via its groups", func(t *testing.T) {
		ex, err := b.gate().ExplainObject(b.ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		want := read(t, `(g.object_class, g.source_registry, g.lifecycle_status) = (SELECT object_class, source_registry, lifecycle_status
			FROM governance_group WHERE group_key = $1)`, key)
		if len(ex.Rows) != len(want) || len(ex.Statements) != len(want) || len(want) < 2 {
			t.Fatalf("explain %s: %d rows, want one per scope (%d)", obj, len(ex.Rows), len(want))
		}
		for i, r := range ex.Rows {
			s, ok := want[r.Key]
			if !ok || r.Source != gcos.GateSourceGroup || r.Scope != s.scope {
				t.Fatalf("explained row %+v is not one of the object's groups", r)
			}
			if !strings.HasPrefix(ex.Statements[i], "object "+obj+" was ") || !strings.Contains(ex.Statements[i], "in scope "+s.scope) {
				t.Fatalf("statement %q", ex.Statements[i])
			}
			mustState(t, ex.Statements[i], s)
		}
	})

	t.Run("object with its own row", func(t *testing.T) {
		coll, code, _ := strings.Cut(obj, ":")
		b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
			VALUES ('EXC-SB10-EXPLAIN', 'policy', $1, $2, 'APR-SB10', now() + interval '1 year', 'fp', 'approved')`, coll, code)
		b.backfill(t)
		ex, err := b.gate().ExplainObject(b.ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		var s stored
		if err := b.pool.QueryRow(b.ctx, `SELECT o.candidate_verdict, o.ruleset_version, o.source_snapshot_ref, s.snapshot_at, o.scan_time, o.stale_after
			FROM governance_candidate_object o JOIN evolution_snapshots s ON s.id = o.source_snapshot_ref WHERE o.candidate_key = $1`, obj).Scan(
			&s.verdict, &s.ruleset, &s.snapshot, &s.snapshotAt, &s.scan, &s.valid); err != nil {
			t.Fatal(err)
		}
		// The object's own row first, then its group in every scope: the row never stands in for its groups.
		groups := read(t, `(g.object_class, g.source_registry, g.lifecycle_status) = (SELECT object_class, source_registry, lifecycle_status
			FROM governance_group WHERE group_key = $1)`, key)
		if len(ex.Rows) != 1+len(groups) || ex.Rows[0].Source != gcos.GateSourceObject || ex.Rows[0].Key != obj {
			t.Fatalf("explain of a materialized object: %+v, want its row and its %d groups", ex.Rows, len(groups))
		}
		mustState(t, ex.Statements[0], s)
		for i, r := range ex.Rows[1:] {
			if g, ok := groups[r.Key]; !ok || r.Source != gcos.GateSourceGroup || r.Scope != g.scope {
				t.Fatalf("explained row %+v is not one of the object's groups", r)
			} else {
				mustState(t, ex.Statements[i+1], g)
			}
		}
	})

	t.Run("unknown or malformed input", func(t *testing.T) {
		for _, c := range []struct {
			group bool
			in    string
			code  string
		}{
			{in: "not-an-object", code: gcos.EINVALID},
			{in: "", code: gcos.EINVALID},
			{in: ":code", code: gcos.EINVALID},
			{in: "coll:\x01", code: gcos.EINVALID},
			{in: "no_such_collection:nothing", code: gcos.ENOTFOUND},
			{in: strings.SplitN(obj, ":", 2)[0] + ":no-such-code", code: gcos.ENOTFOUND},
			{group: true, in: "zz", code: gcos.EINVALID},
			{group: true, in: "", code: gcos.EINVALID},
			{group: true, in: strings.ToUpper(key), code: gcos.EINVALID},
			{group: true, in: key + "0", code: gcos.EINVALID},
			{group: true, in: "'; DROP TABLE governance_group; --", code: gcos.EINVALID},
			{group: true, in: strings.Repeat("0", 32), code: gcos.ENOTFOUND},
		} {
			var err error
			if c.group {
				_, err = b.gate().ExplainGroup(b.ctx, c.in)
			} else {
				_, err = b.gate().ExplainObject(b.ctx, c.in)
			}
			if gcos.ErrorCode(err) != c.code {
				t.Errorf("explain (group=%v) %q: %v (code %s), want %s", c.group, c.in, err, gcos.ErrorCode(err), c.code)
			}
		}
		if n := b.count(t, `SELECT count(*) FROM governance_group`); n == 0 {
			t.Fatal("the group registry is gone")
		}
	})
}

// TestSelectedKeysNeverNil: a ruleset diff that selects no group must reach SQL as an empty array, not NULL (NULL
// made the carried rows' dirty flag NULL and the activation fail; found by the differential soak).
func TestSelectedKeysNeverNil(t *testing.T) {
	if keys := postgres.SelectedKeys(nil, nil); keys == nil {
		t.Fatal("selectedKeys of an empty selection is nil")
	}
}
