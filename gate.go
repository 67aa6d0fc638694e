package gcos

import (
	"fmt"
	"slices"
	"strings"
)

// Gate actions.
const (
	ActionWrite = "write" // a write/deploy action in production
	ActionRead  = "read"  // a read-only action
)

// Gate decisions.
const (
	GateAllow = "allow"
	GateBlock = "block"
)

// Where the gate found the state it decided on: a materialized object row is consulted before its group row.
const (
	GateSourceObject = "object"
	GateSourceGroup  = "group"
)

// IsHighRisk reports whether riskClass is gated as high risk: everything is, except the classes configured as low
// risk. An empty or unknown risk class is always high: unknown is never safe.
func IsHighRisk(riskClass string, lowRiskClasses []string) bool {
	if riskClass == "" || riskClass == UnknownRisk {
		return true
	}
	return !slices.Contains(lowRiskClasses, riskClass)
}

// GateInput is everything the gate decides on; the caller gathers it (one lookup) and passes it by value.
type GateInput struct {
	Action         string         // ActionWrite or ActionRead
	Found          bool           // a candidate row exists for the object or its group
	Source         string         // GateSourceObject or GateSourceGroup
	Row            CandidateRow   // the row consulted (when Found)
	Effective      EffectiveState // Effective(Row, now, ...) (when Found)
	HighRisk       bool           // IsHighRisk(Row.RiskClass, cfg.Gate.LowRiskClasses)
	RulesetStatus  string         // status of Row.RulesetVersion (Ruleset*)
	SnapshotExists bool           // Row.SnapshotRef still resolves
	Scope          string         // the scope the row judges the object in (its group's scope)
	// Coverage is the recorded coverage outcome of the row under its ruleset ("" when none is recorded): a scan
	// records one for every relevant row.
	Coverage CoverageOutcome
	Err      error // any error met while gathering the input
}

// GateDecision is the gate's answer.
type GateDecision struct {
	Decision         string   `json:"decision"`          // GateAllow or GateBlock
	RescanScheduled  bool     `json:"rescan_scheduled"`  // the caller must dirty the row (reason ttl) for a re-scan
	EffectiveVerdict Verdict  `json:"effective_verdict"` // "" when no row was found
	RiskClass        string   `json:"risk_class"`
	Reasons          []string `json:"reasons"`       // human-readable, never empty
	RaiseUnknown     bool     `json:"raise_unknown"` // the caller raises candidate_unknown
	RaiseOrphan      bool     `json:"raise_orphan"`  // the caller raises coverage_orphan for the row's group
}

// Allowed reports whether the action may proceed.
func (d GateDecision) Allowed() bool { return d.Decision == GateAllow }

