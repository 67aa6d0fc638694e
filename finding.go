package gcos

import (
	"slices"
	"strings"
)

// Severity is a finding's severity; the order is low < medium < high < critical.
type Severity string

// Severities, lowest first.
const (
	SeverityLow      Severity = "low"
	SeverityMedium   Severity = "medium"
	SeverityHigh     Severity = "high"
	SeverityCritical Severity = "critical"
)

// Severities lists the severities in ascending order.
var Severities = []Severity{SeverityLow, SeverityMedium, SeverityHigh, SeverityCritical}

// Rank orders severities (low=1 … critical=4); an unknown severity ranks 0.
func (s Severity) Rank() int { return slices.Index(Severities, s) + 1 }

// ParseSeverity accepts one of Severities.
func ParseSeverity(s string) (Severity, error) {
	v := Severity(s)
	if v.Rank() == 0 {
		return "", Errorf(EINVALID, "unknown severity %s", Quote(s))
	}
	return v, nil
}

// IssueType is a finding's type (system_issues.issue_type).
type IssueType string

// The finding types of SPEC §11; input-quality findings are InputIssue(state).
const (
	IssueCandidateStale           IssueType = "candidate_stale"
	IssueCandidateUnknown         IssueType = "candidate_unknown"
	IssueCandidateScanLag         IssueType = "candidate_scan_lag"
	IssueGroupInvalidationStorm   IssueType = "group_invalidation_storm"
	IssueSnapshotCaptureFailed    IssueType = "snapshot_capture_failed"
	IssueSnapshotNondeterministic IssueType = "snapshot_nondeterministic"
	IssueSnapshotRefDangling      IssueType = "snapshot_ref_dangling"
	IssueRulesetUnowned           IssueType = "ruleset_unowned"
	IssueRulesetDrift             IssueType = "ruleset_drift"
	IssueHandoffLag               IssueType = "handoff_lag"
	IssueHandoffDLQ               IssueType = "handoff_dlq"
	IssueHandoffSilentGap         IssueType = "handoff_silent_gap"
	IssueHandoffUnregisteredType  IssueType = "handoff_unregistered_type"
	IssueBackfillInventoryGap     IssueType = "backfill_inventory_gap"
	IssueGovernanceSchemaDrift    IssueType = "governance_schema_drift"
	IssueIssueEventGap            IssueType = "issue_event_gap"
	IssueCoverageOrphan           IssueType = "coverage_orphan"      // a high-risk relevant group with no owner in its scope
	IssueExceptionLifted          IssueType = "exception_lifted"     // an exception stopped counting (expired, object changed, …)
	IssueVerifyMismatch           IssueType = "verify_mismatch"      // the incremental state differs from a from-scratch evaluation
	IssueHandoffUnmappedRow       IssueType = "handoff_unmapped_row" // a tailed row no mapping rule matches
	IssueHandoffOutOfOrder        IssueType = "handoff_out_of_order" // a row behind the committed cursor or in the future
	IssueOwnerDispute             IssueType = "owner_dispute"        // equally specific ownership rows name different owners
	IssueAxisUnregistered         IssueType = "axis_unregistered"    // groups carry an axis family the axis registry does not hold
	IssueCoverageOwnerGap         IssueType = "coverage_owner_gap"   // a scope where a class's relevant groups have no owner at all
	IssueCoverageIsland           IssueType = "coverage_island"      // a registry row naming a scope, class or collection no registry holds
	IssuePhantomGap               IssueType = "phantom_gap"          // an exception naming an object with no birth
)

// StormSubject is the subject of the one group_invalidation_storm finding: a storm is about all groups at once.
const StormSubject = "groups"

// CoverageGapTypes are the coverage detections (detect.go): a scan raises them and the scan that sees the condition
// gone resolves them, announced as governance.coverage.gap_resolved.
var CoverageGapTypes = []IssueType{IssueCoverageOrphan, IssueCoverageOwnerGap, IssueCoverageIsland, IssuePhantomGap}

// IsCoverageGap reports whether t is one of CoverageGapTypes.
func IsCoverageGap(t IssueType) bool { return slices.Contains(CoverageGapTypes, t) }

// gapTypes name each coverage detection's kind of gap and the action that would close it (doc 24 §2 gap_type and
// proposed_action_code): a name for the person who acts, never an instruction anything executes.
var gapTypes = map[IssueType][2]string{IssueCoverageOrphan: {"orphan", ActionAssignOwner},
	IssueCoverageOwnerGap: {"owner_gap", ActionAssignOwner}, IssueCoverageIsland: {"island", ActionRetireRow},
	IssuePhantomGap: {"phantom", ActionRevokeOrRebind}}

// GapType is the gap_type of a coverage detection ("" for any other finding).
func GapType(t IssueType) string { return gapTypes[t][0] }

// ProposedAction is the proposed_action_code of a coverage detection ("" for any other finding).
func ProposedAction(t IssueType) string { return gapTypes[t][1] }

// EventGapResolved announces a coverage detection's resolution (doc 24: the resolved companion of the detections).
const EventGapResolved = "governance.coverage.gap_resolved"

