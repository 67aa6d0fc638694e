package intake_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/intake"
)

// TestMonitorRunsUnderLease: two monitors (two processes) share the silent-gap monitor through its lease: a dead
// intake executor is reported, one lease holder at a time, and a stopped monitor gives its lease up.
func TestMonitorRunsUnderLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.cfg
	cfg.SilentGapThreshold = gcos.Duration(300 * time.Millisecond)
	cfg.HeartbeatInterval = gcos.Duration(50 * time.Millisecond)
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status)
		VALUES ('gcos.intake.birth_registry', 'gcos.intake', now() - interval '1 minute', 'ok read=0 failed=0 retried=0')`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for _, owner := range []string{"host-a:1", "host-b:2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &intake.Monitor{Stage: intake.New(e.store), Config: cfg, Owner: owner}
			if err := m.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wait.For(t, 5*time.Second, "the dead executor is reported", func() bool {
		return e.count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'handoff_silent_gap' AND status = 'open'`) > 0
	})
	if n := e.count(t, `SELECT count(*) FROM queue_heartbeat WHERE executor_name = $1 AND lease_owner IN ('host-a:1', 'host-b:2')
		AND lease_expires_at > now()`, intake.MonitorLease); n != 1 {
		t.Fatalf("%d live monitor leases, want 1", n)
	}
	cancel()
	wg.Wait()
	// A stopped monitor releases its lease; a lease granted by a statement the cancellation cut short is released
	// by its expiry (at most one TTL, 1 s here) — either way no stopped monitor holds it afterwards.
	wait.For(t, 3*time.Second, "no stopped monitor keeps its lease", func() bool {
		return e.count(t, `SELECT count(*) FROM queue_heartbeat WHERE executor_name = $1 AND lease_owner IS NOT NULL AND lease_expires_at > now()`, intake.MonitorLease) == 0
	})
	// A fresh tick resolves the finding at the next check.
	if err := intake.New(e.store).IntakeHeartbeat(e.ctx, "birth_registry", "ok"); err != nil {
		t.Fatal(err)
	}
	rep, err := (&intake.Monitor{Stage: intake.New(e.store), Config: cfg}).Check(e.ctx)
	if err != nil || len(rep.Resolved) != 1 || len(rep.Raised) != 0 {
		t.Fatalf("check after a fresh tick: %+v (%v)", rep, err)
	}
}

// TestWorkerEmitsHeartbeatEvent: Once emits governance.handoff.heartbeat once, counting the rows it saw, through the
// one emit path (captured while the vocabulary is not active); Run emits one per heartbeat interval and ticks
// queue_heartbeat per source after every pass, also when there is nothing to do.
func TestWorkerEmitsHeartbeatEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insert(t, 7, 3)
	wait.Pass(e.ctx, 30*time.Millisecond) // the horizon guard
	ticks, err := e.worker().Once(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	heartbeats := `SELECT count(*) FROM event_pending WHERE event_type_hint = 'governance.handoff.heartbeat'`
	if n := e.count(t, heartbeats); n != 1 {
		t.Fatalf("%d heartbeat events after Once, want 1", n)
	}
	// Seen: the 10 rows, and the audit rows of the batches the changelog tail reached by then.
	seen := ticks[0].Read + ticks[1].Read
	if n := e.count(t, `SELECT count(*) FROM event_pending WHERE event_type_hint = 'governance.handoff.heartbeat'
		AND (capture_payload -> 'safe_payload' ->> 'count')::int = $1
		AND (capture_payload -> 'safe_payload' ->> 'seen')::int = $1
		AND capture_payload -> 'safe_payload' ? 'coalesced' AND capture_payload -> 'safe_payload' ? 'dlq'`, seen); n != 1 || seen < 10 {
		t.Fatalf("the heartbeat should count the %d rows seen (the 10 and audit rows), with its counts", seen)
	}
	w := e.worker()
	w.Config.HeartbeatInterval = gcos.Duration(50 * time.Millisecond)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	// Poll (a loaded machine may run the loop slowly): Run emits one heartbeat per interval, so more follow.
	if !wait.Until(60*time.Second, func() bool { return e.count(t, heartbeats) >= 3 }) {
		t.Fatalf("%d heartbeat events after 60 s of Run with a 50 ms interval", e.count(t, heartbeats))
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	rep, err := intake.New(e.store).CheckSilence(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rep.Executors {
		if x.State != intake.ExecutorAlive {
			t.Fatalf("a quiet worker's executor %+v", x)
		}
	}
}
