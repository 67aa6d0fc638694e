package daemon_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"gcos"
	"gcos/daemon"
	"gcos/gcostest"
	"gcos/intake"
	"gcos/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDaemonRunsEveryPart starts the daemon as `gcos up` does, over a small world: its API answers, /readyz turns
// ready once the intake has completed a poll, a birth committed while it runs is tailed and its group re-scanned,
// and cancelling the context stops every part cleanly.
func TestDaemonRunsEveryPart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 5, Config: func(cfg *gcos.Config) {
		cfg.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.StormFraction = 1
		cfg.HTTP.InsecureNoAuth = true
	}})
	pool, store := w.Pool, w.Store
	if _, err := daemon.New(daemon.Config{}); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("a daemon without a store: %v, want EINVALID", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{Store: store, Listener: ln, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()

	base := "http://" + ln.Addr().String()
	waitFor(t, done, "the API is ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT 'daemon-test', collection_name, entity_type, 'active', 'daemon-test', 'tester' FROM birth_registry ORDER BY id LIMIT 1
		RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, done, "the birth is tailed and its group re-scanned", func() bool {
		c, err := intake.New(store).GetCursor(ctx, "birth_registry")
		if err != nil || c.PositionID == nil || *c.PositionID < id {
			return false
		}
		n, err := store.DirtySetSize(ctx)
		if err != nil || n != 0 {
			return false
		}
		var scanned int
		err = pool.QueryRow(ctx, `SELECT count(*) FROM candidate_scan_run WHERE mode IN ('event', 'incremental')
			AND status = 'succeeded' AND groups_scanned > 0`).Scan(&scanned)
		return err == nil && scanned > 0
	})

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v, want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after its context was cancelled")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the API still answers after the daemon stopped")
	}
}

// waitFor polls cond with a generous deadline, failing at once if the daemon stopped.
func waitFor(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("%s: the daemon stopped: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 90 s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