// Issue buckets of the seeds (doc 34 §10, doc 32 §8): the class of wrong a finding is.
const (
	BucketDataDrift       = "sai_lệch_dữ_liệu" // the data disagrees with what should hold
	BucketMissingRelation = "thiếu_quan_hệ"    // a relation the governance needs is missing
	BucketSilentFail      = "silent_fail"      // something stopped without saying so
)

// issueBuckets assigns the seeds' buckets to the types the seeds assign one.
var issueBuckets = map[IssueType]string{
	IssueCandidateStale: BucketDataDrift, IssueCandidateUnknown: BucketMissingRelation,
	IssueCandidateScanLag: BucketSilentFail, IssueGroupInvalidationStorm: BucketDataDrift,
	IssueHandoffLag: BucketDataDrift, IssueHandoffDLQ: BucketSilentFail, IssueHandoffSilentGap: BucketSilentFail,
	IssueHandoffUnregisteredType: BucketMissingRelation,
}

// IssueBucket is the seeds' bucket of a finding type, "" where the seeds assign none.
func IssueBucket(t IssueType) string { return issueBuckets[t] }

// inputIssuePrefix starts every input-quality finding type ("input.<state>").
const inputIssuePrefix = "input."

// InputIssue is the finding type of an input-quality state, e.g. input.invalid_schema.
func InputIssue(state InputQuality) IssueType { return IssueType(inputIssuePrefix + string(state)) }

// DefaultEscalateAfter is the occurrence count at which a repeating finding reaches its maximum severity.
const DefaultEscalateAfter = 3

// IssueSpec is one finding type's vocabulary: where it is keyed and announced and how its severity grows.
type IssueSpec struct {
	Type          IssueType `json:"issue_type"`
	Family        string    `json:"family"` // event family and coalesce-key family, e.g. "candidate"
	State         string    `json:"state"`  // event name and coalesce-key state, e.g. "stale"
	Base          Severity  `json:"base"`   // severity on first occurrence
	Max           Severity  `json:"max"`    // severity once repeated EscalateAfter times
	EscalateAfter int       `json:"escalate_after"`
}

// EventType is the governance event announcing the finding: governance.<family>.<state>.
func (s IssueSpec) EventType() string { return "governance." + s.Family + "." + s.State }

