package gcos_test

import (
	"strings"
	"testing"

	"gcos"
)

func TestSeverityOrder(t *testing.T) {
	t.Parallel()
	for i := 1; i < len(gcos.Severities); i++ {
		if gcos.Severities[i-1].Rank() >= gcos.Severities[i].Rank() {
			t.Fatalf("%s must rank below %s", gcos.Severities[i-1], gcos.Severities[i])
		}
	}
	if gcos.Severity("bogus").Rank() != 0 {
		t.Fatal("an unknown severity must rank 0")
	}
	if _, err := gcos.ParseSeverity("urgent"); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("ParseSeverity(urgent) = %v", err)
	}
}

func TestIssueSpecs(t *testing.T) {
	t.Parallel()
	types := []gcos.IssueType{"candidate_stale", "candidate_unknown", "candidate_scan_lag", "group_invalidation_storm",
		"snapshot_capture_failed", "snapshot_nondeterministic", "snapshot_ref_dangling", "ruleset_unowned", "ruleset_drift",
		"handoff_lag", "handoff_dlq", "handoff_silent_gap", "handoff_unregistered_type", "backfill_inventory_gap",
		"governance_schema_drift", "issue_event_gap", "input.invalid_schema", "input.untrusted_source"}
	keys := map[string]gcos.IssueType{}
	for _, ty := range types {
		spec, ok := gcos.SpecFor(ty)
		if !ok {
			t.Errorf("%s: not in the vocabulary", ty)
			continue
		}
		if spec.Base.Rank() == 0 || spec.Max.Rank() < spec.Base.Rank() {
			t.Errorf("%s: base %s, max %s", ty, spec.Base, spec.Max)
		}
		k := gcos.CoalesceKey(ty, "g1")
		if prev, dup := keys[k]; dup {
			t.Errorf("%s and %s share coalesce key %s", ty, prev, k)
		}
		keys[k] = ty
		if _, err := gcos.ParseIssueType(string(ty)); err != nil {
			t.Errorf("ParseIssueType(%s): %v", ty, err)
		}
	}
	for _, bad := range []string{"candidate_fresh", "input.accepted_for_candidate_scan", "input.nonsense", ""} {
		if _, err := gcos.ParseIssueType(bad); err == nil {
			t.Errorf("ParseIssueType(%q) accepted", bad)
		}
	}
}

func TestEscalate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		t    gcos.IssueType
		n    int
		want gcos.Severity
	}{
		{"candidate_stale", 1, "medium"},
		{"candidate_stale", 2, "medium"},
		{"candidate_stale", 3, "high"},
		{"candidate_stale", 100, "high"},
		{"handoff_silent_gap", 1, "high"},
		{"handoff_silent_gap", 3, "critical"},
		{"handoff_unregistered_type", 1, "low"},
		{"handoff_unregistered_type", 5, "medium"},
		{"group_invalidation_storm", 1, "high"},
		{"group_invalidation_storm", 9, "high"},
		{"handoff_lag", 1, "medium"},
		{"handoff_lag", 3, "high"},
		{"input.duplicate", 1, "medium"},
		{"input.duplicate", 3, "high"},
		{"not_a_type", 1, "high"},
	}
	for _, tt := range tests {
		if got := gcos.Escalate(tt.t, tt.n); got != tt.want {
			t.Errorf("Escalate(%s, %d) = %s, want %s", tt.t, tt.n, got, tt.want)
		}
	}
}

func TestCoalesceKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		t       gcos.IssueType
		subject string
		want    string
	}{
		{"candidate_stale", "0123abcd", "gov:candidate:stale:0123abcd"},
		{"candidate_unknown", "0123abcd", "gov:candidate:unknown:0123abcd"},
		{"group_invalidation_storm", "", "gov:candidate:group_invalidation_storm"},
		{"handoff_dlq", "registry_changelog", "gov:handoff:dlq:registry_changelog"},
		{"snapshot_ref_dangling", "512", "gov:snapshot:ref_dangling:512"},
		{"ruleset_drift", "gov-rs-abc", "gov:ruleset:drift:gov-rs-abc"},
		{"input.incomplete_input", "routes:R1", "gov:input:incomplete_input:routes:R1"},
		{"governance_schema_drift", "policy", "gov:coverage:schema_drift:policy"},
		{"mystery", "x", "gov:other:mystery:x"},
	}
	for _, tt := range tests {
		if got := gcos.CoalesceKey(tt.t, tt.subject); got != tt.want {
			t.Errorf("CoalesceKey(%s, %q) = %q, want %q", tt.t, tt.subject, got, tt.want)
		}
	}
	f := gcos.NewFinding(gcos.IssueCandidateStale, "0123abcd", "run-1", "gov-rs-abc", nil)
	if f.Severity != gcos.SeverityMedium || f.CoalesceKey() != "gov:candidate:stale:0123abcd" || f.Evidence == nil {
		t.Fatalf("NewFinding = %+v", f)
	}
	spec, _ := gcos.SpecFor(gcos.IssueCandidateStale)
	if spec.EventType() != "governance.candidate.stale" {
		t.Fatalf("EventType = %s", spec.EventType())
	}
	if spec, _ := gcos.SpecFor("input.incomplete_input"); !strings.HasSuffix(spec.EventType(), ".input.incomplete") {
		t.Fatalf("input event = %s, want doc 41's governance.input.incomplete", spec.EventType())
	}
}
