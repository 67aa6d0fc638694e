package postgres_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
)

// A finding that links a candidate row locks the row before the finding's key (LockOrder): a raiser that does not
// hold the row waits for it without holding the key, so a scan that holds the row and raises the same finding
// finishes first, instead of the two waiting on each other until the server aborts one (40P01).
func TestRaiseFindingLocksItsRowBeforeItsKey(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 2000, nil)
	key := b.strs(t, `SELECT group_key FROM governance_candidate_state ORDER BY group_key LIMIT 1`)[0]
	f := gcos.Finding{Type: gcos.IssueCandidateUnknown, Subject: key, Group: key, Evidence: map[string]any{"group_key": key}}

	// The "scan": holds the candidate row.
	scan, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer scan.Rollback(b.ctx)
	var scanPID int
	if err := scan.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&scanPID); err != nil {
		t.Fatal(err)
	}
	if _, err := scan.Exec(b.ctx, `SELECT 1 FROM governance_candidate_state WHERE group_key = $1 FOR NO KEY UPDATE`, key); err != nil {
		t.Fatal(err)
	}

	// Another raiser of the same finding, in its own transaction: it waits for the row.
	raised := make(chan error, 1)
	go func() {
		_, err := b.store.RaiseFinding(b.ctx, f)
		raised <- err
	}()
	wait.For(t, 30*time.Second, "the second raiser waits for a lock", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> $1
			AND wait_event_type = 'Lock' AND backend_type = 'client backend'`, scanPID) > 0
	})
	// The scan raises the finding too, then commits: with the key taken before the row the two would deadlock here.
	if _, err := postgres.RaiseFindingTx(b.ctx, scan, f); err != nil {
		t.Fatalf("the row's holder raising its finding: %v", err)
	}
	if err := scan.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-raised; err != nil {
		t.Fatalf("the waiting raiser: %v", err)
	}
	if n := b.count(t, `SELECT occurrence_count FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`,
		gcos.CoalesceKey(f.Type, f.Subject)); n != 2 {
		t.Fatalf("occurrences %d, want 2 (one open row, both raises)", n)
	}
}
