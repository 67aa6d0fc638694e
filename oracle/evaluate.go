package oracle

import (
	"slices"
	"sort"
	"time"

	"gcos"
)

// Group is the reference's verdict on one group: what its candidate row must say.
type Group struct {
	Key string `json:"group_key"`
	gcos.Dimensions
	Members          int64                `json:"member_count"`
	Verdict          gcos.Verdict         `json:"verdict"`
	InputQuality     string               `json:"input_quality_state"`
	RiskClass        string               `json:"risk_class"`
	CoverageRequired bool                 `json:"coverage_required"`
	Coverage         gcos.CoverageOutcome `json:"coverage_outcome"` // "" unless relevant
}

// Object is the reference's object row: an object that must be materialized, and what its row must say.
type Object struct {
	Key              string               `json:"candidate_key"`
	Ref              string               `json:"object_ref"`
	Collection       string               `json:"collection"`
	Reason           string               `json:"materialization_reason"`
	GroupKey         string               `json:"group_key"`
	Scope            string               `json:"scope"`
	Verdict          gcos.Verdict         `json:"verdict"`
	InputQuality     string               `json:"input_quality_state"`
	RiskClass        string               `json:"risk_class"`
	CoverageRequired bool                 `json:"coverage_required"`
	Coverage         gcos.CoverageOutcome `json:"coverage_outcome"`
}

// Reference is everything a from-scratch evaluation derives from one substrate and one ruleset.
type Reference struct {
	At             time.Time
	RulesetVersion string
	Scopes         []string
	Only           []string               // the collections evaluated (nil: all)
	Groups         map[string]*Group      // by group key; only groups with members
	Objects        map[string]*Object     // object rows by candidate key
	Ledgers        map[string]gcos.Ledger // only when every collection was evaluated
	Births         int64                  // the births counted

	placed     map[string]placement // by object reference, for the births read one by one
	policy     gcos.VerdictPolicy
	lowRisk    []string
	ttl        gcos.TTLConfig
	sub        Substrate
	objectKeys []string // object references with an object row, sorted
	refs       []string // the references of the births read one by one, sorted
}

// placement is where one birth read one by one sits: its group in each scope (in Scopes order, shared by its base
// group), its object row, and the birth (an index into the substrate's births).
type placement struct {
	groups []string
	object string // candidate key of its object row, or ""
	birth  int
}

// base names a base group.
type base struct{ class, registry, lifecycle string }

// Options are the configuration the reference honours: the same that configures GCOS.
type Options struct {
	ObjectRiskClasses []string       // high-risk write-path classes with these risk classes get object rows
	LowRiskClasses    []string       // gate: risk classes that are not high risk
	TTL               gcos.TTLConfig // read-time decay (a fresh verdict is clean; the TTL only sets stale_after)
}

// RowClasses are the classes whose roots have an object row by their class alone (SPEC §7): independently
// authoritative, or a high-risk write path. The substrate's read takes their births one by one.
func RowClasses(rs gcos.RulesetComponents, opts Options) []string {
	var out []string
	if rs.IsAbsent(gcos.ComponentCoverageProfile) {
		return out
	}
	for _, p := range rs.CoverageProfile {
		risk := gcos.UnknownRisk
		if p.RiskClass != nil && *p.RiskClass != "" {
			risk = *p.RiskClass
		}
		if p.IndependentlyAuthoritative || (p.WritePath && slices.Contains(opts.ObjectRiskClasses, risk)) {
			out = append(out, p.EntityType)
		}
	}
	return out
}

