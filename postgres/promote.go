package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Promotion of captured signals to the outbox once their type is active: the mechanics every promotion shares (an
// emit of an active type flushes its backlog with them). The event stage's promoter runs them with its emission
// discipline as the Announcer.

// PromoteBatch bounds one promotion step.
const PromoteBatch = 1000

// PromoteResult reports what a promotion did (PromoteStep, or the event stage's promoter).
type PromoteResult struct {
	Promoted     int `json:"promoted"`      // outbox rows written
	Duplicates   int `json:"duplicates"`    // captures already in the outbox (marked processed only)
	DeadLettered int `json:"dead_lettered"` // unreadable or unsafe captures set aside
	Held         int `json:"held"`          // captures still waiting for their type to be active
	// The emission discipline's work on announcements: held back by a ceiling (counted into a digest), coalesced
	// into a later announcement about the same subject, waiting for a cooldown, digests and escalations emitted.
	HeldBack    int            `json:"held_back"`
	Coalesced   int            `json:"coalesced"`
	Waiting     int            `json:"waiting"`
	Digests     int            `json:"digests"`
	Escalations int            `json:"escalations"`
	ByType      map[string]int `json:"by_type"`
}

// Add adds o's counts to r's.
func (r *PromoteResult) Add(o PromoteResult) {
	r.Promoted += o.Promoted
	r.Duplicates += o.Duplicates
	r.DeadLettered += o.DeadLettered
	r.HeldBack += o.HeldBack
	r.Coalesced += o.Coalesced
	r.Waiting += o.Waiting
	r.Digests += o.Digests
	r.Escalations += o.Escalations
	for k, n := range o.ByType {
		r.ByType[k] += n
	}
}

const promoteSelectSQL = `
SELECT p.id, p.event_type_hint, p.entity_table, coalesce(p.entity_ref, ''), p.canonical_address, p.actor_ref,
       p.capture_payload, r.stream, r.lane, r.severity, coalesce((p.capture_payload ->> 'announce')::boolean, false)
FROM event_pending p
JOIN LATERAL (
    SELECT min(event_stream) AS stream, min(delivery_lane) AS lane, min(default_severity) AS severity,
           bool_and(active) AS active
    FROM event_type_registry t WHERE t.event_domain = p.event_domain AND t.event_type = p.event_type_hint
) r ON r.active
WHERE p.event_domain = $1 AND p.processed_at IS NULL AND p.dead_lettered_at IS NULL
  AND p.event_type_hint <> $2 AND p.capture_payload ? 'gcos_envelope'
  AND ($3::text IS NULL OR p.event_type_hint = $3)
  AND (NOT coalesce((p.capture_payload ->> 'announce')::boolean, false) OR (
       $5::timestamptz IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM gcos_event_cooldown c
           WHERE c.event_type = p.event_type_hint AND c.subject_ref = coalesce(p.entity_ref, '') AND c.quiet_until > $5)))
ORDER BY p.id
LIMIT $4
FOR UPDATE OF p`

const promoteHeldSQL = `
SELECT count(*) FROM event_pending p
WHERE p.event_domain = $1 AND p.processed_at IS NULL AND p.dead_lettered_at IS NULL
  AND p.event_type_hint <> $2 AND p.capture_payload ? 'gcos_envelope'`

// heldTypesSQL lists the types whose captured signals are held because the type is not registered and active, with
// how many are held and the last one.
const heldTypesSQL = `
SELECT p.event_type_hint, count(*), max(p.id),
       EXISTS (SELECT 1 FROM event_type_registry r WHERE r.event_domain = p.event_domain AND r.event_type = p.event_type_hint)
FROM event_pending p
WHERE p.event_domain = $1 AND p.processed_at IS NULL AND p.dead_lettered_at IS NULL
  AND p.event_type_hint <> $2 AND p.capture_payload ? 'gcos_envelope'
  AND NOT EXISTS (SELECT 1 FROM event_type_registry r
                  WHERE r.event_domain = p.event_domain AND r.event_type = p.event_type_hint AND r.active)
GROUP BY p.event_domain, p.event_type_hint
ORDER BY p.event_type_hint`

// SettleHeld raises the unregistered-type finding of every type holding captured signals that has no open one,
// and counts the captures still held. A capture raises the finding without waiting for its lock
// (RaiseHeldSignalFindingTx), so a raise skipped there is made here, each type in a transaction of its own, which
// holds nothing else. The promoter calls it after each promotion.
func (s *Store) SettleHeld(ctx context.Context) (held int, err error) {
	if err := s.raiseHeldTypeFindings(ctx); err != nil {
		return 0, err
	}
	if err := s.pool.QueryRow(ctx, promoteHeldSQL, gcos.EventDomain, emitRetryHint).Scan(&held); err != nil {
		return 0, fmt.Errorf("promote: held: %w", err)
	}
	return held, nil
}

func (s *Store) raiseHeldTypeFindings(ctx context.Context) error {
	type held struct {
		eventType  string
		n, last    int64
		registered bool
	}
	rows, err := s.pool.Query(ctx, heldTypesSQL, gcos.EventDomain, emitRetryHint)
	if err != nil {
		return fmt.Errorf("promote: held types: %w", err)
	}
	types, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (held, error) {
		var h held
		err := r.Scan(&h.eventType, &h.n, &h.last, &h.registered)
		return h, err
	})
	if err != nil {
		return fmt.Errorf("promote: held types: %w", err)
	}
	for _, h := range types {
		issue := gcos.UnregisteredTypeIssue(h.eventType)
		err := s.InTx(ctx, func(tx pgx.Tx) error {
			key := gcos.CoalesceKey(issue, h.eventType)
			if _, err := tx.Exec(ctx, findingLockSQL, key); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
			var id, occurrences, reopens int64
			switch err := tx.QueryRow(ctx, findingOpenSQL, key).Scan(&id, &occurrences, &reopens); err {
			case nil:
				return nil // open: the captures that raised it are counted there
			case pgx.ErrNoRows:
			default:
				return err
			}
			f, _ := heldSignalFinding(h.eventType, h.registered, map[string]any{"held": h.n, "last_pending_id": h.last})
			_, err := raiseLockedFinding(ctx, tx, f)
			return err
		})
		if err != nil {
			return fmt.Errorf("promote: raise %s for %s: %w", issue, h.eventType, err)
		}
	}
	return nil
}

