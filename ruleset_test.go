package gcos_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

func i16(v int16) *int16 { return &v }

// baseComponents is a small registry state with two laws in two scopes.
func baseComponents() gcos.RulesetComponents {
	s := gcos.Str
	return gcos.RulesetComponents{
		Measurements: []gcos.MeasurementRule{
			{MeasurementID: "M1", LawCode: "L-POL", Method: i16(1), SourceQuery: "select 1 where a < b", TargetQuery: "select 1",
				Comparison: s("strict_equals"), Severity: s("high")},
			{MeasurementID: "M2", LawCode: "L-HEALTH", SourceQuery: "select 2", TargetQuery: "select 2"},
		},
		CoverageProfile: []gcos.CoverageProfileRow{
			{EntityType: "route", RiskClass: s("write_high"), CoverageRequired: boolp(true), Privacy: s("shared"), WritePath: true},
			{EntityType: "pref", RiskClass: s("read_descriptive"), CoverageRequired: boolp(false), Privacy: s("user")},
		},
		Pivots: []gcos.PivotRow{
			{PivotCode: "P1", AxisFamily: s("geo"), EntityType: s("route")},
			{PivotCode: "P2", AxisFamily: s("time"), EntityType: s("pref")},
		},
		Jurisdictions: []gcos.JurisdictionRow{
			{LawCode: "L-POL", ScopeCode: s("policy")},
			{LawCode: "L-HEALTH", ScopeCode: s("health"), EntityType: s("route")},
			{LawCode: "L-S", ScopeCode: s("S")},
		},
		Scopes: []gcos.ScopeRow{{ScopeCode: "policy", DefaultOwnerHint: s("GOV-COUNCIL")}, {ScopeCode: "health"}, {ScopeCode: "S"}},
		Policy: gcos.DefaultVerdictPolicy(),
	}
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func TestComputeRulesetFormat(t *testing.T) {
	t.Parallel()
	c := baseComponents()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	rs := gcos.ComputeRuleset(c)
	if !regexp.MustCompile(`^gov-rs-[0-9a-f]{12}$`).MatchString(rs.Version) {
		t.Fatalf("Version = %q", rs.Version)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(rs.ContentHash) || rs.Version != "gov-rs-"+rs.ContentHash[:12] {
		t.Fatalf("ContentHash = %q, Version = %q", rs.ContentHash, rs.Version)
	}
	if !json.Valid(rs.Canonical) {
		t.Fatalf("canonical form is not JSON: %s", rs.Canonical)
	}
	var comps []struct{ Component, State string }
	if err := json.Unmarshal(rs.Canonical, &comps); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, c := range comps {
		order = append(order, c.Component)
	}
	if diff := cmp.Diff(gcos.Components, order); diff != "" {
		t.Fatalf("component order (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(rs.Canonical), "a < b") {
		t.Fatal("rule text must be hashed as written, without HTML escaping")
	}
	want := gcos.RulesetSummary{
		MeasurementIDs: []string{"M1", "M2"}, LawCodes: []string{"L-HEALTH", "L-POL"}, Absent: []string{},
		ComponentHashes: rs.Summary.ComponentHashes, PolicyVersion: 1,
	}
	if diff := cmp.Diff(want, rs.Summary); diff != "" {
		t.Fatalf("summary (-want +got):\n%s", diff)
	}
	if len(rs.Summary.ComponentHashes) != len(gcos.Components) {
		t.Fatalf("component hashes = %v", rs.Summary.ComponentHashes)
	}
}

func TestComputeRulesetIgnoresInputOrder(t *testing.T) {
	t.Parallel()
	a := baseComponents()
	b := baseComponents()
	b.Measurements = reversed(b.Measurements)
	b.CoverageProfile = reversed(b.CoverageProfile)
	b.Pivots = reversed(b.Pivots)
	b.Jurisdictions = reversed(b.Jurisdictions)
	b.Scopes = reversed(b.Scopes)
	b.Absent = []string{}
	if ra, rb := gcos.ComputeRuleset(a), gcos.ComputeRuleset(b); ra.ContentHash != rb.ContentHash {
		t.Fatalf("reordering rows changed the ruleset: %s vs %s\n%s\n%s", ra.Version, rb.Version, ra.Canonical, rb.Canonical)
	}
	c := baseComponents()
	c.Absent = []string{gcos.ComponentScopes, gcos.ComponentCoverageProfile}
	c.Scopes, c.CoverageProfile = nil, nil
	d := baseComponents()
	d.Absent = []string{gcos.ComponentCoverageProfile, gcos.ComponentScopes}
	d.Scopes, d.CoverageProfile = nil, nil
	if gcos.ComputeRuleset(c).ContentHash != gcos.ComputeRuleset(d).ContentHash {
		t.Fatal("the order of Absent changed the ruleset")
	}
}

func TestComputeRulesetChangesWithContent(t *testing.T) {
	t.Parallel()
	base := gcos.ComputeRuleset(baseComponents())
	tests := []struct {
		name string
		edit func(*gcos.RulesetComponents)
	}{
		{"method null vs 0", func(c *gcos.RulesetComponents) { c.Measurements[1].Method = i16(0) }},
		{"comparison null vs empty", func(c *gcos.RulesetComponents) { c.Measurements[1].Comparison = gcos.Str("") }},
		{"query text", func(c *gcos.RulesetComponents) { c.Measurements[0].SourceQuery += " " }},
		{"rule removed", func(c *gcos.RulesetComponents) { c.Measurements = c.Measurements[:1] }},
		{"coverage flag", func(c *gcos.RulesetComponents) { c.CoverageProfile[0].WritePath = false }},
		{"pivot family", func(c *gcos.RulesetComponents) { c.Pivots[0].AxisFamily = gcos.Str("geo2") }},
		{"jurisdiction scope", func(c *gcos.RulesetComponents) { c.Jurisdictions[0].ScopeCode = nil }},
		{"scope hint", func(c *gcos.RulesetComponents) { c.Scopes[1].DefaultOwnerHint = gcos.Str("X") }},
		{"policy", func(c *gcos.RulesetComponents) { c.Policy.Rules[5].Name = "renamed" }},
		{"empty profile present", func(c *gcos.RulesetComponents) { c.CoverageProfile = []gcos.CoverageProfileRow{} }},
		{"profile absent", func(c *gcos.RulesetComponents) {
			c.CoverageProfile, c.Absent = nil, []string{gcos.ComponentCoverageProfile}
		}},
	}
	seen := map[string]string{base.ContentHash: "base"}
	for _, tt := range tests {
		c := baseComponents()
		tt.edit(&c)
		rs := gcos.ComputeRuleset(c)
		if prev, dup := seen[rs.ContentHash]; dup {
			t.Errorf("%s: same ruleset as %s", tt.name, prev)
		}
		seen[rs.ContentHash] = tt.name
	}
}

func TestAbsentMarker(t *testing.T) {
	t.Parallel()
	absent := baseComponents()
	absent.CoverageProfile, absent.Absent = nil, []string{gcos.ComponentCoverageProfile}
	empty := baseComponents()
	empty.CoverageProfile = nil

	ra, re := gcos.ComputeRuleset(absent), gcos.ComputeRuleset(empty)
	if ra.ContentHash == re.ContentHash {
		t.Fatal("an absent component hashes like an empty present one")
	}
	if !strings.Contains(string(ra.Canonical), `{"component":"coverage_profile","state":"absent"}`) {
		t.Fatalf("absent marker missing from %s", ra.Canonical)
	}
	if !strings.Contains(string(re.Canonical), `{"component":"coverage_profile","state":"present","rows":[]}`) {
		t.Fatalf("empty present component missing from %s", re.Canonical)
	}
	if diff := cmp.Diff([]string{"coverage_profile"}, ra.Summary.Absent); diff != "" {
		t.Fatalf("summary absent (-want +got):\n%s", diff)
	}
}

func TestRulesetComponentsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		edit    func(*gcos.RulesetComponents)
		wantErr string
	}{
		{"valid", func(*gcos.RulesetComponents) {}, ""},
		{"unknown component", func(c *gcos.RulesetComponents) { c.Absent = []string{"laws"} }, `absent: unknown component "laws"`},
		{"absent with rows", func(c *gcos.RulesetComponents) { c.Absent = []string{gcos.ComponentAxis} }, "axis: marked absent but has 5 rows"},
		{"policy absent", func(c *gcos.RulesetComponents) { c.Absent = []string{gcos.ComponentVerdictPolicy} }, "verdict_policy: cannot be absent"},
		{"invalid policy", func(c *gcos.RulesetComponents) { c.Policy = gcos.VerdictPolicy{} }, "version: must be >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := baseComponents()
			tt.edit(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

// world is a set of groups over scopes, classes, registries and axis families.
func world() []gcos.Dimensions {
	s := gcos.Str
	var out []gcos.Dimensions
	for _, scope := range []string{"policy", "health", "S"} {
		for _, class := range []string{"route", "pref"} {
			axis := map[string]string{"route": "geo", "pref": "time"}[class]
			out = append(out, gcos.Dimensions{ObjectClass: s(class), SourceRegistry: s(class + "s"), AxisFamily: s(axis),
				Scope: s(scope), LifecycleStatus: s("active")})
		}
	}
	return out
}

// scopesOf lists the distinct scopes of the selected groups.
func selected(groups []gcos.Dimensions, idx []int) []string {
	var out []string
	for _, i := range idx {
		g := groups[i]
		out = append(out, *g.Scope+"/"+*g.ObjectClass)
	}
	return out
}

func TestDiffRulesetsImpact(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	groups := world()
	all := selected(groups, []int{0, 1, 2, 3, 4, 5})
	tests := []struct {
		name           string
		edit           func(*gcos.RulesetComponents)
		wantSelected   []string
		wantUnresolved []string
		wantChanged    []string
	}{
		{"nothing changed", func(*gcos.RulesetComponents) {}, nil, []string{}, []string{}},
		{"enabling one rule scoped to S dirties only S", func(c *gcos.RulesetComponents) {
			c.Measurements = append(c.Measurements, gcos.MeasurementRule{MeasurementID: "M3", LawCode: "L-S", SourceQuery: "q", TargetQuery: "q"})
		}, []string{"S/route", "S/pref"}, []string{}, []string{"measurements"}},
		{"rule of a law with class and scope", func(c *gcos.RulesetComponents) { c.Measurements[1].Severity = s("low") },
			[]string{"health/route"}, []string{}, []string{"measurements"}},
		{"rule of an unresolvable law dirties all", func(c *gcos.RulesetComponents) {
			c.Measurements = append(c.Measurements, gcos.MeasurementRule{MeasurementID: "M9", LawCode: "L-NOWHERE", SourceQuery: "q", TargetQuery: "q"})
		}, all, []string{"L-NOWHERE"}, []string{"measurements"}},
		{"rule moved to another law dirties both", func(c *gcos.RulesetComponents) { c.Measurements[0].LawCode = "L-S" },
			[]string{"policy/route", "policy/pref", "S/route", "S/pref"}, []string{}, []string{"measurements"}},
		{"rule removed", func(c *gcos.RulesetComponents) { c.Measurements = c.Measurements[:1] },
			[]string{"health/route"}, []string{}, []string{"measurements"}},
		{"coverage profile row", func(c *gcos.RulesetComponents) { c.CoverageProfile[1].RiskClass = s("write_high") },
			[]string{"policy/pref", "health/pref", "S/pref"}, []string{}, []string{"coverage_profile"}},
		{"pivot row", func(c *gcos.RulesetComponents) { c.Pivots[0].PivotCode = "P1b" },
			[]string{"policy/route", "health/route", "S/route"}, []string{}, []string{"axis"}},
		{"jurisdiction moved", func(c *gcos.RulesetComponents) { c.Jurisdictions[0].ScopeCode = s("health") },
			[]string{"policy/route", "policy/pref", "health/route", "health/pref"}, []string{}, []string{"axis"}},
		{"scope row", func(c *gcos.RulesetComponents) { c.Scopes[0].DefaultOwnerHint = nil },
			[]string{"policy/route", "policy/pref"}, []string{}, []string{"scopes"}},
		{"policy changed dirties all", func(c *gcos.RulesetComponents) { c.Policy.Version = 2 },
			all, []string{}, []string{"verdict_policy"}},
		{"component vanished dirties all", func(c *gcos.RulesetComponents) {
			c.Scopes, c.Absent = nil, []string{gcos.ComponentScopes}
		}, all, []string{}, []string{"scopes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			from, to := baseComponents(), baseComponents()
			tt.edit(&to)
			d := gcos.DiffRulesets(from, to)
			if got := selected(groups, gcos.SelectGroups(d.Impact, groups)); !cmp.Equal(tt.wantSelected, got) {
				t.Fatalf("selected groups (-want +got):\n%s\nimpact: %+v", cmp.Diff(tt.wantSelected, got), d.Impact)
			}
			if diff := cmp.Diff(tt.wantUnresolved, d.Unresolved); diff != "" {
				t.Fatalf("unresolved (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantChanged, d.ChangedComponents); diff != "" {
				t.Fatalf("changed components (-want +got):\n%s", diff)
			}
			if (d.From == d.To) != (len(tt.wantChanged) == 0) {
				t.Fatalf("From %s, To %s with changes %v", d.From, d.To, d.ChangedComponents)
			}
			for _, sel := range d.Impact {
				if sel.Reason == "" {
					t.Fatalf("selector without a reason: %+v", sel)
				}
			}
		})
	}
}

func TestDiffRulesetsRowChanges(t *testing.T) {
	t.Parallel()
	from, to := baseComponents(), baseComponents()
	to.Measurements[0].Severity = gcos.Str("low")
	to.Measurements = append(to.Measurements[:1], gcos.MeasurementRule{MeasurementID: "M0", LawCode: "L-S"})
	d := gcos.DiffRulesets(from, to)
	want := gcos.RowChanges{Added: []string{"M0"}, Removed: []string{"M2"}, Modified: []string{"M1"}}
	if diff := cmp.Diff(want, d.Measurements); diff != "" {
		t.Fatalf("measurement changes (-want +got):\n%s", diff)
	}
	if !d.Scopes.Empty() || d.PolicyChanged || d.ImpactsAll() {
		t.Fatalf("unexpected changes: %+v", d)
	}
}

func TestDiffRulesetsJurisdictionFallsBackToFrom(t *testing.T) {
	t.Parallel()
	from, to := baseComponents(), baseComponents()
	// The rule of L-POL is removed together with its jurisdiction: the old row still scopes the impact.
	to.Measurements = to.Measurements[1:]
	to.Jurisdictions = to.Jurisdictions[1:]
	d := gcos.DiffRulesets(from, to)
	groups := world()
	if got := selected(groups, gcos.SelectGroups(d.Impact, groups)); !cmp.Equal([]string{"policy/route", "policy/pref"}, got) {
		t.Fatalf("selected %v, impact %+v", got, d.Impact)
	}
	if len(d.Unresolved) != 0 {
		t.Fatalf("unresolved = %v", d.Unresolved)
	}
}

func TestGroupSelectorMatches(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	g := gcos.Dimensions{ObjectClass: s("route"), SourceRegistry: s("routes"), AxisFamily: nil, Scope: s("policy")}
	tests := []struct {
		name string
		sel  gcos.GroupSelector
		d    gcos.Dimensions
		want bool
	}{
		{"all", gcos.GroupSelector{All: true}, g, true},
		{"no constraint", gcos.GroupSelector{}, g, true},
		{"scope match", gcos.GroupSelector{Scope: s("policy")}, g, true},
		{"scope mismatch", gcos.GroupSelector{Scope: s("health")}, g, false},
		{"conjunction", gcos.GroupSelector{Scope: s("policy"), ObjectClass: s("pref")}, g, false},
		{"collection", gcos.GroupSelector{SourceRegistry: s("routes"), ObjectClass: s("route")}, g, true},
		{"null axis never matches a family", gcos.GroupSelector{AxisFamily: s("geo")}, g, false},
		{"unscoped group matches any scope", gcos.GroupSelector{Scope: s("health")},
			gcos.Dimensions{ObjectClass: s("route"), Scope: s(gcos.UnscopedScope)}, true},
		{"null scope matches any scope", gcos.GroupSelector{Scope: s("health")}, gcos.Dimensions{ObjectClass: s("route")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.sel.Matches(tt.d); got != tt.want {
				t.Fatalf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

// The gate requires a group in every scope a ruleset names: its scope codes, or "unscoped" when it has none.
func TestRulesetComponentsScopeCodes(t *testing.T) {
	t.Parallel()
	two := []gcos.ScopeRow{{ScopeCode: "health"}, {ScopeCode: "approval"}}
	tests := []struct {
		name string
		c    gcos.RulesetComponents
		want []string
	}{
		{"scopes", gcos.RulesetComponents{Scopes: two}, []string{"health", "approval"}},
		{"component absent", gcos.RulesetComponents{Absent: []string{gcos.ComponentScopes}}, []string{gcos.UnscopedScope}},
		{"component empty", gcos.RulesetComponents{}, []string{gcos.UnscopedScope}},
	}
	for _, tt := range tests {
		if got := tt.c.ScopeCodes(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: ScopeCodes() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCheckRulesetVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"gov-rs-0123456789ab":    true,
		"gov-rs-abcdefabcdef":    true,
		"gov-rs-0123456789AB":    false, // uppercase
		"gov-rs-0123456789a":     false, // short
		"gov-rs-0123456789abc":   false,
		"gov-rs-zz":              false,
		"latest":                 false,
		"":                       false,
		"gov-rs-0123456789a\x00": false,
	} {
		err := gcos.CheckRulesetVersion(v)
		if (err == nil) != ok || (err != nil && gcos.ErrorCode(err) != gcos.EINVALID) {
			t.Errorf("CheckRulesetVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func TestRulesetOwnership(t *testing.T) {
	principals := []gcos.Principal{{Name: "bob", Roles: []string{gcos.RoleOperator}}, {Name: "alice", Roles: []string{gcos.RoleApprover}}}
	for _, tc := range []struct {
		name               string
		proposer, approver string
		active             bool
		principals         []gcos.Principal
		want               []string
	}{
		{"no principals: off", "x", "y", true, nil, nil},
		{"owned", "bob", "alice", true, principals, nil},
		{"GCOS's own draft, approved", gcos.SystemProposer, "alice", true, principals, nil},
		{"unknown proposer", "mallory", "alice", true, principals, []string{`proposer "mallory" is not a configured principal`}},
		{"approver without the role", "alice", "bob", true, principals, []string{`approver "bob" does not hold the approver role`}},
		{"unknown approver", "bob", "carol", true, principals, []string{`approver "carol" is not a configured principal`}},
		{"active, no approver", "bob", "", true, principals, []string{"active without an approver on record"}},
		{"a judging draft", "bob", "", false, principals, []string{"a draft judges: no approver has ratified the ruleset verdicts are read under"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reasons := gcos.RulesetOwnership(tc.proposer, tc.approver, tc.active, tc.principals)
			if ok != (len(tc.want) == 0) || !slices.Equal(reasons, tc.want) {
				t.Fatalf("RulesetOwnership = %v %q, want %q", ok, reasons, tc.want)
			}
		})
	}
}
