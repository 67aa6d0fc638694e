package gate_test

// Exceptions and odd values are judged at read time (SPEC §12, issue: exceptions at read time): an exception stops
// counting the instant it expires, only counts in its own scope, and only while the excepted object's fingerprint is
// the one it pins; an input value no verdict can rest on blocks the gate by name. The ledger closes throughout.

import (
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

// ledgerOf returns the ledger of one scope.
func (b *bundle) ledgerOf(t *testing.T, scope string) gcos.Ledger {
	t.Helper()
	rep, err := b.gate().Invariant(b.ctx, scope)
	if err != nil || len(rep.Ledgers) != 1 {
		t.Fatalf("invariant of %s: %v (%d ledgers)", scope, err, len(rep.Ledgers))
	}
	return rep.Ledgers[0]
}

// orphanInOneScope returns an object of a high-risk base that is clean and relevant in every scope and an orphan
// in exactly one, that scope, and the orphan group's key and member count.
func (b *bundle) orphanInOneScope(t *testing.T) (obj, scope, key string, members int64) {
	t.Helper()
	base, scope := b.world().BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'write_medium')
		AND count(*) FILTER (WHERE coverage_outcome = 'orphan') = 1`)
	if err := b.pool.QueryRow(b.ctx, `SELECT group_key, group_member_count FROM v_candidate_effective
		WHERE (object_class, source_registry, lifecycle_status) = ($1, $2, $3) AND scope = $4`,
		base[0], base[1], base[2], scope).Scan(&key, &members); err != nil {
		t.Fatal(err)
	}
	return b.world().ObjectOfBase(t, base), scope, key, members
}

func openFindings(b *bundle, t *testing.T, key string) int64 {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key)
}

func TestException_StopsCountingTheInstantItExpires(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)
	obj, scope, key, members := b.orphanInOneScope(t)
	var objClass, objColl string
	if err := b.pool.QueryRow(b.ctx, `SELECT object_class, source_registry FROM governance_group WHERE group_key = $1`, key).
		Scan(&objClass, &objColl); err != nil {
		t.Fatal(err)
	}
	before := b.ledgerOf(t, scope)

	// An approved exception on the whole group, in the orphan's scope, expiring soon; the authority change is
	// handled by a scan as usual.
	b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at, status)
		VALUES ('EXC-T-EXPIRY', $1, $2, $3, 'APR-T', now() + interval '20 seconds', 'approved')`, scope, objClass, objColl)
	if _, err := b.store.MarkDirty(b.ctx, []string{key}, gcos.DirtyAuthority); err != nil {
		t.Fatal(err)
	}
	b.world().ScanAll(t, postgres.ModeIncremental)
	var expired bool
	if err := b.pool.QueryRow(b.ctx, `SELECT now() >= expires_at FROM governance_exception WHERE exception_id = 'EXC-T-EXPIRY'`).Scan(&expired); err != nil || expired {
		t.Skipf("the machine took longer than the exception's life to scan (err %v): nothing to observe", err)
	}
	if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("under an approved exception in scope %s, %s = %s %q, want allow", scope, obj, r.Decision, r.Reasons)
	}
	under := b.ledgerOf(t, scope)
	if under.ApprovedExceptions != before.ApprovedExceptions+members || under.Orphans != before.Orphans-members || !under.Closes() {
		t.Fatalf("ledger %s under the exception: %+v, before %+v: want %d objects moved from orphans to approved_exceptions",
			scope, under, before, members)
	}

	// No scan from here on: the clock alone lifts the exception.
	wait.For(t, 2*time.Minute, "the exception expires by the database clock", func() bool {
		if err := b.pool.QueryRow(b.ctx, `SELECT now() >= expires_at FROM governance_exception WHERE exception_id = 'EXC-T-EXPIRY'`).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		return expired
	})
	r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite)
	if r.Decision != gcos.GateBlock || !strings.Contains(strings.Join(r.Reasons, " | "), "no owner resolves in scope "+scope) {
		t.Fatalf("after the exception expired, %s = %s %q, want block as an orphan in %s", obj, r.Decision, r.Reasons, scope)
	}
	after := b.ledgerOf(t, scope)
	if after.ApprovedExceptions != before.ApprovedExceptions || after.Orphans != before.Orphans || !after.Closes() {
		t.Fatalf("ledger %s after expiry: %+v, want it back to %+v", scope, after, before)
	}
	b.ledgerCloses(t)
	var cov, recorded string
	if err := b.pool.QueryRow(b.ctx, `SELECT coverage_outcome, recorded_coverage_outcome FROM v_candidate_effective WHERE group_key = $1`, key).
		Scan(&cov, &recorded); err != nil || cov != "orphan" || recorded != "approved_exception" {
		t.Fatalf("v_candidate_effective coverage %q (recorded %q, err %v), want orphan in force over the recorded approved_exception", cov, recorded, err)
	}
	ex, err := b.gate().ExplainGroup(b.ctx, key)
	if err != nil || len(ex.Rows) != 1 || ex.Rows[0].Coverage != gcos.CoverageOrphan || ex.Rows[0].ExceptionLifted == nil ||
		ex.Rows[0].ExceptionLifted.Reason != gcos.LiftExpired {
		t.Fatalf("explain %s: %+v (err %v), want coverage orphan and the exception lifted as expired", key, ex.Rows, err)
	}
	if !strings.Contains(ex.Statements[0], "coverage orphan (recorded approved_exception, lifted: exception EXC-T-EXPIRY expired at") {
		t.Fatalf("explain does not say the exception was lifted: %q", ex.Statements[0])
	}
	if n := openFindings(b, t, "gov:exception:lifted:EXC-T-EXPIRY"); n != 1 {
		t.Fatalf("open exception_lifted findings naming EXC-T-EXPIRY = %d, want 1", n)
	}
}

