package gcos_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

// facts builds GroupFacts for a group that passes every gate up to "relevant", then applies edits.
func facts(edits ...func(*gcos.GroupFacts)) gcos.GroupFacts {
	yes := true
	f := gcos.GroupFacts{
		InputQuality:     gcos.Str("accepted_for_candidate_scan"),
		LifecycleStatus:  gcos.Str("active"),
		CoverageStatus:   gcos.Str("BIRTH_REQUIRED"),
		ScopeClass:       gcos.Str("IN_SCOPE"),
		Privacy:          gcos.Str("shared"),
		RiskClass:        gcos.Str("write_high"),
		CoverageRequired: &yes,
		MemberCount:      1,
	}
	for _, e := range edits {
		e(&f)
	}
	return f
}

func boolp(b bool) *bool { return &b }

func TestDefaultPolicyShape(t *testing.T) {
	t.Parallel()
	p := gcos.DefaultVerdictPolicy()
	var got []string
	for _, r := range p.Rules {
		got = append(got, string(r.Verdict))
	}
	want := []string{"needs_input", "retired", "retired", "class_0", "deferred_birth", "not_relevant", "relevant", "unknown"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("default policy order (-want +got):\n%s", diff)
	}
	// Callers get their own copy.
	p.Rules[0].Verdict = gcos.VerdictRelevant
	if gcos.DefaultVerdictPolicy().Rules[0].Verdict != gcos.VerdictNeedsInput {
		t.Fatal("mutating one DefaultVerdictPolicy changed the next")
	}
}

