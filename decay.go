package gcos

import "time"

// Recompute statuses of a candidate row (governance_candidate_state.recompute_status).
const (
	RecomputeOK       = "ok"
	RecomputeDirty    = "dirty"
	RecomputeScanning = "scanning" // allowed by the schema; a scan holds its rows locked and never writes it (only it would see it)
	RecomputeFailed   = "failed"
)

// RecomputeStatuses lists every recompute status (the CHECK list of recompute_status).
var RecomputeStatuses = []string{RecomputeOK, RecomputeDirty, RecomputeScanning, RecomputeFailed}

// Lifecycle statuses of a candidate row (governance_candidate_state.lifecycle_status).
const (
	LifecycleActive     = "active"
	LifecycleSuperseded = "superseded"
	LifecycleRetired    = "retired"
)

// LifecycleStatuses lists every lifecycle status of a candidate row (the CHECK list of lifecycle_status).
var LifecycleStatuses = []string{LifecycleActive, LifecycleSuperseded, LifecycleRetired}

// Reasons a row is not clean, as machine words (EffectiveState.Reasons).
const (
	ReasonDirty             = "dirty"              // a dirty mark is pending
	ReasonRecomputeScanning = "recompute_scanning" // a scan is re-evaluating the row right now
	ReasonRecomputeFailed   = "recompute_failed"   // the last re-evaluation failed
	ReasonRecomputeUnknown  = "recompute_unknown"  // recompute_status holds an unexpected value
	ReasonExpired           = "expired"            // now is at or past stale_after
	ReasonNoStaleAfter      = "stale_after_missing"
	ReasonRulesetDraft      = "ruleset_draft"      // computed under a draft ruleset
	ReasonRulesetSuperseded = "ruleset_superseded" // computed under a ruleset no longer active
	ReasonRulesetMissing    = "ruleset_missing"    // the row's ruleset has no governance_ruleset row
	ReasonRulesetNotActive  = "ruleset_not_active" // any other mismatch with the active version (none active, race)
	ReasonSnapshotDangling  = "snapshot_dangling"  // the row's source snapshot was pruned
	ReasonStoredUnknown     = "stored_unknown"     // the scan itself could not decide
)

// CandidateRow is what the decay and the gate read of a governance_candidate_state (or candidate_object) row.
type CandidateRow struct {
	GroupKey          string     `json:"group_key"`
	SnapshotRef       int64      `json:"source_snapshot_ref"`
	RulesetVersion    string     `json:"ruleset_version"`
	ScanTime          time.Time  `json:"scan_time"`
	Verdict           Verdict    `json:"candidate_verdict"`
	InputQualityState *string    `json:"input_quality_state"`
	Dirty             bool       `json:"dirty"`
	DirtyReason       *string    `json:"dirty_reason"`
	StaleAfter        *time.Time `json:"stale_after"`
	RecomputeStatus   string     `json:"recompute_status"`
	RiskClass         string     `json:"risk_class"`
	CoverageRequired  bool       `json:"coverage_required"`
	CoverageScanRef   *string    `json:"coverage_scan_ref"`
	OwnerScope        *string    `json:"owner_scope"`
	LifecycleStatus   string     `json:"lifecycle_status"`
	MemberCount       int64      `json:"member_count"`
}

// RulesetState is what a reader knows about rulesets: the active version and the status of the row's version.
type RulesetState struct {
	ActiveVersion    string `json:"active_version"`     // "" when none is active
	RowRulesetStatus string `json:"row_ruleset_status"` // RulesetActive, RulesetDraft, RulesetSuperseded, RulesetMissing
}

// EffectiveState is a row's verdict as of now: the stored verdict only while the row is clean.
type EffectiveState struct {
	Verdict Verdict  `json:"effective_verdict"`
	Clean   bool     `json:"clean"`
	Reasons []string `json:"reasons"` // why it is not clean (Reason* words); empty when clean
}

// Effective computes the read-time state of a row (SPEC §7). Clean is the conjunction recompute_status='ok' AND
// NOT dirty AND now < stale_after AND ruleset_version = the active version AND the snapshot exists; it decays on
// its own, with no write. A row dirty (or being re-scanned) for its membership alone (MembershipOnly) counts as
// not dirty: no verdict rests on membership. The effective verdict is
//   - the stored verdict when clean;
//   - unknown when the stored verdict is unknown (staleness never makes it look better), or when the row was
//     computed under a draft ruleset and the group is high risk (SPEC §6);
//   - stale otherwise, whatever is stored.
func Effective(r CandidateRow, now time.Time, active RulesetState, snapshotExists bool, highRisk bool) EffectiveState {
	reasons := []string{}
	// Dirty (or being re-scanned) for its membership alone, the row keeps its verdict: no verdict rests on it.
	membership := r.Dirty && MembershipOnly(r.DirtyReason) &&
		(r.RecomputeStatus == RecomputeDirty || r.RecomputeStatus == RecomputeScanning)
	switch {
	case membership, r.RecomputeStatus == RecomputeOK:
	case r.RecomputeStatus == RecomputeDirty:
		reasons = append(reasons, ReasonDirty)
	case r.RecomputeStatus == RecomputeScanning:
		reasons = append(reasons, ReasonRecomputeScanning)
	case r.RecomputeStatus == RecomputeFailed:
		reasons = append(reasons, ReasonRecomputeFailed)
	default:
		reasons = append(reasons, ReasonRecomputeUnknown)
	}
	if r.Dirty && r.RecomputeStatus != RecomputeDirty && !membership {
		reasons = append(reasons, ReasonDirty)
	}
	switch {
	case r.StaleAfter == nil:
		reasons = append(reasons, ReasonNoStaleAfter)
	case !now.Before(*r.StaleAfter):
		reasons = append(reasons, ReasonExpired)
	}
	draft := false
	if active.ActiveVersion == "" || r.RulesetVersion != active.ActiveVersion {
		switch active.RowRulesetStatus {
		case RulesetDraft:
			draft = true
			reasons = append(reasons, ReasonRulesetDraft)
		case RulesetSuperseded:
			reasons = append(reasons, ReasonRulesetSuperseded)
		case RulesetMissing:
			reasons = append(reasons, ReasonRulesetMissing)
		default:
			reasons = append(reasons, ReasonRulesetNotActive)
		}
	}
	if !snapshotExists {
		reasons = append(reasons, ReasonSnapshotDangling)
	}

	if len(reasons) == 0 {
		return EffectiveState{Verdict: r.Verdict, Clean: true, Reasons: reasons}
	}
	switch {
	case r.Verdict == VerdictUnknown:
		reasons = append(reasons, ReasonStoredUnknown)
		return EffectiveState{Verdict: VerdictUnknown, Reasons: reasons}
	case draft && highRisk:
		return EffectiveState{Verdict: VerdictUnknown, Reasons: reasons}
	}
	return EffectiveState{Verdict: VerdictStale, Reasons: reasons}
}

// StaleAfter is when a verdict computed at scanTime stops being clean: scan_time + ttl(risk_class).
func StaleAfter(scanTime time.Time, ttl time.Duration) time.Time { return scanTime.Add(ttl) }
