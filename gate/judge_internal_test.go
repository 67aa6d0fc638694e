package gate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/postgres"
)

// TestJudge: the judge's answer and follow-ups from an object's reads, row by row. The answer's statement is the
// worst row's; a re-scan is scheduled only for a group row not already dirty (an object row follows its group); the
// synchronous re-scan lists the blocking group rows only when a re-scan could turn the block; a row that names no
// group still leaves the rows after it judged; a lift names the group for a group row and the object for an object
// row; an input problem is a follow-up and forbids the synchronous re-scan.
func TestJudge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	g := &Gate{cfg: Config{Gate: gcos.DefaultConfig().Gate}}
	ref := postgres.ObjectRef{Collection: "orders", Code: "o-1"}
	read := func(source, key, scope string, edits ...func(*candidateRead)) candidateRead {
		valid := now.Add(time.Hour)
		r := candidateRead{source: source, key: key, scope: scope, rulesetStatus: gcos.RulesetActive, activeVersion: "rs-1",
			snapshotExists: true, snapshotAt: new(now.Add(-time.Hour)), coverage: gcos.CoverageCovered,
			row: gcos.CandidateRow{GroupKey: key, SnapshotRef: 7, RulesetVersion: "rs-1", ScanTime: now.Add(-time.Minute),
				Verdict: gcos.VerdictRelevant, StaleAfter: &valid, RecomputeStatus: gcos.RecomputeOK, RiskClass: "write_high",
				CoverageRequired: true, CoverageScanRef: gcos.Str("run-1")}}
		for _, e := range edits {
			e(&r)
		}
		return r
	}
	group := func(key, scope string, edits ...func(*candidateRead)) candidateRead {
		return read(gcos.GateSourceGroup, key, scope, edits...)
	}
	expired := func(r *candidateRead) { r.row.StaleAfter = new(now.Add(-time.Second)) }
	dirty := func(r *candidateRead) { r.row.Dirty, r.row.RecomputeStatus = true, gcos.RecomputeDirty }
	orphan := func(r *candidateRead) { r.coverage = gcos.CoverageOrphan }
	unseeded := func(r *candidateRead) { r.row = gcos.CandidateRow{} }
	lifted := func(r *candidateRead) {
		r.lift = &gcos.ExceptionLift{ExceptionID: "EXC-1", Reason: gcos.LiftRevoked, Detail: "revoked"}
	}
	problem := gcos.InputProblem{State: gcos.InputInvalidSchema, Field: "lifecycle_status", Value: "Active ", Reason: "odd status"}

	tests := []struct {
		name     string
		reads    []candidateRead
		problems []gcos.InputProblem
		decision string
		worst    int      // the consulted row whose statement is the answer's
		marked   bool     // RescanScheduled: a re-scan is already coming
		rescan   []string // groups dirtied for a re-scan
		sync     []string // groups re-scanned before answering
		unknown  []string
		orphans  []string
		lifts    []string // the subject each lift names
		inputs   int
	}{
		{name: "every group clean", reads: []candidateRead{group("g-a", "a"), group("g-b", "b")}, decision: gcos.GateAllow},
		{name: "an expired group behind a clean one", reads: []candidateRead{group("g-a", "a"), group("g-b", "b", expired)},
			decision: gcos.GateBlock, worst: 1, rescan: []string{"g-b"}, sync: []string{"g-b"}},
		{name: "a dirty group: its re-scan is coming", reads: []candidateRead{group("g-a", "a", dirty), group("g-b", "b")},
			decision: gcos.GateBlock, marked: true, sync: []string{"g-a"}},
		{name: "an expired object row follows its group", reads: []candidateRead{
			read(gcos.GateSourceObject, "g-a", "a", expired), group("g-a", "a"), group("g-b", "b")},
			decision: gcos.GateBlock, worst: 0},
		{name: "a row that names no group leaves the rows after it judged", reads: []candidateRead{
			group("", "a", unseeded), group("g-b", "b", expired), group("g-c", "c", orphan, lifted)},
			decision: gcos.GateBlock, worst: 0, rescan: []string{"g-b"}, orphans: []string{"g-c"}, lifts: []string{"group:g-c"}},
		{name: "a group never seeded is raised unknown", reads: []candidateRead{group("g-a", "a"), group("g-b", "b", unseeded)},
			decision: gcos.GateBlock, worst: 1, unknown: []string{"g-b"}},
		{name: "an orphan: no re-scan turns it", reads: []candidateRead{group("g-a", "a", orphan), group("g-b", "b", expired)},
			decision: gcos.GateBlock, worst: 1, rescan: []string{"g-b"}, orphans: []string{"g-a"}},
		{name: "a lift on the object row names the object", reads: []candidateRead{
			read(gcos.GateSourceObject, "g-a", "a", lifted), group("g-a", "a")},
			decision: gcos.GateAllow, lifts: []string{"orders:o-1"}},
		{name: "an input problem blocks and forbids the synchronous re-scan", reads: []candidateRead{group("g-a", "a", expired)},
			problems: []gcos.InputProblem{problem}, decision: gcos.GateBlock, rescan: []string{"g-a"}, inputs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			scopes := []string{}
			for _, r := range tt.reads {
				if r.source == gcos.GateSourceGroup && !slices.Contains(scopes, r.scope) {
					scopes = append(scopes, r.scope)
				}
			}
			res, fu := g.judge(ref, gcos.ActionWrite, objectReads{reads: tt.reads, now: now, scopes: scopes, problems: tt.problems}, GateResult{})
			if res.Decision != tt.decision {
				t.Fatalf("decision %s, want %s: %q", res.Decision, tt.decision, res.Reasons)
			}
			if len(res.Consulted) != len(tt.reads) || res.Statement == "" || res.Statement != res.Consulted[tt.worst].Statement {
				t.Fatalf("statement %q, want consulted row %d's of %+v", res.Statement, tt.worst, res.Consulted)
			}
			if res.RescanScheduled != tt.marked {
				t.Fatalf("rescan_scheduled %v, want %v", res.RescanScheduled, tt.marked)
			}
			var orphans, lifts []string
			for _, o := range fu.orphans {
				orphans = append(orphans, o.key)
			}
			for _, l := range fu.lifts {
				lifts = append(lifts, l.object)
			}
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"rescan", fu.rescan, tt.rescan}, {"sync", fu.sync, tt.sync}, {"unknown", fu.unknown, tt.unknown},
				{"orphans", orphans, tt.orphans}, {"lifts", lifts, tt.lifts}} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s follow-ups %q, want %q", c.what, c.got, c.want)
				}
			}
			if len(fu.inputs) != tt.inputs {
				t.Errorf("%d input follow-ups, want %d", len(fu.inputs), tt.inputs)
			}
		})
	}
}

