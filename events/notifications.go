package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"gcos/postgres"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
)

// Notifications (computed from the outbox and subscriptions, never stored), read tracking and owner resolution.

// Notification is one outbox event a recipient should be notified of.
type Notification struct {
	Recipient     string     `json:"recipient_ref"`
	Event         Event      `json:"event"`
	OccurredAt    *time.Time `json:"occurred_at"`
	CreatedAt     *time.Time `json:"created_at"`
	Subscriptions []string   `json:"subscriptions"` // the unmuted subscriptions that selected it
	// Explain is what explains the announcement (the group or object it names) and where to read it.
	Explain *FindingLink `json:"explain,omitempty"`
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
}, recipient *string) ([]Subscription, error) {
	rows, err := q.Query(ctx, subscriptionsSQL, recipient, gcos.EventDomain)
	if err != nil {
		return nil, fmt.Errorf("subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Subscription, error) {
		var s Subscription
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

// likePattern narrows the outbox read to a subscription's event_type (a gcos.Glob, nil for any): exactly a literal,
// else by the pattern's literal prefix. RouteFor then matches the whole pattern.
func likePattern(p *string) string {
	if p == nil {
		return "%"
	}
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	g, err := gcos.ParseGlob(*p, false)
	if err != nil {
		return "" // a malformed pattern selects nothing (nothing but the empty type, which no event has)
	}
	prefix, literal := g.LiteralPrefix()
	if literal {
		return esc.Replace(prefix)
	}
	return esc.Replace(prefix) + "%"
}

// Notifications returns, oldest first and at most limit (default 100, at most 1000), the governance outbox events
// recipient should be notified of: selected by one of its unmuted subscriptions, not selected by a muted one, and
// not yet recorded as read by it in event_read. Mute only suppresses the notification; the finding behind the
// event is never touched. A replayed emit adds no outbox row, so it never re-notifies.
func (l *Loop) Notifications(ctx context.Context, recipient string, limit int) ([]Notification, error) {
	recipient = strings.TrimSpace(recipient)
	if recipient == "" {
		return nil, gcos.Errorf(gcos.EINVALID, "notifications: recipient must not be empty")
	}
	subs, err := loadSubscriptions(ctx, l.core.Pool(), &recipient)
	if err != nil {
		return nil, err
	}
	return l.notificationsFor(ctx, recipient, subs, clampLimit(limit))
}

// PendingNotifications returns the notifications due to every recipient with a subscription to the governance
// domain, recipient by recipient, at most limit per recipient.
func (l *Loop) PendingNotifications(ctx context.Context, limit int) ([]Notification, error) {
	subs, err := loadSubscriptions(ctx, l.core.Pool(), nil)
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
		n, err := l.notificationsFor(ctx, r, subs, clampLimit(limit))
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

func (l *Loop) notificationsFor(ctx context.Context, recipient string, subs []Subscription, limit int) ([]Notification, error) {
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
		rows, err := l.core.Pool().Query(ctx, notificationPageSQL, gcos.EventDomain, recipient, after, afterID, patterns, page)
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
			route := RouteFor(recipient, subs, *e)
			if !route.Notify || len(out) >= limit {
				continue
			}
			nt.Recipient, nt.Subscriptions = recipient, route.Matched
			key, _ := e.Payload["coalesce_key"].(string)
			nt.Explain = explainLink(key, e.Payload)
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
func (l *Loop) MarkRead(ctx context.Context, eventID, actor string) (bool, error) {
	eventID, actor = strings.TrimSpace(eventID), strings.TrimSpace(actor)
	if !uuidRE.MatchString(eventID) {
		return false, gcos.Errorf(gcos.EINVALID, "mark read: event id %s is not a uuid", gcos.Quote(eventID))
	}
	if actor == "" {
		return false, gcos.Errorf(gcos.EINVALID, "mark read: actor must not be empty")
	}
	var wrote bool
	err := l.core.InTx(ctx, func(tx pgx.Tx) error {
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
			return postgres.MapError(err, "mark read "+eventID)
		}
		wrote = tag.RowsAffected() > 0
		return nil
	})
	return wrote, err
}

// ResolveOwner resolves the owner of a scope / class / collection: an active ownership row → the scope's
// default_owner_hint → GOV-COUNCIL (the registries as the source binding names them) (ResolveOwner). Either registry may be
// absent (optional SB-2 tables): that step is skipped and the reason says so; nothing is guessed.
func (l *Loop) ResolveOwner(ctx context.Context, q OwnerQuery) (ResolvedOwner, error) {
	return resolveOwner(ctx, l.core.Pool(), l.cfg.Binding, q)
}

// resolveOwner is ResolveOwner over db (the pool, or the promoter's transaction).
func resolveOwner(ctx context.Context, db postgres.Querier, sb gcos.SourceBinding, q OwnerQuery) (ResolvedOwner, error) {
	var src OwnerSources
	var hasOwnership, hasScopes bool
	names := postgres.RegistryNames(sb)
	err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		postgres.Quote(sb.OwnerScope.Table), postgres.Quote(sb.Scope.Table)).Scan(&hasOwnership, &hasScopes)
	if err != nil {
		return ResolvedOwner{}, fmt.Errorf("resolve owner: %w", err)
	}
	if hasOwnership {
		rows, err := db.Query(ctx, names.SQL(`
			SELECT id, scope_code, coalesce(entity_type, ''), coalesce(collection_name, ''), {owner_ref}, status
			FROM {ownership}
			WHERE ($1 = '' OR scope_code = $1)
			  AND (entity_type IS NULL OR entity_type = $2) AND (collection_name IS NULL OR collection_name = $3)`),
			q.Scope, q.EntityType, q.CollectionName)
		if err != nil {
			return ResolvedOwner{}, fmt.Errorf("resolve owner: ownership: %w", err)
		}
		src.Ownerships, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Ownership, error) {
			var o Ownership
			err := r.Scan(&o.ID, &o.ScopeCode, &o.EntityType, &o.CollectionName, &o.OwnerRef, &o.Status)
			return o, err
		})
		if err != nil {
			return ResolvedOwner{}, fmt.Errorf("resolve owner: ownership: %w", err)
		}
		if src.Ownerships == nil {
			src.Ownerships = []Ownership{}
		}
	}
	if hasScopes {
		rows, err := db.Query(ctx, names.SQL(`
			SELECT {scope_code}, coalesce(default_owner_hint, '') FROM {scopes}
			WHERE $1 = '' OR {scope_code} = $1`), q.Scope)
		if err != nil {
			return ResolvedOwner{}, fmt.Errorf("resolve owner: scopes: %w", err)
		}
		src.ScopeDefault = map[string]string{}
		var code, hint string
		_, err = pgx.ForEachRow(rows, []any{&code, &hint}, func() error {
			src.ScopeDefault[code] = hint
			return nil
		})
		if err != nil {
			return ResolvedOwner{}, fmt.Errorf("resolve owner: scopes: %w", err)
		}
	}
	return ResolveOwner(q, src), nil
}
