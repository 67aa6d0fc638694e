package postgres

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
	"gcos/events"
)

// The governance event domain (SB-11, doc 41) on the substrate's event tables, with no table of its own:
//
//   - event_type_registry holds the vocabulary (package events), written with active=false; activation is a
//     separate, approved, audited step (registering ≠ activating).
//   - emitSignal is the one emit path. A signal of a registered and active type goes to event_outbox; any other
//     is captured in event_pending with a GCOS envelope and raises handoff_unregistered_type (handoff stream) or
//     issue_event_gap (other streams) once, coalesced. A payload with anything but addresses, refs and counts is
//     rejected with an input.invalid_schema finding and enqueued nowhere.
//   - Idempotency: a signal is identified by (source_system, event_type, correlation_id). Under a transaction-scoped
//     advisory lock on that key, the emit looks in event_outbox and in event_pending (processed or not, dead-lettered
//     or not) and does nothing when the signal is already there, so a replay never adds a row. The key includes the
//     event type so that one source row announcing two different facts is not mistaken for a replay.
//   - PromotePending moves captured signals whose type has become active to the outbox in capture (id) order,
//     under one advisory lock shared by every promoter; an emit of an active type first promotes that type's
//     backlog, so the outbox order of one type follows capture order.
//   - Notifications are computed, not stored: the governance outbox events a recipient's subscriptions select,
//     minus muted ones, minus those event_read says the recipient has seen.
//
// Rows GCOS did not capture itself (no envelope), intake retry rows (event_type_hint governance.handoff.retry) and
// dead-lettered rows are never promoted.

// emitRetryHint marks the intake's retry rows in event_pending: work items of the intake, not signals.
const emitRetryHint = "governance.handoff.retry"

// envelopeVersion is written into every capture so PromotePending recognises GCOS's own captures.
const envelopeVersion = 1

// Outcomes of an emit.
const (
	EmitOutcomeEmitted   = "emitted"   // an event_outbox row was written
	EmitOutcomeCaptured  = "captured"  // the type is not registered and active: held in event_pending
	EmitOutcomeDuplicate = "duplicate" // the same (source, type, correlation id) was already emitted or captured
	EmitOutcomeRejected  = "rejected"  // the payload is not safe metadata: an input finding, nothing enqueued
)

// Emit is one governance signal: an assertion that something happened, addressed by its subject, never carrying
// the subject's contents or an instruction.
type Emit struct {
	EventType      string         `json:"event_type"`      // governance.<stream>.<name>
	Stream         string         `json:"event_stream"`    // optional; must agree with the registry when set
	SubjectTable   string         `json:"subject_table"`   // event_subject_table, e.g. birth_registry
	SubjectRef     string         `json:"subject_ref"`     // event_subject_ref, e.g. the entity code or group key
	CollectionName string         `json:"collection_name"` // with EntityCode, builds canonical_address
	EntityCode     string         `json:"entity_code"`
	ActorRef       string         `json:"actor_ref"`      // who produced the change (provenance)
	SourceSystem   string         `json:"source_system"`  // what produced it (provenance)
	CorrelationID  string         `json:"correlation_id"` // the idempotency key within (source_system, event_type)
	Severity       string         `json:"severity"`       // optional; default: the type's default_severity
	OccurredAt     time.Time      `json:"occurred_at"`    // zero: the database clock at emit time
	Payload        map[string]any `json:"payload"`        // safe metadata only (gcos.SafePayloadKeys)
}

// CanonicalAddress is the emit address, collection_name:entity_code, built at emit time (doc 41 §41.5).
func (e Emit) CanonicalAddress() string { return e.CollectionName + ":" + e.EntityCode }

// validate checks the envelope (not the payload): a signal without provenance, subject or idempotency key is a
// caller's bug and is refused before anything is written.
func (e Emit) validate() error {
	switch {
	case !events.ValidTypeName(e.EventType):
		return gcos.Errorf(gcos.EINVALID, "emit: event type %q is not a governance.<stream>.<name> type", e.EventType)
	case e.Stream != "" && !events.ValidStream(e.Stream):
		return gcos.Errorf(gcos.EINVALID, "emit %s: stream %q is not a governance stream", e.EventType, e.Stream)
	case strings.TrimSpace(e.SubjectTable) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: subject table must not be empty", e.EventType)
	case strings.TrimSpace(e.CollectionName) == "" || strings.TrimSpace(e.EntityCode) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: collection_name and entity_code must not be empty (they build canonical_address)", e.EventType)
	case strings.TrimSpace(e.ActorRef) == "" || strings.TrimSpace(e.SourceSystem) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: actor_ref and source_system must not be empty (every signal carries provenance)", e.EventType)
	case strings.TrimSpace(e.CorrelationID) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: correlation_id must not be empty (it is the idempotency key)", e.EventType)
	case e.Severity != "" && !slices.Contains(events.Severities, e.Severity):
		return gcos.Errorf(gcos.EINVALID, "emit %s: severity %q is not one of %v", e.EventType, e.Severity, events.Severities)
	}
	return nil
}

// EmitResult says what an emit did.
type EmitResult struct {
	Outcome   string `json:"outcome"`              // emitted, captured, duplicate, rejected
	EventID   string `json:"event_id,omitempty"`   // the event_outbox id (emitted, or a duplicate of an emitted one)
	PendingID int64  `json:"pending_id,omitempty"` // the event_pending id (captured, or a duplicate of a capture)
	FindingID int64  `json:"finding_id,omitempty"` // the system_issues id (captured, rejected)
	Reason    string `json:"reason,omitempty"`
}

// EmitSignal emits e in its own transaction (see emitSignal). A rejected payload is not an error: the result says
// rejected and the input finding is committed.
func (s *Store) EmitSignal(ctx context.Context, e Emit) (EmitResult, error) {
	var res EmitResult
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = emitSignal(ctx, tx, e)
		return err
	})
	return res, err
}

