package events

import (
	"context"
	"fmt"
	"gcos/postgres"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// registryLockSQL serialises writers of the governance rows of event_type_registry (register, activate): the
// substrate table may lack the unique key a live database was meant to have, so GCOS never relies on it.
const registryLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('gcos.events.registry', 0))`

// The governance event vocabulary in event_type_registry: register (inactive), activate (approved, audited), list.

const registryRowsSQL = `
SELECT event_type, event_stream, delivery_lane, coalesce(default_severity, ''), description, active
FROM event_type_registry WHERE event_domain = $1`

const registryInsertSQL = `
INSERT INTO event_type_registry (event_domain, event_type, event_stream, delivery_lane, default_severity, description, active)
VALUES ($1, $2, $3, $4, $5, $6, false)`

// RegisterResult reports what RegisterVocabulary did.
type RegisterResult struct {
	Domain     string   `json:"event_domain"`
	Registered []string `json:"registered"`         // types written now, all with active=false
	Present    int      `json:"already_present"`    // vocabulary types already in the registry (left untouched)
	Drifted    []string `json:"drifted,omitempty"`  // present types whose stream, lane, severity or description differ
	AuditID    int64    `json:"audit_id,omitempty"` // the registry_changelog row, when anything was registered
	Total      int      `json:"vocabulary_size"`
}

// RegisterVocabulary writes every vocabulary type missing from event_type_registry, in domain governance, with
// active=false. It is idempotent: a type already present is never modified (an activated type stays active, a
// changed description is only reported as drift), so a re-run writes nothing. Rows of other domains are never
// read for writing. One audit row records a run that registered anything.
func (l *Loop) RegisterVocabulary(ctx context.Context) (RegisterResult, error) {
	v, err := gcos.LoadVocabulary()
	if err != nil {
		return RegisterResult{}, err
	}
	res := RegisterResult{Domain: gcos.EventDomain, Total: len(v.Types), Registered: []string{}}
	err = l.core.InTx(ctx, func(tx pgx.Tx) error {
		res.Registered, res.Present, res.Drifted, res.AuditID = []string{}, 0, nil, 0
		if _, err := tx.Exec(ctx, registryLockSQL); err != nil {
			return fmt.Errorf("register vocabulary: lock: %w", err)
		}
		existing := map[string]gcos.VocabularyEntry{}
		rows, err := tx.Query(ctx, registryRowsSQL, gcos.EventDomain)
		if err != nil {
			return fmt.Errorf("register vocabulary: %w", err)
		}
		for rows.Next() {
			var t gcos.VocabularyEntry
			var active bool
			if err := rows.Scan(&t.EventType, &t.EventStream, &t.DeliveryLane, &t.DefaultSeverity, &t.Description, &active); err != nil {
				rows.Close()
				return fmt.Errorf("register vocabulary: %w", err)
			}
			existing[t.EventType] = t
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("register vocabulary: %w", err)
		}
		for _, t := range v.Types {
			if have, ok := existing[t.EventType]; ok {
				res.Present++
				if have.EventStream != t.EventStream || have.DeliveryLane != t.DeliveryLane ||
					have.DefaultSeverity != t.DefaultSeverity || have.Description != t.Description {
					res.Drifted = append(res.Drifted, t.EventType)
				}
				continue
			}
			if _, err := tx.Exec(ctx, registryInsertSQL, gcos.EventDomain, t.EventType, t.EventStream, t.DeliveryLane,
				t.DefaultSeverity, t.Description); err != nil {
				return postgres.MapError(err, "register "+t.EventType)
			}
			res.Registered = append(res.Registered, t.EventType)
		}
		if len(res.Registered) == 0 {
			return nil
		}
		res.AuditID, err = postgres.Audit(ctx, tx, postgres.AuditEntry{
			EntityType: "governance_event_type", EntityCode: gcos.EventDomain, Action: "register",
			Detail: map[string]any{"event_domain": gcos.EventDomain, "registered": len(res.Registered),
				"types": res.Registered, "active": false, "vocabulary_version": v.Version},
		})
		return err
	})
	return res, err
}

// ActivateResult reports what ActivateEventType did.
type ActivateResult struct {
	EventType      string `json:"event_type"`
	Activated      bool   `json:"activated"` // false when the type was already active (nothing written)
	ApprovalRef    string `json:"approval_ref"`
	ActivatedBy    string `json:"activated_by"`
	AuditID        int64  `json:"audit_id,omitempty"`
	PendingBacklog int    `json:"pending_backlog"` // captured signals waiting for PromotePending
}

const pendingCountSQL = `
SELECT count(*) FROM event_pending
WHERE event_domain = $1 AND event_type_hint = $2 AND processed_at IS NULL AND dead_lettered_at IS NULL
  AND capture_payload ? 'gcos_envelope'`

// ActivateEventType flips one registered governance type to active=true. It needs an approval reference
// (EINVALID without one) and a registered type (ENOTFOUND otherwise); it writes one registry_changelog row carrying
// the approval reference and closes the type's unregistered-type finding. Activating an active type changes
// nothing. Captured signals of the type move to the outbox with PromotePending (or with the type's next emit).
func (l *Loop) ActivateEventType(ctx context.Context, eventType, approvalRef, actor string) (ActivateResult, error) {
	eventType, approvalRef, actor = strings.TrimSpace(eventType), strings.TrimSpace(approvalRef), strings.TrimSpace(actor)
	if actor == "" {
		actor = "gcos"
	}
	res := ActivateResult{EventType: eventType, ApprovalRef: approvalRef, ActivatedBy: actor}
	if approvalRef == "" {
		return res, gcos.Errorf(gcos.EINVALID, "activate %s: an approval reference is required (registering is not activating)", eventType)
	}
	err := l.core.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, registryLockSQL); err != nil {
			return fmt.Errorf("activate %s: lock: %w", eventType, err)
		}
		registered, active, err := postgres.EventTypeState(ctx, tx, eventType)
		if err != nil {
			return err
		}
		if !registered {
			return gcos.Errorf(gcos.ENOTFOUND, "activate %s: not registered in domain %s (run gcos events register)", eventType, gcos.EventDomain)
		}
		if err := tx.QueryRow(ctx, pendingCountSQL, gcos.EventDomain, eventType).Scan(&res.PendingBacklog); err != nil {
			return fmt.Errorf("activate %s: %w", eventType, err)
		}
		if active {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE event_type_registry SET active = true WHERE event_domain = $1 AND event_type = $2`,
			gcos.EventDomain, eventType); err != nil {
			return fmt.Errorf("activate %s: %w", eventType, err)
		}
		res.Activated = true
		res.AuditID, err = postgres.Audit(ctx, tx, postgres.AuditEntry{
			EntityType: "governance_event_type", EntityCode: eventType, Action: "activate", Actor: actor,
			Detail: map[string]any{"event_domain": gcos.EventDomain, "event_type": eventType, "approval_ref": approvalRef,
				"activated_by": actor, "pending_backlog": res.PendingBacklog},
		})
		if err != nil {
			return err
		}
		_, err = postgres.ResolveFindingTx(ctx, tx, gcos.UnregisteredTypeIssue(eventType), eventType, "")
		return err
	})
	return res, err
}