// Gate decides whether an action may proceed (SPEC §12), failing closed:
//   - an error, an unknown action, or no candidate state ⇒ block (no state means unknown, and unknown is never safe);
//   - high (or unknown) risk with an effective verdict unknown, stale or needs_input, a dangling snapshot, a failed
//     recompute, a draft ruleset, or coverage required without a closing coverage scan ⇒ block;
//   - high risk, relevant, coverage required and no owner in the row's scope (an orphan), or no coverage outcome
//     recorded at all ⇒ block, naming the scope;
//   - low risk with a stale verdict ⇒ allow and schedule a re-scan, except a write whose stored verdict was itself
//     unknown or needs_input;
//   - low risk with an unknown or needs_input verdict ⇒ allow a read but block a write. SPEC §12 mandates the block
//     only for high risk; we still block writes because unknown is never safe and a write is what can do harm,
//     while a read of a descriptive object cannot.
//   - everything else ⇒ allow.
//
// A stale or unknown verdict always schedules a re-scan, allowed or not, so the block clears itself.
func Gate(in GateInput) GateDecision {
	d := GateDecision{Decision: GateBlock, Reasons: []string{}}
	if in.Err != nil {
		d.Reasons = append(d.Reasons, "the gate could not read the candidate state ("+ErrorMessage(in.Err)+"); it fails closed")
		return d
	}
	if in.Action != ActionWrite && in.Action != ActionRead {
		d.Reasons = append(d.Reasons, fmt.Sprintf("unknown action %q (want %q or %q); the gate fails closed",
			in.Action, ActionWrite, ActionRead))
		return d
	}
	if !in.Found {
		d.RaiseUnknown = true
		d.Reasons = append(d.Reasons, "no candidate state exists for this object or its group: it was never scanned, "+
			"and unknown is never safe")
		return d
	}

	// A missing verdict is unknown, and a verdict that is not clean is at best stale, whatever the caller passed.
	eff := in.Effective.Verdict
	switch {
	case eff == "":
		eff = VerdictUnknown
	case !in.Effective.Clean && eff != VerdictUnknown:
		eff = VerdictStale
	}
	d.EffectiveVerdict = eff
	d.RiskClass = in.Row.RiskClass
	if d.RiskClass == "" {
		d.RiskClass = UnknownRisk
	}
	stored := in.Row.Verdict
	d.RescanScheduled = eff == VerdictStale || eff == VerdictUnknown
	if eff == VerdictStale {
		d.Reasons = append(d.Reasons, fmt.Sprintf("the stored verdict %s is stale (%s)", stored,
			strings.Join(in.Effective.Reasons, ", ")))
	}

	if in.HighRisk {
		var why []string
		switch eff {
		case VerdictUnknown:
			d.RaiseUnknown = true
			why = append(why, "the effective verdict is unknown")
		case VerdictStale:
			why = append(why, "the verdict is stale")
		case VerdictNeedsInput:
			why = append(why, "the verdict is needs_input (its input failed the input gate)")
		}
		if !in.SnapshotExists {
			why = append(why, fmt.Sprintf("its source snapshot %d no longer exists", in.Row.SnapshotRef))
		}
		if in.Row.RecomputeStatus == RecomputeFailed {
			why = append(why, "its last recompute failed")
		}
		if in.RulesetStatus == RulesetDraft {
			why = append(why, fmt.Sprintf("it was computed under the draft ruleset %s", in.Row.RulesetVersion))
		}
		switch {
		case in.Row.CoverageRequired && in.Row.CoverageScanRef == nil:
			d.RaiseUnknown = true
			why = append(why, fmt.Sprintf("coverage is required in scope %s but no coverage scan has closed it", scopeName(in.Scope)))
		case eff == VerdictRelevant && in.Row.CoverageRequired:
			switch in.Coverage {
			case CoverageCovered, CoverageApprovedException:
			case CoverageOrphan:
				d.RaiseOrphan = true
				why = append(why, fmt.Sprintf("no owner resolves in scope %s (orphan)", scopeName(in.Scope)))
			default:
				d.RaiseUnknown = true
				why = append(why, fmt.Sprintf("no coverage outcome is recorded in scope %s", scopeName(in.Scope)))
			}
		}
		if len(why) > 0 {
			d.Reasons = append(d.Reasons, fmt.Sprintf("blocked: risk class %s is high risk and %s",
				d.RiskClass, strings.Join(why, "; ")))
			return d
		}
		return allow(d, in)
	}

	unsafe := func(v Verdict) bool { return v == VerdictUnknown || v == VerdictNeedsInput }
	switch {
	case in.Action == ActionWrite && (unsafe(eff) || (eff == VerdictStale && unsafe(stored))):
		d.RaiseUnknown = eff == VerdictUnknown
		d.Reasons = append(d.Reasons, fmt.Sprintf("blocked: a write on low-risk class %s needs a decided verdict, "+
			"and the verdict is %s", d.RiskClass, stored))
		return d
	case unsafe(eff):
		d.RaiseUnknown = eff == VerdictUnknown
		d.Reasons = append(d.Reasons, fmt.Sprintf("allowed: a read on low-risk class %s proceeds although the "+
			"verdict is %s", d.RiskClass, eff))
		d.Decision = GateAllow
		return d
	case eff == VerdictStale:
		d.Reasons = append(d.Reasons, fmt.Sprintf("allowed: risk class %s is low risk, so a stale verdict "+
			"does not block; a re-scan is scheduled", d.RiskClass))
		d.Decision = GateAllow
		return d
	}
	return allow(d, in)
}

// allow finishes an allow decision with the reproducible reason.
func allow(d GateDecision, in GateInput) GateDecision {
	src := in.Source
	if src == "" {
		src = "candidate"
	}
	d.Decision = GateAllow
	d.Reasons = append(d.Reasons, fmt.Sprintf("allowed: the %s verdict %s is clean under ruleset %s, snapshot %d",
		src, d.EffectiveVerdict, in.Row.RulesetVersion, in.Row.SnapshotRef))
	return d
}

// scopeName names a scope in a reason; a row without one says so rather than printing nothing.
func scopeName(scope string) string {
	if scope == "" {
		return "(none)"
	}
	return scope
}

// ObjectGateInput is everything the gate judges one object on: the candidate rows that represent it (its
// materialized object row, if any, and its group in each scope) and the scopes every object belongs to under the
// current ruleset.
type ObjectGateInput struct {
	Action string
	Rows   []GateInput
	Scopes []string
	// Problems are the object's input values no verdict can rest on (VerdictPolicy.CheckObject); any blocks.
	Problems []InputProblem
	Err      error // any error met while gathering the input
}

// ObjectGateDecision is the gate's answer for one object.
type ObjectGateDecision struct {
	Decision         string         `json:"decision"`
	EffectiveVerdict Verdict        `json:"effective_verdict"` // the reported row's; unknown when a scope is missing
	RiskClass        string         `json:"risk_class"`
	Reasons          []string       `json:"reasons"`        // blocking rows first; never empty
	Rows             []GateDecision `json:"rows"`           // each input row's own decision, in input order
	Worst            int            `json:"worst"`          // index of the row reported on, -1 when none
	MissingScopes    []string       `json:"missing_scopes"` // scopes in which no group represents the object
}

// Allowed reports whether the action may proceed.
func (d ObjectGateDecision) Allowed() bool { return d.Decision == GateAllow }

