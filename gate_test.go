package gcos_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gcos"
)

func TestIsHighRisk(t *testing.T) {
	t.Parallel()
	low := []string{"read_descriptive", "read_low"}
	tests := []struct {
		risk string
		low  []string
		want bool
	}{
		{"read_descriptive", low, false},
		{"read_low", low, false},
		{"write_high", low, true},
		{"write_medium", low, true},
		{"some_new_class", low, true},
		{"", low, true},
		{"unknown", low, true},
		{"unknown", []string{"unknown"}, true}, // unknown is high even if misconfigured as low
		{"", []string{""}, true},
		{"read_descriptive", nil, true},
	}
	for _, tt := range tests {
		if got := gcos.IsHighRisk(tt.risk, tt.low); got != tt.want {
			t.Errorf("IsHighRisk(%q, %v) = %v, want %v", tt.risk, tt.low, got, tt.want)
		}
	}
}

// gateCase describes one gate scenario; the input is derived the way a caller would derive it.
type gateCase struct {
	name        string
	action      string
	found       bool
	err         error
	row         gcos.CandidateRow
	now         time.Time
	rulesets    gcos.RulesetState
	snapshot    bool
	override    func(*gcos.GateInput)
	decision    string
	rescan      bool
	raise       bool
	effective   gcos.Verdict
	reasonsHave string
}

func (c gateCase) input() gcos.GateInput {
	low := []string{"read_descriptive"}
	high := gcos.IsHighRisk(c.row.RiskClass, low)
	in := gcos.GateInput{
		Action: c.action, Found: c.found, Source: gcos.GateSourceGroup, Row: c.row, HighRisk: high,
		RulesetStatus: c.rulesets.RowRulesetStatus, SnapshotExists: c.snapshot, Err: c.err,
	}
	if c.found {
		in.Effective = gcos.Effective(c.row, c.now, c.rulesets, c.snapshot, high)
	}
	if c.override != nil {
		c.override(&in)
	}
	return in
}

