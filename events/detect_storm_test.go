package events_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/events"
	"gcos/gcostest"
	"gcos/scan"
)

// The first detection pass over an estate opens a finding per orphan group and owner gap at once: subscribers hear
// at most the ceiling of each type in its window, and when the window closes one governance.coverage.summary digest
// per type says how many were held back. Nothing is lost: every finding stays open in system_issues.
func TestDetectionStormStaysWithinTheCeiling(t *testing.T) {
	t.Parallel()
	const ceiling = 5
	window := 10 * time.Minute
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 11, Config: func(cfg *gcos.Config) {
		cfg.Events.Rules = []gcos.EventRule{{Types: "governance.*", Cooldown: gcos.Duration(time.Minute), Ceiling: ceiling,
			Window: gcos.Duration(window)}}
	}})
	w.ActivateVocabulary(t, gcostest.Approver)
	clock := &testClock{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	loop := events.New(w.Store, events.WithClock(clock.Now))
	promote := func() {
		t.Helper()
		if _, err := loop.PromotePending(w.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	promote() // what the backfill announced goes first, so the windows below are the detections'
	clock.Advance(2 * window)
	promote()

	det, err := scan.New(w.Store).Detect(w.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	opened := map[string]int64{}
	for _, typ := range []gcos.IssueType{gcos.IssueCoverageOrphan, gcos.IssueCoverageOwnerGap} {
		spec, _ := gcos.SpecFor(typ)
		opened[spec.EventType()] = w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = $1 AND status = 'open'`, string(typ))
	}
	if opened["governance.coverage.orphan"] <= ceiling || det.Raised == 0 {
		t.Fatalf("the world opens %v findings (pass %+v): too few to storm past a ceiling of %d", opened, det, ceiling)
	}
	promote()
	for typ, n := range opened {
		if sent := w.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = $1`, typ); sent != min(n, ceiling) {
			t.Fatalf("%s: %d announcements of %d findings, want the ceiling %d", typ, sent, n, min(n, ceiling))
		}
	}
	clock.Advance(window + time.Second)
	promote() // the windows close: one digest per type that held something back
	for typ, n := range opened {
		held := n - min(n, ceiling)
		got := w.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = 'governance.coverage.summary'
			AND safe_payload->>'event_type' = $1 AND (safe_payload->>'held')::int = $2`, typ, held)
		if want := int64(min(held, 1)); got != want {
			t.Fatalf("%s: %d digests saying %d held, want %d", typ, got, held, want)
		}
	}
	if n := w.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'coverage_orphan' AND status = 'open'`); n != opened["governance.coverage.orphan"] {
		t.Fatalf("%d orphan findings open after the storm, want all %d", n, opened["governance.coverage.orphan"])
	}
}