// emitKeysSQL claims keys and returns those that were new (source, type and id joined by chr(31)). The key table's
// primary key decides first-seen: a concurrent emit of the same key waits for the other transaction and then
// conflicts, so a signal is enqueued at most once however often it is replayed.
const emitKeysSQL = `
INSERT INTO governance_signal_key (source_system, event_type, correlation_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
ON CONFLICT DO NOTHING
RETURNING source_system || chr(31) || event_type || chr(31) || correlation_id`

// promoteLockSQL serialises every promoter (PromotePending and the backlog flush of an emit) so the outbox order of
// a type follows its capture order.
const promoteLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('gcos.events.promote', 0))`

// registryLockSQL serialises writers of the governance rows of event_type_registry (register, activate): the
// substrate table may lack the unique key a live database was meant to have, so GCOS never relies on it.
const registryLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('gcos.events.registry', 0))`

const emitOutboxDupSQL = `
SELECT id::text FROM event_outbox
WHERE correlation_id = $1 AND source_system = $2 AND event_type = $3 AND event_domain = $4
LIMIT 1`

const emitPendingDupSQL = `
SELECT id FROM event_pending
WHERE event_domain = $4 AND event_type_hint = $3
  AND capture_payload->>'correlation_id' = $1 AND capture_payload->>'source_system' = $2
  AND capture_payload ? 'gcos_envelope'
ORDER BY id LIMIT 1`

// registryTypeSQL reads a type's registry row(s); with duplicate rows (no unique key on a live table) the type is
// active only if every row says so.
const registryTypeSQL = `
SELECT count(*), coalesce(bool_and(active), false), coalesce(min(event_stream), ''), coalesce(min(delivery_lane), ''),
       coalesce(min(default_severity), '')
FROM event_type_registry WHERE event_domain = $1 AND event_type = $2`

const emitOutboxInsertSQL = `
INSERT INTO event_outbox (event_domain, event_type, event_stream, delivery_lane, event_severity, event_subject_table,
                          event_subject_ref, canonical_address, actor_ref, source_system, correlation_id,
                          payload_classification, safe_payload, occurred_at, created_at)
SELECT $1, $2, $3, $4, u.sev, u.subject_table, u.subject_ref, u.addr, u.actor, u.src, u.corr, 'safe_metadata',
       u.payload::jsonb, coalesce(u.occurred, now()), clock_timestamp()
FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
            $13::timestamptz[]) WITH ORDINALITY AS u(sev, subject_table, subject_ref, addr, actor, src, corr, payload, occurred, ord)
ORDER BY u.ord
RETURNING id::text, source_system, correlation_id`

// outboxInsertOneSQL writes one promoted capture (its canonical address is the one captured).
const outboxInsertOneSQL = `
INSERT INTO event_outbox (event_domain, event_type, event_stream, delivery_lane, event_severity, event_subject_table,
                          event_subject_ref, canonical_address, actor_ref, source_system, correlation_id,
                          payload_classification, safe_payload, occurred_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'safe_metadata', $12::jsonb, coalesce($13::timestamptz, now()),
        clock_timestamp())
RETURNING id::text`

const emitPendingInsertSQL = `
INSERT INTO event_pending (event_domain, event_type_hint, entity_table, entity_ref, canonical_address, actor_ref,
                           capture_payload, created_at)
VALUES ($1, $2, $3, $4, $5, $6,
        $7::jsonb || jsonb_build_object('occurred_at', coalesce($8::timestamptz, now())), clock_timestamp())
RETURNING id`

const pendingBacklogSQL = `
SELECT EXISTS (SELECT 1 FROM event_pending
               WHERE event_domain = $1 AND event_type_hint = $2 AND processed_at IS NULL AND dead_lettered_at IS NULL
                 AND capture_payload ? 'gcos_envelope')`

// registryType is what the registry says about one type.
type registryType struct {
	registered, active            bool
	stream, lane, defaultSeverity string
}

func lookupType(ctx context.Context, tx pgx.Tx, eventType string) (registryType, error) {
	var n int
	var r registryType
	err := tx.QueryRow(ctx, registryTypeSQL, events.Domain, eventType).Scan(&n, &r.active, &r.stream, &r.lane, &r.defaultSeverity)
	if err != nil {
		return r, fmt.Errorf("event type %s: %w", eventType, err)
	}
	r.registered = n > 0
	r.active = r.registered && r.active
	return r, nil
}

// emitSignal is the one emit path (doc 41 §41.5, SPEC §10), inside the caller's transaction:
//
//  1. the envelope is checked (type name, subject, provenance, correlation id): a bad one is an EINVALID error and
//     nothing is written;
//  2. the payload must be safe metadata (gcos.ValidateSafePayload): otherwise an input.invalid_schema finding is
//     raised about the canonical address, the result is rejected, and nothing is enqueued anywhere;
//  3. a signal already emitted or captured under the same (source_system, event_type, correlation_id) is a
//     duplicate and writes nothing;
//  4. a registered and active type goes to event_outbox (after that type's captured backlog, in order);
//  5. any other type is captured in event_pending and the unregistered-type finding is raised (coalesced: the
//     first capture opens it, later ones bump occurrence_count).
func emitSignal(ctx context.Context, tx pgx.Tx, e Emit) (EmitResult, error) {
	res, err := EmitSignals(ctx, tx, []Emit{e})
	if err != nil {
		return EmitResult{}, err
	}
	if res[0].Outcome == EmitOutcomeDuplicate {
		return emitDuplicate(ctx, tx, e)
	}
	return res[0], nil
}

