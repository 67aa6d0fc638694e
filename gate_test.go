package gcos_test

import (
	"errors"
	"slices"
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
	coverage    gcos.CoverageOutcome
	decision    string
	rescan      bool
	raise       bool
	orphan      bool
	effective   gcos.Verdict
	reasonsHave string
}

func (c gateCase) input() gcos.GateInput {
	low := []string{"read_descriptive"}
	high := gcos.IsHighRisk(c.row.RiskClass, low)
	in := gcos.GateInput{
		Action: c.action, Found: c.found, Source: gcos.GateSourceGroup, Row: c.row, HighRisk: high,
		RulesetStatus: c.rulesets.RowRulesetStatus, SnapshotExists: c.snapshot, Err: c.err, Scope: "health",
		Coverage: c.coverage,
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
			row:      cleanRow(verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			coverage: gcos.CoverageCovered, now: now, rulesets: active, snapshot: true, decision: "allow", effective: "relevant"},
		{name: "high: clean relevant under an approved exception", action: "write", found: true,
			row:      cleanRow(verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			coverage: gcos.CoverageApprovedException, now: now, rulesets: active, snapshot: true, decision: "allow", effective: "relevant"},
		{name: "high: orphan blocks a write, naming the scope", action: "write", found: true,
			row:      cleanRow(verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			coverage: gcos.CoverageOrphan, now: now, rulesets: active, snapshot: true, decision: "block", orphan: true,
			effective: "relevant", reasonsHave: "no owner resolves in scope health (orphan)"},
		{name: "high: orphan blocks a read", action: "read", found: true,
			row:      cleanRow(verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			coverage: gcos.CoverageOrphan, now: now, rulesets: active, snapshot: true, decision: "block", orphan: true,
			effective: "relevant", reasonsHave: "orphan"},
		{name: "high: relevant without a recorded coverage outcome blocks", action: "write", found: true,
			row: cleanRow(verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			now: now, rulesets: active, snapshot: true, decision: "block", raise: true, effective: "relevant",
			reasonsHave: "no coverage outcome is recorded in scope health"},
		{name: "high: stale orphan blocks as stale", action: "write", found: true,
			row:      cleanRow(dirty, verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			coverage: gcos.CoverageOrphan, now: now, rulesets: active, snapshot: true, decision: "block", rescan: true,
			effective: "stale", reasonsHave: "stale"},
		{name: "high: not relevant needs no owner", action: "write", found: true, row: cleanRow(),
			coverage: gcos.CoverageOrphan, now: now, rulesets: active, snapshot: true, decision: "allow", effective: "not_relevant"},
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
		{name: "low: orphan does not block", action: "write", found: true,
			row:      cleanRow(lowRisk, verdict(gcos.VerdictRelevant), func(r *gcos.CandidateRow) { r.CoverageRequired = true }),
			coverage: gcos.CoverageOrphan, now: now, rulesets: active, snapshot: true, decision: "allow", effective: "relevant"},
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
				got.EffectiveVerdict != tt.effective || got.RaiseOrphan != tt.orphan {
				t.Fatalf("Gate = {decision %s, rescan %v, raise %v, effective %q, orphan %v}, want {%s, %v, %v, %q, %v}\nreasons: %q",
					got.Decision, got.RescanScheduled, got.RaiseUnknown, got.EffectiveVerdict, got.RaiseOrphan,
					tt.decision, tt.rescan, tt.raise, tt.effective, tt.orphan, got.Reasons)
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

func TestGateObject(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	scopes := []string{"approval", "health", "render"}
	relevant := func(r *gcos.CandidateRow) { r.Verdict, r.CoverageRequired = gcos.VerdictRelevant, true }
	// row builds one gated row the way the store does: the effective state from the row, high risk unless low.
	row := func(source, scope string, cov gcos.CoverageOutcome, edits ...func(*gcos.CandidateRow)) gcos.GateInput {
		r := cleanRow(edits...)
		high := gcos.IsHighRisk(r.RiskClass, []string{"read_descriptive"})
		return gcos.GateInput{Action: gcos.ActionWrite, Found: true, Source: source, Scope: scope, Row: r, HighRisk: high,
			Effective: gcos.Effective(r, now, active, true, high), RulesetStatus: gcos.RulesetActive, SnapshotExists: true,
			Coverage: cov}
	}
	group := func(scope string, cov gcos.CoverageOutcome, edits ...func(*gcos.CandidateRow)) gcos.GateInput {
		return row(gcos.GateSourceGroup, scope, cov, edits...)
	}
	covered := func(edits ...func(*gcos.CandidateRow)) []gcos.GateInput {
		var out []gcos.GateInput
		for _, s := range scopes {
			out = append(out, group(s, gcos.CoverageCovered, append([]func(*gcos.CandidateRow){relevant}, edits...)...))
		}
		return out
	}
	with := func(rows []gcos.GateInput, i int, r gcos.GateInput) []gcos.GateInput {
		rows = slices.Clone(rows)
		rows[i] = r
		return rows
	}
	dirty := func(r *gcos.CandidateRow) { r.Dirty = true }
	low := func(r *gcos.CandidateRow) { r.RiskClass = "read_descriptive" }
	objectRow := row(gcos.GateSourceObject, "approval", "", func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictRetired })

	tests := []struct {
		name      string
		in        gcos.ObjectGateInput
		decision  string
		effective gcos.Verdict
		worst     int
		missing   []string
		first     string // the first reason starts with this
		rescan    bool   // a re-scan of the stale rows could turn the block (RescanCouldAllow)
	}{
		{name: "every scope covered and clean", in: gcos.ObjectGateInput{Action: "write", Rows: covered(), Scopes: scopes},
			decision: "allow", effective: "relevant", worst: 0, first: "[approval] allowed"},
		{name: "an orphan in one scope blocks, named first",
			in:       gcos.ObjectGateInput{Action: "write", Rows: with(covered(), 1, group("health", gcos.CoverageOrphan, relevant)), Scopes: scopes},
			decision: "block", effective: "relevant", worst: 1, first: "[health] blocked: risk class write_high is high risk and no owner resolves in scope health (orphan)"},
		{name: "an object row does not hide a stale group in another scope",
			in: gcos.ObjectGateInput{Action: "write", Scopes: scopes, Rows: []gcos.GateInput{objectRow,
				group("approval", "", func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictRetired }),
				group("health", "", func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictRetired }),
				group("render", "", dirty, func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictRetired })}},
			decision: "block", effective: "stale", worst: 3, first: "[render] the stored verdict retired is stale", rescan: true},
		{name: "a dirty high-risk group blocks, and a re-scan could turn it",
			in:       gcos.ObjectGateInput{Action: "write", Rows: with(covered(), 0, group("approval", gcos.CoverageCovered, relevant, dirty)), Scopes: scopes},
			decision: "block", effective: "stale", worst: 0, first: "[approval] the stored verdict relevant is stale", rescan: true},
		{name: "a dirty high-risk group beside an orphan: no re-scan turns the orphan",
			in: gcos.ObjectGateInput{Action: "write", Scopes: scopes, Rows: with(with(covered(), 0, group("approval", gcos.CoverageCovered, relevant, dirty)),
				1, group("health", gcos.CoverageOrphan, relevant))},
			decision: "block", effective: "stale", worst: 0, first: "[approval] the stored verdict relevant is stale"},
		{name: "a dirty high-risk group with an input problem: a re-scan reads the same values",
			in: gcos.ObjectGateInput{Action: "write", Rows: with(covered(), 0, group("approval", gcos.CoverageCovered, relevant, dirty)), Scopes: scopes,
				Problems: []gcos.InputProblem{{State: gcos.InputInvalidSchema, Field: "lifecycle_status", Value: "Active ", Reason: `lifecycle_status "Active " is not one of active`}}},
			decision: "block", effective: "needs_input", worst: 0, first: `blocked: lifecycle_status "Active " is not one of active`},
		{name: "a blocking object row blocks although every group allows",
			in: gcos.ObjectGateInput{Action: "write", Scopes: scopes, Rows: append([]gcos.GateInput{
				row(gcos.GateSourceObject, "approval", "", func(r *gcos.CandidateRow) { r.Verdict = gcos.VerdictNeedsInput })}, covered()...)},
			decision: "block", effective: "needs_input", worst: 0, first: "[object row, scope approval] blocked"},
		{name: "a scope without a group blocks as unknown",
			in:       gcos.ObjectGateInput{Action: "write", Rows: covered()[:2], Scopes: scopes},
			decision: "block", effective: "unknown", worst: 0, missing: []string{"render"}, first: "[render] blocked: no group represents the object in scope render"},
		{name: "an object row does not stand in for a missing scope's group",
			in:       gcos.ObjectGateInput{Action: "write", Rows: append([]gcos.GateInput{row(gcos.GateSourceObject, "render", gcos.CoverageCovered, relevant)}, covered()[:2]...), Scopes: scopes},
			decision: "block", effective: "unknown", worst: 0, missing: []string{"render"}, first: "[render] blocked"},
		{name: "a group never seeded blocks",
			in:       gcos.ObjectGateInput{Action: "write", Rows: with(covered(), 2, gcos.GateInput{Action: "write", Source: gcos.GateSourceGroup, Scope: "render"}), Scopes: scopes},
			decision: "block", effective: "", worst: 2, first: "[render] no candidate state exists"},
		{name: "a low-risk stale group allows with the others",
			in:       gcos.ObjectGateInput{Action: "write", Rows: covered(low, dirty), Scopes: scopes},
			decision: "allow", effective: "stale", worst: 0, first: "[approval] the stored verdict relevant is stale"},
		{name: "no rows", in: gcos.ObjectGateInput{Action: "write", Scopes: scopes}, decision: "block", effective: "unknown",
			worst: -1, first: "no candidate state exists for this object"},
		{name: "an error", in: gcos.ObjectGateInput{Action: "write", Rows: covered(), Scopes: scopes, Err: gcos.Errorf(gcos.EUNAVAILABLE, "database down")},
			decision: "block", worst: -1, first: "the gate could not read the candidate state (database down)"},
		{name: "an unknown action", in: gcos.ObjectGateInput{Action: "deploy", Rows: covered(), Scopes: scopes},
			decision: "block", worst: -1, first: `unknown action "deploy"`},
		{name: "an exception on the object suppresses its orphan in the exception's scope",
			in: gcos.ObjectGateInput{Action: "write", Scopes: scopes, Rows: append([]gcos.GateInput{
				row(gcos.GateSourceObject, "health", gcos.CoverageApprovedException, relevant)},
				with(covered(), 1, group("health", gcos.CoverageOrphan, relevant))...)},
			decision: "allow", effective: "relevant", worst: 0, first: "[object row, scope health] allowed"},
		{name: "an exception on the object does not suppress an orphan in another scope",
			in: gcos.ObjectGateInput{Action: "write", Scopes: scopes, Rows: append([]gcos.GateInput{
				row(gcos.GateSourceObject, "render", gcos.CoverageApprovedException, relevant)},
				with(covered(), 1, group("health", gcos.CoverageOrphan, relevant))...)},
			decision: "block", effective: "relevant", worst: 2, first: "[health] blocked: risk class write_high is high risk and no owner resolves in scope health (orphan)"},
		{name: "an object row's exception reaches its scope's group wherever the rows stand",
			in: gcos.ObjectGateInput{Action: "write", Scopes: scopes, Rows: append(with(covered(), 1, group("health", gcos.CoverageOrphan, relevant)),
				row(gcos.GateSourceObject, "health", gcos.CoverageApprovedException, relevant))},
			decision: "allow", effective: "relevant", worst: 0, first: "[approval] allowed"},
		{name: "an input problem blocks first, by name, although every row allows",
			in: gcos.ObjectGateInput{Action: "read", Rows: covered(), Scopes: scopes, Problems: []gcos.InputProblem{{
				State: gcos.InputInvalidSchema, Field: "lifecycle_status", Value: "Active ", Reason: `lifecycle_status "Active " is not one of active`}}},
			decision: "block", effective: "needs_input", worst: 0, first: `blocked: lifecycle_status "Active " is not one of active (input quality invalid_schema)`},
		{name: "one scope, one row: no prefix", in: gcos.ObjectGateInput{Action: "read", Rows: covered()[:1], Scopes: scopes[:1]},
			decision: "allow", effective: "relevant", worst: 0, first: "allowed: the group verdict relevant is clean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := gcos.GateObject(tt.in)
			if got.Decision != tt.decision || got.EffectiveVerdict != tt.effective || got.Worst != tt.worst {
				t.Fatalf("GateObject = {%s %q worst %d}, want {%s %q worst %d}\nreasons: %q", got.Decision,
					got.EffectiveVerdict, got.Worst, tt.decision, tt.effective, tt.worst, got.Reasons)
			}
			if got.Allowed() != (tt.decision == "allow") {
				t.Fatal("Allowed disagrees with Decision")
			}
			if r := got.RescanCouldAllow(len(tt.in.Problems) > 0); r != tt.rescan {
				t.Fatalf("RescanCouldAllow = %v, want %v", r, tt.rescan)
			}
			if tt.missing == nil {
				tt.missing = []string{}
			}
			if !slices.Equal(got.MissingScopes, tt.missing) {
				t.Fatalf("missing scopes %v, want %v", got.MissingScopes, tt.missing)
			}
			if len(got.Reasons) == 0 || !strings.HasPrefix(got.Reasons[0], tt.first) {
				t.Fatalf("first reason of %q does not start with %q", got.Reasons, tt.first)
			}
			if tt.in.Err == nil && tt.in.Action == "write" && len(got.Rows) != len(tt.in.Rows) {
				t.Fatalf("%d row decisions for %d rows", len(got.Rows), len(tt.in.Rows))
			}
		})
	}
}
