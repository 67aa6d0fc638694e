package gate_test

// The gate judges an object in every scope it belongs to (SPEC §12): the worst of its materialized row and its
// group in each scope decides, and a high-risk relevant group with no owner in a scope (an orphan) blocks.

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/postgres"
)

// ledgerCloses fails the test unless the invariant closes in every scope.
func (b *bundle) ledgerCloses(t *testing.T) {
	t.Helper()
	rep, err := b.gate().Invariant(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ledgers) == 0 {
		t.Fatal("the invariant has no scope")
	}
	for _, l := range rep.Ledgers {
		if !l.Closes() {
			t.Fatalf("ledger of scope %s does not close: %+v (difference %d)", l.Scope, l, l.Difference())
		}
	}
}

// consultedScopes lists the scopes of the group rows a gate answer consulted.
func consultedScopes(r gate.GateResult) []string {
	var out []string
	for _, c := range r.Consulted {
		if c.Source == gcos.GateSourceGroup {
			out = append(out, c.Scope)
		}
	}
	slices.Sort(out)
	return out
}

func TestGate_HighRiskOrphanInAnyScopeBlocks(t *testing.T) {
	t.Parallel()
	// A coalesce window of 1 ns: only the once-per-verdict rule can keep a second ask from raising the orphan again.
	b := seededWorld(t, 20000, func(c *gcos.Config) { c.Scan.CoalesceWindow = gcos.Duration(time.Nanosecond) })
	scopes := b.strs(t, `SELECT scope_code FROM governance_responsibility_scope ORDER BY 1`)

	t.Run("covered in every scope: allowed", func(t *testing.T) {
		base, _ := b.world().BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'write_medium'
			AND coverage_outcome = 'covered')`)
		obj := b.world().ObjectOfBase(t, base)
		r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite)
		if r.Decision != gcos.GateAllow {
			t.Fatalf("gate %s = %s %q, want allow", obj, r.Decision, r.Reasons)
		}
		if got := consultedScopes(r); !slices.Equal(got, scopes) {
			t.Fatalf("consulted scopes %v, want every scope %v", got, scopes)
		}
	})

	t.Run("low-risk orphan: a clean low-risk object is not blocked for lacking an owner", func(t *testing.T) {
		base, _ := b.world().BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'read_descriptive')
			AND count(*) FILTER (WHERE coverage_outcome = 'orphan') > 0`)
		obj := b.world().ObjectOfBase(t, base)
		if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateAllow {
			t.Fatalf("low-risk orphan %s = %s %q, want allow (SPEC §12 blocks orphans of high risk only)", obj, r.Decision, r.Reasons)
		}
	})

	t.Run("orphan in one scope: blocked, the reason names the scope, a coverage_orphan finding names the group", func(t *testing.T) {
		base, scope := b.world().BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'write_medium')
			AND count(*) FILTER (WHERE coverage_outcome = 'orphan') = 1`)
		var orphanKey string
		if err := b.pool.QueryRow(b.ctx, `SELECT group_key FROM v_candidate_effective
			WHERE (object_class, source_registry, lifecycle_status) = ($1, $2, $3) AND coverage_outcome = 'orphan'`,
			base[0], base[1], base[2]).Scan(&orphanKey); err != nil {
			t.Fatal(err)
		}
		obj := b.world().ObjectOfBase(t, base)
		for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
			r := b.gate().Gate(b.ctx, obj, action)
			if r.Decision != gcos.GateBlock {
				t.Fatalf("%s on %s (orphan in scope %s) = %s %q, want block", action, obj, scope, r.Decision, r.Reasons)
			}
			joined := strings.Join(r.Reasons, " | ")
			if !strings.Contains(joined, "scope "+scope) || !strings.Contains(joined, "orphan") {
				t.Fatalf("reasons %q do not name the orphan scope %s", joined, scope)
			}
			if got := consultedScopes(r); !slices.Equal(got, scopes) {
				t.Fatalf("consulted scopes %v, want every scope %v", got, scopes)
			}
		}
		key := "gov:coverage:orphan:" + orphanKey
		if n := b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key); n != 1 {
			t.Fatalf("open %s findings = %d, want 1 (coalesced)", key, n)
		}
		// Asked twice about one verdict, the gate raised the orphan once: a busy caller does not turn blocks into writes.
		if n := b.count(t, `SELECT occurrence_count FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key); n != 1 {
			t.Fatalf("%s occurrence_count = %d after two gate calls on one verdict, want 1", key, n)
		}
		if n := b.count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'coverage_orphan'`); n != 1 {
			t.Fatalf("coverage_orphan findings = %d, want exactly the one naming group %s", n, orphanKey)
		}
		b.ledgerCloses(t)

		// The collection is exempted: the rescan settles the group (retired, no owner needed) and closes the finding.
		b.exec(t, `UPDATE collection_registry SET coverage_status = 'BIRTH_EXEMPT_TEST' WHERE collection_name = $1`, base[1])
		if _, err := b.store.MarkDirty(b.ctx, []string{orphanKey}, gcos.DirtyAuthority); err != nil {
			t.Fatal(err)
		}
		b.world().ScanAll(t, postgres.ModeIncremental)
		if n := b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key); n != 0 {
			t.Fatalf("%s still open after its group was settled as not an orphan", key)
		}
		b.ledgerCloses(t)
	})

}

func TestGate_ObjectRowDoesNotHideItsGroups(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 20000, nil)
	scopes := b.strs(t, `SELECT scope_code FROM governance_responsibility_scope ORDER BY 1`)
	// A materialized high-risk object that is retired in every scope: allowed, on its row and on every group.
	var obj, rowScope string
	if err := b.pool.QueryRow(b.ctx, `
		SELECT o.object_ref, o.scope FROM v_candidate_object_effective o
		JOIN governance_group g ON g.group_key = o.group_key
		WHERE o.lifecycle_status = 'active' AND o.effective_verdict = 'retired' AND o.risk_class = 'write_high'
		  AND NOT EXISTS (SELECT 1 FROM v_candidate_effective e
		                  WHERE (e.object_class, e.source_registry, e.lifecycle_status) = (g.object_class, g.source_registry, g.lifecycle_status)
		                    AND NOT (e.clean AND e.effective_verdict = 'retired'))
		ORDER BY o.object_ref LIMIT 1`).Scan(&obj, &rowScope); err != nil {
		t.Fatalf("no retired materialized object: %v", err)
	}
	if r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("clean retired object %s = %s %q, want allow", obj, r.Decision, r.Reasons)
	}

	// Its group in another scope than the row's goes stale: the object is blocked, and the reason names that scope.
	other := scopes[len(scopes)-1]
	if other == rowScope {
		other = scopes[0]
	}
	var otherKey string
	if err := b.pool.QueryRow(b.ctx, `
		SELECT e.group_key FROM v_candidate_effective e
		JOIN governance_candidate_object o ON o.object_ref = $1 AND o.lifecycle_status = 'active'
		JOIN governance_group g ON g.group_key = o.group_key
		WHERE (e.object_class, e.source_registry, e.lifecycle_status) = (g.object_class, g.source_registry, g.lifecycle_status)
		  AND e.scope = $2`, obj, other).Scan(&otherKey); err != nil {
		t.Fatal(err)
	}
	if n, err := b.store.MarkDirty(b.ctx, []string{otherKey}, gcos.DirtyAuthority); err != nil || n != 1 {
		t.Fatalf("mark %s dirty: n=%d err=%v", otherKey, n, err)
	}
	r := b.gate().Gate(b.ctx, obj, gcos.ActionWrite)
	if r.Decision != gcos.GateBlock || r.EffectiveVerdict != gcos.VerdictStale {
		t.Fatalf("object %s with its %s group stale = %s %s %q, want block stale", obj, other, r.Decision, r.EffectiveVerdict, r.Reasons)
	}
	if joined := strings.Join(r.Reasons, " | "); !strings.Contains(joined, other) {
		t.Fatalf("reasons %q do not name scope %s", joined, other)
	}
	if got := consultedScopes(r); !slices.Equal(got, scopes) {
		t.Fatalf("consulted group scopes %v, want every scope %v", got, scopes)
	}
	if r.Consulted[0].Source != gcos.GateSourceObject {
		t.Fatalf("the object row was not consulted: %+v", r.Consulted)
	}

	// explain lists the object row and each scope with its verdict and age.
	ex, err := b.gate().ExplainObject(b.ctx, obj)
	if err != nil {
		t.Fatal(err)
	}
	var explained []string
	for _, row := range ex.Rows {
		if row.Source == gcos.GateSourceGroup {
			explained = append(explained, row.Scope)
		}
		if row.Scope == other && row.Source == gcos.GateSourceGroup && row.Effective.Verdict != gcos.VerdictStale {
			t.Fatalf("explain shows scope %s as %s, want stale", other, row.Effective.Verdict)
		}
	}
	slices.Sort(explained)
	if !slices.Equal(explained, scopes) {
		t.Fatalf("explain lists scopes %v, want every scope %v", explained, scopes)
	}
	if len(ex.Statements) != len(ex.Rows) || !strings.Contains(strings.Join(ex.Statements, "\n"), "in scope "+other) {
		t.Fatalf("explain statements do not name scope %s:\n%s", other, strings.Join(ex.Statements, "\n"))
	}
	b.ledgerCloses(t)
}
