package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// GCOS's own announcements (doc 41 §41.4, SPEC §10): a finding opening, reopening or resolving, a run completing,
// a snapshot captured or pruned, a ruleset proposed or activated, a group gaining or losing its owner or
// exception. Each is a signal of the one emit path, captured in the same transaction as the fact it announces (so
// a rolled-back fact announces nothing and a committed one is never lost), and released by the promoter under the
// emission discipline once its type is active.

// The lifecycle announcements of snapshots and rulesets.
const (
	EventSnapshotCaptured = "governance.snapshot.captured"
	EventSnapshotPruned   = "governance.snapshot.pruned"
	EventRulesetProposed  = "governance.ruleset.proposed"
	EventRulesetActivated = "governance.ruleset.activated"
	// The emission discipline's own: a window's digest of what it held back, and an unread announcement escalated.
	EventCoverageSummary = "governance.coverage.summary"
	EventEscalated       = "governance.lifecycle.escalated"
)

// AnnouncedEventTypes lists, sorted, every event type GCOS announces itself: each finding type's (opened, reopened,
// resolved), the exception variants, the runs', the coverage changes', the snapshots' and rulesets', the handoff
// heartbeat, the digest and the escalation. docs/REFERENCE.md lists them and every one is in the vocabulary
// (tested).
func AnnouncedEventTypes() []string {
	out := []string{EventSnapshotCaptured, EventSnapshotPruned, EventRulesetProposed, EventRulesetActivated,
		"governance.handoff.heartbeat", EventCoverageSummary, EventEscalated,
		"governance.exception.expired", "governance.exception.unratified", "governance.exception.revoked"}
	for _, s := range gcos.IssueSpecs {
		out = append(out, s.EventType())
	}
	for _, q := range gcos.InputFindingStates {
		if t, ok := FindingEventType(gcos.InputIssue(q), ""); ok {
			out = append(out, t)
		}
	}
	for _, ts := range runEventTypes {
		out = append(out, ts...)
	}
	for _, ts := range runFailedEventTypes {
		out = append(out, ts...)
	}
	out = append(out, gcos.EventGapResolved)
	out = append(out, gcos.CoverageEventTypes()...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Finding transitions, as announced (the payload's transition).
const (
	TransitionOpened   = "opened"
	TransitionReopened = "reopened"
	TransitionResolved = "resolved"
)

// AnnounceTx captures a: Announce set, GCOS as actor and source unless a says otherwise.
func AnnounceTx(ctx context.Context, tx pgx.Tx, a Emit) error {
	a.Announce = true
	if a.ActorRef == "" {
		a.ActorRef = "gcos"
	}
	if a.SourceSystem == "" {
		a.SourceSystem = "gcos"
	}
	res, err := EmitSignals(ctx, tx, []Emit{a})
	if err != nil {
		return fmt.Errorf("announce %s: %w", a.EventType, err)
	}
	if res[0].Outcome == EmitOutcomeRejected {
		return fmt.Errorf("announce %s: %s", a.EventType, res[0].Reason)
	}
	return nil
}

// findingEvent is one transition of one system_issues row.
type findingEvent struct {
	id                   int64
	issueType            gcos.IssueType
	key                  string
	transition, severity string
	occurrences, reopens int
	ruleset, group       string
	reason               string // exception_lifted: why the exception stopped counting
	// scope: the scope a coverage or input finding names (its evidence).
	scope string
	// resolvedBy and auditID: a finding a person resolved (findings resolve), and the audit row that says why.
	resolvedBy string
	auditID    int64
}

// closedFields are the scan targets of closedColumns.
func (f *findingEvent) closedFields() []any {
	return []any{&f.id, &f.issueType, &f.key, &f.severity, &f.occurrences, &f.reopens, &f.ruleset, &f.reason,
		&f.scope}
}

// inputEventTypes are the input-quality findings doc 41 §41.4 announces on the backfill stream instead of the input
// one: an object missing from birth or its registry is an inventory gap, one awaiting the backfill is incomplete.
var inputEventTypes = map[gcos.IssueType]string{
	gcos.InputIssue(gcos.InputBirthOrRegistryMissing): "governance.backfill.inventory_gap",
	gcos.InputIssue(gcos.InputNeedsBackfill):          "governance.backfill.incomplete",
}

// FindingEventType is the governance event announcing a finding of type t: its spec's type, except an exception
// lift, which says whether the exception expired, was never ratified, or lapsed otherwise.
func FindingEventType(t gcos.IssueType, reason string) (string, bool) {
	spec, ok := gcos.SpecFor(t)
	if !ok {
		return "", false
	}
	if e, ok := inputEventTypes[t]; ok {
		return e, true
	}
	if t == gcos.IssueExceptionLifted {
		switch reason {
		case gcos.LiftExpired:
			return "governance.exception.expired", true
		case gcos.LiftNotApproved:
			return "governance.exception.unratified", true
		case gcos.LiftRevoked:
			return "governance.exception.revoked", true
		}
	}
	return spec.EventType(), true
}

// announceFinding captures the announcement of one finding transition, addressed as doc 41 §41.5 gives it for its
// family (findingSubject). Its correlation id names the row, the transition and the open cycle, so a replay announces
// nothing twice; its subject lets the cooldown coalesce a flapping finding.
func announceFinding(ctx context.Context, tx pgx.Tx, f findingEvent) error {
	eventType, ok := FindingEventType(f.issueType, f.reason)
	if !ok {
		return nil // a type outside the vocabulary has no event to announce
	}
	if f.transition == TransitionResolved && gcos.IsCoverageGap(f.issueType) {
		eventType = gcos.EventGapResolved
	}
	payload := map[string]any{
		"issue_id": f.id, "issue_type": string(f.issueType), "coalesce_key": f.key, "transition": f.transition,
		"severity": f.severity, "occurrence_count": f.occurrences, "reopen_count": f.reopens,
	}
	if f.ruleset != "" {
		payload["ruleset_version"] = f.ruleset
	}
	if f.group == "" {
		f.group, _ = gcos.FindingExplain(f.key, nil)
	}
	if f.group != "" {
		payload["group_key"] = f.group
	}
	if b := gcos.IssueBucket(f.issueType); b != "" {
		payload["bucket"] = b
	}
	table, ref := findingSubject(f)
	switch {
	case table == "governance_candidate_state" && f.group != "" && EventStreamIs(eventType, "candidate"):
		// candidate.*: the verdict it is about, under which ruleset and snapshot, and why the group was dirtied.
		var verdict, ruleset, dirtyReason *string
		var snapshot *int64
		err := tx.QueryRow(ctx, `SELECT candidate_verdict, ruleset_version, source_snapshot_ref, dirty_reason
			FROM governance_candidate_state WHERE group_key = $1
			  AND ruleset_version = coalesce($2, (SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'))`,
			f.group, nullIfEmpty(f.ruleset)).Scan(&verdict, &ruleset, &snapshot, &dirtyReason)
		if err != nil && err != pgx.ErrNoRows {
			return fmt.Errorf("announce %s: read candidate %s: %w", eventType, f.group, err)
		}
		for k, v := range map[string]*string{"candidate_verdict": verdict, "ruleset_version": ruleset, "dirty_reason": dirtyReason} {
			if v != nil {
				payload[k] = *v
			}
		}
		if snapshot != nil {
			payload["source_snapshot_ref"] = *snapshot
		}
	case gcos.IsInputIssue(f.issueType):
		// input.*: the input-quality state (doc 41 §41.5), beside the scope where the finding names one.
		payload["input_quality_state"] = strings.TrimPrefix(string(f.issueType), "input.")
		if f.scope != "" {
			payload["scope"] = f.scope
		}
	case gcos.IsCoverageGap(f.issueType):
		// coverage.*: the gap, its scope, the anchor it coalesces on, and what would close it (doc 24 §2).
		payload["gap_type"], payload["coalesce_anchor"] = gcos.GapType(f.issueType), f.key
		if f.scope != "" {
			payload["scope"] = f.scope
		}
		payload["proposed_action_code"] = gcos.ProposedAction(f.issueType)
	}
	severity := ""
	if f.transition == TransitionResolved {
		severity = "info"
	}
	if f.auditID != 0 {
		payload["audit_id"] = f.auditID
	}
	return AnnounceTx(ctx, tx, Emit{ActorRef: f.resolvedBy,
		EventType: eventType, SubjectTable: table, SubjectRef: ref,
		CollectionName: table, EntityCode: ref,
		CorrelationID: fmt.Sprintf("finding:%d:%s:%d", f.id, f.transition, f.reopens),
		Severity:      severity, Payload: payload,
	})
}

// EventStreamIs reports whether eventType is in the governance stream named stream ("candidate").
func EventStreamIs(eventType, stream string) bool {
	return gcos.EventStreamOf(eventType) == gcos.EventDomain+"."+stream
}

// FindingAddress is where the announcements of the finding of type t with coalesce key key are addressed
// (event_subject_table, event_subject_ref): what a finding's detail reads its announcements by.
func FindingAddress(t gcos.IssueType, key string) (table, ref string) {
	group, _ := gcos.FindingExplain(key, nil)
	return findingSubject(findingEvent{issueType: t, key: key, group: group})
}

// findingSubject addresses a finding's announcement as doc 41 §41.5 gives it: candidate.*, backfill.* and input.*
// at governance_candidate_state by group key (or the finding's subject when it names no group: a candidate key, a
// collection), coverage detections at the governed row's table (the group, the scope, the registry row), and every
// other finding at its system_issues row by coalesce key.
func findingSubject(f findingEvent) (table, ref string) {
	spec, _ := gcos.SpecFor(f.issueType)
	subject := f.key
	if i := strings.Index(f.key, ":"+spec.State+":"); i >= 0 {
		subject = f.key[i+len(spec.State)+2:]
	}
	if e, ok := inputEventTypes[f.issueType]; ok && EventStreamIs(e, "backfill") || spec.Family == "candidate" || spec.Family == "input" ||
		spec.Family == "backfill" {
		if f.group != "" {
			return "governance_candidate_state", f.group
		}
		return "governance_candidate_state", subject
	}
	switch f.issueType {
	case gcos.IssueCoverageOrphan:
		if strings.HasPrefix(subject, "object:") {
			return "governance_candidate_object", strings.TrimPrefix(subject, "object:")
		}
		return "governance_group", subject
	case gcos.IssueCoverageOwnerGap:
		return gcos.TableScopes, subject
	case gcos.IssueCoverageIsland:
		if table, id, ok := strings.Cut(subject, ":"); ok {
			return table, id
		}
	case gcos.IssuePhantomGap:
		return gcos.TableExceptions, strings.TrimPrefix(subject, "exception:")
	}
	return "system_issues", f.key
}
