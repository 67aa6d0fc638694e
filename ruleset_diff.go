package gcos

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// GroupSelector says which groups a change dirties: All, or every group matching all of its non-nil fields.
type GroupSelector struct {
	All            bool    `json:"all,omitempty"`
	Scope          *string `json:"scope,omitempty"`
	ObjectClass    *string `json:"object_class,omitempty"`
	SourceRegistry *string `json:"source_registry,omitempty"`
	AxisFamily     *string `json:"axis_family,omitempty"`
	Lifecycle      *string `json:"lifecycle_status,omitempty"`
	Reason         string  `json:"reason"`
}

// Matches reports whether the selector dirties a group with dimensions d. A nil selector field is a wildcard.
// A group whose scope is null or UnscopedScope matches any Scope: with no scope registry the group stands for
// every scope, so a scoped change may affect it (over-dirtying is safe, under-dirtying is not). Other null
// dimensions match only a wildcard.
func (s GroupSelector) Matches(d Dimensions) bool {
	if s.All {
		return true
	}
	eq := func(want, have *string) bool { return want == nil || (have != nil && *have == *want) }
	scopeOK := s.Scope == nil || d.Scope == nil || *d.Scope == UnscopedScope || *d.Scope == *s.Scope
	return scopeOK && eq(s.ObjectClass, d.ObjectClass) && eq(s.SourceRegistry, d.SourceRegistry) &&
		eq(s.AxisFamily, d.AxisFamily) && eq(s.Lifecycle, d.LifecycleStatus)
}

// SelectGroups returns, in order, the indexes of the groups matched by at least one selector.
func SelectGroups(sel []GroupSelector, groups []Dimensions) []int {
	out := []int{}
	for i, g := range groups {
		if slices.ContainsFunc(sel, func(s GroupSelector) bool { return s.Matches(g) }) {
			out = append(out, i)
		}
	}
	return out
}

// selectorKey identifies a selector's match set, ignoring its reason.
func (s GroupSelector) selectorKey() string {
	if s.All {
		return "all"
	}
	f := func(p *string) string {
		if p == nil {
			return "N"
		}
		return "S" + *p
	}
	return strings.Join([]string{f(s.Scope), f(s.ObjectClass), f(s.SourceRegistry), f(s.AxisFamily)}, "\x00")
}

// RowChanges lists the keys of rows added, removed and modified between two versions of a component.
type RowChanges struct {
	Added    []string `json:"added"`
	Removed  []string `json:"removed"`
	Modified []string `json:"modified"`
}

// Empty reports whether nothing changed.
func (r RowChanges) Empty() bool { return len(r.Added)+len(r.Removed)+len(r.Modified) == 0 }

// all lists every changed key, sorted.
func (r RowChanges) all() []string {
	return sortedUnique(slices.Concat(r.Added, r.Removed, r.Modified))
}

// RulesetDiff is what `gcos ruleset diff A B` shows: what changed and which groups the change would dirty.
type RulesetDiff struct {
	From              string          `json:"from"`
	To                string          `json:"to"`
	ChangedComponents []string        `json:"changed_components"`
	Measurements      RowChanges      `json:"measurements"`
	CoverageProfile   RowChanges      `json:"coverage_profile"`
	Pivots            RowChanges      `json:"pivots"`
	Jurisdictions     RowChanges      `json:"jurisdictions"`
	Scopes            RowChanges      `json:"scopes"`
	PolicyChanged     bool            `json:"policy_changed"`
	Impact            []GroupSelector `json:"impact"`
	// Unresolved lists law codes of changed rules with no law_jurisdiction row: their groups cannot be
	// resolved, so Impact selects all groups and the caller raises ruleset_drift (SPEC §6).
	Unresolved []string `json:"unresolved_law_codes"`
}

// ImpactsAll reports whether the change dirties every group.
func (d RulesetDiff) ImpactsAll() bool {
	return slices.ContainsFunc(d.Impact, func(s GroupSelector) bool { return s.All })
}

