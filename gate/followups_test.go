package gate_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
)

// TestGateFollowUpsCoalesce: the gate's follow-up writes (candidate_unknown for a never-seeded group) are made once
// per coalesce window however often the same object is asked about, and again after the window.
func TestGateFollowUpsCoalesce(t *testing.T) {
	t.Parallel()
	const window = 400 * time.Millisecond
	b := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 7, Config: func(c *gcos.Config) { c.Scan.CoalesceWindow = gcos.Duration(window) }})
	// A birth in a lifecycle its class has never had: the intake records its groups, nothing seeds them.
	var coll, class string
	if err := b.Pool.QueryRow(b.Ctx, `SELECT collection_name, entity_type FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class); err != nil {
		t.Fatal(err)
	}
	b.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('followup-1', $1, $2, 'quarantined_test', 'followup-test', 'tester')`, coll, class)
	src := postgres.BirthTailSource(b.Cfg.SourceBinding)
	stage := intake.New(b.Store)
	wait.For(t, 10*time.Second, "the birth is handed off", func() bool { // once the horizon passes it
		res, err := stage.PollTail(b.Ctx, src, b.Cfg.Intake, stage.Apply)
		if err != nil {
			t.Fatal(err)
		}
		return res.Read > 0
	})
	g := gate.New(b.Store, nil) // one gate: its follow-up log is what coalesces
	occurrences := func() int64 {
		return b.Count(t, `SELECT coalesce(sum(occurrence_count), 0) FROM system_issues WHERE issue_type = 'candidate_unknown'
			AND status = 'open' AND evidence_snapshot->>'raised_by' = 'gate'`)
	}
	obj := coll + ":followup-1"
	start := time.Now()
	r := g.Gate(b.Ctx, obj, gcos.ActionRead)
	// The window opens when the follow-up commits, inside Gate: on a loaded machine that is well after start.
	opened := time.Now()
	if r.Decision != gcos.GateBlock || len(r.Consulted) == 0 {
		t.Fatalf("never-seeded groups: %s %v", r.Decision, r.Reasons)
	}
	first := occurrences()
	if first == 0 {
		t.Fatal("the gate raised no candidate_unknown for never-seeded groups")
	}
	for range 5 {
		g.Gate(b.Ctx, obj, gcos.ActionRead)
	}
	if n := occurrences(); time.Since(start) < window && n != first {
		t.Fatalf("repeated gate calls inside the window wrote the finding again: %d occurrences, want %d", n, first)
	}
	wait.Pass(b.Ctx, time.Until(opened.Add(window+50*time.Millisecond))) // the coalesce window closes
	g.Gate(b.Ctx, obj, gcos.ActionRead)
	if n := occurrences(); n != 2*first {
		t.Fatalf("after the window: %d occurrences, want %d", n, 2*first)
	}
}
