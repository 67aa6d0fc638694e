package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"gcos/postgres"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The emission discipline (doc 41 §41.8–§41.9), applied by the promoter to GCOS's announcements in capture order:
//
//   - cooldown: an announcement of a type about a subject waits until the rule's cooldown after the last one about
//     that subject has passed; a later announcement about the subject supersedes a waiting one (coalesced), so
//     what finally goes out is the latest state;
//   - ceiling: past the rule's ceiling in the type's window, an announcement is held back (marked processed with
//     the reason) and counted; when the window closes, one governance.coverage.summary digest says how many;
//   - routing: one owner resolver (ResolveOwner) decides the owner of every released announcement, written into
//     its payload (owner_ref, route); authority disputes (council_types) go to the council whatever it says;
//   - escalation: a released announcement of an escalated severity that its owner has not read (event_read) by
//     its due time is announced again as governance.lifecycle.escalated, routed to the escalation's recipient.
//
// The promoter holds the promotion lock, so it is the one writer of the discipline's tables.

type discipline struct {
	d       Discipline
	clock   func() time.Time
	sb      gcos.SourceBinding
	now     time.Time
	windows map[string]*Window
	dirty   map[string]bool
	digests []windowDigest
	routes  map[OwnerQuery]ResolvedOwner
}

type windowDigest struct {
	eventType string
	w         Window
}

func (l *Loop) newDiscipline() *discipline {
	return &discipline{d: DisciplineFrom(l.cfg.Events), clock: l.clock, sb: l.cfg.Binding}
}

// Begin reads the clock once per transaction: the injected clock, else the database's.
func (dis *discipline) Begin(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	if dis.clock != nil {
		dis.now = dis.clock()
	} else if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&dis.now); err != nil {
		return time.Time{}, fmt.Errorf("discipline: clock: %w", err)
	}
	dis.windows, dis.dirty, dis.digests = map[string]*Window{}, map[string]bool{}, nil
	dis.routes = map[OwnerQuery]ResolvedOwner{}
	return dis.now, nil
}

func (dis *discipline) window(ctx context.Context, tx pgx.Tx, eventType string) (*Window, error) {
	if w, ok := dis.windows[eventType]; ok {
		return w, nil
	}
	w := &Window{}
	err := tx.QueryRow(ctx, `SELECT window_start, window_end, emitted, held FROM gcos_event_window WHERE event_type = $1`,
		eventType).Scan(&w.Start, &w.End, &w.Emitted, &w.Held)
	if err != nil && err != pgx.ErrNoRows {
		return nil, fmt.Errorf("discipline %s: window: %w", eventType, err)
	}
	dis.windows[eventType] = w
	return w, nil
}

const pendingSettledSQL = `UPDATE event_pending SET processed_at = now(), last_error = $2 WHERE id = $1`

const cooldownUpsertSQL = `
INSERT INTO gcos_event_cooldown (event_type, subject_ref, last_emitted_at, quiet_until) VALUES ($1, $2, $3, $4)
ON CONFLICT (event_type, subject_ref) DO UPDATE SET last_emitted_at = EXCLUDED.last_emitted_at,
    quiet_until = EXCLUDED.quiet_until`

