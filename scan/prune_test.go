package scan_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

// TestPruneRefusesOnlyTheCursorsThatMissedADeletedChange: the verdict change log's maintenance makes its time
// partitions, moves a change the default partition caught into its own, drops the partitions past retention and
// moves the feed's horizon just past what it dropped. A cursor issued while the log was empty (a dashboard opened
// before the first change) stays good through a maintenance that drops nothing; once a change it had not seen is
// dropped it is refused (EGONE), while a cursor issued after that change reads on, and a change still kept stays.
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
	maintain := func(keep time.Duration) postgres.LogMaintained {
		t.Helper()
		res, err := stage.MaintainVerdictChanges(ctx, keep, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	insert := func(age string) string {
		t.Helper()
		var xid string
		if err := store.Pool().QueryRow(ctx, `INSERT INTO gcos_verdict_change (changed_at, subject, key, group_key, ruleset_version,
			verdict_before, verdict_after, why, run_id) VALUES (now() - $1::interval, 'group', 'g1', 'g1', 'rs', 'unknown', 'relevant', 'rescan', 'run')
			RETURNING xid::text`, age).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return xid
	}

	early := latest() // the log is empty
	if res := maintain(time.Hour); res.Dropped != 0 || res.Created == 0 {
		t.Fatalf("a maintenance of an empty log: %+v; want partitions made and nothing dropped", res)
	}
	xid := insert("3 hours") // older than any partition: the default partition takes it
	// A cursor is refused when its snapshot's xmin lies below the horizon; the cluster's other transactions (other
	// tests') hold xmin back for a while, and a cursor taken meanwhile is refused too, conservatively.
	wait.For(t, time.Minute, "every transaction older than the change has ended", func() bool {
		var past bool
		err := store.Pool().QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, xid).Scan(&past)
		return err == nil && past
	})
	late := latest() // has seen the change, and every transaction before it ended
	if res := maintain(4 * time.Hour); res.Dropped != 0 || res.Moved != 1 {
		t.Fatalf("a maintenance that keeps 4 hours: %+v; want the 3-hour-old change moved into its partition, nothing dropped", res)
	}
	var caught int
	if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM gcos_verdict_change_default`).Scan(&caught); err != nil || caught != 0 {
		t.Fatalf("the default partition still holds %d changes (%v)", caught, err)
	}
	if got, err := read(early); err != nil || len(got) != 1 {
		t.Fatalf("a cursor from an empty log, after a maintenance that dropped nothing: %d changes, %v; want the one change", len(got), err)
	}
	insert("0 hours") // kept
	if res := maintain(time.Hour); res.Dropped != 1 {
		t.Fatalf("a maintenance that keeps an hour: %+v, want the 3-hour-old change's partition dropped", res)
	}
	if _, err := read(early); gcos.ErrorCode(err) != gcos.EGONE {
		t.Fatalf("a cursor that had not seen a dropped change: %v, want %s", err, gcos.EGONE)
	}
	if got, err := read(late); err != nil || len(got) != 1 {
		t.Fatalf("a cursor that had seen the dropped change: %d changes, %v; want the one kept and no error", len(got), err)
	}
}
