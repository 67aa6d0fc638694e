package events

import (
	"context"
	"encoding/json"
	"fmt"
	"gcos/postgres"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The notifications a principal works: its unread governance events (its subscriptions, less what it muted, less
// what it read), marking them read, and muting or unmuting a stream, a type or one finding. A mute is an
// event_subscription row with mute = true (doc 41 §41.7: the recipient suppresses a lane; the finding stays open
// and keeps counting). Reads and mutes are per principal: event_read.actor_ref and recipient_ref are its name.

// NotificationSelector selects governance events to mute, unmute or subscribe to: a type pattern, a stream
// pattern (gcos.Glob), one finding (by id: its announcements carry its coalesce key), only findings'
// announcements (they carry a transition: opened, reopened, resolved), or several of these at once.
type NotificationSelector struct {
	EventType string `json:"event_type,omitempty"`
	Stream    string `json:"stream,omitempty"`
	FindingID int64  `json:"finding_id,omitempty"`
	Findings  bool   `json:"findings,omitempty"`
}

// findingTransitions are the transitions every finding's announcement carries (payload transition), and nothing
// else announces: what selects "every finding", wherever doc 41 §41.5 addresses its family.
var findingTransitions = []any{postgres.TransitionOpened, postgres.TransitionReopened, postgres.TransitionResolved}

// NotificationInbox is what `gcos notifications list` shows a recipient.
type NotificationInbox struct {
	Recipient string `json:"recipient"`
	// Unread counts the recipient's unread notifications, at most UnreadCap (then UnreadMore is true).
	Unread        int            `json:"unread"`
	UnreadMore    bool           `json:"unread_more"`
	Notifications []Notification `json:"notifications"`
	Subscriptions []Subscription `json:"subscriptions"` // the recipient's governance subscriptions and mutes
}

// UnreadCap bounds an unread count: past it the count says "at least".
const UnreadCap = 1000

// Inbox returns recipient's unread notifications (oldest first, at most limit), its unread count and its
// subscriptions and mutes.
func (l *Loop) Inbox(ctx context.Context, recipient string, limit int) (NotificationInbox, error) {
	in := NotificationInbox{Recipient: strings.TrimSpace(recipient)}
	if err := checkRecipient(in.Recipient); err != nil {
		return in, err
	}
	subs, err := loadSubscriptions(ctx, l.core.Pool(), &in.Recipient)
	if err != nil {
		return in, err
	}
	all, err := l.notificationsFor(ctx, in.Recipient, subs, UnreadCap+1)
	if err != nil {
		return in, err
	}
	in.Unread, in.UnreadMore = min(len(all), UnreadCap), len(all) > UnreadCap
	in.Notifications = all[:min(len(all), clampLimit(limit))]
	in.Subscriptions = subs
	if in.Subscriptions == nil {
		in.Subscriptions = []Subscription{}
	}
	return in, nil
}

// UnreadCount is recipient's unread count (at most UnreadCap; more reports whether there are more).
func (l *Loop) UnreadCount(ctx context.Context, recipient string) (n int, more bool, err error) {
	in, err := l.Inbox(ctx, recipient, 1)
	return in.Unread, in.UnreadMore, err
}

func checkRecipient(r string) error {
	if r == "" {
		return gcos.Errorf(gcos.EINVALID, "notifications: the recipient must not be empty")
	}
	return gcos.CheckParam("recipient", r)
}

// ReadResult says what marking read did.
type ReadResult struct {
	Recipient string `json:"recipient"`
	Marked    int    `json:"marked"`  // newly recorded as read
	Already   int    `json:"already"` // read before
}

// MarkReadAs records that by's principal has read the given events, or with all every notification it has unread
// (at most UnreadCap at a time). An id that is not a uuid is EINVALID, one not in the outbox ENOTFOUND; either
// refuses the whole request before anything is written.
func (l *Loop) MarkReadAs(ctx context.Context, ids []string, all bool, by gcos.Actor) (ReadResult, error) {
	res := ReadResult{Recipient: by.Principal}
	if err := by.Check("mark read"); err != nil {
		return res, err
	}
	switch {
	case all && len(ids) > 0:
		return res, gcos.Errorf(gcos.EINVALID, "mark read: give event ids or --all, not both")
	case !all && len(ids) == 0:
		return res, gcos.Errorf(gcos.EINVALID, "mark read: give the event ids to mark (gcos notifications list shows them), or --all")
	case len(ids) > UnreadCap:
		return res, gcos.Errorf(gcos.EINVALID, "mark read: %d ids, more than %d at once", len(ids), UnreadCap)
	}
	for i, id := range ids {
		ids[i] = strings.TrimSpace(id)
		if !uuidRE.MatchString(ids[i]) {
			return res, gcos.Errorf(gcos.EINVALID, "mark read: event id %s is not a uuid", gcos.Quote(id))
		}
	}
	if all {
		subs, err := loadSubscriptions(ctx, l.core.Pool(), &by.Principal)
		if err != nil {
			return res, err
		}
		ns, err := l.notificationsFor(ctx, by.Principal, subs, UnreadCap)
		if err != nil {
			return res, err
		}
		for _, n := range ns {
			ids = append(ids, n.Event.ID)
		}
	}
	err := l.core.InTx(ctx, func(tx pgx.Tx) error {
		var missing []string
		if err := tx.QueryRow(ctx, `
			SELECT coalesce(array_agg(x), '{}') FROM unnest($1::uuid[]) x
			WHERE NOT EXISTS (SELECT 1 FROM event_outbox WHERE id = x)`, ids).Scan(&missing); err != nil {
			return fmt.Errorf("mark read: %w", err)
		}
		if len(missing) > 0 {
			return gcos.Errorf(gcos.ENOTFOUND, "mark read: no event %s in the outbox; nothing marked", strings.Join(missing, ", "))
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.event_read:' || $1, 0))`, by.Principal); err != nil {
			return fmt.Errorf("mark read: lock: %w", err)
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO event_read (event_id, actor_ref, read_at, read_status_source)
			SELECT DISTINCT x, $2, now(), 'gcos' FROM unnest($1::uuid[]) x
			WHERE NOT EXISTS (SELECT 1 FROM event_read WHERE event_id = x AND actor_ref = $2)`, ids, by.Principal)
		if err != nil {
			return postgres.MapError(err, "mark read")
		}
		res.Marked = int(tag.RowsAffected())
		return nil
	})
	if err != nil {
		return ReadResult{Recipient: by.Principal}, err
	}
	distinct := slices.Clone(ids)
	slices.Sort(distinct)
	res.Already = len(slices.Compact(distinct)) - res.Marked
	return res, nil
}

// SubscriptionChange says what a mute, unmute or subscribe did.
type SubscriptionChange struct {
	Recipient    string       `json:"recipient"`
	Action       string       `json:"action"` // mute, unmute, subscribe
	Changed      bool         `json:"changed"`
	Subscription Subscription `json:"subscription"`
}

// subscriptionRow is the event_subscription row a selector stands for (recipient and mute aside).
type subscriptionRow struct {
	eventType, stream, subjectTable *string
	filter                          map[string]any
}

// selectorRow checks sel and turns it into its subscription row: a pattern must be a valid gcos.Glob that
// matches a governance event type (or stream) GCOS knows, and a finding must exist.
func (l *Loop) selectorRow(ctx context.Context, sel NotificationSelector) (subscriptionRow, error) {
	var row subscriptionRow
	sel.EventType, sel.Stream = strings.TrimSpace(sel.EventType), strings.TrimSpace(sel.Stream)
	if sel.EventType == "" && sel.Stream == "" && sel.FindingID == 0 && !sel.Findings {
		return row, gcos.Errorf(gcos.EINVALID, "notifications: say what to select: an event type pattern (--type), a stream (--stream), a finding (--finding) or every finding (--findings)")
	}
	if sel.Findings {
		row.filter = map[string]any{"transition": findingTransitions}
	}
	types, streams, err := l.governanceTypes(ctx)
	if err != nil {
		return row, err
	}
	for _, p := range []struct {
		name, pattern string
		known         []string
		into          **string
	}{{"type", sel.EventType, types, &row.eventType}, {"stream", sel.Stream, streams, &row.stream}} {
		if p.pattern == "" {
			continue
		}
		if err := gcos.CheckParam(p.name, p.pattern); err != nil {
			return row, err
		}
		if _, err := gcos.ParseGlob(p.pattern, false); err != nil {
			return row, gcos.Errorf(gcos.EINVALID, "notifications: %s %s: %s", p.name, gcos.Quote(p.pattern), gcos.ErrorMessage(err))
		}
		if !slices.ContainsFunc(p.known, func(k string) bool { return gcos.MatchGlob(p.pattern, k, false) }) {
			return row, gcos.Errorf(gcos.EINVALID, "notifications: %s %s matches no governance event %s (gcos events list shows them)", p.name, gcos.Quote(p.pattern), p.name)
		}
		*p.into = &p.pattern
	}
	if sel.FindingID < 0 {
		return row, gcos.Errorf(gcos.EINVALID, "notifications: finding id %d: want a positive number", sel.FindingID)
	}
	if sel.FindingID > 0 {
		var key string
		err := l.core.Pool().QueryRow(ctx, `SELECT coalesce_key FROM system_issues WHERE id = $1 AND coalesce_key LIKE 'gov:%'`, sel.FindingID).Scan(&key)
		if err == pgx.ErrNoRows {
			return row, gcos.Errorf(gcos.ENOTFOUND, "notifications: finding %d: no such finding (gcos findings list shows them)", sel.FindingID)
		}
		if err != nil {
			return row, fmt.Errorf("notifications: finding %d: %w", sel.FindingID, err)
		}
		if row.filter == nil {
			row.filter = map[string]any{}
		}
		row.filter["coalesce_key"] = key
	}
	return row, nil
}

// governanceTypes lists the governance event types and streams GCOS knows: its vocabulary and the registry's rows.
func (l *Loop) governanceTypes(ctx context.Context) (types, streams []string, err error) {
	v, err := gcos.LoadVocabulary()
	if err != nil {
		return nil, nil, err
	}
	for _, t := range v.Types {
		types, streams = append(types, t.EventType), append(streams, t.EventStream)
	}
	rows, err := l.core.Pool().Query(ctx, `SELECT event_type, coalesce(event_stream, '') FROM event_type_registry WHERE event_domain = $1`, gcos.EventDomain)
	if err != nil {
		return nil, nil, fmt.Errorf("governance event types: %w", err)
	}
	var t, st string
	_, err = pgx.ForEachRow(rows, []any{&t, &st}, func() error {
		types, streams = append(types, t), append(streams, st)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("governance event types: %w", err)
	}
	return types, streams, nil
}

// sameSubscriptionSQL finds a recipient's governance subscription row with exactly these selectors and mute flag.
const sameSubscriptionSQL = `
SELECT id::text, coalesce(created_at, '-infinity'::timestamptz) FROM event_subscription
WHERE recipient_ref = $1 AND event_domain = $2 AND event_type IS NOT DISTINCT FROM $3
  AND event_stream IS NOT DISTINCT FROM $4 AND scope_subject_table IS NOT DISTINCT FROM $7 AND scope_filter = $5::jsonb
  AND mute = $6
ORDER BY created_at, id`

// MuteAs mutes, for by's principal, the governance events sel selects: they stop notifying it; the findings behind
// them are untouched and keep counting. Muting what is already muted changes nothing. With principals configured
// muting needs the operator role.
func (l *Loop) MuteAs(ctx context.Context, sel NotificationSelector, by gcos.Actor) (SubscriptionChange, error) {
	return l.changeSubscription(ctx, "mute", sel, by)
}

// UnmuteAs removes by's mute of exactly sel (the same selectors it was muted with); no such mute is ENOTFOUND.
// What happened while it was muted stays unnotified: the events the mute held back are recorded as read
// (read_status_source gcos:muted), so unmuting does not bring back the backlog it was meant to silence.
func (l *Loop) UnmuteAs(ctx context.Context, sel NotificationSelector, by gcos.Actor) (SubscriptionChange, error) {
	return l.changeSubscription(ctx, "unmute", sel, by)
}

// SubscribeAs subscribes by's principal to the governance events sel selects (idempotent).
func (l *Loop) SubscribeAs(ctx context.Context, sel NotificationSelector, by gcos.Actor) (SubscriptionChange, error) {
	return l.changeSubscription(ctx, "subscribe", sel, by)
}

func (l *Loop) changeSubscription(ctx context.Context, action string, sel NotificationSelector, by gcos.Actor) (SubscriptionChange, error) {
	ch := SubscriptionChange{Recipient: by.Principal, Action: action}
	if err := by.Check(action); err != nil {
		return ch, err
	}
	if err := gcos.MayAct(l.cfg.Principals, by.Principal, gcos.RoleOperator); err != nil {
		return ch, gcos.Errorf(gcos.EFORBIDDEN, "%s: %s", action, gcos.ErrorMessage(err))
	}
	row, err := l.selectorRow(ctx, sel)
	if err != nil {
		return ch, err
	}
	filter := row.filter
	if filter == nil {
		filter = map[string]any{}
	}
	filterJSON, err := json.Marshal(filter)
	if err != nil {
		return ch, err
	}
	mute := action != "subscribe"
	domain := gcos.EventDomain
	ch.Subscription = Subscription{RecipientRef: by.Principal, EventDomain: &domain, EventType: row.eventType,
		EventStream: row.stream, ScopeSubjectTable: row.subjectTable, ScopeFilter: filter, Mute: mute}
	err = l.core.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.subscription:' || $1, 0))`, by.Principal); err != nil {
			return fmt.Errorf("%s: lock: %w", action, err)
		}
		rows, err := tx.Query(ctx, sameSubscriptionSQL, by.Principal, domain, row.eventType, row.stream, filterJSON, mute, row.subjectTable)
		if err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		type found struct {
			ID    string
			Since time.Time
		}
		rowsSame, err := pgx.CollectRows(rows, pgx.RowToStructByPos[found])
		if err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		var same []string
		for _, r := range rowsSame {
			same = append(same, r.ID)
		}
		switch {
		case action == "unmute" && len(same) == 0:
			return gcos.Errorf(gcos.ENOTFOUND, "unmute: %s has no mute with exactly these selectors (gcos notifications list shows its mutes)", by.Principal)
		case action == "unmute":
			if err := l.readWhileMuted(ctx, tx, by.Principal, ch.Subscription, rowsSame[0].Since); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM event_subscription WHERE id = ANY($1::uuid[])`, same); err != nil {
				return fmt.Errorf("unmute: %w", err)
			}
			ch.Subscription.ID, ch.Changed = same[0], true
		case len(same) > 0:
			ch.Subscription.ID = same[0] // already so: nothing changes
			return nil
		default:
			if err := tx.QueryRow(ctx, `
				INSERT INTO event_subscription (recipient_ref, event_domain, event_type, event_stream, scope_subject_table, scope_filter, mute)
				VALUES ($1, $2, $3, $4, $7, $5::jsonb, $6) RETURNING id::text`,
				by.Principal, domain, row.eventType, row.stream, filterJSON, mute, row.subjectTable).Scan(&ch.Subscription.ID); err != nil {
				return postgres.MapError(err, action)
			}
			ch.Changed = true
		}
		_, err = postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_subscription", EntityCode: ch.Subscription.ID, Action: action,
			Actor: by.Principal, Detail: map[string]any{"recipient": by.Principal, "selector": sel, "actor": by.Audit()}})
		return err
	})
	if err != nil {
		return SubscriptionChange{Recipient: by.Principal, Action: action}, err
	}
	return ch, nil
}

// readWhileMuted records as read (gcos:muted) the recipient's notifications that mute held back: those it would
// be notified of without the mute, that the mute matches, created since the mute was. At most UnreadCap.
func (l *Loop) readWhileMuted(ctx context.Context, tx pgx.Tx, recipient string, mute Subscription, since time.Time) error {
	subs, err := loadSubscriptions(ctx, tx, &recipient)
	if err != nil {
		return err
	}
	var others []Subscription
	for _, sub := range subs {
		if !sameSelectors(sub, mute) {
			others = append(others, sub)
		}
	}
	ns, err := l.notificationsFor(ctx, recipient, others, UnreadCap)
	if err != nil {
		return err
	}
	var ids []string
	for _, n := range ns {
		if n.CreatedAt != nil && !n.CreatedAt.Before(since) && mute.Matches(n.Event) {
			ids = append(ids, n.Event.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO event_read (event_id, actor_ref, read_at, read_status_source)
		SELECT x, $2, now(), 'gcos:muted' FROM unnest($1::uuid[]) x
		WHERE NOT EXISTS (SELECT 1 FROM event_read WHERE event_id = x AND actor_ref = $2)`, ids, recipient); err != nil {
		return fmt.Errorf("unmute: record what was muted as read: %w", err)
	}
	return nil
}

// sameSelectors reports whether two subscription rows select alike and are both mutes (or both not).
func sameSelectors(a, b Subscription) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	fa, _ := json.Marshal(a.ScopeFilter)
	fb, _ := json.Marshal(b.ScopeFilter)
	return a.Mute == b.Mute && eq(a.EventDomain, b.EventDomain) && eq(a.EventType, b.EventType) &&
		eq(a.EventStream, b.EventStream) && eq(a.ScopeSubjectTable, b.ScopeSubjectTable) && string(fa) == string(fb)
}
