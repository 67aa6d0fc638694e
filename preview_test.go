package gcos_test

import (
	"strings"
	"testing"
	"time"

	"gcos"
)

func TestPreviewRequestValidate(t *testing.T) {
	id := int64(7)
	cases := []struct {
		name string
		req  gcos.PreviewRequest
		want string // "" valid
	}{
		{"revoke", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id}}}, ""},
		{"no changes", gcos.PreviewRequest{}, "at least one change"},
		{"too many", gcos.PreviewRequest{Changes: make([]gcos.ProposedChange, gcos.PreviewMaxChanges+1)}, "at most 32"},
		{"unknown kind", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: "owner_fire"}}}, `unknown kind "owner_fire"`},
		{"missing field", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke}}}, "ownership_id is required"},
		{"field not read", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id, OwnerRef: gcos.Str("x")}}}, "does not take owner_ref"},
		{"empty value", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerAssign, Scope: gcos.Str(" "), OwnerRef: gcos.Str("x")}}}, "scope is empty"},
		{"moves nothing", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerMove, OwnershipID: &id}}}, "moves nothing"},
		{"changes nothing", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewExceptionChange, ExceptionID: gcos.Str("E")}}}, "changes nothing"},
		{"object exception without scope", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewExceptionGrant, ApprovalRef: gcos.Str("A"), Collection: gcos.Str("c"), EntityCode: gcos.Str("e")}}}, "needs its collection and scope"},
		{"group exception pinning", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewExceptionGrant, ApprovalRef: gcos.Str("A"), Fingerprint: gcos.Str("f")}}}, "a group exception names none"},
		{"two rulesets", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewRulesetActivate, RulesetVersion: gcos.Str("a")}, {Kind: gcos.PreviewRulesetActivate, RulesetVersion: gcos.Str("b")}}}, "at most one ruleset"},
		{"bad action", gcos.PreviewRequest{Action: "delete", Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id}}}, `action "delete"`},
		{"bad sample", gcos.PreviewRequest{Sample: 101, Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id}}}, "sample 101"},
		{"control characters quoted", gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: "\x1b[31mred"}}}, `"\x1b[31mred"`},
	}
	for _, c := range cases {
		err := c.req.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(gcos.ErrorMessage(err), c.want)):
			t.Errorf("%s: %v; want EINVALID naming %q", c.name, err, c.want)
		}
	}
	ok := gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id}}}
	if err := ok.Validate(); err != nil || ok.Action != gcos.ActionWrite || ok.Sample != gcos.PreviewSampleDefault {
		t.Errorf("defaults: %v, action %q, sample %d", err, ok.Action, ok.Sample)
	}
}

