package gcos

// ChangeSubject is what one change row names, resolved by the intake against the registries and the inventory:
// the input of RouteChange.
type ChangeSubject struct {
	Kind ChangeKind
	// Registry is the registry word the row is about (a collection, pivot, ownership or exception row…), or ""
	// when the row is about one object of class Class named by Code.
	Registry string
	Code     string // what the row names: a collection, a pivot code, an ownership or exception id, an object code
	// Resolved by the intake: the class, collection and scope an ownership or exception row names, the class a
	// pivot row names, the collection of an object row's class.
	Class, Collection, Scope string
	// Object is the object's anchor base group now (an inherited child's is its anchor's); nil when the inventory
	// does not hold the object.
	Object *BaseGroup
	// Moved lists the other base groups of the object's class in its registry whose member count now differs
	// from the one their groups were last judged on: the lifecycle an object left is one of them (the row does
	// not say which).
	Moved []BaseGroup
}

// Route is what one change dirties: the groups any selector matches. Ensure names a base whose groups must be in
// the registry (an object's current base: the group it moved into may be new). Fallback marks a change that could
// not be placed precisely, so it dirties every group it might affect; the intake counts and logs it.
type Route struct {
	Selectors []GroupSelector
	Ensure    *BaseGroup
	Fallback  bool
}

// RouteChange maps a change to the groups it provably affects, the smallest set doc 40 §40.7 allows, and never
// silently more or less: a kind it does not know is an error, not "dirty everything".
//   - object_born: the object's own group in every scope (its anchor's, for an inherited child).
//   - any other object-level kind (registered, retired/superseded/merged, count, source…): the object's current
//     group and the groups of its class and registry whose member count moved (the one it left) in every scope.
//     An object the inventory does not hold: every group of its class (fallback).
//   - collection, count or source changes of a registry: that registry's groups.
//   - an axis introduced: the groups of the class the pivot names and of the family it names.
//   - ownership or exception changes: the groups of the scope and class or collection the row names; a row that
//     cannot be resolved (deleted, malformed id) dirties every group (fallback, fail closed).
//   - policy and ruleset changes dirty nothing here: the activation's diff dirties exactly the rules' scope.
func RouteChange(s ChangeSubject) (Route, error) {
	if _, err := ParseChangeKind(string(s.Kind)); err != nil {
		return Route{}, err
	}
	reason := DirtyReasonFor(s.Kind)
	sel := func(g GroupSelector) GroupSelector { g.Reason = reason; return g }
	opt := func(v string) *string {
		if v == "" {
			return nil
		}
		return Str(v)
	}
	switch {
	case s.Kind == ChangePolicy || s.Kind == ChangeRuleset:
		return Route{}, nil
	case s.Kind == ChangeAuthority:
		if s.Scope == "" && s.Class == "" && s.Collection == "" {
			return Route{Selectors: []GroupSelector{sel(GroupSelector{All: true})}, Fallback: true}, nil
		}
		// A class row wins over a collection row for the same scope (as ownership resolves), so a row naming a
		// class affects that class in every registry, and a row naming only a collection every class in it.
		if s.Class != "" {
			return Route{Selectors: []GroupSelector{sel(GroupSelector{Scope: opt(s.Scope), ObjectClass: Str(s.Class)})}}, nil
		}
		return Route{Selectors: []GroupSelector{sel(GroupSelector{Scope: opt(s.Scope), SourceRegistry: opt(s.Collection)})}}, nil
	case s.Registry != "" && s.Kind == ChangeAxisIntroduced:
		var out []GroupSelector
		if s.Class != "" {
			out = append(out, sel(GroupSelector{ObjectClass: Str(s.Class)}))
		}
		if s.Code != "" {
			// An axis row names its family; a pivot code may equal a family or a class name.
			out = append(out, sel(GroupSelector{AxisFamily: Str(s.Code)}), sel(GroupSelector{ObjectClass: Str(s.Code)}))
		}
		if len(out) == 0 {
			return Route{}, Errorf(EINVALID, "%s row names neither a class nor a family", s.Registry)
		}
		return Route{Selectors: out}, nil
	case s.Registry != "" && (s.Kind == ChangeCollection || s.Kind == ChangeCount || s.Kind == ChangeSource):
		if s.Code == "" {
			return Route{}, Errorf(EINVALID, "%s %s row names no collection", s.Registry, s.Kind)
		}
		return Route{Selectors: []GroupSelector{sel(GroupSelector{SourceRegistry: Str(s.Code)})}}, nil
	case s.Registry != "":
		return Route{}, Errorf(EINVALID, "%s is neither a registry word nor a known class (%s is a change of one object)", Quote(s.Registry), s.Kind)
	case s.Class == "":
		return Route{}, Errorf(EINVALID, "%s row names no class", s.Kind)
	case s.Object == nil:
		return Route{Selectors: []GroupSelector{sel(GroupSelector{ObjectClass: Str(s.Class)})}, Fallback: true}, nil
	default:
		b := *s.Object
		base := func(b BaseGroup) GroupSelector {
			return sel(GroupSelector{ObjectClass: Str(b.ObjectClass), SourceRegistry: Str(b.SourceRegistry), Lifecycle: Str(b.LifecycleStatus)})
		}
		out := []GroupSelector{base(b)}
		if s.Kind != ChangeObjectBorn {
			for _, m := range s.Moved {
				if m != b {
					out = append(out, base(m))
				}
			}
		}
		return Route{Selectors: out, Ensure: &b}, nil
	}
}