// IssueSpecs is the finding table. Base→max follow doc 34 §10 and doc 32 §8 where they give one, doc 38 §38.7 for
// snapshot and ruleset findings; the rest are ours: a finding that means "something is silently wrong" (dlq,
// schema drift) may reach critical, lag and gaps escalate medium→high.
var IssueSpecs = []IssueSpec{
	{IssueCandidateStale, "candidate", "stale", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueCandidateUnknown, "candidate", "unknown", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueCandidateScanLag, "candidate", "scan_lag", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueGroupInvalidationStorm, "candidate", "group_invalidation_storm", SeverityHigh, SeverityHigh, DefaultEscalateAfter},
	{IssueSnapshotCaptureFailed, "snapshot", "capture_failed", SeverityHigh, SeverityHigh, DefaultEscalateAfter},
	{IssueSnapshotNondeterministic, "snapshot", "nondeterministic", SeverityHigh, SeverityCritical, DefaultEscalateAfter},
	{IssueSnapshotRefDangling, "snapshot", "ref_dangling", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueRulesetUnowned, "ruleset", "unowned", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueRulesetDrift, "ruleset", "drift", SeverityHigh, SeverityHigh, DefaultEscalateAfter},
	{IssueHandoffLag, "handoff", "lag", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueHandoffDLQ, "handoff", "dlq", SeverityHigh, SeverityCritical, DefaultEscalateAfter},
	{IssueHandoffSilentGap, "handoff", "silent_gap", SeverityHigh, SeverityCritical, DefaultEscalateAfter},
	{IssueHandoffUnregisteredType, "handoff", "unregistered_type", SeverityLow, SeverityMedium, DefaultEscalateAfter},
	{IssueBackfillInventoryGap, "backfill", "inventory_gap", SeverityHigh, SeverityHigh, DefaultEscalateAfter},
	{IssueGovernanceSchemaDrift, "coverage", "schema_drift", SeverityHigh, SeverityCritical, DefaultEscalateAfter},
	{IssueIssueEventGap, "coverage", "issue_event_gap", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueCoverageOrphan, "coverage", "orphan", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueExceptionLifted, "exception", "lifted", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueVerifyMismatch, "coverage", "verify_mismatch", SeverityHigh, SeverityCritical, DefaultEscalateAfter},
	{IssueHandoffUnmappedRow, "handoff", "unmapped_row", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueHandoffOutOfOrder, "handoff", "out_of_order", SeverityHigh, SeverityCritical, DefaultEscalateAfter},
	{IssueOwnerDispute, "coverage", "owner_dispute", SeverityHigh, SeverityHigh, DefaultEscalateAfter},
	{IssueAxisUnregistered, "coverage", "axis_unregistered", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueCoverageOwnerGap, "coverage", "owner.gap", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
	{IssueCoverageIsland, "coverage", "island.detected", SeverityHigh, SeverityHigh, DefaultEscalateAfter},
	{IssuePhantomGap, "phantom", "gap", SeverityMedium, SeverityHigh, DefaultEscalateAfter},
}

// inputEventState maps an input-quality state to its doc 41 event name where the two differ.
var inputEventState = map[InputQuality]string{InputIncomplete: "incomplete", InputStale: "stale"}

// SpecFor returns the spec of a finding type; input.<state> types are derived from the input-quality states
// (medium→high). ok is false for a type outside the vocabulary.
func SpecFor(t IssueType) (spec IssueSpec, ok bool) {
	if i := slices.IndexFunc(IssueSpecs, func(s IssueSpec) bool { return s.Type == t }); i >= 0 {
		return IssueSpecs[i], true
	}
	if state, found := strings.CutPrefix(string(t), inputIssuePrefix); found {
		q, err := ParseInputQuality(state)
		if err != nil || q == InputAccepted {
			return IssueSpec{}, false
		}
		event := state
		if e, ok := inputEventState[q]; ok {
			event = e
		}
		return IssueSpec{t, "input", event, SeverityMedium, SeverityHigh, DefaultEscalateAfter}, true
	}
	return IssueSpec{}, false
}

// ParseIssueType accepts a type of the vocabulary (including input.<state>).
func ParseIssueType(s string) (IssueType, error) {
	if _, ok := SpecFor(IssueType(s)); !ok {
		return "", Errorf(EINVALID, "unknown issue type %s", Quote(s))
	}
	return IssueType(s), nil
}

// Escalate is the severity of a finding seen occurrences times: its base, then its max once occurrences reaches
// the spec's EscalateAfter. A type outside the vocabulary is high: an unclassified problem deserves attention.
func Escalate(t IssueType, occurrences int) Severity {
	spec, ok := SpecFor(t)
	if !ok {
		return SeverityHigh
	}
	after := spec.EscalateAfter
	if after <= 0 {
		after = DefaultEscalateAfter
	}
	if occurrences >= after {
		return spec.Max
	}
	return spec.Base
}

// CoalesceKey is the one-open-row key of a finding: gov:<family>:<state>:<subject>, e.g.
// gov:candidate:stale:<group_key> (SPEC §11), or gov:<family>:<state> for a finding about the whole system.
// Input findings use the full state name (gov:input:incomplete_input:<key>) so the key mirrors the issue type.
// A type outside the vocabulary keys as gov:other:<type>:<subject>.
func CoalesceKey(t IssueType, subject string) string {
	family, state := "other", string(t)
	if spec, ok := SpecFor(t); ok {
		family, state = spec.Family, spec.State
		if family == "input" {
			state = strings.TrimPrefix(string(t), inputIssuePrefix)
		}
	}
	key := "gov:" + family + ":" + state
	if subject != "" {
		key += ":" + subject
	}
	return key
}

// Finding is one observation to record in system_issues.
type Finding struct {
	Type           IssueType      `json:"issue_type"`
	Subject        string         `json:"subject"` // what it is about: a group key, a source, a ruleset version, …
	Severity       Severity       `json:"severity"`
	RunID          string         `json:"run_id"`
	RulesetVersion string         `json:"ruleset_version"` // auto-close is keyed by (coalesce_key, ruleset_version)
	Evidence       map[string]any `json:"evidence"`
	// Group or Object names the candidate row the finding is about (a group key, an object's candidate key): while
	// the finding is open the row's issue_ref (input_quality_ref for an input.* finding) points at it (doc 40 §40.4).
	Group  string `json:"group,omitempty"`
	Object string `json:"object,omitempty"`
}

// IsInputIssue reports whether t is an input-quality finding type (input.<state>).
func IsInputIssue(t IssueType) bool { return strings.HasPrefix(string(t), inputIssuePrefix) }

// NewFinding builds a first-occurrence finding at its base severity.
func NewFinding(t IssueType, subject, runID, rulesetVersion string, evidence map[string]any) Finding {
	if evidence == nil {
		evidence = map[string]any{}
	}
	return Finding{Type: t, Subject: subject, Severity: Escalate(t, 1), RunID: runID,
		RulesetVersion: rulesetVersion, Evidence: evidence}
}

// CoalesceKey is the finding's coalesce key.
func (f Finding) CoalesceKey() string { return CoalesceKey(f.Type, f.Subject) }

// FindingExplain names what explains a finding: the group its coalesce key is about (a group finding's subject is
// its group key), else the object its evidence names. Both empty when nothing does (a source, a ruleset, …).
func FindingExplain(coalesceKey string, evidence map[string]any) (group, object string) {
	if i := strings.LastIndexByte(coalesceKey, ':'); i >= 0 && IsGroupKey(coalesceKey[i+1:]) {
		return coalesceKey[i+1:], ""
	}
	if g, ok := evidence["group_key"].(string); ok && IsGroupKey(g) {
		return g, ""
	}
	if o, ok := evidence["object"].(string); ok {
		if CheckObjectRef(o) == nil {
			return "", o
		}
	}
	return "", ""
}

// IsGroupKey reports whether s has a group key's form (GroupKey: 32 lowercase hex digits).
func IsGroupKey(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