// TestStatement: the sentence an answer gives for each consulted row says exactly what its verdict rests on.
func TestStatement(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	g := &Gate{}
	captured, valid := now.Add(-time.Hour), now.Add(time.Hour)
	read := func(edits ...func(*candidateRead)) candidateRead {
		r := candidateRead{source: gcos.GateSourceGroup, key: "g-a", scope: "health", rulesetStatus: gcos.RulesetActive,
			snapshotAt: &captured, coverage: gcos.CoverageCovered,
			row: gcos.CandidateRow{SnapshotRef: 7, RulesetVersion: "rs-1", ScanTime: now.Add(-time.Minute),
				Verdict: gcos.VerdictRelevant, StaleAfter: &valid, CoverageRequired: true}}
		for _, e := range edits {
			e(&r)
		}
		return r
	}
	clean := gcos.EffectiveState{Verdict: gcos.VerdictRelevant, Clean: true}
	const head = "object orders:o-1 was relevant in scope health under ruleset rs-1 (active), snapshot 7 (captured 2026-06-01T11:00:00Z), " +
		"scanned 2026-06-01T11:59:00Z, valid until 2026-06-01T13:00:00Z"
	tests := []struct {
		name string
		r    candidateRead
		eff  gcos.EffectiveState
		want string
	}{
		{"a clean covered group", read(), clean, head + "; coverage covered"},
		{"no coverage recorded", read(func(r *candidateRead) { r.coverage = "" }), clean, head + "; coverage not recorded"},
		{"a lifted exception", read(func(r *candidateRead) {
			r.coverage, r.recorded.Outcome = gcos.CoverageOrphan, gcos.CoverageApprovedException
			r.lift = &gcos.ExceptionLift{Detail: "exception EXC-1 was revoked"}
		}), clean, head + "; coverage orphan (recorded approved_exception, lifted: exception EXC-1 was revoked)"},
		{"no coverage asked of it", read(func(r *candidateRead) { r.row.CoverageRequired = false }), clean, head},
		{"not relevant: no coverage", read(func(r *candidateRead) { r.row.Verdict = gcos.VerdictNotRelevant }),
			gcos.EffectiveState{Verdict: gcos.VerdictNotRelevant, Clean: true},
			strings.Replace(head, "was relevant", "was not_relevant", 1)},
		{"stale now", read(), gcos.EffectiveState{Verdict: gcos.VerdictStale, Reasons: []string{"dirty", "expired"}},
			head + "; coverage covered; now stale (dirty, expired)"},
		{"a pruned snapshot and no expiry", read(func(r *candidateRead) { r.snapshotAt, r.row.StaleAfter, r.scope = nil, nil, "" }), clean,
			"object orders:o-1 was relevant under ruleset rs-1 (active), snapshot 7 (pruned: dangling), scanned 2026-06-01T11:59:00Z, " +
				"no expiry recorded; coverage covered"},
		{"a group with no verdict", read(func(r *candidateRead) { r.row = gcos.CandidateRow{} }), gcos.EffectiveState{},
			"object orders:o-1 (group g-a, scope health) has no verdict under the current ruleset: unknown"},
		{"no group", read(func(r *candidateRead) { r.row, r.key = gcos.CandidateRow{}, "" }), gcos.EffectiveState{},
			"object orders:o-1 belongs to no known group: unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := g.statement("orders:o-1", tt.r, tt.eff); got != tt.want {
				t.Fatalf("statement:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