// promoteTx promotes the whole captured backlog of one type inside tx (an emit of an active type does this first).
func promoteTx(ctx context.Context, tx pgx.Tx, eventType string) (PromoteResult, error) {
	total := PromoteResult{ByType: map[string]int{}}
	for {
		step, n, err := PromoteStep(ctx, tx, &eventType, PromoteBatch, nil)
		if err != nil {
			return total, err
		}
		total.Add(step)
		if n < PromoteBatch {
			return total, nil
		}
	}
}

// captureEnvelope is what EmitSignal wrote into capture_payload.
type captureEnvelope struct {
	Version       int             `json:"gcos_envelope"`
	EventType     string          `json:"event_type"`
	EventStream   string          `json:"event_stream"`
	SubjectTable  string          `json:"event_subject_table"`
	SubjectRef    string          `json:"event_subject_ref"`
	SourceSystem  string          `json:"source_system"`
	CorrelationID string          `json:"correlation_id"`
	Severity      string          `json:"severity"`
	Announce      bool            `json:"announce"`
	OccurredAt    *time.Time      `json:"occurred_at"`
	SafePayload   json.RawMessage `json:"safe_payload"`
}

// PendingSignal is one captured signal promotion looks at: its event_pending row and its type's registry row.
type PendingSignal struct {
	ID                                    int64
	EventType, Table, Ref, Address, Actor string
	Capture                               []byte // the GCOS envelope
	Stream, Lane                          string
	Severity                              *string // the type's default severity
	Announce                              bool    // one of GCOS's own announcements
}

