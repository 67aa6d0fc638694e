package intake_test

import (
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/gcostest"
	"gcos/intake"
)

// TestRegistryWatchHandsOffSilentEdits: edits of the authority registries made with no change-ledger row — an owner
// revoked, an owner row deleted, an exception granted — are seen by the registry watch, which dirties their groups
// for re-evaluation (reason authority) and records the registry as handed off; until it has, a question asked with a
// token is told the registry waits. The first poll only records each registry, and a poll with nothing new hands
// off nothing.
func TestRegistryWatchHandsOffSilentEdits(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 13})
	stage := intake.New(w.Store)
	first, err := stage.PollRegistries(w.Ctx)
	if err != nil || first.Registries < 3 || len(first.Changed) != 0 {
		t.Fatalf("first poll: %+v, %v; want every registry recorded and nothing handed off", first, err)
	}
	if again, err := stage.PollRegistries(w.Ctx); err != nil || len(again.Changed) != 0 {
		t.Fatalf("a poll with nothing new: %+v, %v", again, err)
	}
	present := func() []string {
		t.Helper()
		p, err := stage.Present(w.Ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var regs []string
		for _, x := range p.Waiting {
			if strings.HasPrefix(x, "governance_") {
				regs = append(regs, x)
			}
		}
		return regs
	}
	if waiting := present(); len(waiting) != 0 {
		t.Fatalf("registries wait with nothing new: %v", waiting)
	}
	dirtyBefore := w.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE dirty AND dirty_reason = $1`, gcos.DirtyAuthority)

	ids := w.Strings(t, `SELECT id::text FROM governance_object_ownership WHERE status = 'active' ORDER BY id LIMIT 2`)
	w.Exec(t, `UPDATE governance_object_ownership SET status = 'revoked' WHERE id = $1::bigint`, ids[0])
	w.Exec(t, `DELETE FROM governance_object_ownership WHERE id = $1::bigint`, ids[1])
	w.Exec(t, `INSERT INTO governance_exception (exception_id, scope_code, entity_type, approval_ref, expires_at)
		SELECT 'EXC-WATCH', scope_code, entity_type, 'APR-W', now() + interval '1 day' FROM governance_object_ownership
		WHERE entity_type IS NOT NULL LIMIT 1`)
	if waiting := present(); len(waiting) != 2 {
		t.Fatalf("after silent edits the registries waiting are %v, want the ownership and exception registries", waiting)
	}
	tick, err := stage.PollRegistries(w.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tick.Changed["governance_object_ownership"] != 2 || tick.Changed["governance_exception"] != 1 || tick.Stats.Signals != 3 {
		t.Fatalf("poll after silent edits: %+v, want 2 ownership rows and 1 exception handed off", tick)
	}
	if after := w.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE dirty AND dirty_reason = $1`, gcos.DirtyAuthority); after <= dirtyBefore {
		t.Fatalf("groups dirty for authority: %d before, %d after; the edits dirtied nothing", dirtyBefore, after)
	}
	if waiting := present(); len(waiting) != 0 {
		t.Fatalf("registries still wait once handed off: %v", waiting)
	}
	if again, err := stage.PollRegistries(w.Ctx); err != nil || len(again.Changed) != 0 {
		t.Fatalf("the edits are handed off twice: %+v, %v", again, err)
	}
}
