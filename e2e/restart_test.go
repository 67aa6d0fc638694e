package e2e_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"gcos"
	"gcos/daemon"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
)

// TestRestart_WorkersReconnectGateBlocks is SPEC §14's "PostgreSQL restart mid-run": with the daemon's intake and
// scan scheduler running, the server is stopped; while it is down the gate blocks (fail closed) and the workers keep
// retrying instead of exiting; once it is back they reconnect on their own and a birth committed after the restart
// is tailed, its group dirtied and re-scanned, and the gate answers from fresh state again.
func TestRestart_WorkersReconnectGateBlocks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	db := newPrivateDB(ctx, t, t.TempDir(), "gcos_restart")
	pool := db.pool

	conf := gcos.DefaultConfig()
	conf.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
	conf.Intake.HorizonGuard = gcos.Duration(10 * time.Millisecond)
	conf.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
	conf.Scan.StormFraction = 1
	conf.Gate.Timeout = gcos.Duration(2 * time.Second)
	store := db.seedWorld(ctx, t, conf, 3000, 11)

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	runErrs := make(chan error, 1)
	d, err := daemon.New(daemon.Config{Store: store, ScanModes: []string{postgres.ModeEvent, postgres.ModeIncremental}, NoPromotion: true})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); runErrs <- d.Run(runCtx) }()
	defer func() { stop(); wg.Wait() }()

	// A birth in an existing collection, handed off and re-scanned: the loop works before the restart.
	var collection, entityType string
	if err := pool.QueryRow(ctx, `SELECT collection_name, entity_type FROM birth_registry ORDER BY id LIMIT 1`).Scan(&collection, &entityType); err != nil {
		t.Fatal(err)
	}
	born := func(code string) (int64, time.Time) {
		t.Helper()
		var id int64
		var at time.Time
		if err := pool.QueryRow(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, 'active', 'restart-test', 'tester') RETURNING id, born_at`, code, collection, entityType).Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		return id, at
	}
	waitHandled := func(what string, id int64, after time.Time) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			c, err := intake.New(store).GetCursor(ctx, "birth_registry")
			var dirty int64 = -1
			var scanned int
			if err == nil && c.PositionID != nil && *c.PositionID >= id {
				dirty, err = gcostest.DirtyGroups(ctx, store.Pool())
				if err == nil {
					err = pool.QueryRow(ctx, `SELECT count(*) FROM candidate_scan_run WHERE mode IN ('event', 'incremental')
						AND status = 'succeeded' AND groups_scanned > 0 AND started_at > $1`, after).Scan(&scanned)
				}
			}
			if err == nil && dirty == 0 && scanned > 0 {
				return
			}
			if time.Now().After(deadline) {
				var runs string
				_ = pool.QueryRow(ctx, `SELECT string_agg(run_id || ' ' || mode || ' ' || status || ' ' || groups_scanned || ' ' || started_at, E'\n') FROM candidate_scan_run`).Scan(&runs)
				t.Logf("scan runs:\n%s", runs)
				t.Fatalf("%s: birth %d not tailed and re-scanned within 60 s (dirty %d, scan runs %d, last error %v)", what, id, dirty, scanned, err)
			}
			select {
			case err := <-runErrs:
				t.Fatalf("%s: a worker exited: %v", what, err)
			case <-time.After(25 * time.Millisecond):
			}
		}
	}
	id, at := born("restart-before")
	waitHandled("before the restart", id, at)
	obj := collection + ":restart-before"
	if g := gate.New(store, nil).Gate(ctx, obj, gcos.ActionRead); len(g.Consulted) == 0 {
		t.Fatalf("gate before the restart consulted nothing: %+v", g)
	}

	// The server goes away.
	if err := db.stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
		g := gate.New(store, nil).Gate(ctx, obj, action)
		if g.Decision != gcos.GateBlock || len(g.Consulted) != 0 || len(g.Reasons) == 0 {
			t.Fatalf("gate %s with the database down: %s (%v), want block with a reason", action, g.Decision, g.Reasons)
		}
	}
	wait.Pass(ctx, 300*time.Millisecond) // several failed polls and ticks
	select {
	case err := <-runErrs:
		t.Fatalf("a worker exited while the database was down instead of retrying: %v", err)
	default:
	}

	// It comes back on the same address; nothing is restarted on the GCOS side.
	if err := db.start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	id, _ = born("restart-after")
	waitHandled("after the restart", id, restarted)
	if g := gate.New(store, nil).Gate(ctx, collection+":restart-after", gcos.ActionRead); len(g.Consulted) == 0 {
		t.Fatalf("gate after the restart consulted nothing: %+v", g)
	}
	stop()
	wg.Wait()
	close(runErrs)
	for err := range runErrs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker stopped with %v", err)
		}
	}
}