// rejectSignal raises the input.invalid_schema finding for a signal whose payload is not safe metadata; nothing is
// enqueued.
func rejectSignal(ctx context.Context, tx pgx.Tx, e Emit, cause error) (EmitResult, error) {
	addr := e.CanonicalAddress()
	id, err := RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.InputIssue(gcos.InputInvalidSchema), addr, "", "", map[string]any{
		"reason":            "signal, not data: the payload carries more than addresses, refs and counts",
		"event_type":        e.EventType,
		"canonical_address": addr,
		"source_system":     e.SourceSystem,
		"actor_ref":         e.ActorRef,
		"correlation_id":    e.CorrelationID,
		"rejected_keys":     unsafeKeys(e.Payload),
		"error":             gcos.ErrorMessage(cause),
	}))
	if err != nil {
		return EmitResult{}, fmt.Errorf("emit %s: %w", e.EventType, err)
	}
	return EmitResult{Outcome: EmitOutcomeRejected, FindingID: id, Reason: gcos.ErrorMessage(cause)}, nil
}

// emitDuplicate reports where an already-seen signal went (event_outbox or event_pending).
func emitDuplicate(ctx context.Context, tx pgx.Tx, e Emit) (EmitResult, error) {
	var eventID string
	var pendingID int64
	switch err := tx.QueryRow(ctx, emitOutboxDupSQL, e.CorrelationID, e.SourceSystem, e.EventType, events.Domain).Scan(&eventID); err {
	case nil:
		return EmitResult{Outcome: EmitOutcomeDuplicate, EventID: eventID, Reason: "already in event_outbox"}, nil
	case pgx.ErrNoRows:
	default:
		return EmitResult{}, fmt.Errorf("emit %s: dedup: %w", e.EventType, err)
	}
	switch err := tx.QueryRow(ctx, emitPendingDupSQL, e.CorrelationID, e.SourceSystem, e.EventType, events.Domain).Scan(&pendingID); err {
	case nil:
		return EmitResult{Outcome: EmitOutcomeDuplicate, PendingID: pendingID, Reason: "already captured in event_pending"}, nil
	case pgx.ErrNoRows:
	default:
		return EmitResult{}, fmt.Errorf("emit %s: dedup: %w", e.EventType, err)
	}
	return EmitResult{Outcome: EmitOutcomeDuplicate, Reason: "already emitted or captured"}, nil
}

// flushBacklog promotes eventType's captured backlog before a new signal of that (now active) type is emitted, so
// the outbox order of a type follows capture order.
func flushBacklog(ctx context.Context, tx pgx.Tx, eventType string) error {
	var backlog bool
	if err := tx.QueryRow(ctx, pendingBacklogSQL, events.Domain, eventType).Scan(&backlog); err != nil {
		return fmt.Errorf("emit %s: backlog: %w", eventType, err)
	}
	if backlog {
		if _, err := promoteTx(ctx, tx, eventType); err != nil {
			return err
		}
	}
	return nil
}

// insertOutbox writes signals of one registered and active type to event_outbox in one statement, in the given
// order (created_at is the clock at each row), and returns their ids in that order.
func insertOutbox(ctx context.Context, tx pgx.Tx, rt registryType, es []Emit, payloads [][]byte) ([]string, error) {
	n := len(es)
	sev, refs, occurred := make([]*string, n), make([]*string, n), make([]*time.Time, n)
	tables, addrs, actors, srcs, corrs, pays := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, e := range es {
		severity := e.Severity
		if severity == "" {
			severity = rt.defaultSeverity
		}
		sev[i], refs[i], occurred[i] = nullIfEmpty(severity), nullIfEmpty(e.SubjectRef), nullTime(e.OccurredAt)
		tables[i], addrs[i], actors[i], srcs[i], corrs[i], pays[i] = e.SubjectTable, e.CanonicalAddress(), e.ActorRef, e.SourceSystem, e.CorrelationID, string(payloads[i])
	}
	rows, err := tx.Query(ctx, emitOutboxInsertSQL, events.Domain, es[0].EventType, rt.stream, rt.lane,
		sev, tables, refs, addrs, actors, srcs, corrs, pays, occurred)
	if err != nil {
		return nil, MapError(err, "emit "+es[0].EventType)
	}
	written, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Source, Correlation string }])
	if err != nil {
		return nil, MapError(err, "emit "+es[0].EventType)
	}
	// (source, correlation id) is unique within one type's batch: the signal key table let each through once.
	byKey := make(map[[2]string]string, len(written))
	for _, w := range written {
		byKey[[2]string{w.Source, w.Correlation}] = w.ID
	}
	ids := make([]string, n)
	for i, e := range es {
		if ids[i] = byKey[[2]string{e.SourceSystem, e.CorrelationID}]; ids[i] == "" {
			return nil, fmt.Errorf("emit %s: signal %s of %s has no outbox row", e.EventType, e.CorrelationID, e.SourceSystem)
		}
	}
	return ids, nil
}