// Evaluate derives the reference from the substrate under ruleset components rs (version names them). It reads
// no GCOS state: groups, verdicts, coverage, object rows and the ledger are computed from the rows alone.
func Evaluate(sub Substrate, version string, rs gcos.RulesetComponents, opts Options) *Reference {
	ref := &Reference{At: sub.At, RulesetVersion: version, Scopes: rs.ScopeCodes(), Only: sub.Only, Groups: map[string]*Group{},
		Objects: map[string]*Object{}, Ledgers: map[string]gcos.Ledger{}, placed: make(map[string]placement, len(sub.Births)),
		sub: sub, policy: rs.Policy, lowRisk: opts.LowRiskClasses, ttl: opts.TTL}
	profile := map[string]gcos.CoverageProfileRow{}
	if !rs.IsAbsent(gcos.ComponentCoverageProfile) {
		for _, p := range rs.CoverageProfile {
			profile[p.EntityType] = p
		}
	}

	// Groups: one per base (the class, registry and lifecycle of each birth's anchor), in every scope.
	groupOf := make(map[base][]string, len(sub.Bases))
	for _, bs := range sub.Bases {
		ref.Births += bs.Members
		k := base{bs.Class, bs.Collection, bs.Lifecycle}
		for _, scope := range ref.Scopes {
			d := gcos.Dimensions{ObjectClass: gcos.Str(bs.Class), SourceRegistry: gcos.Str(bs.Collection),
				AxisFamily: axisFamily(rs, bs.Class), Scope: gcos.Str(scope), LifecycleStatus: gcos.Str(bs.Lifecycle)}
			if sub.OwnershipPresent && scope != gcos.UnscopedScope {
				d.OwnerScope = owner(sub.Ownership, scope, bs.Class, bs.Collection)
			}
			g := ref.judge(sub, profile, d, bs.Members)
			ref.Groups[g.Key] = &g
			groupOf[k] = append(groupOf[k], g.Key)
		}
	}

	// Object rows (SPEC §7): an open input finding on the object, an exception naming it, or its class (independently
	// authoritative, or high-risk write path) for an object that is not an inherited child. Every birth that may have
	// one was read one by one, in id order: when two share a candidate key, the first holds the row.
	named := map[[2]string][]gcos.ExceptionRow{}
	for _, x := range sub.Exceptions {
		if x.CollectionName != nil && x.EntityCode != nil && x.Approved(sub.At) {
			k := [2]string{*x.CollectionName, *x.EntityCode}
			named[k] = append(named[k], x)
		}
	}
	for i, b := range sub.Births {
		groups, ok := groupOf[base{b.AnchorClass, b.Collection, b.AnchorStatus}]
		if !ok {
			continue // cannot happen at one instant: every birth is counted in its anchor's base
		}
		p := placement{groups: groups, birth: i}
		if o := ref.objectRow(sub, profile, opts, b, p.groups, named[[2]string{b.Collection, b.Code}]); o != nil {
			if _, dup := ref.Objects[o.Key]; !dup {
				ref.Objects[o.Key] = o
				p.object = o.Key
				ref.objectKeys = append(ref.objectKeys, b.Ref())
			}
		}
		ref.placed[b.Ref()] = p
		ref.refs = append(ref.refs, b.Ref())
	}
	sort.Strings(ref.refs)
	sort.Strings(ref.objectKeys)
	if sub.Only != nil {
		return ref // the ledger is the whole estate's: a slice cannot close it
	}

	// The ledger, in objects: every birth once per scope, in its object row's bucket in that row's scope and in its
	// group's bucket elsewhere (SPEC §12).
	for si, scope := range ref.Scopes {
		l := gcos.Ledger{Scope: scope, Total: ref.Births}
		for _, bs := range sub.Bases {
			g := ref.Groups[groupOf[base{bs.Class, bs.Collection, bs.Lifecycle}][si]]
			l.Add(gcos.BucketFor(g.Verdict, g.Coverage), bs.Members)
		}
		for _, o := range ref.Objects {
			if o.Scope == scope {
				g := ref.Groups[o.GroupKey]
				l.Add(gcos.BucketFor(g.Verdict, g.Coverage), -1)
				l.Add(gcos.BucketFor(o.Verdict, o.Coverage), 1)
			}
		}
		ref.Ledgers[scope] = l
	}
	return ref
}

// judge evaluates one group with the verdict policy, as a scan at the reference's instant would.
func (ref *Reference) judge(sub Substrate, profile map[string]gcos.CoverageProfileRow, d gcos.Dimensions, members int64) Group {
	class, coll := *d.ObjectClass, *d.SourceRegistry
	f := gcos.GroupFacts{LifecycleStatus: d.LifecycleStatus, MemberCount: members}
	quality := gcos.InputAccepted
	if c, ok := sub.Collections[coll]; ok {
		f.CoverageStatus, f.ScopeClass = c.CoverageStatus, c.ScopeClass
	} else {
		quality = gcos.InputBirthOrRegistryMissing
	}
	if !sub.Classes[class] {
		quality = gcos.InputBirthOrRegistryMissing
	}
	risk, required := gcos.UnknownRisk, true // no profile: unknown risk, coverage required (fail closed)
	if p, ok := profile[class]; ok {
		f.Privacy, f.RiskClass, f.CoverageRequired = p.Privacy, p.RiskClass, p.CoverageRequired
		if p.RiskClass != nil && *p.RiskClass != "" {
			risk = *p.RiskClass
		}
		if p.CoverageRequired != nil {
			required = *p.CoverageRequired
		}
	}
	f.InputQuality = gcos.Str(string(quality))
	if quality == gcos.InputAccepted && len(ref.policy.CheckVocabulary(f)) > 0 {
		f.InputQuality = gcos.Str(string(gcos.InputInvalidSchema))
	}
	g := Group{Key: gcos.GroupKey(d), Dimensions: d, Members: members, Verdict: ref.policy.Evaluate(f).Verdict,
		InputQuality: *f.InputQuality, RiskClass: risk}
	// A settled verdict (not relevant, private, deferred, retired) needs no owner; an undecided one keeps the
	// class's requirement.
	g.CoverageRequired = required && !slices.Contains([]gcos.Verdict{gcos.VerdictNotRelevant, gcos.VerdictClass0,
		gcos.VerdictDeferredBirth, gcos.VerdictRetired}, g.Verdict)
	if g.Verdict == gcos.VerdictRelevant {
		g.Coverage = gcos.ResolveCoverage(d.OwnerScope, groupException(sub, d))
	}
	return g
}

