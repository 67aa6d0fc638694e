package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/events"
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
	Events      []events.Event      `json:"events"`      // its announcements in the outbox, newest first (at most 20)
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

// CheckFindingID reads a finding id given as text.
func CheckFindingID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || id <= 0 {
		return 0, gcos.Errorf(gcos.EINVALID, "finding id %q: want a positive number (gcos findings list shows them)", gcos.Clip(s))
	}
	return id, nil
}

// GetFinding returns one of GCOS's findings whole; an id GCOS did not raise is ENOTFOUND.
func (s *Store) GetFinding(ctx context.Context, id int64) (FindingDetail, error) {
	var d FindingDetail
	row, err := scanFinding(s.pool.QueryRow(ctx, `SELECT `+findingColumns+` FROM system_issues WHERE id = $1 AND coalesce_key LIKE 'gov:%'`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return d, gcos.Errorf(gcos.ENOTFOUND, "finding %d: no such finding (gcos findings list shows them)", id)
	}
	if err != nil {
		return d, fmt.Errorf("finding %d: %w", id, err)
	}
	d.FindingRow = row
	rows, err := s.pool.Query(ctx, `
		SELECT o.id::text, o.event_domain, o.event_type, o.event_stream, o.delivery_lane, coalesce(o.event_severity, ''),
		       o.event_subject_table, coalesce(o.event_subject_ref, ''), o.canonical_address, o.actor_ref, o.source_system,
		       o.safe_payload
		FROM event_outbox o
		WHERE o.event_domain = $1 AND o.event_subject_table = 'system_issues' AND o.event_subject_ref = $2
		ORDER BY o.created_at DESC NULLS LAST, o.id DESC LIMIT 20`, events.Domain, row.CoalesceKey)
	if err != nil {
		return d, fmt.Errorf("finding %d: events: %w", id, err)
	}
	d.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Event, error) {
		var e events.Event
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
	rows, err = s.pool.Query(ctx, `
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

// findingResolveByIDSQL closes one open finding by id, clears the candidate rows' links to it and returns the groups
// of the object rows it held.
const findingResolveByIDSQL = `
WITH closed AS (
    UPDATE system_issues SET status = 'resolved', resolved_at = now()
    WHERE id = $1 AND status = 'open'
    RETURNING ` + closedColumns + `
` + unlinkClosedSQL + `
SELECT closed.*, ARRAY(SELECT group_key FROM o1 UNION SELECT group_key FROM o2 ORDER BY 1) FROM closed`

// MaxReasonBytes bounds a resolution's reason.
const MaxReasonBytes = 2000

// ResolveFindingAs closes an open finding because a person says so, with a reason: one audit row names them
// whole and carries the reason, and the resolution is announced like an auto-close (actor_ref the principal).
// With principals configured the person must hold the operator role. An unknown id is ENOTFOUND, a finding
// already resolved ECONFLICT, a missing reason EINVALID; each changes nothing. If the condition is still there,
// the next scan raises the finding again and it reopens with its counts. The groups of the object rows it held are
// marked dirty (input): their rows lost the reason they were materialized for.
func (s *Store) ResolveFindingAs(ctx context.Context, id int64, reason string, by gcos.Actor) (FindingRow, error) {
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
	if err := gcos.MayAct(s.cfg.Principals, by.Principal, gcos.RoleOperator); err != nil {
		return FindingRow{}, gcos.Errorf(gcos.EFORBIDDEN, "resolve finding %d: %s", id, gcos.ErrorMessage(err))
	}
	var out FindingRow
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var key, status string
		err := tx.QueryRow(ctx, `SELECT coalesce_key, status FROM system_issues WHERE id = $1 AND coalesce_key LIKE 'gov:%'`, id).Scan(&key, &status)
		if errors.Is(err, pgx.ErrNoRows) {
			return gcos.Errorf(gcos.ENOTFOUND, "resolve finding %d: no such finding (gcos findings list shows them)", id)
		}
		if err != nil {
			return fmt.Errorf("resolve finding %d: %w", id, err)
		}
		// The raisers' lock: a scan re-raising the same key waits, and then reopens what this closed.
		if _, err := tx.Exec(ctx, findingLockSQL, key); err != nil {
			return fmt.Errorf("resolve finding %d: lock: %w", id, err)
		}
		rows, err := tx.Query(ctx, findingResolveByIDSQL, id)
		if err != nil {
			return fmt.Errorf("resolve finding %d: %w", id, err)
		}
		var held []string // the groups of the object rows the finding held
		closed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (findingEvent, error) {
			var f findingEvent
			err := r.Scan(&f.id, &f.issueType, &f.key, &f.severity, &f.occurrences, &f.reopens, &f.ruleset, &f.reason, &held)
			return f, err
		})
		if err != nil {
			return fmt.Errorf("resolve finding %d: %w", id, err)
		}
		if len(closed) == 0 {
			return gcos.Errorf(gcos.ECONFLICT, "resolve finding %d: it is not open (status %s); nothing changed", id, status)
		}
		f := closed[0]
		// An object row held by the finding lost its reason: its group is re-evaluated (dirty reason input, as for a
		// corrected input), so the row becomes a tombstone there and the incremental state stays equal to a
		// from-scratch evaluation.
		if _, err := MarkKeysDirtyTx(ctx, tx, held, gcos.DirtyInput); err != nil {
			return fmt.Errorf("resolve finding %d: %w", id, err)
		}
		f.auditID, err = Audit(ctx, tx, AuditEntry{EntityType: "governance_finding", EntityCode: strconv.FormatInt(id, 10),
			Action: "resolve", Actor: by.Principal, Detail: map[string]any{"reason": reason, "issue_type": string(f.issueType),
				"coalesce_key": f.key, "occurrence_count": f.occurrences, "reopen_count": f.reopens, "actor": by.Audit()}})
		if err != nil {
			return err
		}
		f.transition, f.resolvedBy = TransitionResolved, by.Principal
		if err := announceFinding(ctx, tx, f); err != nil {
			return fmt.Errorf("resolve finding %d: %w", id, err)
		}
		out, err = scanFinding(tx.QueryRow(ctx, `SELECT `+findingColumns+` FROM system_issues WHERE id = $1`, id))
		return err
	})
	return out, err
}
