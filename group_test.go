package gcos_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

func dims(v ...*string) gcos.Dimensions {
	return gcos.Dimensions{ObjectClass: v[0], SourceRegistry: v[1], AxisFamily: v[2], Scope: v[3],
		LifecycleStatus: v[4], OwnerScope: v[5]}
}

func TestGroupKeyFormatAndDeterminism(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	d := dims(s("route"), s("routes"), s("geo"), s("policy"), s("active"), nil)
	k := gcos.GroupKey(d)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(k) {
		t.Fatalf("GroupKey = %q, want 32 lowercase hex digits", k)
	}
	// A copy with fresh pointers hashes the same: only values count.
	if k2 := gcos.GroupKey(dims(s("route"), s("routes"), s("geo"), s("policy"), s("active"), nil)); k2 != k {
		t.Fatalf("GroupKey not deterministic: %q vs %q", k, k2)
	}
	// Pinned so SQL implementations of the same encoding can be checked against it.
	if got, want := string(gcos.CanonicalTuple(d)), "S5:routeS6:routesS3:geoS6:policyS6:activeN"; got != want {
		t.Fatalf("CanonicalTuple = %q, want %q", got, want)
	}
}

func TestGroupKeyDistinguishes(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	tests := []struct {
		name string
		a, b gcos.Dimensions
	}{
		{"null vs empty", dims(nil, nil, nil, nil, nil, nil), dims(s(""), nil, nil, nil, nil, nil)},
		{"empty vs the word null", dims(s(""), nil, nil, nil, nil, nil), dims(s("null"), nil, nil, nil, nil, nil)},
		{"null vs the word null", dims(nil, nil, nil, nil, nil, nil), dims(s("null"), nil, nil, nil, nil, nil)},
		{"null vs N", dims(nil, nil, nil, nil, nil, nil), dims(s("N"), nil, nil, nil, nil, nil)},
		{"field order", dims(s("a"), s("b"), nil, nil, nil, nil), dims(s("b"), s("a"), nil, nil, nil, nil)},
		{"value moved to next field", dims(s("a"), nil, nil, nil, nil, nil), dims(nil, s("a"), nil, nil, nil, nil)},
		{"separator inside value", dims(s("a:b"), s("c"), nil, nil, nil, nil), dims(s("a"), s("b:c"), nil, nil, nil, nil)},
		{"encoding lookalike", dims(s("aS1:b"), nil, nil, nil, nil, nil), dims(s("a"), s("b"), nil, nil, nil, nil)},
		{"null tag lookalike", dims(s("xN"), nil, nil, nil, nil, nil), dims(s("x"), nil, nil, nil, nil, nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if string(gcos.CanonicalTuple(tt.a)) == string(gcos.CanonicalTuple(tt.b)) {
				t.Fatalf("canonical tuples collide: %q", gcos.CanonicalTuple(tt.a))
			}
			if gcos.GroupKey(tt.a) == gcos.GroupKey(tt.b) {
				t.Fatal("group keys collide")
			}
		})
	}
}

func TestNewGroup(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	d := dims(s("route"), s("routes"), nil, s("policy"), s("active"), s("GOV-SIV"))
	g := gcos.NewGroup(d, 7)
	want := gcos.Group{
		Key: gcos.GroupKey(d), Dimensions: d, MemberCount: 7,
		DependsOn: gcos.DependsOn{Collections: []string{"routes"}, RuleScopes: []string{"policy"}, AxisFamilies: []string{}},
	}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Fatalf("NewGroup (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(g.DependsOn)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"collections":["routes"],"rule_scopes":["policy"],"axis_families":[]}` {
		t.Fatalf("depends_on JSON = %s", got)
	}
}
