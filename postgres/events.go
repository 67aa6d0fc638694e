package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The capture side of the governance event domain (SB-11, doc 41) on the substrate's event tables, with no table
// of its own; the event stage (package events) registers and activates types, promotes and serves notifications:
//
//   - EmitSignal is the one emit path. A signal of a registered and active type goes to event_outbox; any other
//     is captured in event_pending with a GCOS envelope and raises handoff_unregistered_type (handoff stream) or
//     issue_event_gap (other streams) once, coalesced. A payload with anything but addresses, refs and counts is
//     rejected with an input.invalid_schema finding and enqueued nowhere.
//   - Idempotency: a signal is identified by (source_system, event_type, correlation_id). Under a transaction-scoped
//     advisory lock on that key, the emit looks in event_outbox and in event_pending (processed or not, dead-lettered
//     or not) and does nothing when the signal is already there, so a replay never adds a row. The key includes the
//     event type so that one source row announcing two different facts is not mistaken for a replay.
//   - Promotion (promote.go) moves captured signals whose type has become active to the outbox in capture (id)
//     order, under one advisory lock shared by every promoter; an emit of an active type first promotes that
//     type's backlog, so the outbox order of one type follows capture order.
//
// Rows GCOS did not capture itself (no envelope), intake retry rows (event_type_hint governance.handoff.retry) and
// dead-lettered rows are never promoted.

// emitRetryHint marks the intake's retry rows in event_pending: work items of the intake, not signals.
const emitRetryHint = "governance.handoff.retry"

// envelopeVersion is written into every capture so promotion recognises GCOS's own captures.
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
	// Announce marks one of GCOS's own announcements (a finding's transition, a run, a snapshot, a ruleset): it is
	// always captured, and the promoter releases it under the emission discipline (cooldown, ceiling, digest,
	// routing, escalation). A handoff signal is transport, not announcement: it goes straight to the outbox.
	Announce bool `json:"-"`
}

// CanonicalAddress is the emit address, collection_name:entity_code, built at emit time (doc 41 §41.5).
func (e Emit) CanonicalAddress() string { return e.CollectionName + ":" + e.EntityCode }