// An Announcer releases GCOS's own announcements while PromoteStep promotes (the event stage's emission
// discipline): Begin once per transaction, under the promotion lock, reading the time it decides by; Release for
// each announcement in capture order (superseded: a later one about the same subject is in the batch), returning
// an emit outcome or EmitOutcomeHeldBack, EmitOutcomeCoalesced, EmitOutcomeWaiting; End before the transaction
// commits. Without one, announcements stay captured.
type Announcer interface {
	Begin(ctx context.Context, tx pgx.Tx) (time.Time, error)
	Release(ctx context.Context, tx pgx.Tx, p PendingSignal, superseded bool) (string, error)
	End(ctx context.Context, tx pgx.Tx, res *PromoteResult) error
}

// Outcomes of an announcement the Announcer did not release now.
const (
	EmitOutcomeHeldBack  = "held_back" // past its type's ceiling: counted into the window's digest
	EmitOutcomeCoalesced = "coalesced" // superseded by a later announcement about the same subject
	EmitOutcomeWaiting   = "waiting"   // its subject's cooldown has not passed
)

// LockPromotion takes the promotion lock for tx: one promoter at a time, and an emit's own backlog flush waits.
func LockPromotion(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, promoteLockSQL); err != nil {
		return fmt.Errorf("promote: lock: %w", err)
	}
	return nil
}

// PromoteStep promotes up to limit captures (of one type when eventType is set) in capture order and reports how
// many rows it looked at. Announcements are promoted only through an Announcer (a); without one they wait for the
// promoter.
func PromoteStep(ctx context.Context, tx pgx.Tx, eventType *string, limit int, a Announcer) (PromoteResult, int, error) {
	res := PromoteResult{ByType: map[string]int{}}
	if err := LockPromotion(ctx, tx); err != nil {
		return res, 0, err
	}
	var now *time.Time
	if a != nil {
		t, err := a.Begin(ctx, tx)
		if err != nil {
			return res, 0, err
		}
		now = &t
	}
	rows, err := tx.Query(ctx, promoteSelectSQL, gcos.EventDomain, emitRetryHint, eventType, limit, now)
	if err != nil {
		return res, 0, fmt.Errorf("promote: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingSignal, error) {
		var p PendingSignal
		err := r.Scan(&p.ID, &p.EventType, &p.Table, &p.Ref, &p.Address, &p.Actor, &p.Capture, &p.Stream, &p.Lane,
			&p.Severity, &p.Announce)
		return p, err
	})
	if err != nil {
		return res, 0, fmt.Errorf("promote: %w", err)
	}
	// Within a batch, an announcement under a cooldown is superseded by a later one about the same subject.
	latest := map[[2]string]int64{}
	for _, p := range batch {
		if p.Announce {
			latest[[2]string{p.EventType, p.Ref}] = p.ID
		}
	}
	for _, p := range batch {
		var outcome string
		var err error
		if p.Announce {
			superseded := latest[[2]string{p.EventType, p.Ref}] != p.ID
			outcome, err = a.Release(ctx, tx, p, superseded)
		} else {
			_, outcome, err = PromoteSignal(ctx, tx, p, nil)
		}
		if err != nil {
			return res, 0, err
		}
		switch outcome {
		case EmitOutcomeEmitted:
			res.Promoted++
			res.ByType[p.EventType]++
		case EmitOutcomeDuplicate:
			res.Duplicates++
		case EmitOutcomeHeldBack:
			res.HeldBack++
		case EmitOutcomeCoalesced:
			res.Coalesced++
		case EmitOutcomeWaiting:
			res.Waiting++
		default:
			res.DeadLettered++
		}
	}
	if a != nil {
		if err := a.End(ctx, tx, &res); err != nil {
			return res, 0, err
		}
	}
	return res, len(batch), nil
}

const pendingProcessedSQL = `UPDATE event_pending SET processed_at = now() WHERE id = $1`

const pendingDeadLetterSQL = `
UPDATE event_pending SET dead_lettered_at = now(), error_count = error_count + 1, last_error = $2 WHERE id = $1`

