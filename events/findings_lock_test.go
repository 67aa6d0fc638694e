package events_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// TestFindingsRaisedInTwoOrdersDoNotDeadlock: two transactions raise findings of one type in opposite orders. Each
// finding's announcement is of a type not registered yet, so each raise also raises that type's gap finding: one
// key for both. Waiting for that key would put it between the findings' own keys, and the two would wait on each
// other; neither does. When the transaction that raised the gap finding rolls back, the one that skipped it has
// still captured its announcement, and the promoter raises the finding.
func TestFindingsRaisedInTwoOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"commits", "rolls back"} {
		t.Run("the first "+end, func(t *testing.T) {
			t.Parallel()
			e := newEvEnv(t)
			issue := gcos.IssueCandidateStale
			announce, ok := postgres.FindingEventType(issue, "")
			if !ok {
				t.Fatalf("%s announces nothing", issue)
			}
			begin := func() (pgx.Tx, int32) {
				tx, err := e.pool.Begin(e.ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback(e.ctx) })
				var pid int32
				if err := tx.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				return tx, pid
			}
			raise := func(tx pgx.Tx, subject string) error {
				_, err := postgres.RaiseFindingTx(e.ctx, tx, gcos.NewFinding(issue, subject, "", "", nil))
				return err
			}
			a, _ := begin()
			b, bPid := begin()
			if err := raise(a, "one"); err != nil { // a holds "one" and the gap finding of the announcement's type
				t.Fatal(err)
			}
			bDone := make(chan error, 1)
			go func() { bDone <- raise(b, "two") }()
			// b holds "two" and has either finished or is waiting for a lock a holds: a's raise of "two" next would
			// close a cycle.
			var errB error
			finished := false
			for deadline := time.Now().Add(time.Minute); !finished; {
				select {
				case errB = <-bDone:
					finished = true
				case <-time.After(20 * time.Millisecond):
				}
				if !finished && e.n(t, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, bPid) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("b neither finished nor waited")
				}
			}
			aDone := make(chan error, 1)
			go func() { aDone <- raise(a, "two") }() // waits for b's "two" until b ends
			if !finished {
				errB = <-bDone
			}
			// b ends before a is waited for (a's raise uses its connection until then).
			endB := b.Commit
			if errB != nil {
				endB = b.Rollback
			}
			if err := endB(e.ctx); err != nil && errB == nil {
				errB = err
			}
			if errA := <-aDone; errA != nil || errB != nil {
				t.Fatalf("the raisers failed: the second %v; the first, raising the second's finding: %v", errB, errA)
			}
			gapOpen := func() int {
				return e.n(t, `SELECT count(*) FROM system_issues WHERE status = 'open' AND issue_type = $1 AND coalesce_key = $2`,
					string(gcos.IssueIssueEventGap), gcos.CoalesceKey(gcos.IssueIssueEventGap, announce))
			}
			if end == "commits" {
				if err := a.Commit(e.ctx); err != nil {
					t.Fatal(err)
				}
				if n := gapOpen(); n != 1 {
					t.Fatalf("%d open gap findings for %s, want the one the first raiser committed", n, announce)
				}
			} else {
				if err := a.Rollback(e.ctx); err != nil {
					t.Fatal(err)
				}
				if n := gapOpen(); n != 0 {
					t.Fatalf("%d open gap findings for %s before the promoter ran, want none (the raiser rolled back)", n, announce)
				}
			}
			e.promote(t)
			if n := gapOpen(); n != 1 {
				t.Fatalf("%d open gap findings for %s after the promoter ran, want 1", n, announce)
			}
			if n := e.n(t, `SELECT count(*) FROM event_pending WHERE event_type_hint = $1 AND processed_at IS NULL`, announce); n == 0 {
				t.Fatalf("no announcement of %s held", announce)
			}
		})
	}
}