// Release applies the discipline to one announcement.
func (dis *discipline) Release(ctx context.Context, tx pgx.Tx, p postgres.PendingSignal, superseded bool) (string, error) {
	rule := dis.d.RuleFor(p.EventType)
	if superseded && rule.Cooldown > 0 {
		if _, err := tx.Exec(ctx, pendingSettledSQL, p.ID, "coalesced: a later announcement about the same subject supersedes it"); err != nil {
			return "", fmt.Errorf("promote %d: %w", p.ID, err)
		}
		return postgres.EmitOutcomeCoalesced, nil
	}
	var last time.Time
	if rule.Cooldown > 0 {
		err := tx.QueryRow(ctx, `SELECT last_emitted_at FROM gcos_event_cooldown WHERE event_type = $1 AND subject_ref = $2`,
			p.EventType, p.Ref).Scan(&last)
		if err != nil && err != pgx.ErrNoRows {
			return "", fmt.Errorf("promote %d: cooldown: %w", p.ID, err)
		}
	}
	w, err := dis.window(ctx, tx, p.EventType)
	if err != nil {
		return "", err
	}
	dec := Decide(rule, last, *w, dis.now)
	if dec.Closed != nil && dec.Closed.Held > 0 {
		dis.digests = append(dis.digests, windowDigest{p.EventType, *dec.Closed})
	}
	*w = dec.Window
	dis.dirty[p.EventType] = true
	switch dec.Outcome {
	case Wait:
		// The cooldown grew since it was written: wait out the longer one.
		if _, err := tx.Exec(ctx, cooldownUpsertSQL, p.EventType, p.Ref, last, dec.Until); err != nil {
			return "", fmt.Errorf("promote %d: cooldown: %w", p.ID, err)
		}
		return postgres.EmitOutcomeWaiting, nil
	case Hold:
		reason := fmt.Sprintf("held back: ceiling of %d %s per %s reached; counted into the digest at %s",
			rule.Ceiling, p.EventType, rule.Window, dec.Window.End.UTC().Format(time.RFC3339))
		if _, err := tx.Exec(ctx, pendingSettledSQL, p.ID, reason); err != nil {
			return "", fmt.Errorf("promote %d: %w", p.ID, err)
		}
		return postgres.EmitOutcomeHeldBack, nil
	}
	var env announcement
	if json.Unmarshal(p.Capture, &env) != nil {
		// unreadable: dead-lettered with a finding, never a poison row
		_, outcome, err := postgres.PromoteSignal(ctx, tx, p, nil)
		return outcome, err
	}
	route, err := dis.route(ctx, tx, p, env.Payload)
	if err != nil {
		return "", err
	}
	eventID, outcome, err := postgres.PromoteSignal(ctx, tx, p, func(payload []byte) ([]byte, string) {
		return withRoute(payload, route)
	})
	if err != nil || outcome != postgres.EmitOutcomeEmitted {
		return outcome, err
	}
	if rule.Cooldown > 0 {
		if _, err := tx.Exec(ctx, cooldownUpsertSQL, p.EventType, p.Ref, dis.now, dis.now.Add(rule.Cooldown)); err != nil {
			return "", fmt.Errorf("promote %d: cooldown: %w", p.ID, err)
		}
	}
	if due, ok := dis.d.Escalation.EscalationDue(env.severity(p), route.OwnerRef, dis.now); ok {
		if _, err := tx.Exec(ctx, `INSERT INTO gcos_event_escalation (event_id, event_type, owner_ref, due_at)
			VALUES ($1::uuid, $2, $3, $4) ON CONFLICT DO NOTHING`, eventID, p.EventType, route.OwnerRef, due); err != nil {
			return "", fmt.Errorf("promote %d: escalation: %w", p.ID, err)
		}
	}
	return outcome, nil
}

// announcement is what the discipline reads of a capture's envelope.
type announcement struct {
	Severity string         `json:"severity"`
	Payload  map[string]any `json:"safe_payload"`
}

// severity is the severity the outbox row gets: the capture's, else the type's default.
func (a announcement) severity(p postgres.PendingSignal) string {
	if a.Severity != "" {
		return a.Severity
	}
	if p.Severity != nil {
		return *p.Severity
	}
	return ""
}

// route decides an announcement's owner: the council for an authority dispute or a system-wide announcement (one
// that names no scope, class, collection or group), else the owner resolver over what the announcement names (a
// group's scope, class and collection when it names a group).
func (dis *discipline) route(ctx context.Context, tx pgx.Tx, p postgres.PendingSignal, payload map[string]any) (ResolvedOwner, error) {
	if dis.d.IsDispute(p.EventType) {
		return ResolvedOwner{OwnerRef: CouncilOwner, Source: OwnerFromCouncil,
			Reason: "authority dispute: routed to " + CouncilOwner}, nil
	}
	text := func(k string) string { s, _ := payload[k].(string); return s }
	q := OwnerQuery{Scope: text("scope"), EntityType: text("object_type"), CollectionName: text("collection_name")}
	if g := text("group_key"); g != "" {
		var scope, class, coll *string
		err := tx.QueryRow(ctx, `SELECT scope, object_class, source_registry FROM governance_group WHERE group_key = $1`, g).
			Scan(&scope, &class, &coll)
		if err != nil && err != pgx.ErrNoRows {
			return ResolvedOwner{}, fmt.Errorf("promote %d: route: group %s: %w", p.ID, g, err)
		}
		for dst, src := range map[*string]*string{&q.Scope: scope, &q.EntityType: class, &q.CollectionName: coll} {
			if *dst == "" && src != nil {
				*dst = *src
			}
		}
	}
	if q == (OwnerQuery{}) {
		return ResolvedOwner{OwnerRef: CouncilOwner, Source: OwnerFromCouncil,
			Reason: "a system-wide announcement names no scope: routed to " + CouncilOwner}, nil
	}
	if r, ok := dis.routes[q]; ok {
		return r, nil
	}
	r, err := resolveOwner(ctx, tx, dis.sb, q)
	if err != nil {
		return r, fmt.Errorf("promote %d: %w", p.ID, err)
	}
	dis.routes[q] = r
	return r, nil
}

// withRoute writes the routed owner into a safe payload.
func withRoute(payload []byte, r ResolvedOwner) ([]byte, string) {
	m := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, "unreadable safe payload: " + err.Error()
	}
	m["owner_ref"], m["route"] = r.OwnerRef, r.Source
	out, err := json.Marshal(m)
	if err != nil {
		return nil, "safe payload: " + err.Error()
	}
	return out, ""
}

