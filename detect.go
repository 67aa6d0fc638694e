package gcos

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Coverage detections (doc 24 §4, issue family E): what the coverage scans find wrong with who answers for what. Each
// detection is one coalesced finding (one open row per condition, its counts updated), raised by the scan that sees
// the condition and resolved by the scan that sees it gone (announced as governance.coverage.gap_resolved).
//
//   - orphan: a relevant group with members and no owner in its scope (the group carries its scope);
//   - owner gap: a scope in which a class has relevant groups with members and not one of them has an owner;
//   - island: an active ownership row, or an approved exception, naming a scope, class or collection no registry
//     holds: an authority over something outside the one roof (routed to the council);
//   - phantom: an approved exception naming one object that has no birth.

// CoverageGroup is what the detections read of one live group under the current ruleset.
type CoverageGroup struct {
	GroupKey, Scope, ObjectClass, SourceRegistry string
	Verdict                                      Verdict         // the recorded verdict
	Coverage                                     CoverageOutcome // the coverage outcome at read time; "" when not relevant
	RiskClass                                    string
	Members                                      int64
}

// Detection is one condition a coverage scan found: the finding to hold open for it.
type Detection struct {
	Type     IssueType
	Subject  string
	Evidence map[string]any
}

// Key is the detection's coalesce key.
func (d Detection) Key() string { return CoalesceKey(d.Type, d.Subject) }

// Proposed actions a detection names (doc 41 §41.5 proposed_action_code): what would close it, never an instruction.
const (
	ActionAssignOwner    = "assign_owner"
	ActionRetireRow      = "retire_registry_row"
	ActionRevokeOrRebind = "revoke_or_rebind_exception"
)

// IsOrphan reports whether g is an orphan: relevant, with members, no owner and no exception in its scope.
func (g CoverageGroup) IsOrphan() bool {
	return g.Verdict == VerdictRelevant && g.Coverage == CoverageOrphan && g.Members > 0
}

// OrphanDetection is the finding of an orphan group: per group (so per scope), with its object count and risk.
func OrphanDetection(g CoverageGroup) Detection {
	return Detection{Type: IssueCoverageOrphan, Subject: g.GroupKey, Evidence: map[string]any{
		"group_key": g.GroupKey, "scope": g.Scope, "object_type": g.ObjectClass, "collection_name": g.SourceRegistry,
		"objects": g.Members, "risk_class": g.RiskClass, "gap_type": GapType(IssueCoverageOrphan), "proposed_action": ProposedAction(IssueCoverageOrphan)}}
}

// DetectCoverageGaps derives the orphan and owner-gap detections of the live groups, in a stable order.
func DetectCoverageGaps(groups []CoverageGroup) []Detection {
	type classScope struct{ scope, class string }
	type tally struct {
		orphanGroups, objects int64
		owned                 bool
		risks                 []string
	}
	var out []Detection
	tallies := map[classScope]*tally{}
	for _, g := range groups {
		if g.Verdict != VerdictRelevant || g.Members <= 0 {
			continue
		}
		k := classScope{g.Scope, g.ObjectClass}
		t := tallies[k]
		if t == nil {
			t = &tally{}
			tallies[k] = t
		}
		switch g.Coverage {
		case CoverageCovered:
			t.owned = true
		case CoverageOrphan:
			t.orphanGroups++
			t.objects += g.Members
			if !slices.Contains(t.risks, g.RiskClass) {
				t.risks = append(t.risks, g.RiskClass)
			}
			out = append(out, OrphanDetection(g))
		}
	}
	for k, t := range tallies {
		if t.owned || t.orphanGroups == 0 {
			continue
		}
		slices.Sort(t.risks)
		out = append(out, Detection{Type: IssueCoverageOwnerGap, Subject: k.scope + ":" + k.class, Evidence: map[string]any{
			"scope": k.scope, "object_type": k.class, "groups": t.orphanGroups, "objects": t.objects,
			"risk_classes": strings.Join(t.risks, ","), "gap_type": GapType(IssueCoverageOwnerGap), "proposed_action": ProposedAction(IssueCoverageOwnerGap)}})
	}
	sortDetections(out)
	return out
}

// ExceptionObject names the one object an exception excepts (collection and code), for the phantom check.
type ExceptionObject struct{ Collection, Code string }

// PhantomProbes lists the objects approved, unexpired exceptions name one by one: the births the phantom check
// looks up.
func PhantomProbes(reg Registries, now time.Time) []ExceptionObject {
	var out []ExceptionObject
	for _, e := range reg.Exceptions {
		if e.EntityCode != nil && e.Approved(now) {
			o := ExceptionObject{deref(e.CollectionName), *e.EntityCode}
			if !slices.Contains(out, o) {
				out = append(out, o)
			}
		}
	}
	return out
}

// DetectRegistryGaps derives the island and phantom detections of the registries at now; born reports whether an
// object PhantomProbes listed has a birth.
func DetectRegistryGaps(reg Registries, now time.Time, born func(ExceptionObject) bool) []Detection {
	scopes := reg.ScopeCodes()
	unknown := func(scope, class, coll *string) (field, value string) {
		switch {
		case scope != nil && !slices.Contains(scopes, *scope):
			return "scope_code", *scope
		case class != nil && !hasKey(reg.Classes, *class):
			return "entity_type", *class
		case coll != nil && !hasKey(reg.Collections, *coll):
			return "collection_name", *coll
		}
		return "", ""
	}
	var out []Detection
	island := func(table, id string, scope *string, field, value string) {
		out = append(out, Detection{Type: IssueCoverageIsland, Subject: table + ":" + id, Evidence: map[string]any{
			"registry": table, "row": id, "field": field, "value": value, "scope": deref(scope), "gap_type": GapType(IssueCoverageIsland),
			"proposed_action": ProposedAction(IssueCoverageIsland),
			"reason":          "the row names a " + field + " no registry holds: an authority outside the one roof"}})
	}
	if !slices.Contains(reg.Absent, TableOwnership) {
		for _, o := range reg.Ownership {
			if o.Status != "active" {
				continue
			}
			scope := o.ScopeCode
			if field, value := unknown(&scope, o.EntityType, o.CollectionName); field != "" {
				island(TableOwnership, strconv.FormatInt(o.ID, 10), &scope, field, value)
			}
		}
	}
	for _, e := range reg.Exceptions {
		if !e.Approved(now) {
			continue
		}
		if field, value := unknown(e.ScopeCode, e.EntityType, e.CollectionName); field != "" {
			island(TableExceptions, e.ExceptionID, e.ScopeCode, field, value)
			continue
		}
		if e.EntityCode != nil && !born(ExceptionObject{deref(e.CollectionName), *e.EntityCode}) {
			object := deref(e.CollectionName) + ":" + *e.EntityCode
			out = append(out, Detection{Type: IssuePhantomGap, Subject: "exception:" + e.ExceptionID, Evidence: map[string]any{
				"exception_id": e.ExceptionID, "object": object, "scope": deref(e.ScopeCode), "gap_type": GapType(IssuePhantomGap),
				"proposed_action": ProposedAction(IssuePhantomGap),
				"reason":          "the exception names an object with no birth: a registered object with no born counterpart"}})
		}
	}
	sortDetections(out)
	return out
}

func sortDetections(ds []Detection) {
	slices.SortFunc(ds, func(a, b Detection) int { return strings.Compare(a.Key(), b.Key()) })
}
