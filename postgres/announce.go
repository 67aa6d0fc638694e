package postgres

import (
	"context"
	"fmt"
	"slices"

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
		"governance.exception.expired", "governance.exception.unratified"}
	for _, s := range gcos.IssueSpecs {
		out = append(out, s.EventType())
	}
	for _, q := range gcos.InputQualities {
		if t, ok := FindingEventType(gcos.InputIssue(q), ""); ok {
			out = append(out, t)
		}
	}
	for _, ts := range runEventTypes {
		out = append(out, ts...)
	}
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
	// resolvedBy and auditID: a finding a person resolved (findings resolve), and the audit row that says why.
	resolvedBy string
	auditID    int64
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
		}
	}
	return spec.EventType(), true
}

// announceFinding captures the announcement of one finding transition. Its subject is the finding's key, so the
// cooldown coalesces a flapping finding; its correlation id names the row, the transition and the open cycle, so a
// replay announces nothing twice.
func announceFinding(ctx context.Context, tx pgx.Tx, f findingEvent) error {
	eventType, ok := FindingEventType(f.issueType, f.reason)
	if !ok {
		return nil // a type outside the vocabulary has no event to announce
	}
	payload := map[string]any{
		"issue_id": f.id, "issue_type": string(f.issueType), "coalesce_key": f.key, "transition": f.transition,
		"severity": f.severity, "occurrence_count": f.occurrences, "reopen_count": f.reopens,
	}
	if f.ruleset != "" {
		payload["ruleset_version"] = f.ruleset
	}
	if f.group != "" {
		payload["group_key"] = f.group
	}
	severity := ""
	if f.transition == TransitionResolved {
		severity = "info"
	}
	if f.auditID != 0 {
		payload["audit_id"] = f.auditID
	}
	return AnnounceTx(ctx, tx, Emit{ActorRef: f.resolvedBy,
		EventType: eventType, SubjectTable: "system_issues", SubjectRef: f.key,
		CollectionName: "system_issues", EntityCode: f.key,
		CorrelationID: fmt.Sprintf("finding:%d:%s:%d", f.id, f.transition, f.reopens),
		Severity:      severity, Payload: payload,
	})
}