func TestDefaultPolicyEvaluate(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	tests := []struct {
		name  string
		facts gcos.GroupFacts
		want  gcos.Evaluation
	}{
		{"relevant", facts(), gcos.Evaluation{Verdict: "relevant", Rule: "birth_required_in_scope"}},
		{"needs_input beats everything", facts(func(f *gcos.GroupFacts) {
			f.InputQuality, f.LifecycleStatus, f.Privacy = s("untrusted_source"), s("retired"), s("private")
		}), gcos.Evaluation{Verdict: "needs_input", Rule: "input_not_accepted"}},
		{"registry missing is needs_input", facts(func(f *gcos.GroupFacts) {
			f.InputQuality, f.CoverageStatus, f.ScopeClass = s("birth_or_registry_missing"), nil, nil
		}), gcos.Evaluation{Verdict: "needs_input", Rule: "input_not_accepted"}},
		{"null input quality fails closed to needs_input", facts(func(f *gcos.GroupFacts) { f.InputQuality = nil }),
			gcos.Evaluation{Verdict: "needs_input", Rule: "input_not_accepted"}},
		{"retired group in an exempt collection is retired by rule 2", facts(func(f *gcos.GroupFacts) {
			f.LifecycleStatus, f.CoverageStatus = s("retired"), s("BIRTH_EXEMPT_SYSTEM")
		}), gcos.Evaluation{Verdict: "retired", Rule: "lifecycle_retired"}},
		{"superseded", facts(func(f *gcos.GroupFacts) { f.LifecycleStatus = s("superseded") }),
			gcos.Evaluation{Verdict: "retired", Rule: "lifecycle_retired"}},
		{"merged beats private", facts(func(f *gcos.GroupFacts) { f.LifecycleStatus, f.Privacy = s("merged"), s("private") }),
			gcos.Evaluation{Verdict: "retired", Rule: "lifecycle_retired"}},
		{"exempt collection", facts(func(f *gcos.GroupFacts) { f.CoverageStatus = s("BIRTH_EXEMPT_TOOLING") }),
			gcos.Evaluation{Verdict: "retired", Rule: "collection_birth_exempt"}},
		{"exempt beats private", facts(func(f *gcos.GroupFacts) { f.CoverageStatus, f.Privacy = s("BIRTH_EXEMPT_X"), s("user") }),
			gcos.Evaluation{Verdict: "retired", Rule: "collection_birth_exempt"}},
		{"private class in a BIRTH_REQUIRED collection", facts(func(f *gcos.GroupFacts) { f.Privacy = s("private") }),
			gcos.Evaluation{Verdict: "class_0", Rule: "private_or_user_excluded"}},
		{"user", facts(func(f *gcos.GroupFacts) { f.Privacy = s("user") }),
			gcos.Evaluation{Verdict: "class_0", Rule: "private_or_user_excluded"}},
		{"session", facts(func(f *gcos.GroupFacts) { f.Privacy = s("session") }),
			gcos.Evaluation{Verdict: "class_0", Rule: "private_or_user_excluded"}},
		{"USER_EXCLUDED with deferred coverage is class_0 (rule 4 before 5)", facts(func(f *gcos.GroupFacts) {
			f.ScopeClass, f.CoverageStatus = s("USER_EXCLUDED"), s("BIRTH_DEFERRED_NEEDS_REVIEW")
		}), gcos.Evaluation{Verdict: "class_0", Rule: "private_or_user_excluded"}},
		{"future scope", facts(func(f *gcos.GroupFacts) { f.ScopeClass = s("FUTURE_SCOPE") }),
			gcos.Evaluation{Verdict: "deferred_birth", Rule: "birth_deferred"}},
		{"orphan registry", facts(func(f *gcos.GroupFacts) { f.ScopeClass = s("ORPHAN_REGISTRY") }),
			gcos.Evaluation{Verdict: "deferred_birth", Rule: "birth_deferred"}},
		{"deferred in scope", facts(func(f *gcos.GroupFacts) { f.CoverageStatus = s("BIRTH_DEFERRED_NEEDS_REVIEW") }),
			gcos.Evaluation{Verdict: "deferred_birth", Rule: "birth_deferred"}},
		{"deferred beats coverage not required", facts(func(f *gcos.GroupFacts) {
			f.ScopeClass, f.CoverageRequired = s("FUTURE_SCOPE"), boolp(false)
		}), gcos.Evaluation{Verdict: "deferred_birth", Rule: "birth_deferred"}},
		{"coverage not required", facts(func(f *gcos.GroupFacts) { f.CoverageRequired = boolp(false) }),
			gcos.Evaluation{Verdict: "not_relevant", Rule: "coverage_not_required"}},
		{"no coverage profile in BIRTH_REQUIRED/IN_SCOPE is unknown", facts(func(f *gcos.GroupFacts) {
			f.CoverageRequired, f.Privacy, f.RiskClass = nil, nil, nil
		}), gcos.Evaluation{Verdict: "unknown", Rule: "undecidable"}},
		{"unclassified collection is unknown", facts(func(f *gcos.GroupFacts) { f.CoverageStatus, f.ScopeClass = nil, nil }),
			gcos.Evaluation{Verdict: "unknown", Rule: "undecidable"}},
		{"in scope but an unexpected coverage status is unknown", facts(func(f *gcos.GroupFacts) { f.CoverageStatus = s("BIRTH_MAYBE") }),
			gcos.Evaluation{Verdict: "unknown", Rule: "undecidable"}},
	}
	p := gcos.DefaultVerdictPolicy()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, p.Evaluate(tt.facts)); diff != "" {
				t.Fatalf("Evaluate (-want +got):\n%s", diff)
			}
			// count>1 only nominates: multiplicity never changes the verdict.
			for _, n := range []int64{0, 2, 1_000_000} {
				f := tt.facts
				f.MemberCount = n
				if got := p.Evaluate(f); got != tt.want {
					t.Fatalf("member count %d changed the evaluation to %+v", n, got)
				}
			}
		})
	}
}

func TestEvaluationCarriesNoOwnerOrIssue(t *testing.T) {
	t.Parallel()
	// count>1 never creates an owner requirement or an issue: an Evaluation has no field that could say so.
	typ := reflect.TypeFor[gcos.Evaluation]()
	var names []string
	for i := range typ.NumField() {
		names = append(names, typ.Field(i).Name)
	}
	if diff := cmp.Diff([]string{"Verdict", "Rule"}, names); diff != "" {
		t.Fatalf("Evaluation fields (-want +got):\n%s", diff)
	}
}

func TestConditionNullFailsClosed(t *testing.T) {
	t.Parallel()
	p := gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
		{Name: "shared_only", Verdict: "relevant", Any: [][]gcos.Condition{{{Fact: "privacy", Op: "not_in", Values: []string{"private"}}}}},
		{Name: "starts", Verdict: "relevant", Any: [][]gcos.Condition{{{Fact: "privacy", Op: "prefix", Values: []string{""}}}}},
		{Name: "set", Verdict: "relevant", Any: [][]gcos.Condition{{{Fact: "privacy", Op: "not_null"}}}},
		{Name: "missing", Verdict: "needs_input", Any: [][]gcos.Condition{{{Fact: "privacy", Op: "is_null"}}}},
		{Name: "fallback", Verdict: "unknown"},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := p.Evaluate(gcos.GroupFacts{}); got.Rule != "missing" {
		t.Fatalf("a null fact satisfied %q; only is_null may match it", got.Rule)
	}
	if got := p.Evaluate(gcos.GroupFacts{Privacy: gcos.Str("shared")}); got.Rule != "shared_only" {
		t.Fatalf("got %q, want shared_only", got.Rule)
	}
}