// PromoteSignal moves one capture to the outbox and returns the outbox id and the outcome: emitted, duplicate
// (already there: only marked processed), or rejected (unreadable or unsafe capture: dead-lettered with a finding,
// never promoted). rewrite, when given, turns the checked payload into the one to emit (the discipline writes the
// route into it), or says why it cannot.
func PromoteSignal(ctx context.Context, tx pgx.Tx, p PendingSignal, rewrite func(payload []byte) ([]byte, string)) (string, string, error) {
	var env captureEnvelope
	payload, reason := decodeCapture(p.Capture, &env)
	if reason == "" && rewrite != nil {
		payload, reason = rewrite(payload)
	}
	if reason == "" && env.EventType != p.EventType {
		reason = fmt.Sprintf("envelope event type %q differs from event_type_hint %q", env.EventType, p.EventType)
	}
	if reason != "" {
		if _, err := tx.Exec(ctx, pendingDeadLetterSQL, p.ID, reason); err != nil {
			return "", "", fmt.Errorf("promote %d: %w", p.ID, err)
		}
		_, err := RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.InputIssue(gcos.InputInvalidSchema), p.Address, "", "", map[string]any{
			"reason": "captured signal cannot be promoted: " + reason, "pending_id": p.ID, "event_type": p.EventType,
			"canonical_address": p.Address,
		}))
		if err != nil {
			return "", "", fmt.Errorf("promote %d: %w", p.ID, err)
		}
		return "", EmitOutcomeRejected, nil
	}
	var eventID string
	err := tx.QueryRow(ctx, emitOutboxDupSQL, env.CorrelationID, env.SourceSystem, p.EventType, gcos.EventDomain).Scan(&eventID)
	switch err {
	case nil:
		if _, err := tx.Exec(ctx, pendingProcessedSQL, p.ID); err != nil {
			return "", "", fmt.Errorf("promote %d: %w", p.ID, err)
		}
		return eventID, EmitOutcomeDuplicate, nil
	case pgx.ErrNoRows:
	default:
		return "", "", fmt.Errorf("promote %d: dedup: %w", p.ID, err)
	}
	severity := p.Severity
	if env.Severity != "" {
		severity = &env.Severity
	}
	subjectTable := env.SubjectTable
	if subjectTable == "" {
		subjectTable = p.Table
	}
	subjectRef := env.SubjectRef
	if subjectRef == "" {
		subjectRef = p.Ref
	}
	var occurred *time.Time
	if env.OccurredAt != nil && !env.OccurredAt.IsZero() {
		occurred = env.OccurredAt
	}
	err = tx.QueryRow(ctx, outboxInsertOneSQL, gcos.EventDomain, p.EventType, p.Stream, p.Lane, severity, subjectTable,
		nullIfEmpty(subjectRef), p.Address, p.Actor, env.SourceSystem, env.CorrelationID, string(payload), occurred).Scan(&eventID)
	if err != nil {
		return "", "", MapError(err, fmt.Sprintf("promote %d", p.ID))
	}
	if _, err := tx.Exec(ctx, pendingProcessedSQL, p.ID); err != nil {
		return "", "", fmt.Errorf("promote %d: %w", p.ID, err)
	}
	return eventID, EmitOutcomeEmitted, nil
}

// decodeCapture reads a capture envelope and re-checks its payload; it returns the payload to emit, or why the
// capture cannot be promoted.
func decodeCapture(b []byte, env *captureEnvelope) ([]byte, string) {
	if err := json.Unmarshal(b, env); err != nil {
		return nil, "unreadable capture envelope: " + err.Error()
	}
	if env.Version != envelopeVersion {
		return nil, fmt.Sprintf("unknown capture envelope version %d", env.Version)
	}
	if env.SourceSystem == "" || env.CorrelationID == "" {
		return nil, "capture envelope lacks source_system or correlation_id"
	}
	payload := map[string]any{}
	if len(env.SafePayload) > 0 && !bytes.Equal(env.SafePayload, []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(env.SafePayload))
		dec.UseNumber()
		if err := dec.Decode(&payload); err != nil {
			return nil, "unreadable safe payload: " + err.Error()
		}
	}
	if err := gcos.ValidateSafePayload(payload); err != nil {
		return nil, gcos.ErrorMessage(err)
	}
	out, err := json.Marshal(payload)
	if err != nil {
		return nil, "safe payload: " + err.Error()
	}
	return out, ""
}
