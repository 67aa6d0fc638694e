package gate_test

// Churn elsewhere blocks no write (SPEC §12): a group dirty because a birth joined it keeps its verdict for the gate
// (no verdict rests on membership), and such a mark never hides a mark for any other reason.

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

func TestMembershipDirtyKeepsTheGateAndHidesNoOtherReason(t *testing.T) {
	t.Parallel()
	b, v := viewWorld(t, 20000, time.Hour)
	// A high-risk object allowed at rest, alone in its base's groups by nothing but its class.
	base, _ := b.world().BaseWhere(t, `bool_and(clean AND effective_verdict = 'relevant' AND risk_class = 'write_medium'
		AND coverage_outcome = 'covered')`)
	obj := b.world().ObjectOfBase(t, base)
	keys := b.strs(t, `SELECT group_key FROM governance_group WHERE (object_class, source_registry, lifecycle_status) = ($1, $2, $3)
		AND retired_at IS NULL ORDER BY 1`, base[0], base[1], base[2])
	reasonOf := func(key string) string {
		t.Helper()
		return b.strs(t, `SELECT coalesce(c.dirty_reason, '') FROM governance_candidate_state c JOIN v_current_ruleset r USING (ruleset_version)
			WHERE c.group_key = $1`, key)[0]
	}
	gate := func(want string) {
		t.Helper()
		if err := v.CatchUp(b.ctx); err != nil {
			t.Fatal(err)
		}
		db, vw := b.gate().Decide(b.ctx, obj, gcos.ActionWrite), v.Decide(b.ctx, obj, gcos.ActionWrite)
		sameAnswer(t, obj, gcos.ActionWrite, db, vw)
		if db.Decision != want {
			t.Fatalf("%s: %s %q, want %s", obj, db.Decision, db.Reasons, want)
		}
	}
	gate(gcos.GateAllow)

	// A birth joins the object's groups and is handed off: every group is dirty for that alone, and the gate allows.
	b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('churn-1', $2, $1, $3, 'birth-api', 'churn-test')`, base[0], base[1], base[2])
	b.world().IntakeAll(t)
	for _, k := range keys {
		if r := reasonOf(k); r != "handoff:object_born" {
			t.Fatalf("group %s after a birth: dirty for %q, want handoff:object_born", k, r)
		}
	}
	gate(gcos.GateAllow)
	if r := b.gate().Decide(b.ctx, b.strs(t, `SELECT $1 || ':churn-1'`, base[1])[0], gcos.ActionWrite); r.Decision != gcos.GateAllow {
		t.Fatalf("the newborn itself: %s %q, want allow as its group", r.Decision, r.Reasons)
	}

	// Another reason on top replaces the birth's (it must not hide behind it), and the gate blocks.
	if _, err := b.store.MarkDirty(b.ctx, keys[:1], gcos.DirtyAuthority); err != nil {
		t.Fatal(err)
	}
	if r := reasonOf(keys[0]); r != gcos.DirtyAuthority {
		t.Fatalf("a mark for authority on a group dirty for a birth: %q, want authority", r)
	}
	gate(gcos.GateBlock)
	// And a birth after it leaves it as it is.
	if _, err := b.store.MarkDirty(b.ctx, keys[:1], "handoff:object_born"); err != nil {
		t.Fatal(err)
	}
	if r := reasonOf(keys[0]); r != gcos.DirtyAuthority {
		t.Fatalf("a birth's mark on a group dirty for authority: %q, want authority kept", r)
	}
	gate(gcos.GateBlock)

	// Marked for both at once, a group takes the reason that is not membership.
	if len(keys) > 1 {
		if err := b.store.InTx(b.ctx, func(tx pgx.Tx) error {
			_, err := postgres.MarkDirtyTx(b.ctx, tx, map[string][]string{"handoff:object_born": keys[1:2], gcos.DirtyAxis: keys[1:2]})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if r := reasonOf(keys[1]); r != gcos.DirtyAxis {
			t.Fatalf("a group marked for a birth and an axis at once: %q, want axis", r)
		}
	}
	b.world().ScanAll(t, postgres.ModeIncremental)
	gate(gcos.GateAllow)
}
