package scan_test

import (
	"slices"
	"strings"
	"testing"

	"gcos"
	"gcos/gcostest"
	"gcos/postgres"
	"gcos/scan"
)

// TestCapturedSnapshotsAreSealed: every capture is sealed in GCOS's own table (the snapshot row itself is the
// substrate's, which GCOS never alters), and a seal can be neither updated, deleted nor truncated. A snapshot row
// changed behind GCOS's back after capture no longer matches its seal: the full audit treats the verdicts keyed to
// it as those of a deleted snapshot — a snapshot_ref_dangling finding that says so, and the rows dirtied (stale, so
// the gate fails closed) until a scan re-qualifies them; once none is keyed to it, the finding closes. Pruning
// deletes snapshot rows and keeps their seals.
func TestCapturedSnapshotsAreSealed(t *testing.T) {
	t.Parallel()
	// Retention keeps one audit cycle beyond the referenced snapshots, so the changed snapshot is pruned below.
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 22, Config: func(c *gcos.Config) { c.Snapshot.RetentionCycles = 1 }})
	ref := w.Count(t, `SELECT min(source_snapshot_ref) FROM governance_candidate_state`)
	if n := w.Count(t, `SELECT count(*) FROM gcos_snapshot_seal WHERE snapshot_id = $1`, ref); n != 1 {
		t.Fatalf("snapshot %d: %d seals, want 1", ref, n)
	}
	for _, stmt := range []string{`UPDATE gcos_snapshot_seal SET digest = 'forged'`, `DELETE FROM gcos_snapshot_seal`, `TRUNCATE gcos_snapshot_seal`} {
		if _, err := w.Pool.Exec(w.Ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want it refused", stmt, err)
		}
	}
	audit := func() []int64 {
		t.Helper()
		res, err := scan.New(w.Store).FullAudit(w.Ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Dangling
	}
	if d := audit(); len(d) != 0 {
		t.Fatalf("nothing changed, yet dangling snapshots %v", d)
	}
	open := func() int64 {
		return w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'snapshot_ref_dangling' AND status = 'open'
			AND evidence_snapshot::text LIKE '%changed after capture%'`)
	}

	w.Exec(t, `UPDATE evolution_snapshots SET notes = notes || ' (edited)' WHERE id = $1`, ref)
	if d := audit(); !slices.Contains(d, ref) {
		t.Fatalf("snapshot %d changed after capture: the audit found %v", ref, d)
	}
	if open() != 1 {
		t.Fatalf("no open snapshot_ref_dangling finding says snapshot %d changed after capture", ref)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE source_snapshot_ref = $1 AND NOT dirty`, ref); n != 0 {
		t.Fatalf("%d rows keyed to the changed snapshot are not dirty", n)
	}
	if _, err := scan.New(w.Store).ScanTick(w.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental}); err != nil {
		t.Fatal(err)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE source_snapshot_ref = $1`, ref); n != 0 {
		t.Fatalf("%d rows still keyed to the changed snapshot after a scan", n)
	}
	if d := audit(); len(d) != 0 || open() != 0 {
		t.Fatalf("after the re-scan: dangling %v, %d findings open", d, open())
	}

	// Pruning deletes the snapshot rows no verdict is keyed to beyond retention; their seals stay.
	pruned, err := w.Store.PruneSnapshots(w.Ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(pruned.Removed) == 0 {
		t.Fatalf("nothing pruned: %+v", pruned)
	}
	if n := w.Count(t, `SELECT count(*) FROM gcos_snapshot_seal WHERE snapshot_id = ANY($1)`, pruned.Removed); n != int64(len(pruned.Removed)) {
		t.Fatalf("%d seals left of the %d pruned snapshots %v", n, len(pruned.Removed), pruned.Removed)
	}
}
