package postgres_test

import (
	"testing"

	"gcos/oracle"
	"gcos/postgres"
	"gcos/scan"
)

// TestObjectPassesWriteInChunks: a pass over the estate reads the births and writes the object rows a chunk at a
// time, and the result is the one a single chunk gives: the rows a from-scratch evaluation expects, rows retired or
// forged behind GCOS's back rewritten, a stray row retired, and nothing left for a pass in one chunk to change.
// (Not parallel: the chunk size is the package's.)
func TestObjectPassesWriteInChunks(t *testing.T) {
	t.Cleanup(postgres.SetObjectChunk(7))
	b := setup(t, 20000)
	res := b.backfill(t)
	b.activate(t, res.RulesetVersion)
	rows := b.count(t, `SELECT count(*) FROM governance_candidate_object WHERE lifecycle_status = 'active'`)
	if rows < 5*7 {
		t.Fatalf("%d object rows: too few for a pass to span chunks of 7", rows)
	}
	clean := func(when string) {
		t.Helper()
		rep, err := oracle.Verify(b.ctx, b.store, oracle.VerifyOptions{Sample: 50, Seed: 3})
		if err != nil {
			t.Fatalf("%s: verify: %v", when, err)
		}
		if !rep.Clean() || rep.Objects != int(rows) {
			t.Fatalf("%s: %d object rows (want %d), mismatches %v", when, rep.Objects, rows, rep.Mismatches)
		}
	}
	clean("after the backfill")

	// Behind GCOS's back: rows retired, rows forged, and a row no reason selects.
	b.exec(t, `UPDATE governance_candidate_object SET lifecycle_status = 'retired' WHERE candidate_key IN (
		SELECT candidate_key FROM governance_candidate_object ORDER BY candidate_key LIMIT 9)`)
	b.exec(t, `UPDATE governance_candidate_object SET evidence_fingerprint = 'forged', candidate_verdict = 'not_relevant'
		WHERE candidate_key IN (SELECT candidate_key FROM governance_candidate_object ORDER BY candidate_key DESC LIMIT 11)`)
	b.exec(t, `INSERT INTO governance_candidate_object SELECT * FROM jsonb_populate_record(NULL::governance_candidate_object,
		(SELECT to_jsonb(o) || '{"candidate_key": "stray:1", "object_ref": "stray:1"}' FROM governance_candidate_object o
		 WHERE lifecycle_status = 'active' AND evidence_fingerprint <> 'forged' ORDER BY candidate_key LIMIT 1))`)
	audit, err := scan.New(b.store).FullAudit(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if audit.ObjectsMaterialized != 9+11 || audit.ObjectsRetired != 1 {
		t.Fatalf("the chunked audit wrote %d rows and retired %d, want 20 and 1", audit.ObjectsMaterialized, audit.ObjectsRetired)
	}
	if n := b.count(t, `SELECT count(*) FROM governance_candidate_object WHERE candidate_key = 'stray:1' AND lifecycle_status = 'retired'`); n != 1 {
		t.Fatal("the stray row was not retired")
	}
	clean("after the chunked audit")

	// One chunk finds nothing left to do.
	postgres.SetObjectChunk(1000)
	again, err := scan.New(b.store).FullAudit(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.ObjectsMaterialized != 0 || again.ObjectsRetired != 0 {
		t.Fatalf("an audit in one chunk after the chunked one wrote %d rows and retired %d", again.ObjectsMaterialized, again.ObjectsRetired)
	}
}
