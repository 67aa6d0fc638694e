package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/events"
)

// Promotion of captured signals to the outbox once their type is active, and the stream heartbeats.

// promoteBatch bounds one promotion step.
const promoteBatch = 1000

// PromoteResult reports what PromotePending did.
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

func (r *PromoteResult) add(o PromoteResult) {
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

// PromotePending moves every captured signal whose type is now registered and active to event_outbox, in capture
// order (event_pending id order), marking each processed. Captures of still inactive types stay; dead-lettered
// rows, intake retry rows and rows GCOS did not capture are never promoted. Each batch is one transaction, so a
// crash loses nothing and a re-run finishes the job without duplicates. It runs as the holder of RolePromotion
// (ECONFLICT while another process holds it).
func (s *Store) PromotePending(ctx context.Context) (res PromoteResult, err error) {
	err = s.AsRole(ctx, RolePromotion, func(ctx context.Context) error {
		var err error
		res, err = s.promotePending(ctx)
		return err
	})
	return res, err
}

func (s *Store) promotePending(ctx context.Context) (PromoteResult, error) {
	total := PromoteResult{ByType: map[string]int{}}
	for {
		var step PromoteResult
		var n int
		err := s.InTx(ctx, func(tx pgx.Tx) error {
			var err error
			step, n, err = promoteStep(ctx, tx, nil, promoteBatch, s.newDiscipline())
			return err
		})
		if err != nil {
			return total, err
		}
		total.add(step)
		if n < promoteBatch {
			break
		}
	}
	// Windows that closed with nothing new to announce still owe their digest; due escalations go out.
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var step PromoteResult
		dis := s.newDiscipline()
		if _, err := tx.Exec(ctx, promoteLockSQL); err != nil {
			return fmt.Errorf("promote: lock: %w", err)
		}
		if err := dis.begin(ctx, tx); err != nil {
			return err
		}
		if err := dis.closeWindows(ctx, tx, &step); err != nil {
			return err
		}
		if err := dis.escalate(ctx, tx, &step); err != nil {
			return err
		}
		total.add(step)
		return nil
	})
	if err != nil {
		return total, err
	}
	if err := s.raiseHeldTypeFindings(ctx); err != nil {
		return total, err
	}
	if err := s.pool.QueryRow(ctx, promoteHeldSQL, events.Domain, emitRetryHint).Scan(&total.Held); err != nil {
		return total, fmt.Errorf("promote: held: %w", err)
	}
	return total, nil
}

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

// raiseHeldTypeFindings raises the unregistered-type finding of every type holding captured signals that has no
// open one: a capture raises it without waiting for its lock (RaiseHeldSignalFindingTx), so a raise skipped there
// is made here. Each type in a transaction of its own, which holds nothing else.
func (s *Store) raiseHeldTypeFindings(ctx context.Context) error {
	type held struct {
		eventType  string
		n, last    int64
		registered bool
	}
	rows, err := s.pool.Query(ctx, heldTypesSQL, events.Domain, emitRetryHint)
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
		issue := unregisteredIssue(h.eventType)
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
		step, n, err := promoteStep(ctx, tx, &eventType, promoteBatch, nil)
		if err != nil {
			return total, err
		}
		total.add(step)
		if n < promoteBatch {
			return total, nil
		}
	}
}

// captureEnvelope is what emitSignal wrote into capture_payload.
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

type pendingRow struct {
	id                                    int64
	eventType, table, ref, address, actor string
	capture                               []byte
	stream, lane                          string
	severity                              *string
	announce                              bool
}

// promoteStep promotes up to limit captures (of one type when eventType is set) and reports how many rows it
// looked at. Announcements are promoted only under a discipline (dis); without one they wait for the promoter.
func promoteStep(ctx context.Context, tx pgx.Tx, eventType *string, limit int, dis *discipline) (PromoteResult, int, error) {
	res := PromoteResult{ByType: map[string]int{}}
	if _, err := tx.Exec(ctx, promoteLockSQL); err != nil {
		return res, 0, fmt.Errorf("promote: lock: %w", err)
	}
	var now *time.Time
	if dis != nil {
		if err := dis.begin(ctx, tx); err != nil {
			return res, 0, err
		}
		now = &dis.now
	}
	rows, err := tx.Query(ctx, promoteSelectSQL, events.Domain, emitRetryHint, eventType, limit, now)
	if err != nil {
		return res, 0, fmt.Errorf("promote: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pendingRow, error) {
		var p pendingRow
		err := r.Scan(&p.id, &p.eventType, &p.table, &p.ref, &p.address, &p.actor, &p.capture, &p.stream, &p.lane,
			&p.severity, &p.announce)
		return p, err
	})
	if err != nil {
		return res, 0, fmt.Errorf("promote: %w", err)
	}
	// Within a batch, an announcement under a cooldown is superseded by a later one about the same subject.
	latest := map[[2]string]int64{}
	for _, p := range batch {
		if p.announce {
			latest[[2]string{p.eventType, p.ref}] = p.id
		}
	}
	for _, p := range batch {
		var outcome string
		var err error
		if p.announce {
			superseded := latest[[2]string{p.eventType, p.ref}] != p.id
			outcome, err = dis.promote(ctx, tx, p, superseded)
		} else {
			outcome, err = promoteOne(ctx, tx, p, nil)
		}
		if err != nil {
			return res, 0, err
		}
		switch outcome {
		case EmitOutcomeEmitted:
			res.Promoted++
			res.ByType[p.eventType]++
		case EmitOutcomeDuplicate:
			res.Duplicates++
		case outcomeHeld:
			res.HeldBack++
		case outcomeCoalesced:
			res.Coalesced++
		case outcomeWaiting:
			res.Waiting++
		default:
			res.DeadLettered++
		}
	}
	if dis != nil {
		if err := dis.end(ctx, tx, &res); err != nil {
			return res, 0, err
		}
	}
	return res, len(batch), nil
}

