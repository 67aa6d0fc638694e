package postgres_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

// TestRoleLeaseEpochsFenceAndAbandon: a role has one holder at a time; a take after expiry starts a new epoch, marks
// the runs its predecessor left running abandoned, and fences the predecessor out: its renewals fail and no
// transaction it commits on the role's behalf goes through, nor can it finish its run.
func TestRoleLeaseEpochsFenceAndAbandon(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 500, nil)
	role := postgres.RoleFullAudit
	a, err := b.store.TakeRole(b.ctx, role, "host-a:1", time.Minute)
	if err != nil || a == nil || a.Renewed {
		t.Fatalf("first take: %+v, %v", a, err)
	}
	if other, err := b.store.TakeRole(b.ctx, role, "host-b:2", time.Minute); err != nil || other != nil {
		t.Fatalf("a second owner took a held role: %+v, %v", other, err)
	}
	again, err := b.store.TakeRole(b.ctx, role, "host-a:1", time.Minute)
	if err != nil || again == nil || !again.Renewed || again.Epoch != a.Epoch {
		t.Fatalf("the holder's re-take is a renewal of epoch %d: %+v, %v", a.Epoch, again, err)
	}
	// A's audit is under way (its run recorded under its epoch) when A stops renewing (killed, or paused).
	b.exec(t, `INSERT INTO candidate_scan_run (run_id, mode, phase, lease_role, lease_epoch) VALUES ('run-of-a', 'full_audit', 'auditing', $1, $2)`,
		role.Name, a.Epoch)
	b.exec(t, `INSERT INTO candidate_scan_run (run_id, mode, phase) VALUES ('run-without-lease', 'full_audit', 'auditing')`)
	b.exec(t, `UPDATE governance_role_lease SET expires_at = clock_timestamp() - interval '1 second' WHERE role = $1`, role.Name)

	bl, err := b.store.TakeRole(b.ctx, role, "host-b:2", time.Minute)
	if err != nil || bl == nil || bl.Epoch != a.Epoch+1 || bl.Renewed {
		t.Fatalf("take over after expiry: %+v, %v (want epoch %d)", bl, err, a.Epoch+1)
	}
	if bl.Abandoned != 2 {
		t.Fatalf("the takeover abandoned %d runs, want 2", bl.Abandoned)
	}
	if n := b.count(t, `SELECT count(*) FROM candidate_scan_run WHERE run_id IN ('run-of-a', 'run-without-lease') AND status = 'abandoned'
		AND finished_at IS NOT NULL AND error LIKE 'abandoned:%'`); n != 2 {
		t.Fatalf("%d runs marked abandoned with a reason, want 2", n)
	}
	if err := postgres.RenewLease(b.store, b.ctx, a); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Fatalf("the old holder's renewal: %v, want ErrLeaseLost", err)
	}
	// A's fenced work cannot commit: its full audit fails before writing a run, and nothing of it is left.
	runs := b.count(t, `SELECT count(*) FROM candidate_scan_run`)
	if _, err := scan.New(b.store).FullAudit(postgres.Fenced(b.ctx, a), nil); !errors.Is(err, postgres.ErrLeaseLost) {
		t.Fatalf("a full audit under a lost lease: %v, want ErrLeaseLost", err)
	}
	if n := b.count(t, `SELECT count(*) FROM candidate_scan_run`); n != runs {
		t.Fatalf("the fenced-out audit recorded %d runs", n-runs)
	}
	// B's own audit runs under its epoch and completes.
	res, err := scan.New(b.store).FullAudit(postgres.Fenced(b.ctx, bl), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM candidate_scan_run WHERE run_id = $1 AND status = 'succeeded' AND lease_epoch = $2`, res.RunID, bl.Epoch); n != 1 {
		t.Fatal("B's audit did not complete under its epoch")
	}
	// Without a lease in the context, another process's live holding refuses the role.
	if _, err := scan.New(b.store).FullAudit(b.ctx, nil); gcos.ErrorCode(err) != gcos.ECONFLICT {
		t.Fatalf("a full audit while another process holds the role: %v, want ECONFLICT", err)
	}
	if err := b.store.ReleaseLease(b.ctx, bl); err != nil {
		t.Fatal(err)
	}
	if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
		t.Fatalf("a full audit once the role is released: %v", err)
	}
	if n := b.count(t, `SELECT count(*) FROM governance_role_lease WHERE role = $1 AND owner IS NULL`, role.Name); n != 1 {
		t.Fatal("the store's own take of the role was not released after its audit")
	}
}

// TestRoleLeaseFenceHoldsOffTakeover: a fenced transaction checks its lease FOR SHARE just before it commits, so a
// successor's take waits for it to end and cannot slip in between the check and the commit.
func TestRoleLeaseFenceHoldsOffTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t, 300)
	role := postgres.RolePromotion
	a, err := b.store.TakeRole(b.ctx, role, "host-a:1", 2*time.Second)
	if err != nil || a == nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if err := postgres.CheckFence(postgres.Fenced(b.ctx, a), tx); err != nil {
		t.Fatal(err)
	}
	// The lease runs out while the fenced transaction is still open (a holder that stalled before its commit).
	wait.For(t, time.Minute, "the lease expires", func() bool {
		return b.count(t, `SELECT count(*) FROM governance_role_lease WHERE role = $1 AND expires_at > clock_timestamp()`, role.Name) == 0
	})
	taken := make(chan *postgres.Lease, 1)
	go func() {
		l, err := b.store.TakeRole(b.ctx, role, "host-b:2", time.Minute)
		if err != nil {
			t.Error(err)
		}
		taken <- l
	}()
	// The take waits on the fenced transaction's share lock: poll until it is seen waiting.
	deadline := time.Now().Add(30 * time.Second)
	for b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%governance_role_lease%' AND datname = current_database()`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the successor's take never waited for the fenced transaction")
		}
		select {
		case l := <-taken:
			t.Fatalf("the successor took the role (%+v) while a fenced transaction of its holder was open", l)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-taken; l == nil || l.Epoch != a.Epoch+1 {
		t.Fatalf("after the commit the successor takes epoch %d: %+v", a.Epoch+1, l)
	}
}