func TestException_OnAnObjectCountsOnlyInItsOwnScopeAndWhileTheObjectIsUnchanged(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)
	scopes := b.strs(t, `SELECT scope_code FROM governance_responsibility_scope ORDER BY 1`)
	obj, orphanScope, _, _ := b.orphanInOneScope(t)
	other := scopes[len(scopes)-1] // never the first scope, where an object row lands by default
	if other == orphanScope {
		other = scopes[len(scopes)-2]
	}
	coll, code, _ := strings.Cut(obj, ":")
	fp := b.objectFingerprint(t, obj)
	objectsIn := func(scope string) int64 {
		return b.count(t, `SELECT count(*) FROM v_candidate_object_effective
			WHERE object_ref = $1 AND lifecycle_status = 'active' AND scope = $2 AND coverage_outcome = 'approved_exception'`, obj, scope)
	}
	audit := func() {
		t.Helper()
		if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
		b.world().ScanAll(t, postgres.ModeIncremental)
		b.ledgerCloses(t)
	}

	// 1. Granted in a scope where the object is covered anyway: counted there, not in the first scope, and it does
	// not suppress the orphan of another scope.
	beforeOther, beforeFirst := b.ledgerOf(t, other), b.ledgerOf(t, scopes[0])
	b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
		VALUES ('EXC-T-OBJ', $1, $2, $3, 'APR-T', now() + interval '1 year', $4, 'approved')`, other, coll, code, fp)
	audit()
	if objectsIn(other) != 1 {
		t.Fatalf("the object's exception in scope %s is not counted there", other)
	}
	if got := b.ledgerOf(t, other).ApprovedExceptions; got != beforeOther.ApprovedExceptions+1 {
		t.Fatalf("approved_exceptions in %s = %d, want %d", other, got, beforeOther.ApprovedExceptions+1)
	}
	if got := b.ledgerOf(t, scopes[0]).ApprovedExceptions; got != beforeFirst.ApprovedExceptions {
		t.Fatalf("an exception granted in %s was counted in %s (%d, was %d)", other, scopes[0], got, beforeFirst.ApprovedExceptions)
	}
	if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateBlock ||
		!strings.Contains(strings.Join(r.Reasons, " | "), "no owner resolves in scope "+orphanScope) {
		t.Fatalf("an exception in %s let the orphan in %s pass: %s %q", other, orphanScope, r.Decision, r.Reasons)
	}

	// 2. Moved to the orphan's scope: the object passes, its neighbours in the same group do not.
	b.exec(t, `UPDATE governance_exception SET scope_code = $1 WHERE exception_id = 'EXC-T-OBJ'`, orphanScope)
	audit()
	if objectsIn(orphanScope) != 1 || objectsIn(other) != 0 {
		t.Fatalf("after moving the exception to %s: counted %d there and %d in %s, want 1 and 0", orphanScope, objectsIn(orphanScope), objectsIn(other), other)
	}
	if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("under its exception in %s, %s = %s %q, want allow", orphanScope, obj, r.Decision, r.Reasons)
	}
	underOrphan := b.ledgerOf(t, orphanScope)
	var neighbour string
	if err := b.pool.QueryRow(b.ctx, `SELECT n.collection_name || ':' || n.entity_code FROM birth_registry n, birth_registry o
		WHERE o.collection_name = $1 AND o.entity_code = $2 AND n.collection_name = o.collection_name
		  AND n.entity_type = o.entity_type AND n.status = o.status AND n.parent_code IS NULL AND n.id <> o.id
		ORDER BY n.id LIMIT 1`, coll, code).Scan(&neighbour); err != nil {
		t.Fatal(err)
	}
	if r := b.gate().Gate(b.ctx, neighbour, gcos.ActionWrite); r.Decision != gcos.GateBlock {
		t.Fatalf("an exception on %s let its neighbour %s pass: %q", obj, neighbour, r.Reasons)
	}

	// 3. The object changes without a word to GCOS: the very next read lifts the exception and says why.
	b.exec(t, `UPDATE birth_registry SET actor_ref = 'someone-else' WHERE collection_name = $1 AND entity_code = $2`, coll, code)
	r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite)
	if r.Decision != gcos.GateBlock || !strings.Contains(strings.Join(r.Reasons, " | "), "no owner resolves in scope "+orphanScope) {
		t.Fatalf("after the excepted object changed, %s = %s %q, want block as an orphan in %s", obj, r.Decision, r.Reasons, orphanScope)
	}
	if n := openFindings(b, t, "gov:exception:lifted:EXC-T-OBJ"); n != 1 {
		t.Fatalf("open exception_lifted findings naming EXC-T-OBJ = %d, want 1", n)
	}
	// The views and the ledger agree with the gate at once, with no scan.
	if objectsIn(orphanScope) != 0 {
		t.Fatal("v_candidate_object_effective still counts the exception on the changed object")
	}
	if got := b.ledgerOf(t, orphanScope); got.ApprovedExceptions != underOrphan.ApprovedExceptions-1 || !got.Closes() {
		t.Fatalf("ledger %s after the object changed: %+v, want one approved exception less than %+v", orphanScope, got, underOrphan)
	}
	ex, err := b.gate().ExplainObject(b.ctx, obj)
	if err != nil || ex.ObjectFingerprint == fp || ex.Rows[0].ExceptionLifted == nil || ex.Rows[0].ExceptionLifted.Reason != gcos.LiftFingerprintChanged {
		t.Fatalf("explain %s: fingerprint %s (pinned %s), rows %+v (err %v), want the exception lifted as fingerprint_changed", obj, ex.ObjectFingerprint, fp, ex.Rows, err)
	}
	// The next audit agrees: the object is an orphan again in every count, and the finding is not repeated.
	audit()
	if objectsIn(orphanScope) != 0 {
		t.Fatal("the audit still counts the lifted exception")
	}
	if n := b.count(t, `SELECT occurrence_count FROM system_issues WHERE coalesce_key = 'gov:exception:lifted:EXC-T-OBJ' AND status = 'open'`); n != 1 {
		t.Fatalf("exception_lifted occurrence_count = %d after the gate and an audit saw the same lift, want 1", n)
	}
}

func TestGate_OddInputValuesBlockByName(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)
	base, _ := b.world().BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'write_medium'
		AND coverage_outcome = 'covered')`)
	allowed := b.world().ObjectOfBase(t, base)
	if r := b.gate().Gate(b.ctx, allowed, gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("well-formed %s = %s %q, want allow", allowed, r.Decision, r.Reasons)
	}
	birth := func(code, coll, class, status string, parent any) string {
		b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, parent_code, source_system, actor_ref)
			VALUES ($1, $2, $3, $4, $5, 'birth-api', 'birth-gateway')`, code, coll, class, status, parent)
		return coll + ":" + code
	}
	tests := []struct {
		name, object, value, state, finding string
	}{
		{"a child whose parent has no birth", birth("odd-orphan-child", base[1], base[0], base[2], "no-such-parent"),
			"no-such-parent", "birth_or_registry_missing", "gov:input:birth_or_registry_missing:" + base[1] + ":odd-orphan-child"},
		{"an odd status string", birth("odd-status", base[1], base[0], "Active ", nil),
			`"Active "`, "invalid_schema", "gov:input:invalid_schema:lifecycle_status=Active "},
		{"an unregistered collection", birth("odd-collection", "no_such_collection", base[0], base[2], nil),
			"no_such_collection", "birth_or_registry_missing", "gov:input:birth_or_registry_missing:collection=no_such_collection"},
	}
	var unknownRisk string
	if err := b.pool.QueryRow(b.ctx, `SELECT b.collection_name || ':' || b.entity_code FROM birth_registry b
		JOIN governance_coverage_profile p ON p.entity_type = b.entity_type AND p.risk_class IS NULL
		WHERE b.parent_code IS NULL ORDER BY b.id LIMIT 1`).Scan(&unknownRisk); err != nil {
		t.Fatalf("no object of a class without a risk class: %v", err)
	}
	tests = append(tests, struct{ name, object, value, state, finding string }{"a class without a risk class", unknownRisk,
		"has no risk class", "birth_or_registry_missing", "gov:input:birth_or_registry_missing:risk_class=unknown"})
	for _, tt := range tests {
		for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
			r := b.gate().Gate(b.ctx, tt.object, action)
			if r.Decision != gcos.GateBlock || len(r.Reasons) == 0 || !strings.Contains(r.Reasons[0], tt.value) ||
				!strings.Contains(r.Reasons[0], tt.state) {
				t.Fatalf("%s: %s on %s = %s %q, want block with the first reason naming %s and %s", tt.name, action,
					tt.object, r.Decision, r.Reasons, tt.value, tt.state)
			}
		}
		if n := openFindings(b, t, tt.finding); n != 1 {
			t.Fatalf("%s: open %q findings = %d, want 1 (coalesced)", tt.name, tt.finding, n)
		}
		ex, err := b.gate().ExplainObject(b.ctx, tt.object)
		if err != nil || len(ex.InputProblems) == 0 {
			t.Fatalf("%s: explain names no input problem (%v)", tt.name, err)
		}
	}
	// The audit takes the odd births in: the odd status's group is needs_input (invalid_schema), the unregistered
	// collection's birth_or_registry_missing, and every object is still counted once.
	if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	b.world().ScanAll(t, postgres.ModeIncremental)
	if n := b.count(t, `SELECT count(*) FROM v_candidate_effective WHERE lifecycle_status = 'Active '
		AND (candidate_verdict, input_quality_state) IS DISTINCT FROM ('needs_input', 'invalid_schema')`); n != 0 {
		t.Fatalf("%d groups of status 'Active ' are not needs_input/invalid_schema", n)
	}
	b.ledgerCloses(t)
	if r := b.gate().Gate(b.ctx, allowed, gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("the well-formed neighbour %s = %s %q after the odd births, want allow", allowed, r.Decision, r.Reasons)
	}
}

func TestException_TheWorldPinsItsObjectExceptionsAsGCOSReadsThem(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 3000, nil)
	var id, scope, object, pinned string
	if err := b.pool.QueryRow(b.ctx, `SELECT exception_id, scope_code, collection_name || ':' || entity_code, fingerprint
		FROM governance_exception WHERE entity_code IS NOT NULL AND status = 'approved' AND expires_at > now()
		ORDER BY exception_id LIMIT 1`).Scan(&id, &scope, &object, &pinned); err != nil {
		t.Fatalf("the world has no live exception on one object: %v", err)
	}
	if got := b.objectFingerprint(t, object); got != pinned {
		t.Fatalf("world pinned %s to %s, GCOS reads the object's fingerprint as %s: the two row hashes drifted apart", id, pinned, got)
	}
	if n := b.count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'exception_lifted' AND coalesce_key LIKE '%' || $1`, id); n != 0 {
		t.Fatalf("the backfill lifted the world's exception %s", id)
	}
	if n := b.count(t, `SELECT count(*) FROM v_candidate_object_effective WHERE object_ref = $1 AND lifecycle_status = 'active'
		AND scope = $2 AND materialization_reason = 'exception'`, object, scope); n != 1 {
		t.Fatalf("the object of %s has no row in the exception's scope %s", id, scope)
	}
	// An exception naming an object that was never born suppresses nothing, and the audit says so.
	b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
		VALUES ('EXC-T-GHOST', $1, 'commerce_orders', 'never-born', 'APR-T', now() + interval '1 year', $2, 'approved')`, scope, pinned)
	if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = 'gov:exception:lifted:EXC-T-GHOST' AND status = 'open'
		AND evidence_snapshot ->> 'reason' = $1`, gcos.LiftObjectGone); n != 1 {
		t.Fatal("an exception on an object with no birth raised no exception_lifted finding")
	}
	b.ledgerCloses(t)
}

