package gcos

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Verdict is a group's or object's governance verdict (SPEC §7).
type Verdict string

// Stored verdicts, plus the read-time-only VerdictStale.
const (
	VerdictRelevant      Verdict = "relevant"       // governance-relevant: the coverage detector does owner work
	VerdictNotRelevant   Verdict = "not_relevant"   // evaluated, nothing to govern under (snapshot, ruleset)
	VerdictClass0        Verdict = "class_0"        // private/user/session: suppressed
	VerdictDeferredBirth Verdict = "deferred_birth" // not yet born into governance scope
	VerdictRetired       Verdict = "retired"        // retired, superseded, merged, or in an exempt collection
	VerdictNeedsInput    Verdict = "needs_input"    // failed the input gate; held
	VerdictUnknown       Verdict = "unknown"        // the inputs cannot decide; never safe
	VerdictStale         Verdict = "stale"          // effective only: the stored verdict no longer holds
)

// StoredVerdicts are the verdicts a scan may write; stale is computed at read time and never stored.
var StoredVerdicts = []Verdict{
	VerdictRelevant, VerdictNotRelevant, VerdictClass0, VerdictDeferredBirth,
	VerdictRetired, VerdictNeedsInput, VerdictUnknown,
}

// Stored reports whether v may be written to the candidate store.
func (v Verdict) Stored() bool { return slices.Contains(StoredVerdicts, v) }

// ParseVerdict accepts a stored verdict or stale.
func ParseVerdict(s string) (Verdict, error) {
	return parseEnum(s, "verdict", append(slices.Clip(StoredVerdicts), VerdictStale))
}

// InputQuality is an input-quality state of the input gate (doc 33); only accepted_for_candidate_scan proceeds.
type InputQuality string

// The input-quality states.
const (
	InputAccepted               InputQuality = "accepted_for_candidate_scan"
	InputIncomplete             InputQuality = "incomplete_input"
	InputInvalidSchema          InputQuality = "invalid_schema"
	InputDuplicate              InputQuality = "duplicate"
	InputConflict               InputQuality = "conflict"
	InputStale                  InputQuality = "stale_input"
	InputUntrustedSource        InputQuality = "untrusted_source"
	InputQuarantined            InputQuality = "quarantined"
	InputBirthOrRegistryMissing InputQuality = "birth_or_registry_missing"
	InputNeedsBackfill          InputQuality = "needs_backfill"
)

// InputQualities lists every input-quality state, accepted first.
var InputQualities = []InputQuality{
	InputAccepted, InputIncomplete, InputInvalidSchema, InputDuplicate, InputConflict,
	InputStale, InputUntrustedSource, InputQuarantined, InputBirthOrRegistryMissing, InputNeedsBackfill,
}

// InputFindingStates are the input-quality states a GCOS check raises a finding for (input.<state>): an odd value in a
// registry or a signal (invalid_schema) and a birth from a source not trusted (untrusted_source). The other states
// are doc 33's input gate's, which GCOS does not run: they are accepted as recorded values, and their event types are
// not in the vocabulary (docs/REFERENCE.md, "Types GCOS does not register").
var InputFindingStates = []InputQuality{InputInvalidSchema, InputUntrustedSource}

// ParseInputQuality accepts one of InputQualities.
func ParseInputQuality(s string) (InputQuality, error) {
	return parseEnum(s, "input quality state", InputQualities)
}

// parseEnum accepts s when it is one of values, else an EINVALID error naming what the enumeration is.
func parseEnum[T ~string](s, what string, values []T) (T, error) {
	if v := T(s); slices.Contains(values, v) {
		return v, nil
	}
	return "", Errorf(EINVALID, "unknown %s %s", what, Quote(s))
}

// GroupFacts are the inputs the verdict policy may look at for one group; nil means the registry had no value.
type GroupFacts struct {
	InputQuality     *string // input_quality: the group's input-quality state
	LifecycleStatus  *string // lifecycle_status: birth_registry.status of the group
	CoverageStatus   *string // coverage_status: collection_registry.coverage_status
	ScopeClass       *string // scope_class: collection_registry.scope_class
	Privacy          *string // privacy: coverage profile privacy of the class
	RiskClass        *string // risk_class: coverage profile risk class
	CoverageRequired *bool   // coverage_required: coverage profile flag, as "true"/"false"
	// MemberCount is carried for evidence only: no fact name reaches it, because count>1 only nominates a group
	// for evaluation and never decides a verdict, an owner requirement or an issue (SPEC §7).
	MemberCount int64
}

