package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/daemon"
	"gcos/gcostest"
	"gcos/intake"
	"gcos/postgres"
)

// inconclusiveProof is what the scan scheduler logs of a proof taken while its intake was behind.
const inconclusiveProof = "full audit: the proof is inconclusive: the intake had not handed off what its instant held, so no difference is judged settled and the next audit proves the slice again"

// TestAuditProofWhileTheIntakeIsBehind: the daemon's intake runs but hands nothing off for longer than the audit
// waits (scan.settle_timeout) and far longer than the idle window a process without an intake would conclude
// from, while births keep arriving. Every proof taken meanwhile is inconclusive: the births its instant saw and
// the intake had not handed off are differences in flight, never settled mismatches, no verify_mismatch is raised
// and no proof is recorded (the next audit proves the slice again). Once the intake hands off again, a proof of
// the same slice settles clean and is recorded.
func TestAuditProofWhileTheIntakeIsBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 7, Config: func(cfg *gcos.Config) {
		cfg.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.IncrementalInterval = gcos.Duration(500 * time.Millisecond)
		cfg.Scan.FullAuditInterval = gcos.Duration(time.Second)
		cfg.Scan.SettleTimeout = gcos.Duration(2 * time.Second)
		cfg.Scan.VerifySlices = 1 // every proof is of the whole estate
		cfg.Scan.VerifySample = 50
		cfg.Roles.LeaseTTL = gcos.Duration(3 * time.Second)
	}})
	logs := &recordLog{}
	store := postgres.New(w.Pool, w.Cfg, slog.New(logs))
	// An idle window far shorter than the settle timeout: were it applied to the running intake, the audit would
	// conclude no intake runs and count the differences as settled.
	d, err := daemon.New(daemon.Config{Store: store, Logger: slog.New(logs), SettleIdle: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool
	held.Store(true)
	stage := d.Intake.Stage
	d.Intake.Apply = func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
		if held.Load() {
			return nil, errors.New("held by the test: the intake is behind")
		}
		return stage.Apply(ctx, tx, rows)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()

	// Births arrive all along, in every collection, so that every proof's instant holds some not handed off.
	collections := w.Strings(t, `SELECT DISTINCT collection_name FROM birth_registry ORDER BY 1`)
	birthsCtx, stopBirths := context.WithCancel(ctx)
	birthsDone := make(chan struct{})
	go func() {
		defer close(birthsDone)
		pace := time.NewTicker(20 * time.Millisecond) // a steady rate of births, not a wait for anything
		defer pace.Stop()
		for i := 0; birthsCtx.Err() == nil; i++ {
			_, err := w.Pool.Exec(birthsCtx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
				SELECT $1, collection_name, entity_type, 'active', 'behind-test', 'tester' FROM birth_registry
				WHERE collection_name = $2 ORDER BY id LIMIT 1`, fmt.Sprintf("behind-%d", i), collections[i%len(collections)])
			if err != nil && birthsCtx.Err() == nil {
				t.Errorf("birth: %v", err)
				return
			}
			select {
			case <-birthsCtx.Done():
			case <-pace.C:
			}
		}
	}()
	const differs = "full audit: the incremental state differs from a from-scratch evaluation (gcos verify lists it)"
	inFlight := regexp.MustCompile(` in_flight=([1-9][0-9]*) `)
	waitUntil(t, done, 3*time.Minute, "a proof taken while the intake is behind finds differences in flight", func() bool {
		for _, l := range logs.find(inconclusiveProof) {
			if inFlight.MatchString(l) {
				return true
			}
		}
		return logs.count(differs) > 0 // a false alarm: reported below
	})
	runID := regexp.MustCompile(` run_id=(\S+)`)
	for _, l := range logs.find(inconclusiveProof) {
		if !strings.Contains(l, " mismatches=0 ") || !strings.Contains(l, "were not handed off within") {
			t.Errorf("an inconclusive proof judged something settled, or gave up as if no intake ran: %s", l)
		}
		m := runID.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("no run id: %s", l)
		}
		if n := w.Count(t, `SELECT count(*) FROM candidate_scan_run WHERE run_id = $1 AND verified_at IS NOT NULL`, m[1]); n != 0 {
			t.Errorf("run %s recorded an inconclusive proof as proven", m[1])
		}
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = $1`, string(gcos.IssueVerifyMismatch)); n != 0 {
		t.Errorf("%d verify_mismatch findings raised while the intake was behind", n)
	}
	for _, l := range logs.find(differs) {
		t.Errorf("logged while the intake was behind: %s", l)
	}

	// The intake hands off again: a later audit's proof of the same slice settles clean and is recorded.
	stopBirths()
	<-birthsDone
	proven := len(logs.find("full audit: proved its slice of the cover against a from-scratch evaluation"))
	held.Store(false)
	waitUntil(t, done, 3*time.Minute, "a proof once the intake has caught up", func() bool {
		return len(logs.find("full audit: proved its slice of the cover against a from-scratch evaluation")) > proven
	})
	for _, l := range logs.find("full audit: proved its slice of the cover against a from-scratch evaluation")[proven:] {
		if !strings.Contains(l, " mismatches=0 ") {
			t.Errorf("a proof after the intake caught up: %s", l)
		}
		if m := runID.FindStringSubmatch(l); m == nil || w.Count(t, `SELECT count(*) FROM candidate_scan_run
			WHERE run_id = $1 AND verify_slice = 0 AND verified_at IS NOT NULL`, m[1]) != 1 {
			t.Errorf("a proof after the intake caught up is not recorded: %s", l)
		}
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = $1`, string(gcos.IssueVerifyMismatch)); n != 0 {
		t.Errorf("%d verify_mismatch findings raised", n)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("daemon: %v", err)
	}
}
