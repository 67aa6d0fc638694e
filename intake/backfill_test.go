package intake_test

import (
	"testing"

	"gcos"
	"gcos/gcostest"
)

func TestBackfillSeedsOneRowPerGroupAndRerunIsNoOp(t *testing.T) {
	t.Parallel()
	b := gcostest.New(t, gcostest.Options{Births: 20000, Seed: 7})
	res := b.Backfill(t)
	if res.Births != 20000 {
		t.Fatalf("births = %d, want 20000", res.Births)
	}
	groups := b.Count(t, `SELECT count(*) FROM governance_group`)
	rows := b.Count(t, `SELECT count(*) FROM governance_candidate_state`)
	if rows != groups || rows != int64(res.Groups) || rows == 0 {
		t.Fatalf("candidate rows %d, groups %d, result %d: want one row per group", rows, groups, res.Groups)
	}
	if res.RulesetStatus != gcos.RulesetDraft {
		t.Fatalf("first backfill ruleset status = %s, want draft (nobody approved it yet)", res.RulesetStatus)
	}
	before := b.Digest(t, `SELECT * FROM governance_candidate_state`)
	groupsBefore := b.Digest(t, `SELECT * FROM governance_group`)
	snaps := b.Count(t, `SELECT count(*) FROM evolution_snapshots`)
	again := b.Backfill(t)
	if !again.SnapshotReused || again.SnapshotID != res.SnapshotID {
		t.Fatalf("re-run captured a new snapshot %d (reused=%v), want %d reused", again.SnapshotID, again.SnapshotReused, res.SnapshotID)
	}
	if again.RowsWritten != 0 {
		t.Fatalf("re-run wrote %d rows", again.RowsWritten)
	}
	if after := b.Digest(t, `SELECT * FROM governance_candidate_state`); after != before {
		t.Fatal("re-run changed candidate rows")
	}
	if after := b.Digest(t, `SELECT * FROM governance_group`); after != groupsBefore {
		t.Fatal("re-run changed the group registry")
	}
	if n := b.Count(t, `SELECT count(*) FROM evolution_snapshots`); n != snaps {
		t.Fatalf("snapshots %d → %d on a no-op re-run", snaps, n)
	}
	if n := b.Count(t, `SELECT count(*) FROM candidate_scan_run WHERE mode = 'backfill' AND phase = 'seeding' AND status = 'succeeded'`); n != 2 {
		t.Fatalf("succeeded backfill runs = %d, want 2", n)
	}
}
