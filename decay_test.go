package gcos_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

var (
	t0     = time.Date(2026, 6, 10, 8, 0, 3, 0, time.UTC)
	active = gcos.RulesetState{ActiveVersion: "gov-rs-aaaaaaaaaaaa", RowRulesetStatus: gcos.RulesetActive}
)

// cleanRow is a row that is clean at t0+1h.
func cleanRow(edits ...func(*gcos.CandidateRow)) gcos.CandidateRow {
	staleAfter := gcos.StaleAfter(t0, 24*time.Hour)
	r := gcos.CandidateRow{
		GroupKey: "0123456789abcdef0123456789abcdef", SnapshotRef: 512, RulesetVersion: active.ActiveVersion,
		ScanTime: t0, Verdict: gcos.VerdictNotRelevant, InputQualityState: gcos.Str("accepted_for_candidate_scan"),
		StaleAfter: &staleAfter, RecomputeStatus: gcos.RecomputeOK, RiskClass: "write_high",
		CoverageScanRef: gcos.Str("run-1"), LifecycleStatus: gcos.LifecycleActive, MemberCount: 3,
	}
	for _, e := range edits {
		e(&r)
	}
	return r
}

func TestEffective(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	draft := gcos.RulesetState{ActiveVersion: active.ActiveVersion, RowRulesetStatus: gcos.RulesetDraft}
	draftRow := func(r *gcos.CandidateRow) { r.RulesetVersion = "gov-rs-dddddddddddd" }
	tests := []struct {
		name     string
		row      gcos.CandidateRow
		now      time.Time
		rulesets gcos.RulesetState
		snapshot bool
		highRisk bool
		want     gcos.EffectiveState
	}{
		{"clean keeps the stored verdict", cleanRow(), now, active, true, true,
			gcos.EffectiveState{Verdict: "not_relevant", Clean: true, Reasons: []string{}}},
		{"clean unknown stays unknown", cleanRow(func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictUnknown }), now, active, true, true,
			gcos.EffectiveState{Verdict: "unknown", Clean: true, Reasons: []string{}}},
		{"dirty", cleanRow(func(r *gcos.CandidateRow) { r.Dirty = true }), now, active, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"dirty"}}},
		{"recompute dirty and dirty flag say it once", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus = true, gcos.RecomputeDirty
		}), now, active, true, true, gcos.EffectiveState{Verdict: "stale", Reasons: []string{"dirty"}}},
		{"dirty for a birth alone keeps its verdict", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.DirtyReason = true, gcos.RecomputeDirty, gcos.Str("handoff:object_born")
		}), now, active, true, true, gcos.EffectiveState{Verdict: "not_relevant", Clean: true, Reasons: []string{}}},
		{"re-scanned for a birth alone keeps its verdict", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.DirtyReason = true, gcos.RecomputeScanning, gcos.Str("handoff:object_born")
		}), now, active, true, true, gcos.EffectiveState{Verdict: "not_relevant", Clean: true, Reasons: []string{}}},
		{"dirty for a birth alone still expires", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.DirtyReason = true, gcos.RecomputeDirty, gcos.Str("handoff:object_born")
		}), t0.Add(24 * time.Hour), active, true, true, gcos.EffectiveState{Verdict: "stale", Reasons: []string{"expired"}}},
		{"dirty for a birth but failed", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.DirtyReason = true, gcos.RecomputeFailed, gcos.Str("handoff:object_born")
		}), now, active, true, true, gcos.EffectiveState{Verdict: "stale", Reasons: []string{"recompute_failed", "dirty"}}},
		{"dirty for another handoff", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.DirtyReason = true, gcos.RecomputeDirty, gcos.Str("handoff:object_registered")
		}), now, active, true, true, gcos.EffectiveState{Verdict: "stale", Reasons: []string{"dirty"}}},
		{"dirty for a retirement (membership alone)", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.DirtyReason = true, gcos.RecomputeDirty, gcos.Str("handoff:object_retired")
		}), now, active, true, true, gcos.EffectiveState{Verdict: "not_relevant", Clean: true, Reasons: []string{}}},
		{"scanning", cleanRow(func(r *gcos.CandidateRow) { r.RecomputeStatus = gcos.RecomputeScanning }), now, active, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"recompute_scanning"}}},
		{"failed", cleanRow(func(r *gcos.CandidateRow) { r.RecomputeStatus = gcos.RecomputeFailed }), now, active, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"recompute_failed"}}},
		{"unexpected recompute status", cleanRow(func(r *gcos.CandidateRow) { r.RecomputeStatus = "" }), now, active, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"recompute_unknown"}}},
		{"one instant before stale_after is clean", cleanRow(), t0.Add(24*time.Hour - time.Nanosecond), active, true, true,
			gcos.EffectiveState{Verdict: "not_relevant", Clean: true, Reasons: []string{}}},
		{"at stale_after it expires", cleanRow(), t0.Add(24 * time.Hour), active, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"expired"}}},
		{"no stale_after is not clean", cleanRow(func(r *gcos.CandidateRow) { r.StaleAfter = nil }), now, active, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"stale_after_missing"}}},
		{"superseded ruleset", cleanRow(func(r *gcos.CandidateRow) { r.RulesetVersion = "gov-rs-000000000000" }), now,
			gcos.RulesetState{ActiveVersion: active.ActiveVersion, RowRulesetStatus: gcos.RulesetSuperseded}, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"ruleset_superseded"}}},
		{"missing ruleset", cleanRow(func(r *gcos.CandidateRow) { r.RulesetVersion = "gov-rs-000000000000" }), now,
			gcos.RulesetState{ActiveVersion: active.ActiveVersion, RowRulesetStatus: gcos.RulesetMissing}, true, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"ruleset_missing"}}},
		{"no active ruleset at all", cleanRow(), now, gcos.RulesetState{RowRulesetStatus: gcos.RulesetSuperseded}, true, false,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"ruleset_superseded"}}},
		{"draft ruleset, high risk ⇒ unknown", cleanRow(draftRow), now, draft, true, true,
			gcos.EffectiveState{Verdict: "unknown", Reasons: []string{"ruleset_draft"}}},
		{"draft ruleset, low risk ⇒ stale", cleanRow(draftRow), now, draft, true, false,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"ruleset_draft"}}},
		{"dangling snapshot", cleanRow(), now, active, false, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"snapshot_dangling"}}},
		{"stored unknown never decays into stale", cleanRow(func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictUnknown }),
			t0.Add(48 * time.Hour), active, true, false,
			gcos.EffectiveState{Verdict: "unknown", Reasons: []string{"expired", "stored_unknown"}}},
		{"every conjunct fails", cleanRow(func(r *gcos.CandidateRow) {
			r.Dirty, r.RecomputeStatus, r.RulesetVersion = true, gcos.RecomputeFailed, "gov-rs-000000000000"
		}), t0.Add(48 * time.Hour), gcos.RulesetState{ActiveVersion: active.ActiveVersion, RowRulesetStatus: gcos.RulesetSuperseded}, false, true,
			gcos.EffectiveState{Verdict: "stale", Reasons: []string{"recompute_failed", "dirty", "expired", "ruleset_superseded", "snapshot_dangling"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := gcos.Effective(tt.row, tt.now, tt.rulesets, tt.snapshot, tt.highRisk)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Effective (-want +got):\n%s", diff)
			}
		})
	}
}