func TestApplyChanges(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	regs := gcos.Registries{
		Collections: map[string]gcos.CollectionRow{"c1": {CollectionName: "c1", CoverageStatus: gcos.Str("BIRTH_REQUIRED")}},
		Classes:     map[string]*string{"k1": gcos.Str("c1")},
		Profile:     map[string]gcos.CoverageProfileRow{"k1": {EntityType: "k1", RiskClass: gcos.Str("write_high")}},
		Scopes:      []gcos.ScopeRow{{ScopeCode: "s1"}, {ScopeCode: "s2"}},
		Ownership:   []gcos.OwnershipRow{{ID: 4, ScopeCode: "s1", EntityType: gcos.Str("k1"), OwnerRef: "team-a", Status: "active"}},
		Exceptions:  []gcos.ExceptionRow{{ExceptionID: "E1", ScopeCode: gcos.Str("s2"), EntityType: gcos.Str("k1"), ApprovalRef: gcos.Str("A"), Status: "approved"}},
	}
	regs.Finish()
	id := int64(4)
	objects := map[string]gcos.PreviewObject{"c1:o1": {Collection: "c1", Code: "o1", Found: true, Status: "active", Children: 2,
		Base: gcos.BaseGroup{ObjectClass: "k1", SourceRegistry: "c1", LifecycleStatus: "active"}, Fingerprint: gcos.Str("fp")}}
	apply := func(cs ...gcos.ProposedChange) (gcos.AppliedChanges, error) {
		return gcos.ApplyChanges(regs, cs, now, objects)
	}

	got, err := apply(gcos.ProposedChange{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id})
	if err != nil || regs.OwnerScope("s1", "k1", "c1") == nil || got.After.OwnerScope("s1", "k1", "c1") != nil {
		t.Fatalf("revoke: %v; before %v, after %v", err, regs.OwnerScope("s1", "k1", "c1"), got.After.OwnerScope("s1", "k1", "c1"))
	}
	if len(got.Selectors) != 1 || *got.Selectors[0].Scope != "s1" || *got.Selectors[0].ObjectClass != "k1" {
		t.Errorf("revoke routes to %+v, want scope s1 class k1", got.Selectors)
	}
	got, err = apply(gcos.ProposedChange{Kind: gcos.PreviewOwnerMove, OwnershipID: &id, Scope: gcos.Str("s2")})
	if err != nil || got.After.OwnerScope("s2", "k1", "c1") == nil || got.After.OwnerScope("s1", "k1", "c1") != nil || len(got.Selectors) != 2 {
		t.Errorf("move to s2: %v, selectors %+v (want where it was and where it goes)", err, got.Selectors)
	}
	got, err = apply(gcos.ProposedChange{Kind: gcos.PreviewExceptionRevoke, ExceptionID: gcos.Str("E1")})
	if err != nil || got.After.GroupException(gcos.Dimensions{Scope: gcos.Str("s2"), ObjectClass: gcos.Str("k1"), SourceRegistry: gcos.Str("c1")}, now) != nil {
		t.Errorf("exception revoke: %v", err)
	}
	got, err = apply(gcos.ProposedChange{Kind: gcos.PreviewExceptionGrant, Scope: gcos.Str("s1"), Collection: gcos.Str("c1"), EntityCode: gcos.Str("o1"), ApprovalRef: gcos.Str("A")})
	if err != nil || len(got.Objects) != 1 || len(got.Assumed) != 1 || *got.After.Exceptions[1].Fingerprint != "fp" {
		t.Errorf("object exception: %v, objects %v, assumed %v", err, got.Objects, got.Assumed)
	}
	got, err = apply(gcos.ProposedChange{Kind: gcos.PreviewObjectRetire, Collection: gcos.Str("c1"), EntityCode: gcos.Str("o1")})
	if err != nil || len(got.Moves) != 1 || got.Moves[0].To.LifecycleStatus != "retired" || got.Moves[0].Members != 3 {
		t.Errorf("retire: %v, moves %+v (want to retired with its 2 children)", err, got.Moves)
	}
	got, err = apply(gcos.ProposedChange{Kind: gcos.PreviewCoverageProfile, EntityType: gcos.Str("k1"), RiskClass: gcos.Str("read_descriptive")})
	if err != nil || got.After.RiskClass("k1") != "read_descriptive" || regs.RiskClass("k1") != "write_high" {
		t.Errorf("profile: %v, after %s, before %s (the input must not change)", err, got.After.RiskClass("k1"), regs.RiskClass("k1"))
	}
	if regs.Ownership[0].Status != "active" || regs.Exceptions[0].Status != "approved" {
		t.Fatal("ApplyChanges modified the registries it was given")
	}
	for _, c := range []struct {
		changes []gcos.ProposedChange
		want    string
	}{
		{[]gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id}, {Kind: gcos.PreviewOwnerMove, OwnershipID: &id, OwnerRef: gcos.Str("b")}}, "both change ownership 4"},
		{[]gcos.ProposedChange{{Kind: gcos.PreviewExceptionGrant, ExceptionID: gcos.Str("E1"), ApprovalRef: gcos.Str("A")}}, "exists already"},
		{[]gcos.ProposedChange{{Kind: gcos.PreviewObjectRetire, Collection: gcos.Str("c1"), EntityCode: gcos.Str("o9")}}, "has no birth"},
		{[]gcos.ProposedChange{{Kind: gcos.PreviewObjectRetire, Collection: gcos.Str("c1"), EntityCode: gcos.Str("o1"), Status: gcos.Str("active")}}, "is \"active\" already"},
		{[]gcos.ProposedChange{{Kind: gcos.PreviewOwnerAssign, Scope: gcos.Str("s9"), OwnerRef: gcos.Str("x")}}, "not a responsibility scope"},
	} {
		if _, err := apply(c.changes...); gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(gcos.ErrorMessage(err), c.want) {
			t.Errorf("%+v: %v; want EINVALID naming %q", c.changes, err, c.want)
		}
	}
}