const pendingProcessedSQL = `UPDATE event_pending SET processed_at = now() WHERE id = $1`

const pendingDeadLetterSQL = `
UPDATE event_pending SET dead_lettered_at = now(), error_count = error_count + 1, last_error = $2 WHERE id = $1`

// promoteOne moves one capture to the outbox: emitted, duplicate (already there: only marked processed), or
// rejected (unreadable or unsafe capture: dead-lettered with a finding, never promoted).
func promoteOne(ctx context.Context, tx pgx.Tx, p pendingRow, route *events.ResolvedOwner) (string, error) {
	_, outcome, err := promoteCapture(ctx, tx, p, route)
	return outcome, err
}

// promoteCapture is promoteOne returning the outbox id; a route, when given, is written into the payload
// (owner_ref, route).
func promoteCapture(ctx context.Context, tx pgx.Tx, p pendingRow, route *events.ResolvedOwner) (string, string, error) {
	var env captureEnvelope
	payload, reason := decodeCapture(p.capture, &env)
	if reason == "" && route != nil {
		payload, reason = withRoute(payload, *route)
	}
	if reason == "" && env.EventType != p.eventType {
		reason = fmt.Sprintf("envelope event type %q differs from event_type_hint %q", env.EventType, p.eventType)
	}
	if reason != "" {
		if _, err := tx.Exec(ctx, pendingDeadLetterSQL, p.id, reason); err != nil {
			return "", "", fmt.Errorf("promote %d: %w", p.id, err)
		}
		_, err := RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.InputIssue(gcos.InputInvalidSchema), p.address, "", "", map[string]any{
			"reason": "captured signal cannot be promoted: " + reason, "pending_id": p.id, "event_type": p.eventType,
			"canonical_address": p.address,
		}))
		if err != nil {
			return "", "", fmt.Errorf("promote %d: %w", p.id, err)
		}
		return "", EmitOutcomeRejected, nil
	}
	var eventID string
	err := tx.QueryRow(ctx, emitOutboxDupSQL, env.CorrelationID, env.SourceSystem, p.eventType, events.Domain).Scan(&eventID)
	switch err {
	case nil:
		if _, err := tx.Exec(ctx, pendingProcessedSQL, p.id); err != nil {
			return "", "", fmt.Errorf("promote %d: %w", p.id, err)
		}
		return eventID, EmitOutcomeDuplicate, nil
	case pgx.ErrNoRows:
	default:
		return "", "", fmt.Errorf("promote %d: dedup: %w", p.id, err)
	}
	severity := p.severity
	if env.Severity != "" {
		severity = &env.Severity
	}
	subjectTable := env.SubjectTable
	if subjectTable == "" {
		subjectTable = p.table
	}
	subjectRef := env.SubjectRef
	if subjectRef == "" {
		subjectRef = p.ref
	}
	var occurred *time.Time
	if env.OccurredAt != nil && !env.OccurredAt.IsZero() {
		occurred = env.OccurredAt
	}
	err = tx.QueryRow(ctx, outboxInsertOneSQL, events.Domain, p.eventType, p.stream, p.lane, severity, subjectTable,
		nullIfEmpty(subjectRef), p.address, p.actor, env.SourceSystem, env.CorrelationID, string(payload), occurred).Scan(&eventID)
	if err != nil {
		return "", "", MapError(err, fmt.Sprintf("promote %d", p.id))
	}
	if _, err := tx.Exec(ctx, pendingProcessedSQL, p.id); err != nil {
		return "", "", fmt.Errorf("promote %d: %w", p.id, err)
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

// ---------------------------------------------------------------------------------------------------------------
// Heartbeats.

// EmitHeartbeat announces that a worker of stream ("handoff", "candidate", … or "governance.handoff") is alive and
// what it did: the stream's heartbeat type from the vocabulary (governance.handoff.heartbeat, governance.candidate.
// scan_completed, …; governance.<stream>.heartbeat for a stream without one), as an announcement whose subject is
// the stream, so the emission discipline's cooldown makes it a periodic summary. The payload carries each count
// whose name is a safe payload key (seen, coalesced, enqueued, failed, dlq, …), and as count the rows seen (the
// total of the counts when there is no seen); each call is a new fact with its own correlation id.
func (s *Store) EmitHeartbeat(ctx context.Context, stream string, counts map[string]int64) (EmitResult, error) {
	full := events.NormalizeStream(stream)
	if !events.ValidStream(full) {
		return EmitResult{}, gcos.Errorf(gcos.EINVALID, "heartbeat: %q is not a governance stream", stream)
	}
	eventType := full + ".heartbeat"
	if v, err := events.Load(); err == nil {
		if t, ok := v.HeartbeatType(full); ok {
			eventType = t.EventType
		}
	}
	payload := map[string]any{"source": full}
	var total int64
	for k, n := range counts {
		if k != "count" && slices.Contains(gcos.SafePayloadKeys, k) {
			payload[k] = n
		}
		total += n
	}
	payload["count"] = total
	if seen, ok := counts["seen"]; ok {
		payload["count"] = seen
	}
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return EmitResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	return s.EmitSignal(ctx, Emit{
		EventType: eventType, Stream: full,
		SubjectTable: "queue_heartbeat", SubjectRef: full,
		CollectionName: "queue_heartbeat", EntityCode: full,
		ActorRef: "gcos", SourceSystem: "gcos",
		CorrelationID: "heartbeat:" + full + ":" + hex.EncodeToString(nonce),
		Payload:       payload, Announce: true,
	})
}