// EmitSignals is emitSignal for many signals in one transaction, with the same outcomes (a duplicate's result does
// not name the earlier row): the keys are claimed in one statement and each active type's new signals are written
// in one more. The intake emits thousands of signals per page.
func EmitSignals(ctx context.Context, tx pgx.Tx, es []Emit) ([]EmitResult, error) {
	out := make([]EmitResult, len(es))
	payloads := make([][]byte, len(es))
	var idx []int
	inBatch := map[[3]string]bool{}
	for i, e := range es {
		if err := e.validate(); err != nil {
			return nil, err
		}
		if cause := gcos.ValidateSafePayload(e.Payload); cause != nil {
			r, err := rejectSignal(ctx, tx, e, cause)
			if err != nil {
				return nil, err
			}
			out[i] = r
			continue
		}
		k := [3]string{e.SourceSystem, e.EventType, e.CorrelationID}
		if inBatch[k] {
			out[i] = EmitResult{Outcome: EmitOutcomeDuplicate, Reason: "the same signal twice in one batch"}
			continue
		}
		inBatch[k] = true
		p, err := json.Marshal(nonNilPayload(e.Payload))
		if err != nil {
			return nil, gcos.Errorf(gcos.EINVALID, "emit %s: payload: %v", e.EventType, err)
		}
		payloads[i] = p
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return out, nil
	}
	// Claimed in key order, so two transactions claiming overlapping sets wait for each other instead of deadlocking.
	keyOrder := slices.Clone(idx)
	slices.SortFunc(keyOrder, func(a, b int) int {
		return cmp.Or(strings.Compare(es[a].SourceSystem, es[b].SourceSystem), strings.Compare(es[a].EventType, es[b].EventType),
			strings.Compare(es[a].CorrelationID, es[b].CorrelationID))
	})
	var srcs, types, corrs []string
	for _, i := range keyOrder {
		srcs, types, corrs = append(srcs, es[i].SourceSystem), append(types, es[i].EventType), append(corrs, es[i].CorrelationID)
	}
	rows, err := tx.Query(ctx, emitKeysSQL, srcs, types, corrs)
	if err != nil {
		return nil, fmt.Errorf("emit: keys: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("emit: keys: %w", err)
	}
	fresh := make(map[string]bool, len(claimed))
	for _, k := range claimed {
		fresh[k] = true
	}
	byType := map[string][]int{}
	var typeOrder []string
	for _, i := range idx {
		e := es[i]
		if !fresh[e.SourceSystem+"\x1f"+e.EventType+"\x1f"+e.CorrelationID] {
			out[i] = EmitResult{Outcome: EmitOutcomeDuplicate, Reason: "already emitted or captured"}
			continue
		}
		if _, ok := byType[e.EventType]; !ok {
			typeOrder = append(typeOrder, e.EventType)
		}
		byType[e.EventType] = append(byType[e.EventType], i)
	}
	for _, typ := range typeOrder {
		rt, err := lookupType(ctx, tx, typ)
		if err != nil {
			return nil, err
		}
		for _, i := range byType[typ] {
			if s := es[i].Stream; rt.registered && s != "" && events.NormalizeStream(s) != rt.stream {
				return nil, gcos.Errorf(gcos.EINVALID, "emit %s: stream %q differs from the registered stream %q", typ, s, rt.stream)
			}
		}
		if !rt.active {
			for _, i := range byType[typ] {
				if out[i], err = captureSignal(ctx, tx, es[i], payloads[i], rt); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err := flushBacklog(ctx, tx, typ); err != nil {
			return nil, err
		}
		batch, pays := make([]Emit, 0, len(byType[typ])), make([][]byte, 0, len(byType[typ]))
		for _, i := range byType[typ] {
			batch, pays = append(batch, es[i]), append(pays, payloads[i])
		}
		ids, err := insertOutbox(ctx, tx, rt, batch, pays)
		if err != nil {
			return nil, err
		}
		for j, i := range byType[typ] {
			out[i] = EmitResult{Outcome: EmitOutcomeEmitted, EventID: ids[j]}
		}
	}
	return out, nil
}

// captureSignal holds a signal whose type is not registered and active in event_pending, with the envelope
// PromotePending needs, and raises the unregistered-type finding (coalesced).
func captureSignal(ctx context.Context, tx pgx.Tx, e Emit, payload []byte, rt registryType) (EmitResult, error) {
	addr, occurred := e.CanonicalAddress(), nullTime(e.OccurredAt)
	stream := events.NormalizeStream(e.Stream)
	if rt.registered {
		stream = rt.stream
	} else if stream == "" {
		stream = events.StreamOf(e.EventType)
		if v, err := events.Load(); err == nil {
			if t, ok := v.Lookup(e.EventType); ok {
				stream = t.EventStream
			}
		}
	}
	envelope, err := json.Marshal(map[string]any{
		"gcos_envelope":       envelopeVersion,
		"event_type":          e.EventType,
		"event_stream":        stream,
		"event_subject_table": e.SubjectTable,
		"event_subject_ref":   e.SubjectRef,
		"source_system":       e.SourceSystem,
		"correlation_id":      e.CorrelationID,
		"severity":            e.Severity,
		"safe_payload":        json.RawMessage(payload),
	})
	if err != nil {
		return EmitResult{}, fmt.Errorf("emit %s: envelope: %w", e.EventType, err)
	}
	var pendingID int64
	err = tx.QueryRow(ctx, emitPendingInsertSQL, events.Domain, e.EventType, e.SubjectTable, nullIfEmpty(e.SubjectRef),
		addr, e.ActorRef, string(envelope), occurred).Scan(&pendingID)
	if err != nil {
		return EmitResult{}, MapError(err, "capture "+e.EventType)
	}
	state := "not registered"
	if rt.registered {
		state = "registered but not active"
	}
	findingID, err := RaiseFindingTx(ctx, tx, gcos.NewFinding(unregisteredIssue(e.EventType), e.EventType, "", "", map[string]any{
		"event_type":          e.EventType,
		"event_domain":        events.Domain,
		"state":               state,
		"registered":          rt.registered,
		"active":              false,
		"last_pending_id":     pendingID,
		"last_correlation_id": e.CorrelationID,
		"hold":                "captured in event_pending; promoted to event_outbox once the type is registered and active",
	}))
	if err != nil {
		return EmitResult{}, fmt.Errorf("emit %s: %w", e.EventType, err)
	}
	return EmitResult{Outcome: EmitOutcomeCaptured, PendingID: pendingID, FindingID: findingID,
		Reason: "event type " + e.EventType + " is " + state + " in domain " + events.Domain}, nil
}

// unregisteredIssue is the finding of a held signal: handoff_unregistered_type for the handoff stream (doc 32 §8),
// issue_event_gap for every other governance stream (doc 41 §41.9).
func unregisteredIssue(eventType string) gcos.IssueType {
	if strings.HasPrefix(eventType, events.Domain+".handoff.") {
		return gcos.IssueHandoffUnregisteredType
	}
	return gcos.IssueIssueEventGap
}

// unsafeKeys names (never shows the values of) the payload keys that broke the safe-metadata rule.
func unsafeKeys(p map[string]any) []string {
	var out []string
	for k, v := range p {
		if !slices.Contains(gcos.SafePayloadKeys, k) || gcos.ValidateSafePayload(map[string]any{k: v}) != nil {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func nonNilPayload(p map[string]any) map[string]any {
	if p == nil {
		return map[string]any{}
	}
	return p
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// ---------------------------------------------------------------------------------------------------------------
// Vocabulary: register, activate, list.

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
func (s *Store) RegisterVocabulary(ctx context.Context) (RegisterResult, error) {
	v, err := events.Load()
	if err != nil {
		return RegisterResult{}, err
	}
	res := RegisterResult{Domain: events.Domain, Total: len(v.Types), Registered: []string{}}
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		res.Registered, res.Present, res.Drifted, res.AuditID = []string{}, 0, nil, 0
		if _, err := tx.Exec(ctx, registryLockSQL); err != nil {
			return fmt.Errorf("register vocabulary: lock: %w", err)
		}
		existing := map[string]events.EventType{}
		rows, err := tx.Query(ctx, registryRowsSQL, events.Domain)
		if err != nil {
			return fmt.Errorf("register vocabulary: %w", err)
		}
		for rows.Next() {
			var t events.EventType
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
			if _, err := tx.Exec(ctx, registryInsertSQL, events.Domain, t.EventType, t.EventStream, t.DeliveryLane,
				t.DefaultSeverity, t.Description); err != nil {
				return MapError(err, "register "+t.EventType)
			}
			res.Registered = append(res.Registered, t.EventType)
		}
		if len(res.Registered) == 0 {
			return nil
		}
		res.AuditID, err = Audit(ctx, tx, AuditEntry{
			EntityType: "governance_event_type", EntityCode: events.Domain, Action: "register",
			Detail: map[string]any{"event_domain": events.Domain, "registered": len(res.Registered),
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
func (s *Store) ActivateEventType(ctx context.Context, eventType, approvalRef, actor string) (ActivateResult, error) {
	eventType, approvalRef, actor = strings.TrimSpace(eventType), strings.TrimSpace(approvalRef), strings.TrimSpace(actor)
	if actor == "" {
		actor = "gcos"
	}
	res := ActivateResult{EventType: eventType, ApprovalRef: approvalRef, ActivatedBy: actor}
	if approvalRef == "" {
		return res, gcos.Errorf(gcos.EINVALID, "activate %s: an approval reference is required (registering is not activating)", eventType)
	}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, registryLockSQL); err != nil {
			return fmt.Errorf("activate %s: lock: %w", eventType, err)
		}
		rt, err := lookupType(ctx, tx, eventType)
		if err != nil {
			return err
		}
		if !rt.registered {
			return gcos.Errorf(gcos.ENOTFOUND, "activate %s: not registered in domain %s (run gcos events register)", eventType, events.Domain)
		}
		if err := tx.QueryRow(ctx, pendingCountSQL, events.Domain, eventType).Scan(&res.PendingBacklog); err != nil {
			return fmt.Errorf("activate %s: %w", eventType, err)
		}
		if rt.active {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE event_type_registry SET active = true WHERE event_domain = $1 AND event_type = $2`,
			events.Domain, eventType); err != nil {
			return fmt.Errorf("activate %s: %w", eventType, err)
		}
		res.Activated = true
		res.AuditID, err = Audit(ctx, tx, AuditEntry{
			EntityType: "governance_event_type", EntityCode: eventType, Action: "activate", Actor: actor,
			Detail: map[string]any{"event_domain": events.Domain, "event_type": eventType, "approval_ref": approvalRef,
				"activated_by": actor, "pending_backlog": res.PendingBacklog},
		})
		if err != nil {
			return err
		}
		_, err = ResolveFindingTx(ctx, tx, unregisteredIssue(eventType), eventType, "")
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
func (s *Store) ListEventTypes(ctx context.Context) ([]EventTypeRow, error) {
	v, err := events.Load()
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT r.event_type, r.event_stream, r.delivery_lane, coalesce(r.default_severity, ''), r.description, r.active,
		       r.created_at,
		       (SELECT count(*) FROM event_pending p
		        WHERE p.event_domain = r.event_domain AND p.event_type_hint = r.event_type AND p.processed_at IS NULL
		          AND p.dead_lettered_at IS NULL AND p.capture_payload ? 'gcos_envelope')
		FROM event_type_registry r WHERE r.event_domain = $1
		ORDER BY r.event_stream, r.event_type`, events.Domain)
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

// ---------------------------------------------------------------------------------------------------------------
// Promotion of captured signals.

// promoteBatch bounds one promotion step.
const promoteBatch = 1000

// PromoteResult reports what PromotePending did.
type PromoteResult struct {
	Promoted     int            `json:"promoted"`      // outbox rows written
	Duplicates   int            `json:"duplicates"`    // captures already in the outbox (marked processed only)
	DeadLettered int            `json:"dead_lettered"` // unreadable or unsafe captures set aside
	Held         int            `json:"held"`          // captures still waiting for their type to be active
	ByType       map[string]int `json:"by_type"`
}

func (r *PromoteResult) add(o PromoteResult) {
	r.Promoted += o.Promoted
	r.Duplicates += o.Duplicates
	r.DeadLettered += o.DeadLettered
	for k, n := range o.ByType {
		r.ByType[k] += n
	}
}

const promoteSelectSQL = `
SELECT p.id, p.event_type_hint, p.entity_table, coalesce(p.entity_ref, ''), p.canonical_address, p.actor_ref,
       p.capture_payload, r.stream, r.lane, r.severity
FROM event_pending p
JOIN LATERAL (
    SELECT min(event_stream) AS stream, min(delivery_lane) AS lane, min(default_severity) AS severity,
           bool_and(active) AS active
    FROM event_type_registry t WHERE t.event_domain = p.event_domain AND t.event_type = p.event_type_hint
) r ON r.active
WHERE p.event_domain = $1 AND p.processed_at IS NULL AND p.dead_lettered_at IS NULL
  AND p.event_type_hint <> $2 AND p.capture_payload ? 'gcos_envelope'
  AND ($3::text IS NULL OR p.event_type_hint = $3)
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
			step, n, err = promoteStep(ctx, tx, nil, promoteBatch)
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
	if err := s.pool.QueryRow(ctx, promoteHeldSQL, events.Domain, emitRetryHint).Scan(&total.Held); err != nil {
		return total, fmt.Errorf("promote: held: %w", err)
	}
	return total, nil
}

// promoteTx promotes the whole captured backlog of one type inside tx (an emit of an active type does this first).
func promoteTx(ctx context.Context, tx pgx.Tx, eventType string) (PromoteResult, error) {
	total := PromoteResult{ByType: map[string]int{}}
	for {
		step, n, err := promoteStep(ctx, tx, &eventType, promoteBatch)
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
	OccurredAt    *time.Time      `json:"occurred_at"`
	SafePayload   json.RawMessage `json:"safe_payload"`
}

type pendingRow struct {
	id                                    int64
	eventType, table, ref, address, actor string
	capture                               []byte
	stream, lane                          string
	severity                              *string
}

// promoteStep promotes up to limit captures (of one type when eventType is set) and reports how many rows it
// looked at.
func promoteStep(ctx context.Context, tx pgx.Tx, eventType *string, limit int) (PromoteResult, int, error) {
	res := PromoteResult{ByType: map[string]int{}}
	if _, err := tx.Exec(ctx, promoteLockSQL); err != nil {
		return res, 0, fmt.Errorf("promote: lock: %w", err)
	}
	rows, err := tx.Query(ctx, promoteSelectSQL, events.Domain, emitRetryHint, eventType, limit)
	if err != nil {
		return res, 0, fmt.Errorf("promote: %w", err)
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pendingRow, error) {
		var p pendingRow
		err := r.Scan(&p.id, &p.eventType, &p.table, &p.ref, &p.address, &p.actor, &p.capture, &p.stream, &p.lane, &p.severity)
		return p, err
	})
	if err != nil {
		return res, 0, fmt.Errorf("promote: %w", err)
	}
	for _, p := range batch {
		outcome, err := promoteOne(ctx, tx, p)
		if err != nil {
			return res, 0, err
		}
		switch outcome {
		case EmitOutcomeEmitted:
			res.Promoted++
			res.ByType[p.eventType]++
		case EmitOutcomeDuplicate:
			res.Duplicates++
		default:
			res.DeadLettered++
		}
	}
	return res, len(batch), nil
}

const pendingProcessedSQL = `UPDATE event_pending SET processed_at = now() WHERE id = $1`

const pendingDeadLetterSQL = `
UPDATE event_pending SET dead_lettered_at = now(), error_count = error_count + 1, last_error = $2 WHERE id = $1`

// promoteOne moves one capture to the outbox: emitted, duplicate (already there: only marked processed), or
// rejected (unreadable or unsafe capture: dead-lettered with a finding, never promoted).
func promoteOne(ctx context.Context, tx pgx.Tx, p pendingRow) (string, error) {
	var env captureEnvelope
	payload, reason := decodeCapture(p.capture, &env)
	if reason == "" && env.EventType != p.eventType {
		reason = fmt.Sprintf("envelope event type %q differs from event_type_hint %q", env.EventType, p.eventType)
	}
	if reason != "" {
		if _, err := tx.Exec(ctx, pendingDeadLetterSQL, p.id, reason); err != nil {
			return "", fmt.Errorf("promote %d: %w", p.id, err)
		}
		_, err := RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.InputIssue(gcos.InputInvalidSchema), p.address, "", "", map[string]any{
			"reason": "captured signal cannot be promoted: " + reason, "pending_id": p.id, "event_type": p.eventType,
			"canonical_address": p.address,
		}))
		if err != nil {
			return "", fmt.Errorf("promote %d: %w", p.id, err)
		}
		return EmitOutcomeRejected, nil
	}
	var eventID string
	err := tx.QueryRow(ctx, emitOutboxDupSQL, env.CorrelationID, env.SourceSystem, p.eventType, events.Domain).Scan(&eventID)
	switch err {
	case nil:
		if _, err := tx.Exec(ctx, pendingProcessedSQL, p.id); err != nil {
			return "", fmt.Errorf("promote %d: %w", p.id, err)
		}
		return EmitOutcomeDuplicate, nil
	case pgx.ErrNoRows:
	default:
		return "", fmt.Errorf("promote %d: dedup: %w", p.id, err)
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
		return "", MapError(err, fmt.Sprintf("promote %d", p.id))
	}
	if _, err := tx.Exec(ctx, pendingProcessedSQL, p.id); err != nil {
		return "", fmt.Errorf("promote %d: %w", p.id, err)
	}
	return EmitOutcomeEmitted, nil
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

// EmitHeartbeat announces that a worker of stream ("handoff", "candidate", … or "governance.handoff") completed a
// run: the stream's heartbeat type from the vocabulary (governance.handoff.heartbeat, governance.candidate.
// scan_completed, …; governance.<stream>.heartbeat for a stream without one) through the one emit path, so an
// inactive type is captured like any other signal. The payload carries the run's total count; each call is a new
// fact with its own correlation id.
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
	var total int64
	for _, n := range counts {
		total += n
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
		Payload:       map[string]any{"source": full, "count": total},
	})
}

// ---------------------------------------------------------------------------------------------------------------
// Routing and the notification boundary.

// Notification is one outbox event a recipient should be notified of.
type Notification struct {
	Recipient     string       `json:"recipient_ref"`
	Event         events.Event `json:"event"`
	OccurredAt    *time.Time   `json:"occurred_at"`
	CreatedAt     *time.Time   `json:"created_at"`
	Subscriptions []string     `json:"subscriptions"` // the unmuted subscriptions that selected it
}

const subscriptionsSQL = `
SELECT id::text, recipient_ref, event_domain, event_type, event_stream, scope_subject_table, scope_filter, mute
FROM event_subscription
WHERE ($1::text IS NULL OR recipient_ref = $1) AND (event_domain IS NULL OR event_domain = $2)
ORDER BY recipient_ref, created_at, id`

// notificationPageSQL reads unread governance events in (created_at, id) order; $5 prefilters on the event types
// the recipient's unmuted subscriptions can select (LIKE patterns), and Go applies the exact match.
const notificationPageSQL = `
SELECT o.id::text, o.event_domain, o.event_type, o.event_stream, o.delivery_lane, coalesce(o.event_severity, ''),
       o.event_subject_table, coalesce(o.event_subject_ref, ''), o.canonical_address, o.actor_ref, o.source_system,
       o.safe_payload, o.occurred_at, o.created_at, coalesce(o.created_at, '-infinity'::timestamptz)
FROM event_outbox o
WHERE o.event_domain = $1
  AND (coalesce(o.created_at, '-infinity'::timestamptz), o.id) > ($3::timestamptz, $4::uuid)
  AND o.event_type LIKE ANY ($5::text[])
  AND NOT EXISTS (SELECT 1 FROM event_read r WHERE r.event_id = o.id AND r.actor_ref = $2)
ORDER BY coalesce(o.created_at, '-infinity'::timestamptz), o.id
LIMIT $6`

func loadSubscriptions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, recipient *string) ([]events.Subscription, error) {
	rows, err := q.Query(ctx, subscriptionsSQL, recipient, events.Domain)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Subscription, error) {
		var s events.Subscription
		var filter []byte
		if err := r.Scan(&s.ID, &s.RecipientRef, &s.EventDomain, &s.EventType, &s.EventStream, &s.ScopeSubjectTable,
			&filter, &s.Mute); err != nil {
			return s, err
		}
		if len(filter) > 0 {
			dec := json.NewDecoder(bytes.NewReader(filter))
			dec.UseNumber()
			var m any
			if err := dec.Decode(&m); err != nil {
				return s, fmt.Errorf("subscription %s: scope_filter: %w", s.ID, err)
			}
			obj, ok := m.(map[string]any)
			if !ok && m != nil {
				// A scope_filter that is not an object selects nothing rather than everything.
				obj = map[string]any{"\x00unsupported_scope_filter": true}
			}
			s.ScopeFilter = obj
		}
		return s, nil
	})
	if err != nil {
		return nil, fmt.Errorf("subscriptions: %w", err)
	}
	return subs, nil
}

// likePattern turns a subscription's event_type (nil, exact, or prefix "…*") into a LIKE pattern.
func likePattern(p *string) string {
	if p == nil {
		return "%"
	}
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	if prefix, ok := strings.CutSuffix(*p, "*"); ok {
		return esc.Replace(prefix) + "%"
	}
	return esc.Replace(*p)
}

// Notifications returns, oldest first and at most limit (default 100, at most 1000), the governance outbox events
// recipient should be notified of: selected by one of its unmuted subscriptions, not selected by a muted one, and
// not yet recorded as read by it in event_read. Mute only suppresses the notification; the finding behind the
// event is never touched. A replayed emit adds no outbox row, so it never re-notifies.
func (s *Store) Notifications(ctx context.Context, recipient string, limit int) ([]Notification, error) {
	recipient = strings.TrimSpace(recipient)
	if recipient == "" {
		return nil, gcos.Errorf(gcos.EINVALID, "notifications: recipient must not be empty")
	}
	subs, err := loadSubscriptions(ctx, s.pool, &recipient)
	if err != nil {
		return nil, err
	}
	return s.notificationsFor(ctx, recipient, subs, clampLimit(limit))
}

// PendingNotifications returns the notifications due to every recipient with a subscription to the governance
// domain, recipient by recipient, at most limit per recipient.
func (s *Store) PendingNotifications(ctx context.Context, limit int) ([]Notification, error) {
	subs, err := loadSubscriptions(ctx, s.pool, nil)
	if err != nil {
		return nil, err
	}
	var recipients []string
	for _, sub := range subs {
		if !slices.Contains(recipients, sub.RecipientRef) {
			recipients = append(recipients, sub.RecipientRef)
		}
	}
	out := []Notification{}
	for _, r := range recipients {
		n, err := s.notificationsFor(ctx, r, subs, clampLimit(limit))
		if err != nil {
			return nil, err
		}
		out = append(out, n...)
	}
	return out, nil
}

func clampLimit(limit int) int {
	if limit <= 0 || limit > 1000 {
		return 100
	}
	return limit
}

func (s *Store) notificationsFor(ctx context.Context, recipient string, subs []events.Subscription, limit int) ([]Notification, error) {
	var patterns []string
	for _, sub := range subs {
		if sub.RecipientRef == recipient && !sub.Mute {
			patterns = append(patterns, likePattern(sub.EventType))
		}
	}
	out := []Notification{}
	if len(patterns) == 0 {
		return out, nil
	}
	after := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	afterID := "00000000-0000-0000-0000-000000000000"
	page := max(limit, 200)
	for len(out) < limit {
		rows, err := s.pool.Query(ctx, notificationPageSQL, events.Domain, recipient, after, afterID, patterns, page)
		if err != nil {
			return nil, fmt.Errorf("notifications for %s: %w", recipient, err)
		}
		n := 0
		for rows.Next() {
			n++
			var nt Notification
			var payload []byte
			e := &nt.Event
			if err := rows.Scan(&e.ID, &e.Domain, &e.Type, &e.Stream, &e.DeliveryLane, &e.Severity, &e.SubjectTable,
				&e.SubjectRef, &e.CanonicalAddress, &e.ActorRef, &e.SourceSystem, &payload, &nt.OccurredAt,
				&nt.CreatedAt, &after); err != nil {
				rows.Close()
				return nil, fmt.Errorf("notifications for %s: %w", recipient, err)
			}
			afterID = e.ID
			dec := json.NewDecoder(bytes.NewReader(payload))
			dec.UseNumber()
			if err := dec.Decode(&e.Payload); err != nil {
				rows.Close()
				return nil, fmt.Errorf("notifications for %s: event %s payload: %w", recipient, e.ID, err)
			}
			route := events.RouteFor(recipient, subs, *e)
			if !route.Notify || len(out) >= limit {
				continue
			}
			nt.Recipient, nt.Subscriptions = recipient, route.Matched
			out = append(out, nt)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("notifications for %s: %w", recipient, err)
		}
		if n < page {
			break
		}
	}
	return out, nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

const markReadLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('gcos.event_read:' || $1 || chr(31) || $2, 0))`

const markReadSQL = `
INSERT INTO event_read (event_id, actor_ref, read_at, read_status_source)
SELECT $1::uuid, $2, now(), 'gcos'
WHERE NOT EXISTS (SELECT 1 FROM event_read WHERE event_id = $1::uuid AND actor_ref = $2)`

// MarkRead records that actor has seen the outbox event eventID (event_read). It is idempotent: it reports
// whether a row was written now, and a second call writes nothing. An unknown event is ENOTFOUND.
func (s *Store) MarkRead(ctx context.Context, eventID, actor string) (bool, error) {
	eventID, actor = strings.TrimSpace(eventID), strings.TrimSpace(actor)
	if !uuidRE.MatchString(eventID) {
		return false, gcos.Errorf(gcos.EINVALID, "mark read: event id %q is not a uuid", eventID)
	}
	if actor == "" {
		return false, gcos.Errorf(gcos.EINVALID, "mark read: actor must not be empty")
	}
	var wrote bool
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_outbox WHERE id = $1::uuid)`, eventID).Scan(&exists); err != nil {
			return fmt.Errorf("mark read %s: %w", eventID, err)
		}
		if !exists {
			return gcos.Errorf(gcos.ENOTFOUND, "mark read: no event %s in event_outbox", eventID)
		}
		if _, err := tx.Exec(ctx, markReadLockSQL, eventID, actor); err != nil {
			return fmt.Errorf("mark read %s: lock: %w", eventID, err)
		}
		tag, err := tx.Exec(ctx, markReadSQL, eventID, actor)
		if err != nil {
			return MapError(err, "mark read "+eventID)
		}
		wrote = tag.RowsAffected() > 0
		return nil
	})
	return wrote, err
}

// ResolveOwner resolves the owner of a scope / class / collection: an active ownership row → the scope's
// default_owner_hint → GOV-COUNCIL (the registries as the source binding names them) (events.ResolveOwner). Either registry may be
// absent (optional SB-2 tables): that step is skipped and the reason says so; nothing is guessed.
func (s *Store) ResolveOwner(ctx context.Context, q events.OwnerQuery) (events.ResolvedOwner, error) {
	var src events.OwnerSources
	var hasOwnership, hasScopes bool
	sb := s.cfg.SourceBinding
	names := RegistryNames(sb)
	err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		Quote(sb.OwnerScope.Table), Quote(sb.Scope.Table)).Scan(&hasOwnership, &hasScopes)
	if err != nil {
		return events.ResolvedOwner{}, fmt.Errorf("resolve owner: %w", err)
	}
	if hasOwnership {
		rows, err := s.pool.Query(ctx, names.SQL(`
			SELECT id, scope_code, coalesce(entity_type, ''), coalesce(collection_name, ''), {owner_ref}, status
			FROM {ownership}
			WHERE ($1 = '' OR scope_code = $1)
			  AND (entity_type IS NULL OR entity_type = $2) AND (collection_name IS NULL OR collection_name = $3)`),
			q.Scope, q.EntityType, q.CollectionName)
		if err != nil {
			return events.ResolvedOwner{}, fmt.Errorf("resolve owner: ownership: %w", err)
		}
		src.Ownerships, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Ownership, error) {
			var o events.Ownership
			err := r.Scan(&o.ID, &o.ScopeCode, &o.EntityType, &o.CollectionName, &o.OwnerRef, &o.Status)
			return o, err
		})
		if err != nil {
			return events.ResolvedOwner{}, fmt.Errorf("resolve owner: ownership: %w", err)
		}
		if src.Ownerships == nil {
			src.Ownerships = []events.Ownership{}
		}
	}
	if hasScopes {
		rows, err := s.pool.Query(ctx, names.SQL(`
			SELECT {scope_code}, coalesce(default_owner_hint, '') FROM {scopes}
			WHERE $1 = '' OR {scope_code} = $1`), q.Scope)
		if err != nil {
			return events.ResolvedOwner{}, fmt.Errorf("resolve owner: scopes: %w", err)
		}
		src.ScopeDefault = map[string]string{}
		var code, hint string
		_, err = pgx.ForEachRow(rows, []any{&code, &hint}, func() error {
			src.ScopeDefault[code] = hint
			return nil
		})
		if err != nil {
			return events.ResolvedOwner{}, fmt.Errorf("resolve owner: scopes: %w", err)
		}
	}
	return events.ResolveOwner(q, src), nil
}