// Fact names a policy condition may use.
const (
	FactInputQuality     = "input_quality"
	FactLifecycleStatus  = "lifecycle_status"
	FactCoverageStatus   = "coverage_status"
	FactScopeClass       = "scope_class"
	FactPrivacy          = "privacy"
	FactCoverageRequired = "coverage_required"
	FactRiskClass        = "risk_class"
)

// Facts lists every fact name, for validation and documentation.
var Facts = []string{
	FactInputQuality, FactLifecycleStatus, FactCoverageStatus, FactScopeClass,
	FactPrivacy, FactCoverageRequired, FactRiskClass,
}

// Fact returns the value of a named fact (nil when null) and whether the name is known.
func (f GroupFacts) Fact(name string) (value *string, known bool) {
	switch name {
	case FactInputQuality:
		return f.InputQuality, true
	case FactLifecycleStatus:
		return f.LifecycleStatus, true
	case FactCoverageStatus:
		return f.CoverageStatus, true
	case FactScopeClass:
		return f.ScopeClass, true
	case FactPrivacy:
		return f.Privacy, true
	case FactRiskClass:
		return f.RiskClass, true
	case FactCoverageRequired:
		if f.CoverageRequired == nil {
			return nil, true
		}
		if *f.CoverageRequired {
			return Str("true"), true
		}
		return Str("false"), true
	}
	return nil, false
}

// Condition operators.
const (
	OpIn      = "in"       // the fact is one of Values
	OpNotIn   = "not_in"   // the fact is set and none of Values
	OpPrefix  = "prefix"   // the fact starts with one of Values
	OpEquals  = "equals"   // the fact equals the single value
	OpIsNull  = "is_null"  // the fact is null
	OpNotNull = "not_null" // the fact is set
)

// Condition tests one fact. Null handling fails closed: a null fact satisfies only is_null. In particular null is
// NOT "not in" anything, so a rule that must catch missing data says so with an explicit is_null clause (as the
// default policy's input-quality rule does) instead of catching it by accident.
type Condition struct {
	Fact   string   `json:"fact"`
	Op     string   `json:"op"`
	Values []string `json:"values,omitempty"`
}

// holds evaluates c against f; unknown facts and operators never hold (Validate rejects them up front).
func (c Condition) holds(f GroupFacts) bool {
	v, known := f.Fact(c.Fact)
	if !known {
		return false
	}
	switch c.Op {
	case OpIsNull:
		return v == nil
	case OpNotNull:
		return v != nil
	}
	if v == nil {
		return false
	}
	switch c.Op {
	case OpIn:
		return slices.Contains(c.Values, *v)
	case OpNotIn:
		return !slices.Contains(c.Values, *v)
	case OpEquals:
		return len(c.Values) == 1 && *v == c.Values[0]
	case OpPrefix:
		return slices.ContainsFunc(c.Values, func(p string) bool { return strings.HasPrefix(*v, p) })
	}
	return false
}

// PolicyRule assigns Verdict when any clause of Any holds, a clause holding when all its conditions hold.
// A rule without clauses always fires: it is the fallback.
type PolicyRule struct {
	Name    string        `json:"name"`
	Verdict Verdict       `json:"verdict"`
	Any     [][]Condition `json:"any,omitempty"`
}

