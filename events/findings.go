package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"gcos/postgres"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The loop a person works on a finding: show it, resolve it with a reason. Resolving closes the row the way an
// auto-close does (its candidate links cleared, the resolution announced); if the condition is still there the
// next scan raises it again and it reopens with its counts. Muting is the notifications' business, never the
// finding's (SPEC §10).

// FindingLink is what explains a finding: its group or object, and the API path of that explanation.
type FindingLink struct {
	Group  string `json:"group,omitempty"`
	Object string `json:"object,omitempty"`
	Path   string `json:"path"`
}

// findingLink derives the explain link of a row from its coalesce key and evidence (gcos.FindingExplain).
func findingLink(key string, evidence json.RawMessage) *FindingLink {
	var ev map[string]any
	_ = json.Unmarshal(evidence, &ev) // evidence GCOS did not write may be anything; then only the key counts
	return explainLink(key, ev)
}

// explainLink is the explain link of what a coalesce key and its evidence (or an announcement's payload) name.
func explainLink(key string, ev map[string]any) *FindingLink {
	group, object := gcos.FindingExplain(key, ev)
	switch {
	case group != "":
		return &FindingLink{Group: group, Path: "/v1/explain?group=" + group}
	case object != "":
		return &FindingLink{Object: object, Path: "/v1/explain?object=" + object}
	}
	return nil
}

// FindingResolution is a person's resolution of a finding, as its audit row records it.
type FindingResolution struct {
	AuditID    int64          `json:"audit_id"`
	ResolvedAt time.Time      `json:"resolved_at"`
	By         string         `json:"by"`
	Reason     string         `json:"reason"`
	Actor      map[string]any `json:"actor"`
}

// FindingDetail is one finding whole: its row, what explains it, what was announced about it and who resolved it.
type FindingDetail struct {
	FindingRow
	Events      []Event             `json:"events"`      // its announcements in the outbox, newest first (at most 20)
	Resolutions []FindingResolution `json:"resolutions"` // resolutions by a person, newest first (at most 20)
}

const findingColumns = `id, issue_type, severity, coalesce_key, occurrence_count, reopen_count, business_logic_hash,
       run_id, status, coalesce(evidence_snapshot::jsonb, '{}'::jsonb), first_seen_at, last_seen_at, resolved_at`

func scanFinding(r pgx.Row) (FindingRow, error) {
	var x FindingRow
	err := r.Scan(&x.ID, &x.IssueType, &x.Severity, &x.CoalesceKey, &x.OccurrenceCount, &x.ReopenCount,
		&x.RulesetVersion, &x.RunID, &x.Status, &x.Evidence, &x.FirstSeenAt, &x.LastSeenAt, &x.ResolvedAt)
	if err == nil {
		x.Explain = findingLink(x.CoalesceKey, x.Evidence)
	}
	return x, err
}

// FindingRow is one system_issues row as GCOS reports it.
type FindingRow struct {
	ID              int64           `json:"id"`
	IssueType       string          `json:"issue_type"`
	Severity        string          `json:"severity"`
	CoalesceKey     string          `json:"coalesce_key"`
	OccurrenceCount int             `json:"occurrence_count"`
	ReopenCount     int             `json:"reopen_count"`
	RulesetVersion  *string         `json:"ruleset_version"`
	RunID           *string         `json:"run_id"`
	Status          string          `json:"status"`
	Evidence        json.RawMessage `json:"evidence"`
	FirstSeenAt     any             `json:"first_seen_at"`
	LastSeenAt      any             `json:"last_seen_at"`
	ResolvedAt      any             `json:"resolved_at"`
	// Explain is what explains the finding (its group or object) and where to read it; absent when nothing does.
	Explain *FindingLink `json:"explain,omitempty"`
}

// FindingFilter narrows ListFindings.
type FindingFilter struct {
	OpenOnly  bool
	IssueType string
	Limit     int
}

// ListFindings returns GCOS's findings (coalesce keys starting with "gov:"), newest first.
func (l *Loop) ListFindings(ctx context.Context, f FindingFilter) ([]FindingRow, error) {
	var err error
	if f.Limit, err = postgres.CheckLimit("limit", f.Limit, postgres.DefaultFindingLimit, postgres.MaxFindingLimit); err != nil {
		return nil, err
	}
	if f.IssueType != "" {
		if _, err := gcos.ParseIssueType(f.IssueType); err != nil {
			return nil, err
		}
	}
	rows, err := l.core.Pool().Query(ctx, `
		SELECT `+findingColumns+`
		FROM system_issues
		WHERE coalesce_key LIKE 'gov:%' AND (NOT $1 OR status = 'open') AND ($2 = '' OR issue_type = $2)
		ORDER BY last_seen_at DESC, id DESC LIMIT $3`, f.OpenOnly, f.IssueType, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FindingRow, error) { return scanFinding(r) })
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	return out, nil
}

// CheckFindingID reads a finding id given as text.
func CheckFindingID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || id <= 0 {
		return 0, gcos.Errorf(gcos.EINVALID, "finding id %s: want a positive number (gcos findings list shows them)", gcos.Quote(s))
	}
	return id, nil
}

