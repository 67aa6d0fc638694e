package gcos

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// ChangeKind is one of the ten handoff kinds of doc 32 §3: what happened in a source registry.
type ChangeKind string

// The ten handoff kinds.
const (
	ChangeObjectBorn       ChangeKind = "object_born"
	ChangeObjectRegistered ChangeKind = "object_registered"
	ChangeCollection       ChangeKind = "collection_changed"
	ChangeCount            ChangeKind = "count_changed"
	ChangeObjectRetired    ChangeKind = "object_retired"
	ChangeSource           ChangeKind = "source_changed"
	ChangeAxisIntroduced   ChangeKind = "axis_introduced"
	ChangePolicy           ChangeKind = "policy_changed"
	ChangeAuthority        ChangeKind = "authority_changed"
	ChangeRuleset          ChangeKind = "ruleset_changed"
)

// ChangeKinds lists the ten kinds in doc 32 order.
var ChangeKinds = []ChangeKind{
	ChangeObjectBorn, ChangeObjectRegistered, ChangeCollection, ChangeCount, ChangeObjectRetired,
	ChangeSource, ChangeAxisIntroduced, ChangePolicy, ChangeAuthority, ChangeRuleset,
}

// ParseChangeKind accepts one of ChangeKinds.
func ParseChangeKind(s string) (ChangeKind, error) { return parseEnum(s, "change kind", ChangeKinds) }

// EventType is the governance event a handoff of this kind emits (doc 41 §41.4 family A).
func (k ChangeKind) EventType() string { return "governance.handoff." + string(k) }

// Dirty reasons (governance_candidate_state.dirty_reason) other than handoff:<kind> (SPEC §8).
const (
	DirtyAxis          = "axis"           // axis introduced or axis policy changed
	DirtyRulesetBump   = "ruleset_bump"   // policy changed or a new ruleset activated
	DirtyAuthority     = "authority"      // owner, approval or exception changed
	DirtySnapshotDrift = "snapshot_drift" // a group's fingerprint changed between snapshots
	DirtyTTL           = "ttl"            // the row expired (or the gate asked for a re-scan)
	DirtyInput         = "input"          // input correction or late data
)

// DirtyReasonFor is the dirty_reason a handoff of kind k writes: handoff:<kind> for the six object/registry
// kinds, and the shared reason of SPEC §8 for the others.
func DirtyReasonFor(k ChangeKind) string {
	switch k {
	case ChangeAxisIntroduced:
		return DirtyAxis
	case ChangePolicy, ChangeRuleset:
		return DirtyRulesetBump
	case ChangeAuthority:
		return DirtyAuthority
	}
	return "handoff:" + string(k)
}

// Signal is one handoff as it travels: addresses, refs and provenance, never the object's contents.
type Signal struct {
	ObjectType     string     `json:"object_type"`
	CollectionName string     `json:"collection_name"`
	GroupKey       string     `json:"group_key"`
	ChangeKind     ChangeKind `json:"change_kind"`
	Source         string     `json:"source"`
	OccurredAt     time.Time  `json:"occurred_at"`
}

// Validate checks that a signal names a known kind, a source and a time.
func (s Signal) Validate() error {
	if _, err := ParseChangeKind(string(s.ChangeKind)); err != nil {
		return Errorf(EINVALID, "signal: change_kind: %w", err)
	}
	if s.Source == "" {
		return Errorf(EINVALID, "signal: source: must not be empty (every signal carries provenance)")
	}
	if s.OccurredAt.IsZero() {
		return Errorf(EINVALID, "signal: occurred_at: must be set")
	}
	return nil
}

// SafePayload is the signal as an event_outbox safe_payload (payload_classification safe_metadata).
func (s Signal) SafePayload() map[string]any {
	return map[string]any{
		"object_type":     s.ObjectType,
		"collection_name": s.CollectionName,
		"group_key":       s.GroupKey,
		"change_kind":     string(s.ChangeKind),
		"occurred_at":     s.OccurredAt.UTC().Format(time.RFC3339Nano),
		"source":          s.Source,
	}
}

// SafePayloadKeys are the only keys a signal's payload may carry ("signal, not data", SPEC §9.3, doc 41 §41.5):
// addresses, refs, states and counts. The first row is the handoff's; the rest are what GCOS's own announcements
// carry (a finding's id, key and transition; a run's mode and counts; the routed owner).
var SafePayloadKeys = []string{
	"object_type", "collection_name", "group_key", "change_kind", "occurred_at", "source",
	"object_ref", "canonical_address", "count",
	"issue_id", "issue_type", "coalesce_key", "transition", "severity", "occurrence_count", "reopen_count",
	"scope", "ruleset_version", "source_snapshot_ref", "snapshot_id", "exception_id", "run_id", "mode", "status",
	"groups", "objects", "mismatches", "seen", "coalesced", "enqueued", "failed", "dlq", "held", "pruned",
	"owner_ref", "route", "event_type", "event_id", "window_start", "window_end", "audit_id",
	"coverage_before", "coverage_after",
	"affected_groups", "changed_groups", "allow_to_block", "block_to_allow", "preview_failed",
	"candidate_verdict", "dirty_reason", "gap_type", "coalesce_anchor", "proposed_action_code", "bucket", "input_quality_state",
}

// ValidateSafePayload rejects a payload with any key outside SafePayloadKeys, or any value that is not a scalar
// (a nested object or array could smuggle contents under an allowed key). The error names every offending key.
func ValidateSafePayload(p map[string]any) error {
	var bad []string
	for k, v := range p {
		if !slices.Contains(SafePayloadKeys, k) {
			bad = append(bad, fmt.Sprintf("key %q is not allowed", k))
			continue
		}
		switch v.(type) {
		case nil, string, bool, json.Number, time.Time,
			float32, float64, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		default:
			bad = append(bad, fmt.Sprintf("key %q: value must be a scalar, got %T", k, v))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return Errorf(EINVALID, "safe payload: %s (allowed keys: %s)", strings.Join(bad, "; "),
			strings.Join(SafePayloadKeys, ", "))
	}
	return nil
}