// The way a risk desk revokes an exception: its expires_at moved into the past (with its changelog row). The terms
// recorded with the object's coverage said 2030; the gate, explain, the views and the ledger read the registry's
// current row, so the exception stops suppressing at once, with no intake and no scan in between.
func TestException_RevokedInTheRegistryStopsSuppressingAtOnce(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)
	obj, scope, _, _ := b.orphanInOneScope(t)
	coll, code, _ := strings.Cut(obj, ":")
	before := b.ledgerOf(t, scope)
	b.exec(t, `INSERT INTO governance_exception (exception_id, scope_code, collection_name, entity_code, approval_ref, expires_at, fingerprint, status)
		VALUES ('EXC-T-REVOKE', $1, $2, $3, 'APR-T', '2030-01-01T00:00:00Z', $4, 'approved')`, scope, coll, code, b.objectFingerprint(t, obj))
	if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	b.world().ScanAll(t, postgres.ModeIncremental)
	if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("under its exception in %s, %s = %s %q, want allow", scope, obj, r.Decision, r.Reasons)
	}
	if got := b.ledgerOf(t, scope); got.ApprovedExceptions != before.ApprovedExceptions+1 {
		t.Fatalf("approved_exceptions in %s = %d under the exception, want %d", scope, got.ApprovedExceptions, before.ApprovedExceptions+1)
	}

	// Revoked: no intake, no scan from here on.
	b.exec(t, `UPDATE governance_exception SET expires_at = now() - interval '1 minute' WHERE exception_id = 'EXC-T-REVOKE'`)
	b.exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ('exception', 'EXC-T-REVOKE', 'update', 'risk-desk')`)
	var recordedExpiry time.Time
	if err := b.pool.QueryRow(b.ctx, `SELECT exception_expires_at FROM governance_candidate_coverage WHERE exception_id = 'EXC-T-REVOKE'`).
		Scan(&recordedExpiry); err != nil || recordedExpiry.Year() != 2030 {
		t.Fatalf("the recorded terms changed without a scan (%v, err %v): the test no longer shows the read", recordedExpiry, err)
	}
	r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite)
	if r.Decision != gcos.GateBlock || !strings.Contains(strings.Join(r.Reasons, " | "), "no owner resolves in scope "+scope) {
		t.Fatalf("after the revocation, %s = %s %q, want block as an orphan in %s", obj, r.Decision, r.Reasons, scope)
	}
	if got := b.ledgerOf(t, scope); got.ApprovedExceptions != before.ApprovedExceptions || !got.Closes() {
		t.Fatalf("ledger %s after the revocation: %+v, want approved_exceptions back to %d", scope, got, before.ApprovedExceptions)
	}
	if n := b.count(t, `SELECT count(*) FROM v_candidate_object_effective WHERE exception_id = 'EXC-T-REVOKE'
		AND coverage_outcome = 'approved_exception'`); n != 0 {
		t.Fatal("v_candidate_object_effective still counts the revoked exception")
	}
	ex, err := b.gate().ExplainObject(b.ctx, obj)
	if err != nil || ex.Rows[0].ExceptionLifted == nil || ex.Rows[0].ExceptionLifted.Reason != gcos.LiftExpired {
		t.Fatalf("explain %s: rows %+v (err %v), want the exception lifted as expired", obj, ex.Rows, err)
	}

	// Withdrawn altogether (the row deleted): still nothing suppresses.
	b.exec(t, `DELETE FROM governance_exception WHERE exception_id = 'EXC-T-REVOKE'`)
	if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateBlock {
		t.Fatalf("after the exception was deleted, %s = %s %q, want block", obj, r.Decision, r.Reasons)
	}
	ex, err = b.gate().ExplainObject(b.ctx, obj)
	if err != nil || ex.Rows[0].ExceptionLifted == nil || ex.Rows[0].ExceptionLifted.Reason != gcos.LiftWithdrawn {
		t.Fatalf("explain %s: rows %+v (err %v), want the exception lifted as withdrawn", obj, ex.Rows, err)
	}
	b.ledgerCloses(t)
}

// Two equally specific active ownership rows naming different owners are a dispute: the group has no owner (an
// orphan: never coverage), an owner_dispute finding routed to the council names the claimants, explain says so, and
// retiring one row settles it.
func TestOwnership_ADisputeIsNoOwner(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)
	var scope, class, coll, owner, key string
	if err := b.pool.QueryRow(b.ctx, `SELECT e.scope, e.object_class, e.source_registry, o.owner_ref, e.group_key
		FROM v_candidate_effective e
		JOIN governance_object_ownership o ON o.scope_code = e.scope AND o.collection_name = e.source_registry
		     AND o.entity_type IS NULL AND o.status = 'active'
		WHERE e.coverage_outcome = 'covered' AND e.clean AND e.lifecycle_status = 'active'
		  AND NOT EXISTS (SELECT 1 FROM governance_object_ownership c WHERE c.scope_code = e.scope AND c.entity_type = e.object_class)
		ORDER BY e.group_key LIMIT 1`).Scan(&scope, &class, &coll, &owner, &key); err != nil {
		t.Fatalf("no group covered by a collection owner: %v", err)
	}
	var rival int64
	if err := b.pool.QueryRow(b.ctx, `INSERT INTO governance_object_ownership (scope_code, collection_name, owner_ref)
		VALUES ($1, $2, 'team-rival') RETURNING id`, scope, coll).Scan(&rival); err != nil {
		t.Fatal(err)
	}
	rescan := func(key string) string {
		t.Helper()
		if _, err := b.store.MarkDirty(b.ctx, []string{key}, gcos.DirtyAuthority); err != nil {
			t.Fatal(err)
		}
		b.world().ScanAll(t, postgres.ModeIncremental)
		var k string
		if err := b.pool.QueryRow(b.ctx, `SELECT group_key FROM v_candidate_effective WHERE scope = $1 AND object_class = $2
			AND source_registry = $3 AND lifecycle_status = 'active' AND member_count > 0`, scope, class, coll).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	disputed := rescan(key)
	var cov string
	var ownerScope *string
	if err := b.pool.QueryRow(b.ctx, `SELECT coverage_outcome, owner_scope FROM v_candidate_effective WHERE group_key = $1`, disputed).
		Scan(&cov, &ownerScope); err != nil || cov != "orphan" || ownerScope != nil {
		t.Fatalf("disputed group %s: coverage %q, owner %v (err %v), want an orphan with no owner", disputed, cov, ownerScope, err)
	}
	fkey := gcos.CoalesceKey(gcos.IssueOwnerDispute, disputed)
	if n := b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'
		AND evidence_snapshot ->> 'routed_to' = $2 AND evidence_snapshot::jsonb -> 'claimants' ? $3 AND evidence_snapshot::jsonb -> 'claimants' ? 'team-rival'`,
		fkey, gcos.CouncilOwner, owner); n != 1 {
		t.Fatalf("open owner_dispute findings naming %s and team-rival, routed to the council = %d, want 1", owner, n)
	}
	ex, err := b.gate().ExplainGroup(b.ctx, disputed)
	if err != nil || len(ex.Rows) != 1 || len(ex.Rows[0].OwnerDispute) != 2 ||
		!strings.Contains(strings.Join(ex.Statements, " | "), "ownership dispute between") {
		t.Fatalf("explain %s: %+v %q (err %v), want the dispute named", disputed, ex.Rows, ex.Statements, err)
	}
	// Settled: the rival row retired, the owner is back and the finding closes.
	b.exec(t, `UPDATE governance_object_ownership SET status = 'inactive' WHERE id = $1`, rival)
	settled := rescan(disputed)
	if err := b.pool.QueryRow(b.ctx, `SELECT coverage_outcome, owner_scope FROM v_candidate_effective WHERE group_key = $1`, settled).
		Scan(&cov, &ownerScope); err != nil || cov != "covered" || ownerScope == nil || *ownerScope != owner {
		t.Fatalf("after the rival row was retired: coverage %q, owner %v (err %v), want covered by %s", cov, ownerScope, err, owner)
	}
	if n := b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, fkey); n != 0 {
		t.Fatalf("the owner_dispute finding of %s is still open after the dispute was settled", disputed)
	}
	b.ledgerCloses(t)
}
