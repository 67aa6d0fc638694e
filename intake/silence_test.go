package intake_test

import (
	"slices"
	"testing"
	"time"

	"gcos"
	"gcos/gcostest"
	"gcos/intake"
	"gcos/postgres"
)

// TestMonitorCheckSilence: CheckSilence reads queue_heartbeat by the database clock. Against a 2 s threshold an
// intake executor that ticked 1 s ago is alive, one that ticked 10 s ago is dead (handoff_silent_gap), one that
// stopped cleanly 10 s ago is reported as stopped; a scan executor 10 s silent raises candidate_scan_lag, but the
// full audit's, which ticks once per interval by design, is allowed its cadence; leases and other systems'
// executors are not watched. A fresh tick resolves the finding.
func TestMonitorCheckSilence(t *testing.T) {
	t.Parallel()
	b := gcostest.New(t, gcostest.Options{Births: 0, Seed: 7})
	b.Cfg.Intake.SilentGapThreshold = gcos.Duration(2 * time.Second)
	b.Cfg.Scan.FullAuditInterval = gcos.Duration(30 * time.Second)
	b.Store = postgres.New(b.Pool, b.Cfg, nil)
	b.Exec(t, `INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status) VALUES
		('gcos.intake.birth_registry', 'gcos.intake', now() - interval '1 second', 'ok read=0 failed=0 retried=0'),
		('gcos.intake.registry_changelog', 'gcos.intake', now() - interval '10 seconds', 'ok read=3 failed=0 retried=0'),
		('gcos.intake.other_source', 'gcos.intake', now() - interval '10 seconds', 'stopped'),
		('gcos.intake.never', 'gcos.intake', NULL, NULL),
		('gcos.scan.incremental', 'scan', now() - interval '10 seconds', 'ok'),
		('gcos.scan.full_audit', 'scan', now() - interval '20 seconds', 'idle'),
		('gcos.scan.full_audit.lease', 'lease', now() - interval '1 hour', 'leased'),
		('dieu45_phase3_pilot', 'pilot', now() - interval '1 day', 'ok')`)
	rep, err := intake.New(b.Store).CheckSilence(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, e := range rep.Executors {
		states[e.Name] = e.State
	}
	want := map[string]string{
		"gcos.intake.birth_registry":     intake.ExecutorAlive,
		"gcos.intake.registry_changelog": intake.ExecutorDead,
		"gcos.intake.other_source":       intake.ExecutorStopped,
		"gcos.intake.never":              intake.ExecutorNever,
		"gcos.scan.incremental":          intake.ExecutorDead,
		"gcos.scan.full_audit":           intake.ExecutorAlive, // 20 s < 2 s threshold + 30 s cadence
	}
	if len(states) != len(want) {
		t.Fatalf("watched executors %v, want %v", states, want)
	}
	for name, st := range want {
		if states[name] != st {
			t.Fatalf("%s: state %q, want %q (all: %v)", name, states[name], st, states)
		}
	}
	raised := []string{
		gcos.CoalesceKey(gcos.IssueHandoffSilentGap, "gcos.intake.registry_changelog"),
		gcos.CoalesceKey(gcos.IssueHandoffSilentGap, "gcos.intake.other_source"),
		gcos.CoalesceKey(gcos.IssueHandoffSilentGap, "gcos.intake.never"),
		gcos.CoalesceKey(gcos.IssueCandidateScanLag, "gcos.scan.incremental"),
	}
	slices.Sort(raised)
	got := slices.Sorted(slices.Values(rep.Raised))
	if !slices.Equal(got, raised) || !rep.Silent() || rep.DirtySet.Lagging {
		t.Fatalf("raised %v, want %v (dirty set %+v)", got, raised, rep.DirtySet)
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE status = 'open' AND severity = 'high'
		AND issue_type = 'handoff_silent_gap'`); n != 3 {
		t.Fatalf("%d open handoff_silent_gap findings, want 3", n)
	}
	var state string
	if err := b.Pool.QueryRow(b.Ctx, `SELECT evidence_snapshot::jsonb ->> 'state' FROM system_issues WHERE coalesce_key = $1`,
		gcos.CoalesceKey(gcos.IssueHandoffSilentGap, "gcos.intake.other_source")).Scan(&state); err != nil || state != intake.ExecutorStopped {
		t.Fatalf("a clean stop's evidence says %q (%v)", state, err)
	}

	// Still silent: raised again (the occurrence counts and the severity grow); ticking again resolves.
	if _, err := intake.New(b.Store).CheckSilence(b.Ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.Count(t, `SELECT max(occurrence_count) FROM system_issues WHERE issue_type = 'handoff_silent_gap'`); n != 2 {
		t.Fatalf("occurrences %d after a second check, want 2", n)
	}
	for _, name := range []string{"gcos.intake.registry_changelog", "gcos.intake.other_source", "gcos.intake.never"} {
		if err := intake.New(b.Store).IntakeHeartbeat(b.Ctx, name[len("gcos.intake."):], "ok read=0 failed=0 retried=0"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Store.Heartbeat(b.Ctx, "gcos.scan.incremental", "scan", "ok"); err != nil {
		t.Fatal(err)
	}
	rep, err = intake.New(b.Store).CheckSilence(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Raised) != 0 || len(rep.Resolved) != len(raised) {
		t.Fatalf("after fresh ticks: raised %v, resolved %v", rep.Raised, rep.Resolved)
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE status = 'open' AND `+gcostest.NotHeldAnnouncement); n != 0 {
		t.Fatalf("%d findings still open", n)
	}
}

// TestMonitorDirtySetLag: candidate_scan_lag (subject dirty_set) while the oldest pending dirty mark is older than
// the threshold; resolved once the scan has drained it. A failed re-evaluation waits on its own backoff and does not
// count.
func TestMonitorDirtySetLag(t *testing.T) {
	t.Parallel()
	b := gcostest.Ready(t, gcostest.Options{Births: 400, Seed: 7, Config: func(c *gcos.Config) {
		c.Intake.SilentGapThreshold = gcos.Duration(time.Second)
		c.Intake.HeartbeatInterval = gcos.Duration(500 * time.Millisecond) // below the threshold, as configuration requires
	}})
	keys := b.Strings(t, `SELECT group_key FROM governance_group ORDER BY group_key LIMIT 3`)
	if _, err := b.Store.MarkDirty(b.Ctx, keys, "handoff:object_born"); err != nil {
		t.Fatal(err)
	}
	rep, err := intake.New(b.Store).CheckSilence(b.Ctx)
	if err != nil || rep.DirtySet.Lagging || rep.DirtySet.DirtyGroups != 3 {
		t.Fatalf("fresh marks: %+v (%v)", rep.DirtySet, err)
	}
	b.Exec(t, `UPDATE governance_candidate_state SET dirtied_at = now() - interval '5 seconds' WHERE dirty`)
	rep, err = intake.New(b.Store).CheckSilence(b.Ctx)
	if err != nil || !rep.DirtySet.Lagging || rep.DirtySet.AgeSeconds < 5 {
		t.Fatalf("old marks: %+v (%v)", rep.DirtySet, err)
	}
	if open, _ := gcostest.FindingOpen(b.Ctx, b.Pool, gcos.IssueCandidateScanLag); !open {
		t.Fatal("candidate_scan_lag should be open")
	}
	b.Exec(t, `UPDATE governance_candidate_state SET recompute_status = 'failed' WHERE group_key = $1 AND dirty`, keys[0])
	b.ScanAll(t, postgres.ModeIncremental)
	b.Exec(t, `UPDATE governance_candidate_state SET dirty = true, dirty_reason = 'input', dirtied_at = now() - interval '1 hour',
		recompute_status = 'failed' WHERE group_key = $1`, keys[0])
	rep, err = intake.New(b.Store).CheckSilence(b.Ctx)
	if err != nil || rep.DirtySet.Lagging || len(rep.Resolved) != 1 {
		t.Fatalf("after the scan (one failed group left): %+v resolved %v (%v)", rep.DirtySet, rep.Resolved, err)
	}
}