func TestGate(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	draft := gcos.RulesetState{ActiveVersion: active.ActiveVersion, RowRulesetStatus: gcos.RulesetDraft}
	lowRisk := func(r *gcos.CandidateRow) { r.RiskClass = "read_descriptive" }
	dirty := func(r *gcos.CandidateRow) { r.Dirty = true }
	verdict := func(v gcos.Verdict) func(*gcos.CandidateRow) { return func(r *gcos.CandidateRow) { r.Verdict = v } }
	draftRow := func(r *gcos.CandidateRow) { r.RulesetVersion = "gov-rs-dddddddddddd" }
	needsCoverage := func(r *gcos.CandidateRow) { r.CoverageRequired, r.CoverageScanRef = true, nil }

	tests := []gateCase{
		// Failures to decide.
		{name: "internal error", action: "write", found: true, err: errors.New("conn reset"), row: cleanRow(), now: now,
			rulesets: active, snapshot: true, decision: "block", reasonsHave: "fails closed"},
		{name: "internal error on read", action: "read", found: true, err: gcos.Errorf(gcos.EUNAVAILABLE, "database down"),
			row: cleanRow(lowRisk), now: now, rulesets: active, snapshot: true, decision: "block", reasonsHave: "database down"},
		{name: "unknown action", action: "deploy", found: true, row: cleanRow(), now: now, rulesets: active, snapshot: true,
			decision: "block", reasonsHave: `unknown action "deploy"`},
		{name: "not found (write)", action: "write", found: false, decision: "block", raise: true, reasonsHave: "never scanned"},
		{name: "not found (read, low risk)", action: "read", found: false, row: cleanRow(lowRisk), decision: "block", raise: true},

		// High risk.
		{name: "high: clean", action: "write", found: true, row: cleanRow(), now: now, rulesets: active, snapshot: true,
			decision: "allow", effective: "not_relevant", reasonsHave: "clean under ruleset gov-rs-aaaaaaaaaaaa, snapshot 512"},
		{name: "high: clean relevant, coverage closed", action: "write", found: true,
			row: cleanRow(verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			now: now, rulesets: active, snapshot: true, decision: "allow", effective: "relevant"},
		{name: "high: coverage required without coverage scan", action: "write", found: true,
			row: cleanRow(verdict(gcos.VerdictRelevant), needsCoverage), now: now, rulesets: active, snapshot: true,
			decision: "block", raise: true, effective: "relevant", reasonsHave: "no coverage scan has closed it"},
		{name: "high: coverage not required, no scan needed", action: "write", found: true,
			row: cleanRow(func(r *gcos.CandidateRow) { r.CoverageScanRef = nil }), now: now, rulesets: active, snapshot: true,
			decision: "allow", effective: "not_relevant"},
		{name: "high: dirty", action: "write", found: true, row: cleanRow(dirty), now: now, rulesets: active, snapshot: true,
			decision: "block", rescan: true, effective: "stale", reasonsHave: "stale (dirty)"},
		{name: "high: dirty, read blocks too", action: "read", found: true, row: cleanRow(dirty), now: now, rulesets: active,
			snapshot: true, decision: "block", rescan: true, effective: "stale"},
		{name: "high: expired", action: "write", found: true, row: cleanRow(), now: t0.Add(25 * time.Hour), rulesets: active,
			snapshot: true, decision: "block", rescan: true, effective: "stale", reasonsHave: "expired"},
		{name: "high: stored unknown", action: "write", found: true, row: cleanRow(verdict(gcos.VerdictUnknown)), now: now,
			rulesets: active, snapshot: true, decision: "block", rescan: true, raise: true, effective: "unknown"},
		{name: "high: needs_input", action: "write", found: true, row: cleanRow(verdict(gcos.VerdictNeedsInput)), now: now,
			rulesets: active, snapshot: true, decision: "block", effective: "needs_input", reasonsHave: "input gate"},
		{name: "high: dangling snapshot", action: "write", found: true, row: cleanRow(), now: now, rulesets: active,
			snapshot: false, decision: "block", rescan: true, effective: "stale", reasonsHave: "snapshot 512 no longer exists"},
		{name: "high: recompute failed", action: "write", found: true,
			row: cleanRow(func(r *gcos.CandidateRow) { r.RecomputeStatus = gcos.RecomputeFailed }), now: now, rulesets: active,
			snapshot: true, decision: "block", rescan: true, effective: "stale", reasonsHave: "last recompute failed"},
		{name: "high: draft ruleset", action: "write", found: true, row: cleanRow(draftRow), now: now, rulesets: draft,
			snapshot: true, decision: "block", rescan: true, raise: true, effective: "unknown", reasonsHave: "draft ruleset"},
		{name: "high: unknown risk class", action: "write", found: true,
			row: cleanRow(dirty, func(r *gcos.CandidateRow) { r.RiskClass = "" }), now: now, rulesets: active, snapshot: true,
			decision: "block", rescan: true, effective: "stale", reasonsHave: "risk class unknown is high risk"},
		{name: "high: inconsistent effective state counts as stale", action: "write", found: true, row: cleanRow(), now: now,
			rulesets: active, snapshot: true,
			override: func(in *gcos.GateInput) { in.Effective = gcos.EffectiveState{Verdict: gcos.VerdictRelevant} },
			decision: "block", rescan: true, effective: "stale"},
		{name: "high: missing effective verdict counts as unknown", action: "write", found: true, row: cleanRow(), now: now,
			rulesets: active, snapshot: true, override: func(in *gcos.GateInput) { in.Effective = gcos.EffectiveState{} },
			decision: "block", rescan: true, raise: true, effective: "unknown"},

		// Low risk.
		{name: "low: clean", action: "write", found: true, row: cleanRow(lowRisk), now: now, rulesets: active, snapshot: true,
			decision: "allow", effective: "not_relevant"},
		{name: "low: stale write is allowed and rescanned", action: "write", found: true, row: cleanRow(lowRisk, dirty), now: now,
			rulesets: active, snapshot: true, decision: "allow", rescan: true, effective: "stale", reasonsHave: "re-scan is scheduled"},
		{name: "low: stale read", action: "read", found: true, row: cleanRow(lowRisk), now: t0.Add(200 * time.Hour),
			rulesets: active, snapshot: true, decision: "allow", rescan: true, effective: "stale"},
		{name: "low: draft ruleset is stale, allowed", action: "write", found: true, row: cleanRow(lowRisk, draftRow),
			now: now, rulesets: draft, snapshot: true, decision: "allow", rescan: true, effective: "stale"},
		{name: "low: dangling snapshot is stale, allowed", action: "write", found: true, row: cleanRow(lowRisk), now: now,
			rulesets: active, snapshot: false, decision: "allow", rescan: true, effective: "stale"},
		{name: "low: coverage required without scan does not block", action: "write", found: true,
			row: cleanRow(lowRisk, verdict(gcos.VerdictRelevant), needsCoverage), now: now, rulesets: active, snapshot: true,
			decision: "allow", effective: "relevant"},
		{name: "low: unknown write blocks", action: "write", found: true, row: cleanRow(lowRisk, verdict(gcos.VerdictUnknown)),
			now: now, rulesets: active, snapshot: true, decision: "block", rescan: true, raise: true, effective: "unknown"},
		{name: "low: unknown read allowed", action: "read", found: true, row: cleanRow(lowRisk, verdict(gcos.VerdictUnknown)),
			now: now, rulesets: active, snapshot: true, decision: "allow", rescan: true, raise: true, effective: "unknown"},
		{name: "low: needs_input write blocks", action: "write", found: true,
			row: cleanRow(lowRisk, verdict(gcos.VerdictNeedsInput)), now: now, rulesets: active, snapshot: true,
			decision: "block", effective: "needs_input"},
		{name: "low: needs_input read allowed", action: "read", found: true,
			row: cleanRow(lowRisk, verdict(gcos.VerdictNeedsInput)), now: now, rulesets: active, snapshot: true,
			decision: "allow", effective: "needs_input"},
		{name: "low: stale needs_input write still blocks", action: "write", found: true,
			row: cleanRow(lowRisk, dirty, verdict(gcos.VerdictNeedsInput)), now: now, rulesets: active, snapshot: true,
			decision: "block", rescan: true, effective: "stale", reasonsHave: "the verdict is needs_input"},
		{name: "low: stale needs_input read allowed", action: "read", found: true,
			row: cleanRow(lowRisk, dirty, verdict(gcos.VerdictNeedsInput)), now: now, rulesets: active, snapshot: true,
			decision: "allow", rescan: true, effective: "stale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := gcos.Gate(tt.input())
			if got.Decision != tt.decision || got.RescanScheduled != tt.rescan || got.RaiseUnknown != tt.raise ||
				got.EffectiveVerdict != tt.effective {
				t.Fatalf("Gate = {decision %s, rescan %v, raise %v, effective %q}, want {%s, %v, %v, %q}\nreasons: %q",
					got.Decision, got.RescanScheduled, got.RaiseUnknown, got.EffectiveVerdict,
					tt.decision, tt.rescan, tt.raise, tt.effective, got.Reasons)
			}
			if got.Allowed() != (tt.decision == "allow") {
				t.Fatal("Allowed disagrees with Decision")
			}
			if len(got.Reasons) == 0 {
				t.Fatal("a decision must say why")
			}
			if joined := strings.Join(got.Reasons, " | "); !strings.Contains(joined, tt.reasonsHave) {
				t.Fatalf("reasons %q do not mention %q", joined, tt.reasonsHave)
			}
		})
	}
}