// RescanCouldAllow reports whether re-scanning the object's stale rows could turn its block into an allow (SPEC
// §12's synchronous re-evaluation): it blocks, and only on rows whose verdict awaits a re-scan (RescanScheduled),
// with a group in every scope and no input problem (a re-scan reads the same birth values).
func (d ObjectGateDecision) RescanCouldAllow(inputProblems bool) bool {
	if d.Allowed() || inputProblems || len(d.MissingScopes) > 0 {
		return false
	}
	stale := false
	for _, r := range d.Rows {
		if r.Allowed() {
			continue
		}
		if !r.RescanScheduled {
			return false
		}
		stale = true
	}
	return stale
}

// GateObject judges an object on the worst of its rows (SPEC §12): every row is gated on its own (Gate) and the
// object is allowed only if every row allows and a group represents it in every scope of the current ruleset.
// An object row never stands in for its groups: it links to one scope's group, and the object is governed in all.
// It does state the object's own coverage in its scope, though: an exception on the object suppresses there, and
// only there, so that scope's group is judged with the object row's coverage (SPEC §12).
// The row reported on is the first blocking one, least settled verdict first (unknown, needs_input, stale, then
// the rest), or the least settled row when all allow.
func GateObject(in ObjectGateInput) ObjectGateDecision {
	out := ObjectGateDecision{Decision: GateBlock, Reasons: []string{}, Rows: []GateDecision{}, Worst: -1,
		MissingScopes: []string{}}
	if in.Err != nil || (in.Action != ActionWrite && in.Action != ActionRead) {
		d := Gate(GateInput{Action: in.Action, Err: in.Err})
		out.Reasons = d.Reasons
		return out
	}
	if len(in.Rows) == 0 {
		out.EffectiveVerdict = VerdictUnknown
		out.Reasons = append(out.Reasons, "no candidate state exists for this object: it was never scanned, and "+
			"unknown is never safe")
		return out
	}
	rows := objectCoverage(in.Rows)
	allowed := true
	var blocking, passing []string
	for i, row := range rows {
		d := Gate(row)
		out.Rows = append(out.Rows, d)
		if !d.Allowed() {
			allowed = false
		}
		prefix := ""
		if len(in.Rows) > 1 {
			prefix = "[" + scopeName(row.Scope) + "] "
			if row.Source == GateSourceObject {
				prefix = "[object row, scope " + scopeName(row.Scope) + "] "
			}
		}
		for _, r := range d.Reasons {
			if d.Allowed() {
				passing = append(passing, prefix+r)
			} else {
				blocking = append(blocking, prefix+r)
			}
		}
		if out.Worst < 0 || worseRow(d, out.Rows[out.Worst]) {
			out.Worst = i
		}
	}
	for _, scope := range in.Scopes {
		found := false
		for _, row := range in.Rows {
			if row.Source == GateSourceGroup && row.Scope == scope {
				found = true
				break
			}
		}
		if !found {
			out.MissingScopes = append(out.MissingScopes, scope)
			blocking = append(blocking, fmt.Sprintf("[%s] blocked: no group represents the object in scope %s, so it "+
				"was never judged there, and unknown is never safe", scope, scope))
		}
	}
	w := out.Rows[out.Worst]
	out.EffectiveVerdict, out.RiskClass = w.EffectiveVerdict, w.RiskClass
	if len(out.MissingScopes) > 0 {
		allowed = false
		out.EffectiveVerdict = VerdictUnknown
	}
	if len(in.Problems) > 0 {
		// Input no verdict can rest on blocks first and by name: unknown is never safe, and a person must see why.
		allowed = false
		out.EffectiveVerdict = VerdictNeedsInput
		var named []string
		for _, p := range in.Problems {
			named = append(named, fmt.Sprintf("blocked: %s (input quality %s)", p.Reason, p.State))
		}
		blocking = append(named, blocking...)
	}
	if allowed {
		out.Decision = GateAllow
	}
	out.Reasons = append(blocking, passing...)
	return out
}

// objectCoverage returns the rows with each found object row's recorded coverage given to the group of its scope.
func objectCoverage(in []GateInput) []GateInput {
	rows := slices.Clone(in)
	for _, o := range in {
		if o.Source != GateSourceObject || !o.Found || o.Coverage == "" {
			continue
		}
		for j := range rows {
			if rows[j].Source == GateSourceGroup && rows[j].Found && rows[j].Scope == o.Scope {
				rows[j].Coverage = o.Coverage
			}
		}
	}
	return rows
}

// worseRow reports whether decision a is reported in preference to b: a block before an allow, then the least
// settled effective verdict.
func worseRow(a, b GateDecision) bool {
	if a.Allowed() != b.Allowed() {
		return !a.Allowed()
	}
	return verdictRank(a.EffectiveVerdict) < verdictRank(b.EffectiveVerdict)
}

// verdictRank orders effective verdicts from least settled (unknown) to decided.
func verdictRank(v Verdict) int {
	switch v {
	case VerdictUnknown, "":
		return 0
	case VerdictNeedsInput:
		return 1
	case VerdictStale:
		return 2
	}
	return 3
}