// validate checks the envelope (not the payload): a signal without provenance, subject or idempotency key is a
// caller's bug and is refused before anything is written.
func (e Emit) validate() error {
	switch {
	case !gcos.ValidEventType(e.EventType):
		return gcos.Errorf(gcos.EINVALID, "emit: event type %s is not a governance.<stream>.<name> type", gcos.Quote(e.EventType))
	case e.Stream != "" && !gcos.ValidEventStream(e.Stream):
		return gcos.Errorf(gcos.EINVALID, "emit %s: stream %s is not a governance stream", e.EventType, gcos.Quote(e.Stream))
	case strings.TrimSpace(e.SubjectTable) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: subject table must not be empty", e.EventType)
	case strings.TrimSpace(e.CollectionName) == "" || strings.TrimSpace(e.EntityCode) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: collection_name and entity_code must not be empty (they build canonical_address)", e.EventType)
	case strings.TrimSpace(e.ActorRef) == "" || strings.TrimSpace(e.SourceSystem) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: actor_ref and source_system must not be empty (every signal carries provenance)", e.EventType)
	case strings.TrimSpace(e.CorrelationID) == "":
		return gcos.Errorf(gcos.EINVALID, "emit %s: correlation_id must not be empty (it is the idempotency key)", e.EventType)
	case e.Severity != "" && !slices.Contains(gcos.EventSeverities, e.Severity):
		return gcos.Errorf(gcos.EINVALID, "emit %s: severity %s is not one of %v", e.EventType, gcos.Quote(e.Severity), gcos.EventSeverities)
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

// emitKeysSQL claims keys into the current generation and returns those that were new (source, type and id joined
// by chr(31)). A key either generation holds (one first seen within the dedup window, events.signal_key_keep) is a
// replay. Within a generation the primary key decides first-seen: a concurrent emit of the same key waits for the
// other transaction and then conflicts, so a signal is enqueued at most once however often it is replayed; a
// rotation of the generations waits for every claiming transaction (RotateSignalKeysTx), so no claim spans one.
const emitKeysSQL = `
INSERT INTO governance_signal_key (source_system, event_type, correlation_id, generation)
SELECT u.s, u.t, u.c, g.current FROM unnest($1::text[], $2::text[], $3::text[]) AS u(s, t, c), gcos_signal_key_generation g
WHERE NOT EXISTS (SELECT 1 FROM governance_signal_key k WHERE k.source_system = u.s AND k.event_type = u.t AND k.correlation_id = u.c)
ON CONFLICT DO NOTHING
RETURNING source_system || chr(31) || event_type || chr(31) || correlation_id`

// ClaimSignalKeysTx claims the signals' idempotency keys (source, type and correlation id, side by side, in key
// order) and returns those that were new, each as source, type and id joined by chr(31) (emitKeysSQL).
func ClaimSignalKeysTx(ctx context.Context, tx pgx.Tx, srcs, types, corrs []string) ([]string, error) {
	rows, err := tx.Query(ctx, emitKeysSQL, srcs, types, corrs)
	if err != nil {
		return nil, fmt.Errorf("claim signal keys: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("claim signal keys: %w", err)
	}
	return claimed, nil
}

// promoteLockSQL serialises every promoter (the event stage's promoter and the backlog flush of an emit) so the outbox order of
// a type follows its capture order.
const promoteLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('gcos.events.promote', 0))`

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

// EventTypeState says whether eventType has a governance row in event_type_registry and whether it is active (every
// row says so, when a live table holds duplicates).
func EventTypeState(ctx context.Context, tx pgx.Tx, eventType string) (registered, active bool, err error) {
	rt, err := lookupType(ctx, tx, eventType)
	return rt.registered, rt.active, err
}

func lookupType(ctx context.Context, tx pgx.Tx, eventType string) (registryType, error) {
	var n int
	var r registryType
	err := tx.QueryRow(ctx, registryTypeSQL, gcos.EventDomain, eventType).Scan(&n, &r.active, &r.stream, &r.lane, &r.defaultSeverity)
	if err != nil {
		return r, fmt.Errorf("event type %s: %w", eventType, err)
	}
	r.registered = n > 0
	r.active = r.registered && r.active
	return r, nil
}

// EmitSignal is the one emit path (doc 41 §41.5, SPEC §10), inside the caller's transaction:
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
func EmitSignal(ctx context.Context, tx pgx.Tx, e Emit) (EmitResult, error) {
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
	switch err := tx.QueryRow(ctx, emitOutboxDupSQL, e.CorrelationID, e.SourceSystem, e.EventType, gcos.EventDomain).Scan(&eventID); err {
	case nil:
		return EmitResult{Outcome: EmitOutcomeDuplicate, EventID: eventID, Reason: "already in event_outbox"}, nil
	case pgx.ErrNoRows:
	default:
		return EmitResult{}, fmt.Errorf("emit %s: dedup: %w", e.EventType, err)
	}
	switch err := tx.QueryRow(ctx, emitPendingDupSQL, e.CorrelationID, e.SourceSystem, e.EventType, gcos.EventDomain).Scan(&pendingID); err {
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
	if err := tx.QueryRow(ctx, pendingBacklogSQL, gcos.EventDomain, eventType).Scan(&backlog); err != nil {
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
	rows, err := tx.Query(ctx, emitOutboxInsertSQL, gcos.EventDomain, es[0].EventType, rt.stream, rt.lane,
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

// EmitSignals is EmitSignal for many signals in one transaction, with the same outcomes (a duplicate's result does
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
	claimed, err := ClaimSignalKeysTx(ctx, tx, srcs, types, corrs)
	if err != nil {
		return nil, fmt.Errorf("emit: %w", err)
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
			if s := es[i].Stream; rt.registered && s != "" && gcos.NormalizeEventStream(s) != rt.stream {
				return nil, gcos.Errorf(gcos.EINVALID, "emit %s: stream %s differs from the registered stream %s", typ, gcos.Quote(s), gcos.Quote(rt.stream))
			}
		}
		var direct []int
		for _, i := range byType[typ] {
			if rt.active && !es[i].Announce {
				direct = append(direct, i)
				continue
			}
			if out[i], err = captureSignal(ctx, tx, es[i], payloads[i], rt); err != nil {
				return nil, err
			}
		}
		if len(direct) == 0 {
			continue
		}
		if err := flushBacklog(ctx, tx, typ); err != nil {
			return nil, err
		}
		batch, pays := make([]Emit, 0, len(direct)), make([][]byte, 0, len(direct))
		for _, i := range direct {
			batch, pays = append(batch, es[i]), append(pays, payloads[i])
		}
		ids, err := insertOutbox(ctx, tx, rt, batch, pays)
		if err != nil {
			return nil, err
		}
		for j, i := range direct {
			out[i] = EmitResult{Outcome: EmitOutcomeEmitted, EventID: ids[j]}
		}
	}
	return out, nil
}

// captureSignal holds a signal in event_pending, with the envelope promotion needs: a signal whose type is not
// registered and active (and raises the unregistered-type finding, coalesced), or an announcement, which the
// promoter releases under the emission discipline.
func captureSignal(ctx context.Context, tx pgx.Tx, e Emit, payload []byte, rt registryType) (EmitResult, error) {
	addr, occurred := e.CanonicalAddress(), nullTime(e.OccurredAt)
	stream := gcos.NormalizeEventStream(e.Stream)
	if rt.registered {
		stream = rt.stream
	} else if stream == "" {
		stream = gcos.EventStreamOf(e.EventType)
		if v, err := gcos.LoadVocabulary(); err == nil {
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
		"announce":            e.Announce,
		"safe_payload":        json.RawMessage(payload),
	})
	if err != nil {
		return EmitResult{}, fmt.Errorf("emit %s: envelope: %w", e.EventType, err)
	}
	var pendingID int64
	err = tx.QueryRow(ctx, emitPendingInsertSQL, gcos.EventDomain, e.EventType, e.SubjectTable, nullIfEmpty(e.SubjectRef),
		addr, e.ActorRef, string(envelope), occurred).Scan(&pendingID)
	if err != nil {
		return EmitResult{}, MapError(err, "capture "+e.EventType)
	}
	if rt.active {
		return EmitResult{Outcome: EmitOutcomeCaptured, PendingID: pendingID,
			Reason: "announcement of " + e.EventType + ": released by the promoter under the emission discipline"}, nil
	}
	f, state := heldSignalFinding(e.EventType, rt.registered, map[string]any{
		"last_pending_id": pendingID, "last_correlation_id": e.CorrelationID,
	})
	findingID, err := RaiseHeldSignalFindingTx(ctx, tx, f)
	if err != nil {
		return EmitResult{}, fmt.Errorf("emit %s: %w", e.EventType, err)
	}
	return EmitResult{Outcome: EmitOutcomeCaptured, PendingID: pendingID, FindingID: findingID,
		Reason: "event type " + e.EventType + " is " + state + " in domain " + gcos.EventDomain}, nil
}

// heldSignalFinding is the finding of signals held for eventType (not registered, or registered but not active),
// with evidence beside what every such finding says; state names the type's state.
func heldSignalFinding(eventType string, registered bool, evidence map[string]any) (f gcos.Finding, state string) {
	state = "not registered"
	if registered {
		state = "registered but not active"
	}
	ev := map[string]any{
		"event_type": eventType, "event_domain": gcos.EventDomain, "state": state, "registered": registered, "active": false,
		"hold": "captured in event_pending; promoted to event_outbox once the type is registered and active",
	}
	maps.Copy(ev, evidence)
	return gcos.NewFinding(gcos.UnregisteredTypeIssue(eventType), eventType, "", "", ev), state
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
// Heartbeats.

// Heartbeat is the signal announcing that a worker of stream ("handoff", "candidate", … or "governance.handoff") is alive and
// what it did: the stream's heartbeat type from the vocabulary (governance.handoff.heartbeat, governance.candidate.
// scan_completed, …; governance.<stream>.heartbeat for a stream without one), as an announcement whose subject is
// the stream, so the emission discipline's cooldown makes it a periodic summary. The payload carries each count
// whose name is a safe payload key (seen, coalesced, enqueued, failed, dlq, …), and as count the rows seen (the
// total of the counts when there is no seen); each call is a new fact with its own correlation id. EmitSignal sends
// it.
func Heartbeat(stream string, counts map[string]int64) (Emit, error) {
	full := gcos.NormalizeEventStream(stream)
	if !gcos.ValidEventStream(full) {
		return Emit{}, gcos.Errorf(gcos.EINVALID, "heartbeat: %s is not a governance stream", gcos.Quote(stream))
	}
	eventType := full + ".heartbeat"
	if v, err := gcos.LoadVocabulary(); err == nil {
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
		return Emit{}, fmt.Errorf("heartbeat: %w", err)
	}
	return Emit{
		EventType: eventType, Stream: full,
		SubjectTable: "queue_heartbeat", SubjectRef: full,
		CollectionName: "queue_heartbeat", EntityCode: full,
		ActorRef: "gcos", SourceSystem: "gcos",
		CorrelationID: "heartbeat:" + full + ":" + hex.EncodeToString(nonce),
		Payload:       payload, Announce: true,
	}, nil
}