// groupException reports whether an exception on the whole group (no entity_code) holds now; a null selector
// matches any value.
func groupException(sub Substrate, d gcos.Dimensions) bool {
	match := func(sel, v *string) bool { return sel == nil || (v != nil && *sel == *v) }
	for _, x := range sub.Exceptions {
		if x.EntityCode == nil && x.Holds(sub.At, nil) == nil &&
			match(x.ScopeCode, d.Scope) && match(x.EntityType, d.ObjectClass) && match(x.CollectionName, d.SourceRegistry) {
			return true
		}
	}
	return false
}

// objectRow is the object row b must have, or nil. groups are b's groups in Scopes order.
func (ref *Reference) objectRow(sub Substrate, profile map[string]gcos.CoverageProfileRow, opts Options, b Birth,
	groups []string, exceptions []gcos.ExceptionRow) *Object {
	reason, scope := "", 0
	p := profile[b.AnchorClass]
	switch {
	case b.Parent != nil: // an inherited child is represented by its anchor's group, unless named one by one
	case p.IndependentlyAuthoritative:
		reason = gcos.ObjectRowIndependentlyAuthoritative
	case p.WritePath && slices.Contains(opts.ObjectRiskClasses, ref.Groups[groups[0]].RiskClass):
		reason = gcos.ObjectRowHighRiskWritePath
	}
	// An exception naming the object: the one that holds in a scope of the ruleset (lowest scope, then id), else
	// the first naming such a scope. Only the one that holds suppresses, and only in its own scope.
	var holds *gcos.ExceptionRow
	chosen := -1
	if len(exceptions) > 0 {
		reason = gcos.ObjectRowException
		xs := slices.Clone(exceptions)
		sort.Slice(xs, func(i, j int) bool {
			if deref(xs[i].ScopeCode) != deref(xs[j].ScopeCode) {
				return deref(xs[i].ScopeCode) < deref(xs[j].ScopeCode)
			}
			return xs[i].ExceptionID < xs[j].ExceptionID
		})
		fp, ok := sub.Fingerprints[[2]string{b.Collection, b.Code}]
		var current *string
		if ok {
			current = &fp
		}
		for _, x := range xs {
			i := slices.Index(ref.Scopes, deref(x.ScopeCode))
			if i < 0 {
				continue
			}
			if chosen < 0 {
				chosen = i
			}
			if x.Holds(sub.At, current) == nil {
				chosen, holds = i, &x
				break
			}
		}
		if chosen >= 0 {
			scope = chosen
		}
	}
	finding, held := sub.InputFindings[b.Key()]
	if !held {
		finding, held = sub.InputFindings[b.Ref()]
	}
	if held {
		reason = gcos.ObjectRowOpenFinding
	}
	if reason == "" {
		return nil
	}
	g := ref.Groups[groups[scope]]
	o := &Object{Key: b.Key(), Ref: b.Ref(), Collection: b.Collection, Reason: reason, GroupKey: g.Key, Scope: ref.Scopes[scope], Verdict: g.Verdict,
		InputQuality: g.InputQuality, RiskClass: g.RiskClass, CoverageRequired: g.CoverageRequired, Coverage: g.Coverage}
	switch {
	case held:
		// An open input finding holds the object in needs_input until it closes (SPEC §7).
		o.Verdict, o.InputQuality, o.Coverage = gcos.HoldForInput(reason).Verdict, string(finding), ""
		o.CoverageRequired = p.CoverageRequired == nil || *p.CoverageRequired
	case holds != nil && g.Verdict == gcos.VerdictRelevant:
		o.Coverage = gcos.CoverageApprovedException
	}
	return o
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// axisFamily is the smallest axis family the ruleset's axis registry gives the class, or nil.
func axisFamily(rs gcos.RulesetComponents, class string) *string {
	if rs.IsAbsent(gcos.ComponentAxis) {
		return nil
	}
	var best *string
	for _, p := range rs.Pivots {
		if p.EntityType != nil && *p.EntityType == class && p.AxisFamily != nil && (best == nil || *p.AxisFamily < *best) {
			best = p.AxisFamily
		}
	}
	return best
}

// owner is the owner of (scope, class, collection) by the one owner resolver GCOS uses (gcos.ResolveOwnership):
// its rules are pure and table-tested where they live, so the reference does not keep a copy of them.
func owner(rows []gcos.OwnershipRow, scope, class, collection string) *string {
	return gcos.ResolveOwnership(rows, scope, class, collection).Owner
}

// Gate is the decision the gate must take on the object (collection:code) for action, judged from the reference's
// rows exactly as the gate judges stored ones: a fresh verdict is clean, so only the verdicts, risk and coverage
// decide. An object with no birth is blocked; so is one the read did not take one by one (ask for it with
// ReadOptions.Also).
func (ref *Reference) Gate(object, action string) gcos.ObjectGateDecision {
	p, ok := ref.placed[object]
	if !ok {
		return gcos.GateObject(gcos.ObjectGateInput{Action: action})
	}
	in := gcos.ObjectGateInput{Action: action, Scopes: ref.Scopes}
	row := func(source, scope string, v gcos.Verdict, risk string, required bool, coverage gcos.CoverageOutcome, quality string) gcos.GateInput {
		staleAfter := ref.At.Add(ref.ttl.TTLFor(risk))
		r := gcos.CandidateRow{SnapshotRef: 1, RulesetVersion: ref.RulesetVersion, ScanTime: ref.At, Verdict: v,
			InputQualityState: &quality, StaleAfter: &staleAfter, RecomputeStatus: gcos.RecomputeOK, RiskClass: risk,
			CoverageRequired: required, LifecycleStatus: gcos.LifecycleActive}
		if v == gcos.VerdictRelevant {
			r.CoverageScanRef = gcos.Str("reference")
		}
		high := gcos.IsHighRisk(risk, ref.lowRisk)
		state := gcos.RulesetState{ActiveVersion: ref.RulesetVersion, RowRulesetStatus: gcos.RulesetActive}
		return gcos.GateInput{Action: action, Found: true, Source: source, Row: r, Scope: scope, HighRisk: high,
			RulesetStatus: gcos.RulesetActive, SnapshotExists: true, Coverage: coverage,
			Effective: gcos.Effective(r, ref.At, state, true, high)}
	}
	var risks []string
	if p.object != "" {
		o := ref.Objects[p.object]
		in.Rows = append(in.Rows, row(gcos.GateSourceObject, o.Scope, o.Verdict, o.RiskClass, o.CoverageRequired, o.Coverage, o.InputQuality))
		risks = append(risks, o.RiskClass)
	}
	for _, key := range p.groups {
		g := ref.Groups[key]
		in.Rows = append(in.Rows, row(gcos.GateSourceGroup, deref(g.Scope), g.Verdict, g.RiskClass, g.CoverageRequired, g.Coverage, g.InputQuality))
		risks = append(risks, g.RiskClass)
	}
	if ref.RulesetVersion == "" {
		return gcos.GateObject(gcos.ObjectGateInput{Action: action})
	}
	b := ref.sub.Births[p.birth]
	_, registered := ref.sub.Collections[b.Collection]
	in.Problems = ref.policy.CheckObject(gcos.ObjectBirth{Object: b.Ref(), Class: b.AnchorClass, Collection: b.Collection,
		LifecycleStatus: b.AnchorStatus, OwnLifecycleStatus: b.Status, ParentCode: b.Parent, ParentFound: b.Parent == nil || b.ParentFound,
		CollectionRegistered: registered, ClassRegistered: ref.sub.Classes[b.AnchorClass]}, risks)
	return gcos.GateObject(in)
}

// ObjectsWithRows lists the references of the objects that have an object row, sorted.
func (ref *Reference) ObjectsWithRows() []string { return ref.objectKeys }

// ObjectRefs lists the references of the births read one by one, sorted.
func (ref *Reference) ObjectRefs() []string { return ref.refs }
