package gcos_test

import (
	"reflect"
	"testing"

	"gcos"
)

// TestRouteChange: one row per change kind (and per way a row can name its subject), with the exact selectors,
// the base to record and whether the change fell back to its whole class.
func TestRouteChange(t *testing.T) {
	obj := &gcos.BaseGroup{ObjectClass: "order", SourceRegistry: "orders", LifecycleStatus: "retired"}
	active := gcos.BaseGroup{ObjectClass: "order", SourceRegistry: "orders", LifecycleStatus: "active"}
	s := gcos.Str
	tests := []struct {
		name     string
		in       gcos.ChangeSubject
		want     []gcos.GroupSelector
		ensure   *gcos.BaseGroup
		fallback bool
		err      bool
	}{
		{name: "born: the object's own group", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectBorn, Class: "order", Code: "o-1", Object: obj, Moved: []gcos.BaseGroup{active}},
			want:   []gcos.GroupSelector{{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("retired"), Reason: "handoff:object_born"}},
			ensure: obj},
		{name: "retired: the group it is in and the one it left", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectRetired, Class: "order", Code: "o-1", Object: obj, Moved: []gcos.BaseGroup{active, *obj}},
			want: []gcos.GroupSelector{{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("retired"), Reason: "handoff:object_retired"},
				{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("active"), Reason: "handoff:object_retired"}},
			ensure: obj},
		{name: "retired, no count moved yet: the group it is in", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectRetired, Class: "order", Code: "o-1", Object: obj},
			want:   []gcos.GroupSelector{{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("retired"), Reason: "handoff:object_retired"}},
			ensure: obj},
		{name: "registered (a re-birth)", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectRegistered, Class: "order", Code: "o-1", Object: obj, Moved: []gcos.BaseGroup{active}},
			want: []gcos.GroupSelector{{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("retired"), Reason: "handoff:object_registered"},
				{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("active"), Reason: "handoff:object_registered"}},
			ensure: obj},
		{name: "object count changed", in: gcos.ChangeSubject{Kind: gcos.ChangeCount, Class: "order", Code: "o-1", Object: obj},
			want:   []gcos.GroupSelector{{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("retired"), Reason: "handoff:count_changed"}},
			ensure: obj},
		{name: "object source changed", in: gcos.ChangeSubject{Kind: gcos.ChangeSource, Class: "order", Code: "o-1", Object: obj},
			want:   []gcos.GroupSelector{{ObjectClass: s("order"), SourceRegistry: s("orders"), Lifecycle: s("retired"), Reason: "handoff:source_changed"}},
			ensure: obj},
		{name: "object not in the inventory: the whole class, counted", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectRetired, Class: "order", Code: "gone"},
			want: []gcos.GroupSelector{{ObjectClass: s("order"), Reason: "handoff:object_retired"}}, fallback: true},
		{name: "collection changed", in: gcos.ChangeSubject{Kind: gcos.ChangeCollection, Registry: "collection", Code: "orders"},
			want: []gcos.GroupSelector{{SourceRegistry: s("orders"), Reason: "handoff:collection_changed"}}},
		{name: "registry count changed", in: gcos.ChangeSubject{Kind: gcos.ChangeCount, Registry: "collection", Code: "orders"},
			want: []gcos.GroupSelector{{SourceRegistry: s("orders"), Reason: "handoff:count_changed"}}},
		{name: "registry source changed", in: gcos.ChangeSubject{Kind: gcos.ChangeSource, Registry: "collection", Code: "orders"},
			want: []gcos.GroupSelector{{SourceRegistry: s("orders"), Reason: "handoff:source_changed"}}},
		{name: "axis introduced by a pivot", in: gcos.ChangeSubject{Kind: gcos.ChangeAxisIntroduced, Registry: "pivot", Code: "p-1", Class: "order"},
			want: []gcos.GroupSelector{{ObjectClass: s("order"), Reason: "axis"}, {AxisFamily: s("p-1"), Reason: "axis"}, {ObjectClass: s("p-1"), Reason: "axis"}}},
		{name: "ownership of a class in a scope", in: gcos.ChangeSubject{Kind: gcos.ChangeAuthority, Registry: "ownership", Code: "7", Scope: "health", Class: "order", Collection: "orders"},
			want: []gcos.GroupSelector{{Scope: s("health"), ObjectClass: s("order"), Reason: "authority"}}},
		{name: "ownership of a collection in a scope", in: gcos.ChangeSubject{Kind: gcos.ChangeAuthority, Registry: "ownership", Code: "8", Scope: "health", Collection: "orders"},
			want: []gcos.GroupSelector{{Scope: s("health"), SourceRegistry: s("orders"), Reason: "authority"}}},
		{name: "ownership of a class in every scope", in: gcos.ChangeSubject{Kind: gcos.ChangeAuthority, Registry: "ownership", Code: "9", Class: "order"},
			want: []gcos.GroupSelector{{ObjectClass: s("order"), Reason: "authority"}}},
		{name: "ownership of a collection in every scope", in: gcos.ChangeSubject{Kind: gcos.ChangeAuthority, Registry: "ownership", Code: "10", Collection: "orders"},
			want: []gcos.GroupSelector{{SourceRegistry: s("orders"), Reason: "authority"}}},
		{name: "unresolvable authority row: every group, counted", in: gcos.ChangeSubject{Kind: gcos.ChangeAuthority, Registry: "exception", Code: "EXC-gone"},
			want: []gcos.GroupSelector{{All: true, Reason: "authority"}}, fallback: true},
		{name: "policy: the activation's diff dirties", in: gcos.ChangeSubject{Kind: gcos.ChangePolicy, Registry: "measurement", Code: "M-1"}},
		{name: "ruleset: the activation's diff dirties", in: gcos.ChangeSubject{Kind: gcos.ChangeRuleset, Registry: "ruleset", Code: "gov-rs-1"}},
		{name: "unknown kind", in: gcos.ChangeSubject{Kind: "object_teleported", Class: "order", Object: obj}, err: true},
		{name: "object kind on a registry word", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectRetired, Registry: "collection", Code: "orders"}, err: true},
		{name: "object row with no class", in: gcos.ChangeSubject{Kind: gcos.ChangeObjectBorn, Code: "o-1"}, err: true},
		{name: "collection change naming nothing", in: gcos.ChangeSubject{Kind: gcos.ChangeCollection, Registry: "collection"}, err: true},
		{name: "axis row naming nothing", in: gcos.ChangeSubject{Kind: gcos.ChangeAxisIntroduced, Registry: "pivot"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gcos.RouteChange(tt.in)
			if tt.err {
				if gcos.ErrorCode(err) != gcos.EINVALID {
					t.Fatalf("RouteChange = %+v, %v; want EINVALID", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Selectors, tt.want) {
				t.Errorf("selectors = %s, want %s", show(got.Selectors), show(tt.want))
			}
			if !reflect.DeepEqual(got.Ensure, tt.ensure) || got.Fallback != tt.fallback {
				t.Errorf("ensure %v fallback %v, want %v %v", got.Ensure, got.Fallback, tt.ensure, tt.fallback)
			}
		})
	}
	// Every kind is routed somewhere (or deliberately nowhere) without an error for a well-formed object row.
	for _, k := range gcos.ChangeKinds {
		if _, err := gcos.RouteChange(gcos.ChangeSubject{Kind: k, Class: "order", Object: obj}); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

func show(sels []gcos.GroupSelector) string {
	out := "["
	for _, s := range sels {
		out += "{"
		for _, f := range []struct {
			n string
			v *string
		}{{"scope", s.Scope}, {"class", s.ObjectClass}, {"registry", s.SourceRegistry}, {"axis", s.AxisFamily}, {"lifecycle", s.Lifecycle}} {
			if f.v != nil {
				out += f.n + "=" + *f.v + " "
			}
		}
		if s.All {
			out += "all "
		}
		out += s.Reason + "}"
	}
	return out + "]"
}