func TestVerdictPolicyValidate(t *testing.T) {
	t.Parallel()
	fallback := gcos.PolicyRule{Name: "fallback", Verdict: "unknown"}
	cond := func(fact, op string, values ...string) [][]gcos.Condition {
		return [][]gcos.Condition{{{Fact: fact, Op: op, Values: values}}}
	}
	rule := func(name string, v gcos.Verdict, any [][]gcos.Condition) gcos.PolicyRule {
		return gcos.PolicyRule{Name: name, Verdict: v, Any: any}
	}
	tests := []struct {
		name    string
		policy  gcos.VerdictPolicy
		wantErr string
	}{
		{"default is valid", gcos.DefaultVerdictPolicy(), ""},
		{"version", gcos.VerdictPolicy{Rules: []gcos.PolicyRule{fallback}}, "version: must be >= 1"},
		{"no rules", gcos.VerdictPolicy{Version: 1}, "rules: must not be empty"},
		{"unknown verdict", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "maybe", cond("privacy", "in", "x")), fallback}}, `rules[0] ("r"): verdict: unknown verdict "maybe"`},
		{"stale is not storable", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "stale", cond("privacy", "in", "x")), fallback}}, `rules[0] ("r"): verdict: unknown verdict "stale"`},
		{"unknown fact", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", cond("member_count", "in", "2")), fallback}}, `rules[0] ("r"): any[0][0]: fact: unknown fact "member_count"`},
		{"unknown op", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", cond("privacy", "like", "x")), fallback}}, `any[0][0]: op: unknown operator "like"`},
		{"in without values", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", cond("privacy", "in")), fallback}}, `values: op "in" needs at least one value`},
		{"equals with two values", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", cond("privacy", "equals", "a", "b")), fallback}}, `op "equals" needs exactly one value, got 2`},
		{"is_null with values", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", cond("privacy", "is_null", "a")), fallback}}, `op "is_null" takes no values`},
		{"boolean fact", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", cond("coverage_required", "equals", "yes")), fallback}}, `use "true" or "false", got "yes"`},
		{"empty clause", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", [][]gcos.Condition{{}}), fallback}}, `rules[0] ("r"): any[0]: empty clause`},
		{"empty name", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("", "relevant", cond("privacy", "in", "x")), fallback}}, `rules[0] (""): name: must not be empty`},
		{"duplicate name", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("fallback", "relevant", cond("privacy", "in", "x")), fallback}}, `rules[1] ("fallback"): name: duplicate`},
		{"unconditional rule before the end", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("all", "relevant", nil), fallback}}, `rules[0] ("all"): any: an unconditional rule must be last`},
		{"last rule conditional", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "unknown", cond("privacy", "in", "x"))}}, `rules[0] ("r"): the last rule must be an unconditional fallback`},
		{"fallback to relevant", gcos.VerdictPolicy{Version: 1, Rules: []gcos.PolicyRule{
			rule("r", "relevant", nil)}}, `rules[0] ("r"): the last rule must be an unconditional fallback to "unknown"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.policy.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || gcos.ErrorCode(err) != gcos.EINVALID {
				t.Fatalf("Validate error = %v, want EINVALID containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseVerdictPolicy(t *testing.T) {
	t.Parallel()
	if _, err := gcos.ParseVerdictPolicy(gcos.DefaultVerdictPolicyJSON()); err != nil {
		t.Fatalf("default document: %v", err)
	}
	tests := []struct{ name, doc, wantErr string }{
		{"unknown field", `{"version":1,"rules":[{"name":"f","verdict":"unknown","when":[]}]}`, `unknown field "when"`},
		{"trailing data", `{"version":1,"rules":[{"name":"f","verdict":"unknown"}]} {}`, "trailing data"},
		{"not json", `version: 1`, "verdict policy"},
		{"invalid policy", `{"version":1,"rules":[{"name":"f","verdict":"relevant"}]}`, "fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := gcos.ParseVerdictPolicy([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}