// EventTypeRow is one governance row of event_type_registry.
type EventTypeRow struct {
	EventType       string     `json:"event_type"`
	EventStream     string     `json:"event_stream"`
	DeliveryLane    string     `json:"delivery_lane"`
	DefaultSeverity string     `json:"default_severity"`
	Description     string     `json:"description"`
	Active          bool       `json:"active"`
	CreatedAt       *time.Time `json:"created_at"`
	InVocabulary    bool       `json:"in_vocabulary"`
	Pending         int        `json:"pending"` // captured signals not yet promoted (not dead-lettered)
}

// ListEventTypes returns the governance rows of event_type_registry by stream and type, with their backlog.
func (l *Loop) ListEventTypes(ctx context.Context) ([]EventTypeRow, error) {
	v, err := gcos.LoadVocabulary()
	if err != nil {
		return nil, err
	}
	rows, err := l.core.Pool().Query(ctx, `
		SELECT r.event_type, r.event_stream, r.delivery_lane, coalesce(r.default_severity, ''), r.description, r.active,
		       r.created_at,
		       (SELECT count(*) FROM event_pending p
		        WHERE p.event_domain = r.event_domain AND p.event_type_hint = r.event_type AND p.processed_at IS NULL
		          AND p.dead_lettered_at IS NULL AND p.capture_payload ? 'gcos_envelope')
		FROM event_type_registry r WHERE r.event_domain = $1
		ORDER BY r.event_stream, r.event_type`, gcos.EventDomain)
	if err != nil {
		return nil, fmt.Errorf("list event types: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventTypeRow, error) {
		var x EventTypeRow
		err := r.Scan(&x.EventType, &x.EventStream, &x.DeliveryLane, &x.DefaultSeverity, &x.Description, &x.Active,
			&x.CreatedAt, &x.Pending)
		_, x.InVocabulary = v.Lookup(x.EventType)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list event types: %w", err)
	}
	return out, nil
}

// ActivateVocabulary registers the vocabulary and activates every inactive governance type under one approval:
// a demo, a benchmark or a test world that wants every announcement to reach the outbox.
func (l *Loop) ActivateVocabulary(ctx context.Context, approvalRef, actor string) error {
	if _, err := l.RegisterVocabulary(ctx); err != nil {
		return fmt.Errorf("register the vocabulary: %w", err)
	}
	types, err := l.ListEventTypes(ctx)
	if err != nil {
		return err
	}
	for _, t := range types {
		if t.Active {
			continue
		}
		if _, err := l.ActivateEventType(ctx, t.EventType, approvalRef, actor); err != nil {
			return fmt.Errorf("activate event type %s: %w", t.EventType, err)
		}
	}
	return nil
}