// fires reports whether the rule applies to f.
func (r PolicyRule) fires(f GroupFacts) bool {
	if len(r.Any) == 0 {
		return true
	}
	for _, clause := range r.Any {
		all := true
		for _, c := range clause {
			if !c.holds(f) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// VerdictPolicy is the ordered verdict rule list (SPEC §7), kept as data so it can be overridden and is hashed
// into the ruleset: a policy change is a ruleset change.
type VerdictPolicy struct {
	Version int          `json:"version"`
	Rules   []PolicyRule `json:"rules"`
	// Vocabulary lists the values a fact may take (e.g. lifecycle_status, risk_class). A value outside its list is
	// not a value the rules can be trusted with: the group's input is invalid_schema (needs_input), and the gate
	// blocks the object naming the value. A fact without a list is not checked.
	Vocabulary map[string][]string `json:"vocabulary,omitempty"`
}

// Evaluation is the outcome of a policy for one group: exactly one verdict and the rule that gave it.
type Evaluation struct {
	Verdict Verdict `json:"verdict"`
	Rule    string  `json:"rule"`
}

// Evaluate returns the verdict of the first rule that fires. If none fires (only possible for a policy that failed
// Validate) the answer is unknown, never a guess.
func (p VerdictPolicy) Evaluate(f GroupFacts) Evaluation {
	for _, r := range p.Rules {
		if r.fires(f) {
			return Evaluation{Verdict: r.Verdict, Rule: r.Name}
		}
	}
	return Evaluation{Verdict: VerdictUnknown, Rule: ""}
}

// HoldForInput is the verdict of an object or group held by its input (SPEC §7): an open input finding on it, or
// an untrusted source's birth, keeps it needs_input until the finding closes, whatever the rule list says of its
// group. reason says which hold (open_finding, untrusted_source) and is reported as the rule. It is the policy's one
// fixed rule beside Evaluate, so every verdict GCOS writes comes from one of the two.
func HoldForInput(reason string) Evaluation {
	return Evaluation{Verdict: VerdictNeedsInput, Rule: reason}
}

// Validate checks that every rule names a stored verdict, known facts and operators with the right number of
// values, and that the policy ends in exactly one unconditional fallback to unknown.
func (p VerdictPolicy) Validate() error {
	if p.Version < 1 {
		return Errorf(EINVALID, "verdict policy: version: must be >= 1, got %d", p.Version)
	}
	if len(p.Rules) == 0 {
		return Errorf(EINVALID, "verdict policy: rules: must not be empty")
	}
	seen := map[string]bool{}
	last := len(p.Rules) - 1
	for i, r := range p.Rules {
		at := fmt.Sprintf("verdict policy: rules[%d] (%q)", i, r.Name)
		if r.Name == "" {
			return Errorf(EINVALID, "%s: name: must not be empty", at)
		}
		if seen[r.Name] {
			return Errorf(EINVALID, "%s: name: duplicate rule name", at)
		}
		seen[r.Name] = true
		if !r.Verdict.Stored() {
			return Errorf(EINVALID, "%s: verdict: unknown verdict %s (want one of %v)", at, Quote(r.Verdict), StoredVerdicts)
		}
		if len(r.Any) == 0 && i != last {
			return Errorf(EINVALID, "%s: any: an unconditional rule must be last, it would hide every rule after it", at)
		}
		for j, clause := range r.Any {
			if len(clause) == 0 {
				return Errorf(EINVALID, "%s: any[%d]: empty clause (omit \"any\" for an unconditional rule)", at, j)
			}
			for k, c := range clause {
				if err := c.validate(); err != nil {
					return Errorf(EINVALID, "%s: any[%d][%d]: %s", at, j, k, err)
				}
			}
		}
	}
	for fact, values := range p.Vocabulary {
		if _, known := (GroupFacts{}).Fact(fact); !known || fact == FactInputQuality || fact == FactCoverageRequired {
			return Errorf(EINVALID, "verdict policy: vocabulary: %s is not a fact with a vocabulary (want one of %v)",
				Quote(fact), []string{FactLifecycleStatus, FactCoverageStatus, FactScopeClass, FactPrivacy, FactRiskClass})
		}
		if len(values) == 0 {
			return Errorf(EINVALID, "verdict policy: vocabulary: %s: list at least one value, or omit the fact", Quote(fact))
		}
	}
	if fb := p.Rules[last]; len(fb.Any) != 0 || fb.Verdict != VerdictUnknown {
		return Errorf(EINVALID, "verdict policy: rules[%d] (%s): the last rule must be an unconditional fallback to %s",
			last, Quote(fb.Name), Quote(VerdictUnknown))
	}
	return nil
}

// validate checks one condition's fact, operator and values.
func (c Condition) validate() error {
	if _, known := (GroupFacts{}).Fact(c.Fact); !known {
		return fmt.Errorf("fact: unknown fact %q (want one of %v)", c.Fact, Facts)
	}
	switch c.Op {
	case OpIn, OpNotIn, OpPrefix:
		if len(c.Values) == 0 {
			return fmt.Errorf("values: op %q needs at least one value", c.Op)
		}
	case OpEquals:
		if len(c.Values) != 1 {
			return fmt.Errorf("values: op %q needs exactly one value, got %d", c.Op, len(c.Values))
		}
	case OpIsNull, OpNotNull:
		if len(c.Values) != 0 {
			return fmt.Errorf("values: op %q takes no values", c.Op)
		}
	default:
		return fmt.Errorf("op: unknown operator %q", c.Op)
	}
	if c.Fact == FactCoverageRequired {
		for _, v := range c.Values {
			if v != "true" && v != "false" {
				return fmt.Errorf("values: fact %q is a boolean, use \"true\" or \"false\", got %q", c.Fact, v)
			}
		}
	}
	return nil
}

// ParseVerdictPolicy decodes a policy document strictly (unknown fields are errors) and validates it.
func ParseVerdictPolicy(doc []byte) (VerdictPolicy, error) {
	var p VerdictPolicy
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return VerdictPolicy{}, Errorf(EINVALID, "verdict policy: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return VerdictPolicy{}, Errorf(EINVALID, "verdict policy: trailing data after the document")
	}
	if err := p.Validate(); err != nil {
		return VerdictPolicy{}, err
	}
	return p, nil
}

//go:embed defaults/verdict_policy.json
var defaultVerdictPolicyJSON []byte

// DefaultVerdictPolicyJSON returns the shipped policy document (SPEC §7 order), e.g. for an operator to copy.
func DefaultVerdictPolicyJSON() []byte { return bytes.Clone(defaultVerdictPolicyJSON) }

// DefaultVerdictPolicy returns the shipped policy. It is parsed on every call so callers never share slices.
func DefaultVerdictPolicy() VerdictPolicy {
	p, err := ParseVerdictPolicy(defaultVerdictPolicyJSON)
	if err != nil {
		panic("gcos: embedded default verdict policy is invalid: " + err.Error()) // a build defect, caught by tests
	}
	return p
}

// InputProblem is one input value a verdict cannot rest on, with the input-quality state it earns (doc 32 §4).
type InputProblem struct {
	State  InputQuality `json:"state"`
	Field  string       `json:"field"`
	Value  string       `json:"value"`
	Reason string       `json:"reason"`
}

// CheckVocabulary lists the facts whose value lies outside the policy's vocabulary, in the order of Facts. A fact
// with no value (null) is not checked here: the rules decide what a missing value means.
func (p VerdictPolicy) CheckVocabulary(f GroupFacts) []InputProblem {
	var out []InputProblem
	for _, fact := range Facts {
		values, listed := p.Vocabulary[fact]
		v, _ := f.Fact(fact)
		if !listed || v == nil || slices.Contains(values, *v) {
			continue
		}
		out = append(out, InputProblem{State: InputInvalidSchema, Field: fact, Value: *v,
			Reason: fmt.Sprintf("%s %q is not one of %s", fact, *v, strings.Join(values, ", "))})
	}
	return out
}

// ObjectBirth is what the gate read of one object's birth: the values its groups are keyed on (its anchor's, for an
// inherited child), its own status and parent, and whether its collection and class are registered.
type ObjectBirth struct {
	Object               string
	Class                string
	Collection           string
	LifecycleStatus      string
	OwnLifecycleStatus   string
	ParentCode           *string
	ParentFound          bool
	CollectionRegistered bool
	ClassRegistered      bool
}

// CheckObject lists what makes an object's input untrustworthy, each naming the value: a parent that has no birth,
// a collection missing from collection_registry or a class missing from meta_catalog (birth_or_registry_missing),
// a lifecycle status or risk class outside the vocabulary (invalid_schema), and a class with no risk class in its
// coverage profile, or no profile (UnknownRisk: birth_or_registry_missing). riskClasses are the risk classes of the candidate
// rows that judge the object. Unknown is never safe: the gate blocks on any of them.
func (p VerdictPolicy) CheckObject(b ObjectBirth, riskClasses []string) []InputProblem {
	var out []InputProblem
	missing := func(field, value, reason string, args ...any) {
		out = append(out, InputProblem{State: InputBirthOrRegistryMissing, Field: field, Value: value, Reason: fmt.Sprintf(reason, args...)})
	}
	if b.ParentCode != nil && !b.ParentFound {
		missing("parent_code", *b.ParentCode, "the parent %q of object %s has no birth in collection %s", *b.ParentCode, b.Object, b.Collection)
	}
	if !b.CollectionRegistered {
		missing("collection", b.Collection, "collection %q is not in collection_registry", b.Collection)
	}
	if !b.ClassRegistered {
		missing("object_class", b.Class, "object class %q is not in meta_catalog", b.Class)
	}
	statuses := []string{b.OwnLifecycleStatus}
	if b.LifecycleStatus != b.OwnLifecycleStatus {
		statuses = append(statuses, b.LifecycleStatus)
	}
	for _, st := range statuses {
		out = append(out, p.CheckVocabulary(GroupFacts{LifecycleStatus: Str(st)})...)
	}
	seen := map[string]bool{}
	for _, rc := range riskClasses {
		if seen[rc] {
			continue
		}
		seen[rc] = true
		if rc == UnknownRisk || rc == "" {
			missing("risk_class", UnknownRisk, "object class %q has no risk class in governance_coverage_profile, so its risk is unknown", b.Class)
			continue
		}
		out = append(out, p.CheckVocabulary(GroupFacts{RiskClass: Str(rc)})...)
	}
	return out
}
