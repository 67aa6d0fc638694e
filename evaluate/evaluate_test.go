package evaluate_test

import (
	"errors"
	"testing"
	"time"

	"gcos"
	"gcos/evaluate"
	"gcos/gcostest"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/scan"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestObjectPassesWriteInChunks: a pass over the estate reads the births and writes the object rows a chunk at a
// time, and the result is the one a single chunk gives: the rows a from-scratch evaluation expects, rows retired or
// forged behind GCOS's back rewritten, a stray row retired, and nothing left for a pass in one chunk to change.
// (Not parallel: the chunk size is the package's.)
func TestObjectPassesWriteInChunks(t *testing.T) {
	t.Cleanup(evaluate.SetObjectChunk(7))
	w := gcostest.New(t, gcostest.Options{Births: 20000, Seed: 7})
	res := w.Backfill(t)
	w.Activate(t, res.RulesetVersion)
	rows := w.Count(t, `SELECT count(*) FROM governance_candidate_object WHERE lifecycle_status = 'active'`)
	if rows < 5*7 {
		t.Fatalf("%d object rows: too few for a pass to span chunks of 7", rows)
	}
	clean := func(when string) {
		t.Helper()
		rep, err := oracle.Verify(w.Ctx, w.Store, oracle.VerifyOptions{Sample: 50, Seed: 3})
		if err != nil {
			t.Fatalf("%s: verify: %v", when, err)
		}
		if !rep.Clean() || rep.Objects != int(rows) {
			t.Fatalf("%s: %d object rows (want %d), mismatches %v", when, rep.Objects, rows, rep.Mismatches)
		}
	}
	clean("after the backfill")

	// Behind GCOS's back: rows retired, rows forged, and a row no reason selects.
	w.Exec(t, `UPDATE governance_candidate_object SET lifecycle_status = 'retired' WHERE candidate_key IN (
		SELECT candidate_key FROM governance_candidate_object ORDER BY candidate_key LIMIT 9)`)
	w.Exec(t, `UPDATE governance_candidate_object SET evidence_fingerprint = 'forged', candidate_verdict = 'not_relevant'
		WHERE candidate_key IN (SELECT candidate_key FROM governance_candidate_object ORDER BY candidate_key DESC LIMIT 11)`)
	w.Exec(t, `INSERT INTO governance_candidate_object SELECT * FROM jsonb_populate_record(NULL::governance_candidate_object,
		(SELECT to_jsonb(o) || '{"candidate_key": "stray:1", "object_ref": "stray:1"}' FROM governance_candidate_object o
		 WHERE lifecycle_status = 'active' AND evidence_fingerprint <> 'forged' ORDER BY candidate_key LIMIT 1))`)
	audit, err := scan.New(w.Store).FullAudit(w.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if audit.ObjectsMaterialized != 9+11 || audit.ObjectsRetired != 1 {
		t.Fatalf("the chunked audit wrote %d rows and retired %d, want 20 and 1", audit.ObjectsMaterialized, audit.ObjectsRetired)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_candidate_object WHERE candidate_key = 'stray:1' AND lifecycle_status = 'retired'`); n != 1 {
		t.Fatal("the stray row was not retired")
	}
	clean("after the chunked audit")

	// One chunk finds nothing left to do.
	evaluate.SetObjectChunk(1000)
	again, err := scan.New(w.Store).FullAudit(w.Ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.ObjectsMaterialized != 0 || again.ObjectsRetired != 0 {
		t.Fatalf("an audit in one chunk after the chunked one wrote %d rows and retired %d", again.ObjectsMaterialized, again.ObjectsRetired)
	}
}

func TestScanFailureIsVisibleAndRetriedWithBackoff(t *testing.T) {
	w := gcostest.Ready(t, gcostest.Options{Births: 5000, Seed: 7, Config: func(c *gcos.Config) {
		c.Scan.RetryBase = gcos.Duration(time.Hour)
		c.Scan.RetryMax = gcos.Duration(2 * time.Hour)
	}})
	key := w.Strings(t, `SELECT group_key FROM v_candidate_effective WHERE effective_verdict = 'relevant'
		AND object_class NOT IN (SELECT object_type FROM governance_candidate_object)
		ORDER BY group_member_count DESC, group_key LIMIT 1`)[0]
	evaluate.SetEvaluateHook(func(g gcos.Group) error {
		if g.Key == key {
			return errors.New("registry row unreadable")
		}
		return nil
	})
	defer evaluate.SetEvaluateHook(nil)
	if _, err := w.Store.MarkDirty(w.Ctx, []string{key}, "input"); err != nil {
		t.Fatal(err)
	}
	res, err := scan.New(w.Store).ScanTick(w.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
	if err != nil || res.Failed != 1 {
		t.Fatalf("tick: failed=%d err=%v", res.Failed, err)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = $1 AND recompute_status = 'failed' AND dirty`, key); n != 1 {
		t.Fatal("failure not visible on the row (recompute_status failed, still dirty)")
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'candidate_unknown' AND status = 'open' AND coalesce_key LIKE '%' || $1`, key); n != 1 {
		t.Fatal("no finding for the failed re-evaluation")
	}
	again, err := scan.New(w.Store).ScanTick(w.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
	if err != nil || again.Claimed != 0 {
		t.Fatalf("group retried inside its backoff: claimed %d (%v)", again.Claimed, err)
	}
	evaluate.SetEvaluateHook(nil)
	w.Exec(t, `UPDATE candidate_scan_attempt SET next_attempt_at = now() WHERE group_key = $1`, key)
	ok, err := scan.New(w.Store).ScanTick(w.Ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
	if err != nil || ok.Scanned != 1 {
		t.Fatalf("retry after backoff: scanned %d (%v)", ok.Scanned, err)
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'candidate_unknown' AND status = 'open' AND coalesce_key LIKE '%' || $1`, key); n != 0 {
		t.Fatal("finding not auto-closed after a successful re-scan")
	}
}