// GetFinding returns one of GCOS's findings whole; an id GCOS did not raise is ENOTFOUND.
func (l *Loop) GetFinding(ctx context.Context, id int64) (FindingDetail, error) {
	var d FindingDetail
	row, err := scanFinding(l.core.Pool().QueryRow(ctx, `SELECT `+findingColumns+` FROM system_issues WHERE id = $1 AND coalesce_key LIKE 'gov:%'`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, gcos.Errorf(gcos.ENOTFOUND, "finding %d: no such finding (gcos findings list shows them)", id)
	}
	if err != nil {
		return d, fmt.Errorf("finding %d: %w", id, err)
	}
	d.FindingRow = row
	// Its announcements, where doc 41 §41.5 addresses them (a candidate finding at its group's row, …).
	table, ref := postgres.FindingAddress(gcos.IssueType(row.IssueType), row.CoalesceKey)
	rows, err := l.core.Pool().Query(ctx, `
		SELECT o.id::text, o.event_domain, o.event_type, o.event_stream, o.delivery_lane, coalesce(o.event_severity, ''),
		       o.event_subject_table, coalesce(o.event_subject_ref, ''), o.canonical_address, o.actor_ref, o.source_system,
		       o.safe_payload
		FROM event_outbox o
		WHERE o.event_domain = $1 AND o.event_subject_table = $2 AND o.event_subject_ref = $3
		  AND o.safe_payload->>'coalesce_key' = $4
		ORDER BY o.created_at DESC NULLS LAST, o.id DESC LIMIT 20`, gcos.EventDomain, table, ref, row.CoalesceKey)
	if err != nil {
		return d, fmt.Errorf("finding %d: events: %w", id, err)
	}
	d.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var payload []byte
		if err := r.Scan(&e.ID, &e.Domain, &e.Type, &e.Stream, &e.DeliveryLane, &e.Severity, &e.SubjectTable,
			&e.SubjectRef, &e.CanonicalAddress, &e.ActorRef, &e.SourceSystem, &payload); err != nil {
			return e, err
		}
		return e, json.Unmarshal(payload, &e.Payload)
	})
	if err != nil {
		return d, fmt.Errorf("finding %d: events: %w", id, err)
	}
	rows, err = l.core.Pool().Query(ctx, `
		SELECT id, "timestamp", changed_by, coalesce(alert_detail::jsonb, '{}'::jsonb)
		FROM registry_changelog
		WHERE entity_type = 'governance_finding' AND entity_code = $1 AND action = 'resolve'
		ORDER BY id DESC LIMIT 20`, strconv.FormatInt(id, 10))
	if err != nil {
		return d, fmt.Errorf("finding %d: resolutions: %w", id, err)
	}
	d.Resolutions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (FindingResolution, error) {
		var x FindingResolution
		var detail struct {
			Reason string         `json:"reason"`
			Actor  map[string]any `json:"actor"`
		}
		var raw []byte
		if err := r.Scan(&x.AuditID, &x.ResolvedAt, &x.By, &raw); err != nil {
			return x, err
		}
		if err := json.Unmarshal(raw, &detail); err != nil {
			return x, err
		}
		x.By, x.Reason, x.Actor = strings.TrimPrefix(x.By, "gcos:"), detail.Reason, detail.Actor
		return x, nil
	})
	if err != nil {
		return d, fmt.Errorf("finding %d: resolutions: %w", id, err)
	}
	return d, nil
}

// MaxReasonBytes bounds a resolution's reason.
const MaxReasonBytes = 2000

// ResolveFindingAs closes an open finding because a person says so, with a reason: one audit row names them
// whole and carries the reason, and the resolution is announced like an auto-close (actor_ref the principal).
// With principals configured the person must hold the operator role. An unknown id is ENOTFOUND, a finding
// already resolved ECONFLICT, a missing reason EINVALID; each changes nothing. If the condition is still there,
// the next scan raises the finding again and it reopens with its counts. The groups of the object rows it held are
// marked dirty (input): their rows lost the reason they were materialized for.
func (l *Loop) ResolveFindingAs(ctx context.Context, id int64, reason string, by gcos.Actor) (FindingRow, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return FindingRow{}, gcos.Errorf(gcos.EINVALID, "resolve finding %d: a reason is required (--reason)", id)
	case len(reason) > MaxReasonBytes:
		return FindingRow{}, gcos.Errorf(gcos.EINVALID, "resolve finding %d: the reason is %d bytes, longer than %d", id, len(reason), MaxReasonBytes)
	}
	if err := gcos.CheckParam("reason", reason); err != nil {
		return FindingRow{}, err
	}
	if err := by.Check("resolve finding"); err != nil {
		return FindingRow{}, err
	}
	if err := gcos.MayAct(l.cfg.Principals, by.Principal, gcos.RoleOperator); err != nil {
		return FindingRow{}, gcos.Errorf(gcos.EFORBIDDEN, "resolve finding %d: %s", id, gcos.ErrorMessage(err))
	}
	var out FindingRow
	err := l.core.InTx(ctx, func(tx pgx.Tx) error {
		if err := postgres.ResolveFindingByIDTx(ctx, tx, id, reason, by); err != nil {
			return err
		}
		var err error
		out, err = scanFinding(tx.QueryRow(ctx, `SELECT `+findingColumns+` FROM system_issues WHERE id = $1`, id))
		return err
	})
	return out, err
}