// DiffRulesets compares two component sets and derives, fail-closed, the groups the change would dirty:
//   - a changed measurement rule → its law_code(s) → law_jurisdiction row(s) of `to` (else `from`) → selector by
//     scope / class / collection; a law with no jurisdiction row → All, and the law code in Unresolved;
//   - a changed coverage-profile row → its object class;
//   - a changed pivot row → its object class, and its axis family (old and new row both count);
//   - a changed jurisdiction row → its old and new selectors; a changed scope row → that scope;
//   - a changed verdict policy, or a component that appeared or vanished → All.
func DiffRulesets(from, to RulesetComponents) RulesetDiff {
	fe, te := encodeComponents(from), encodeComponents(to)
	d := RulesetDiff{
		From:              ComputeRuleset(from).Version,
		To:                ComputeRuleset(to).Version,
		ChangedComponents: []string{},
		Measurements:      diffRows(fe.rows["measurements"], te.rows["measurements"]),
		CoverageProfile:   diffRows(fe.rows["coverage_profile"], te.rows["coverage_profile"]),
		Pivots:            diffRows(fe.rows["pivots"], te.rows["pivots"]),
		Jurisdictions:     diffRows(fe.rows["jurisdictions"], te.rows["jurisdictions"]),
		Scopes:            diffRows(fe.rows["scopes"], te.rows["scopes"]),
		Unresolved:        []string{},
	}
	im := impact{index: map[string]int{}}
	for _, name := range Components {
		if bytes.Equal(fe.json[name], te.json[name]) {
			continue
		}
		d.ChangedComponents = append(d.ChangedComponents, name)
		switch fa, ta := from.IsAbsent(name), to.IsAbsent(name); {
		case fa && !ta:
			im.add(GroupSelector{All: true, Reason: "component " + name + " appeared"})
		case !fa && ta:
			im.add(GroupSelector{All: true, Reason: "component " + name + " vanished"})
		}
	}
	if slices.Contains(d.ChangedComponents, ComponentVerdictPolicy) {
		d.PolicyChanged = true
		im.add(GroupSelector{All: true, Reason: "verdict policy changed"})
	}

	// Measurement rules → law codes → jurisdictions.
	measurements := func(c RulesetComponents, id string) []MeasurementRule {
		if c.IsAbsent(ComponentMeasurements) {
			return nil
		}
		var out []MeasurementRule
		for _, m := range c.Measurements {
			if m.MeasurementID == id {
				out = append(out, m)
			}
		}
		return out
	}
	unresolved := []string{}
	for _, id := range d.Measurements.all() {
		var laws []string
		for _, m := range slices.Concat(measurements(from, id), measurements(to, id)) {
			laws = append(laws, m.LawCode)
		}
		for _, law := range sortedUnique(laws) {
			rows := jurisdictions(to, law)
			if len(rows) == 0 {
				rows = jurisdictions(from, law)
			}
			if len(rows) == 0 {
				unresolved = append(unresolved, law)
				im.add(GroupSelector{All: true,
					Reason: fmt.Sprintf("measurement %s changed: law %s has no law_jurisdiction row", id, law)})
				continue
			}
			for _, j := range rows {
				im.add(jurisdictionSelector(j, fmt.Sprintf("measurement %s changed (law %s)", id, law)))
			}
		}
	}
	d.Unresolved = sortedUnique(unresolved)

	for _, et := range d.CoverageProfile.all() {
		im.add(GroupSelector{ObjectClass: Str(et), Reason: "coverage profile of " + et + " changed"})
	}
	for _, code := range d.Pivots.all() {
		for _, p := range slices.Concat(pivots(from, code), pivots(to, code)) {
			reason := "pivot " + code + " changed"
			if p.EntityType == nil && p.AxisFamily == nil {
				im.add(GroupSelector{All: true, Reason: reason + " (no class or axis family to scope it)"})
			}
			if p.EntityType != nil {
				im.add(GroupSelector{ObjectClass: p.EntityType, Reason: reason})
			}
			if p.AxisFamily != nil {
				im.add(GroupSelector{AxisFamily: p.AxisFamily, Reason: reason})
			}
		}
	}
	for _, law := range d.Jurisdictions.all() {
		for _, j := range slices.Concat(jurisdictions(from, law), jurisdictions(to, law)) {
			im.add(jurisdictionSelector(j, "law_jurisdiction "+law+" changed"))
		}
	}
	for _, code := range d.Scopes.all() {
		im.add(GroupSelector{Scope: Str(code), Reason: "scope " + code + " changed"})
	}
	d.Impact = im.list
	return d
}

// impact accumulates selectors, merging the reasons of selectors that match the same groups.
type impact struct {
	list  []GroupSelector
	index map[string]int
}

// add records s, or appends its reason to an equal selector already recorded.
func (im *impact) add(s GroupSelector) {
	k := s.selectorKey()
	if i, ok := im.index[k]; ok {
		if !slices.Contains(strings.Split(im.list[i].Reason, "; "), s.Reason) {
			im.list[i].Reason += "; " + s.Reason
		}
		return
	}
	im.index[k] = len(im.list)
	im.list = append(im.list, s)
}

// jurisdictionSelector turns a law_jurisdiction row into a selector; a row with no scope, class or collection
// governs everything.
func jurisdictionSelector(j JurisdictionRow, reason string) GroupSelector {
	s := GroupSelector{Scope: j.ScopeCode, ObjectClass: j.EntityType, SourceRegistry: j.CollectionName, Reason: reason}
	if s.Scope == nil && s.ObjectClass == nil && s.SourceRegistry == nil {
		s.All = true
	}
	return s
}

// jurisdictions returns c's law_jurisdiction rows for law (none when the axis component is absent).
func jurisdictions(c RulesetComponents, law string) []JurisdictionRow {
	if c.IsAbsent(ComponentAxis) {
		return nil
	}
	var out []JurisdictionRow
	for _, j := range c.Jurisdictions {
		if j.LawCode == law {
			out = append(out, j)
		}
	}
	return out
}

// pivots returns c's pivot rows with the given code (none when the axis component is absent).
func pivots(c RulesetComponents, code string) []PivotRow {
	if c.IsAbsent(ComponentAxis) {
		return nil
	}
	var out []PivotRow
	for _, p := range c.Pivots {
		if p.PivotCode == code {
			out = append(out, p)
		}
	}
	return out
}

// diffRows compares two keyed row sets (a nil map is an absent or empty component).
func diffRows(from, to map[string][]encodedRow) RowChanges {
	rc := RowChanges{Added: []string{}, Removed: []string{}, Modified: []string{}}
	same := func(a, b []encodedRow) bool {
		return slices.EqualFunc(a, b, func(x, y encodedRow) bool { return bytes.Equal(x.json, y.json) })
	}
	for k, fr := range from {
		tr, ok := to[k]
		switch {
		case !ok:
			rc.Removed = append(rc.Removed, k)
		case !same(fr, tr):
			rc.Modified = append(rc.Modified, k)
		}
	}
	for k := range to {
		if _, ok := from[k]; !ok {
			rc.Added = append(rc.Added, k)
		}
	}
	sort.Strings(rc.Added)
	sort.Strings(rc.Removed)
	sort.Strings(rc.Modified)
	return rc
}
