package scan_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

// TestPruneRefusesOnlyTheCursorsThatMissedADeletedChange: the verdict change log's prune moves the feed's horizon
// just past what it deleted. A cursor issued while the log was empty (a dashboard opened before the first change)
// stays good through a prune that deletes nothing; once a change it had not seen is deleted it is refused (EGONE),
// while a cursor issued after that change reads on.
func TestPruneRefusesOnlyTheCursorsThatMissedADeletedChange(t *testing.T) {
	t.Parallel()
	store, ctx := seeded(t)
	stage := scan.New(store)
	if _, err := store.Pool().Exec(ctx, `DELETE FROM gcos_verdict_change`); err != nil {
		t.Fatal(err)
	}
	latest := func() string {
		t.Helper()
		page, err := store.Changes(ctx, postgres.ChangeQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return page.Next
	}
	read := func(cursor string) ([]postgres.VerdictChange, error) {
		page, err := store.Changes(ctx, postgres.ChangeQuery{After: cursor})
		return page.Changes, err
	}
	prune := func(keep time.Duration) int64 {
		t.Helper()
		n, err := stage.PruneVerdictChanges(ctx, keep)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	early := latest() // the log is empty
	if n := prune(time.Hour); n != 0 {
		t.Fatalf("a prune of an empty log deleted %d", n)
	}
	var xid string
	if err := store.Pool().QueryRow(ctx, `INSERT INTO gcos_verdict_change (subject, key, group_key, ruleset_version,
		verdict_before, verdict_after, why, run_id) VALUES ('group', 'g1', 'g1', 'rs', 'unknown', 'relevant', 'rescan', 'run')
		RETURNING xid::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	// A cursor is refused when its snapshot's xmin lies below the horizon; the cluster's other transactions (other
	// tests') hold xmin back for a while, and a cursor taken meanwhile is refused too, conservatively.
	wait.For(t, time.Minute, "every transaction older than the change has ended", func() bool {
		var past bool
		err := store.Pool().QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, xid).Scan(&past)
		return err == nil && past
	})
	late := latest() // has seen the change, and every transaction before it ended
	if n := prune(time.Hour); n != 0 {
		t.Fatalf("a prune that keeps an hour deleted %d of a change just made", n)
	}
	if got, err := read(early); err != nil || len(got) != 1 {
		t.Fatalf("a cursor from an empty log, after a prune that deleted nothing: %d changes, %v; want the one change", len(got), err)
	}
	if n := prune(0); n != 1 {
		t.Fatalf("a prune that keeps nothing deleted %d, want 1", n)
	}
	if _, err := read(early); gcos.ErrorCode(err) != gcos.EGONE {
		t.Fatalf("a cursor that had not seen a deleted change: %v, want %s", err, gcos.EGONE)
	}
	if got, err := read(late); err != nil || len(got) != 0 {
		t.Fatalf("a cursor that had seen the deleted change: %d changes, %v; want none and no error", len(got), err)
	}
}