// End writes the windows this transaction moved and emits the digests of the windows it closed.
func (dis *discipline) End(ctx context.Context, tx pgx.Tx, res *postgres.PromoteResult) error {
	for typ := range dis.dirty {
		w := dis.windows[typ]
		if w.Start.IsZero() {
			continue
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO gcos_event_window (event_type, window_start, window_end, emitted, held) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (event_type) DO UPDATE SET window_start = EXCLUDED.window_start, window_end = EXCLUDED.window_end,
			    emitted = EXCLUDED.emitted, held = EXCLUDED.held`, typ, w.Start, w.End, w.Emitted, w.Held); err != nil {
			return fmt.Errorf("discipline %s: window: %w", typ, err)
		}
	}
	dis.dirty = map[string]bool{}
	for _, d := range dis.digests {
		if err := emitDigest(ctx, tx, d); err != nil {
			return err
		}
		res.Digests++
	}
	dis.digests = nil
	return nil
}

// closeWindows ends every window past its end, emitting the digest of those that held something back.
func (dis *discipline) closeWindows(ctx context.Context, tx pgx.Tx, res *postgres.PromoteResult) error {
	rows, err := tx.Query(ctx, `DELETE FROM gcos_event_window WHERE window_end <= $1
		RETURNING event_type, window_start, window_end, emitted, held`, dis.now)
	if err != nil {
		return fmt.Errorf("discipline: close windows: %w", err)
	}
	closed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (windowDigest, error) {
		var d windowDigest
		err := r.Scan(&d.eventType, &d.w.Start, &d.w.End, &d.w.Emitted, &d.w.Held)
		return d, err
	})
	if err != nil {
		return fmt.Errorf("discipline: close windows: %w", err)
	}
	for _, d := range closed {
		if d.w.Held == 0 {
			continue
		}
		if err := emitDigest(ctx, tx, d); err != nil {
			return err
		}
		res.Digests++
	}
	return nil
}

// emitDigest announces how many announcements of a type a window held back (one digest per type and window: its
// correlation id names both, so a retried promotion emits it once).
func emitDigest(ctx context.Context, tx pgx.Tx, d windowDigest) error {
	start := d.w.Start.UTC().Format(time.RFC3339Nano)
	_, err := postgres.EmitSignals(ctx, tx, []postgres.Emit{{
		EventType: postgres.EventCoverageSummary, SubjectTable: "event_type_registry", SubjectRef: d.eventType,
		CollectionName: "event_type_registry", EntityCode: d.eventType, ActorRef: "gcos", SourceSystem: "gcos",
		CorrelationID: "digest:" + d.eventType + ":" + start,
		Payload: map[string]any{"event_type": d.eventType, "held": d.w.Held, "count": d.w.Emitted,
			"window_start": start, "window_end": d.w.End.UTC().Format(time.RFC3339Nano),
			"owner_ref": CouncilOwner, "route": OwnerFromCouncil},
	}})
	if err != nil {
		return fmt.Errorf("digest %s: %w", d.eventType, err)
	}
	return nil
}

// escalationBatch bounds one escalation pass.
const escalationBatch = 500

// escalate settles the escalations that are due: read by their owner in time (settled), or announced again to
// the escalation's recipient.
func (dis *discipline) escalate(ctx context.Context, tx pgx.Tx, res *postgres.PromoteResult) error {
	rows, err := tx.Query(ctx, `
		SELECT e.event_id::text, e.event_type, e.owner_ref,
		       EXISTS (SELECT 1 FROM event_read r WHERE r.event_id = e.event_id AND r.actor_ref = e.owner_ref)
		FROM gcos_event_escalation e
		WHERE e.settled_at IS NULL AND e.due_at <= $1
		ORDER BY e.due_at, e.event_id LIMIT $2`, dis.now, escalationBatch)
	if err != nil {
		return fmt.Errorf("escalate: %w", err)
	}
	type due struct {
		ID, EventType, Owner string
		Read                 bool
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[due])
	if err != nil {
		return fmt.Errorf("escalate: %w", err)
	}
	to := dis.d.Escalation.To
	for _, e := range list {
		outcome, ref := "read", ""
		if !e.Read {
			outcome, ref = "escalated", "escalate:"+e.ID
			_, err := postgres.EmitSignals(ctx, tx, []postgres.Emit{{
				EventType: postgres.EventEscalated, SubjectTable: "event_outbox", SubjectRef: e.ID,
				CollectionName: "event_outbox", EntityCode: e.ID, ActorRef: "gcos", SourceSystem: "gcos",
				CorrelationID: ref,
				Payload: map[string]any{"event_id": e.ID, "event_type": e.EventType, "owner_ref": to,
					"route": "escalation"},
			}})
			if err != nil {
				return fmt.Errorf("escalate %s: %w", e.ID, err)
			}
			res.Escalations++
		}
		if _, err := tx.Exec(ctx, `UPDATE gcos_event_escalation SET settled_at = $2, outcome = $3, escalation_ref = nullif($4::text, '')
			WHERE event_id = $1::uuid`, e.ID, dis.now, outcome, ref); err != nil {
			return fmt.Errorf("escalate %s: %w", e.ID, err)
		}
	}
	return nil
}

// EscalationOutcomes are the values of gcos_event_escalation.outcome.
var EscalationOutcomes = []string{"read", "escalated"}