// TestFullAuditBaselineIsTheLastCompletedAudit: an audit killed after its snapshot was written leaves a snapshot
// that is never a baseline: the next audit still reports the lost signals it was to catch.
func TestFullAuditBaselineIsTheLastCompletedAudit(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 2000, nil)
	if _, err := scan.New(b.store).FullAudit(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	var class, coll, status string
	if err := b.pool.QueryRow(b.ctx, `SELECT entity_type, collection_name, status FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 1`).
		Scan(&class, &coll, &status); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		b.exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, $4, 'birth-api', 'tester')`, fmt.Sprintf("BASELINE-%d", i), coll, class, status)
	}
	// The intake has passed these births but their signal was lost (what the audit exists to catch)…
	b.exec(t, `UPDATE gov_worker_cursor SET position_tstz = n.at, last_created_at = n.at, position_id = 0, last_event_id = '0'
		FROM (SELECT clock_timestamp() AS at) n WHERE ts_type = 'timestamptz'`)
	// …and an audit was killed right after writing its snapshot: a run left running, a snapshot that sees the births.
	partial, err := b.store.CaptureSnapshot(b.ctx, postgres.CaptureOptions{Scope: postgres.SnapshotAudit, RunID: "killed-audit"})
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, `INSERT INTO candidate_scan_run (run_id, mode, phase, source_snapshot_ref) VALUES ('killed-audit', 'full_audit', 'auditing', $1)`, partial.ID)
	res, err := scan.New(b.store).FullAudit(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.PreviousID == nil || *res.PreviousID == partial.ID {
		t.Fatalf("the audit's baseline is snapshot %v, the killed audit's %d", res.PreviousID, partial.ID)
	}
	if len(res.LostSignals) == 0 {
		t.Fatal("the lost signals the killed audit saw were never reported")
	}
	var st string
	if err := b.pool.QueryRow(b.ctx, `SELECT status FROM candidate_scan_run WHERE run_id = 'killed-audit'`).Scan(&st); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if st != "abandoned" {
		t.Fatalf("the killed audit's run is %q, want abandoned by the next holder of the role", st)
	}
}

// TestMarkingNeverDeadlocks: transactions marking overlapping sets of groups with several reasons each (as an intake
// page does), from many connections at once while a scanner keeps clearing the marks, wait for each other in one
// lock order and never deadlock.
func TestMarkingNeverDeadlocks(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 1500, nil)
	keys := b.strs(t, `SELECT group_key FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version) ORDER BY 1`)
	if len(keys) < 40 {
		t.Fatalf("only %d groups", len(keys))
	}
	reasons := []string{gcos.DirtyAuthority, gcos.DirtyAxis, gcos.DirtyInput}
	const workers, txs = 6, 60
	stop := make(chan struct{})
	cleared := make(chan error, 1)
	go func() { // the scanner: clears every mark, taking its rows in key order like every writer
		for {
			select {
			case <-stop:
				cleared <- nil
				return
			default:
			}
			if _, err := b.pool.Exec(b.ctx, `UPDATE governance_candidate_state c SET dirty = false, recompute_status = 'ok'
				FROM (SELECT group_key, ruleset_version FROM governance_candidate_state WHERE dirty ORDER BY group_key FOR UPDATE) d
				WHERE (c.group_key, c.ruleset_version) = (d.group_key, d.ruleset_version)`); err != nil {
				cleared <- err
				return
			}
		}
	}()
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range txs {
				byReason := map[string][]string{}
				for _, k := range r.Perm(len(keys))[:30] {
					reason := reasons[r.IntN(len(reasons))]
					byReason[reason] = append(byReason[reason], keys[k])
				}
				if err := postgres.MarkDirtyByReason(b.ctx, b.store, byReason, func(pgx.Tx) error { return nil }); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("marking: %v", err)
		}
	}
	close(stop)
	if err := <-cleared; err != nil {
		t.Fatalf("clearing: %v", err)
	}
	if n := b.store.Counters().TxRetries; n != 0 {
		t.Fatalf("%d transactions failed on a lock conflict", n)
	}
}
