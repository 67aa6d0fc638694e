package events_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/events"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// testClock is the discipline's injected clock: tests move it, nothing sleeps.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newDisciplineEnv is an event environment whose store runs the given discipline on a clock the test moves, with the
// whole vocabulary registered and active.
func newDisciplineEnv(t *testing.T, ev gcos.EventsConfig) (*evEnv, *testClock) {
	t.Helper()
	pool := pgtest.NewDB(t)
	cfg := gcos.DefaultConfig()
	cfg.Events = ev
	clock := &testClock{now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	store := postgres.New(pool, cfg, nil)
	e := &evEnv{ctx: context.Background(), pool: pool, store: store, loop: events.New(store, events.WithClock(clock.Now))}
	e.register(t)
	for _, typ := range e.strings(t, `SELECT event_type FROM event_type_registry WHERE event_domain = 'governance'`) {
		e.activate(t, typ)
	}
	return e, clock
}

func (e *evEnv) raise(t *testing.T, f gcos.Finding) int64 {
	t.Helper()
	id, err := e.store.RaiseFinding(e.ctx, f)
	if err != nil {
		t.Fatalf("raise %s: %v", f.Type, err)
	}
	return id
}

func (e *evEnv) resolve(t *testing.T, typ gcos.IssueType, subject string) {
	t.Helper()
	if ok, err := e.store.ResolveFinding(e.ctx, typ, subject, ""); err != nil || !ok {
		t.Fatalf("resolve %s %s: %v, %v", typ, subject, ok, err)
	}
}

// announced lists the outbox announcements of eventType as "transition@coalesce_key" (or the digest's and the
// escalation's payload) in emission order.
func (e *evEnv) announced(t *testing.T, eventType string) []string {
	t.Helper()
	return e.strings(t, `SELECT coalesce(safe_payload->>'transition', '') || '@' ||
			coalesce(safe_payload->>'coalesce_key', safe_payload->>'event_type', '') ||
			coalesce('/held=' || (safe_payload->>'held'), '') || coalesce('/owner=' || (safe_payload->>'owner_ref'), '')
		FROM event_outbox WHERE event_type = $1 ORDER BY created_at, id`, eventType)
}

// A finding that flaps inside the cooldown reaches subscribers as its first state and then its latest, never as a
// flood; the states in between are coalesced, and nothing is lost: the latest always goes out.
func TestDisciplineCooldownCoalesces(t *testing.T) {
	t.Parallel()
	e, clock := newDisciplineEnv(t, gcos.EventsConfig{Rules: []gcos.EventRule{
		{Types: "governance.handoff.*", Cooldown: gcos.Duration(time.Minute)}}})
	lag := gcos.NewFinding(gcos.IssueHandoffLag, "birth_registry", "", "", map[string]any{"lag_seconds": 90})
	e.raise(t, lag)
	if p := e.promote(t); p.Promoted != 1 {
		t.Fatalf("first promote %+v, want the opening announced", p)
	}
	key := gcos.CoalesceKey(gcos.IssueHandoffLag, "birth_registry")
	// Resolved, re-raised (a repeat announces nothing), resolved, reopened: all inside the cooldown.
	e.resolve(t, gcos.IssueHandoffLag, "birth_registry")
	e.raise(t, lag)
	e.raise(t, lag)
	e.resolve(t, gcos.IssueHandoffLag, "birth_registry")
	e.raise(t, lag)
	clock.Advance(10 * time.Second)
	p := e.promote(t)
	if p.Promoted != 0 || p.Held != 4 {
		t.Fatalf("promote inside the cooldown %+v, want nothing out and the 4 transitions waiting", p)
	}
	if got := e.announced(t, "governance.handoff.lag"); !slices.Equal(got, []string{"opened@" + key + "/owner=GOV-COUNCIL"}) {
		t.Fatalf("announced inside the cooldown %v", got)
	}
	clock.Advance(50 * time.Second) // the cooldown ends a minute after the first
	if p := e.promote(t); p.Promoted != 1 || p.Coalesced != 3 {
		t.Fatalf("promote after the cooldown %+v, want the latest state out and the 3 before it coalesced", p)
	}
	want := []string{"opened@" + key + "/owner=GOV-COUNCIL", "reopened@" + key + "/owner=GOV-COUNCIL"}
	if got := e.announced(t, "governance.handoff.lag"); !slices.Equal(got, want) {
		t.Fatalf("announced %v, want %v", got, want)
	}
	// The finding itself saw every transition.
	if n := e.n(t, `SELECT reopen_count FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key); n != 2 {
		t.Fatalf("finding reopened %d times, want 2", n)
	}
	if n := e.n(t, `SELECT count(*) FROM event_pending WHERE processed_at IS NULL`); n != 0 {
		t.Fatalf("%d announcements left", n)
	}
}

// Past the ceiling, announcements are held back and counted; the window closes with one digest saying how many,
// routed to the council. The findings behind them are all open.
func TestDisciplineCeilingDigest(t *testing.T) {
	t.Parallel()
	e, clock := newDisciplineEnv(t, gcos.EventsConfig{Rules: []gcos.EventRule{
		{Types: "governance.candidate.*", Ceiling: 2, Window: gcos.Duration(10 * time.Minute)}}})
	for _, g := range []string{"g1", "g2", "g3", "g4", "g5"} {
		e.raise(t, gcos.NewFinding(gcos.IssueCandidateStale, g, "", "", nil))
	}
	p := e.promote(t)
	if p.Promoted != 2 || p.HeldBack != 3 || p.Digests != 0 {
		t.Fatalf("promote %+v, want 2 out and 3 held back", p)
	}
	if n := e.n(t, `SELECT count(*) FROM event_pending WHERE last_error LIKE 'held back: ceiling%' AND processed_at IS NOT NULL`); n != 3 {
		t.Fatalf("%d pending rows say they were held back, want 3", n)
	}
	clock.Advance(9 * time.Minute)
	if p := e.promote(t); p.Digests != 0 {
		t.Fatalf("digest before the window closed: %+v", p)
	}
	clock.Advance(time.Minute)
	if p := e.promote(t); p.Digests != 1 {
		t.Fatalf("promote at the window's end %+v, want one digest", p)
	}
	want := []string{"@governance.candidate.stale/held=3/owner=GOV-COUNCIL"}
	if got := e.announced(t, "governance.coverage.summary"); !slices.Equal(got, want) {
		t.Fatalf("digests %v, want %v", got, want)
	}
	if p := e.promote(t); p.Digests != 0 {
		t.Fatalf("a second digest of the same window: %+v", p)
	}
	// A new window has room again.
	e.raise(t, gcos.NewFinding(gcos.IssueCandidateStale, "g6", "", "", nil))
	if p := e.promote(t); p.Promoted != 1 {
		t.Fatalf("new window: %+v", p)
	}
	if n := e.n(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'candidate_stale' AND status = 'open'`); n != 6 {
		t.Fatalf("%d open findings, want 6: holding back an announcement never touches its finding", n)
	}
}

// An announcement is routed by the one owner resolver: a group's scope default owner here; an owner dispute goes
// to the council whatever the resolver says. An error its owner has not read by the SLA escalates to the council;
// one the owner read does not.
func TestDisciplineRoutingAndEscalation(t *testing.T) {
	t.Parallel()
	e, clock := newDisciplineEnv(t, gcos.EventsConfig{
		Escalation:   gcos.EventEscalationConfig{Severities: []string{"error"}, After: gcos.Duration(time.Hour)},
		CouncilTypes: []string{"governance.coverage.owner_dispute"},
	})
	e.exec(t, `INSERT INTO governance_responsibility_scope (scope_code, default_owner_hint) VALUES ('FIN', 'owner-fin')`)
	e.exec(t, `INSERT INTO governance_group (group_key, object_class, source_registry, scope, member_count)
		VALUES ('00000000000000000000000000000001', 'invoice', 'fin_invoices', 'FIN', 1),
		       ('00000000000000000000000000000002', 'invoice', 'fin_invoices', 'FIN', 1)`)
	e.raise(t, gcos.Finding{Type: gcos.IssueSnapshotCaptureFailed, Subject: "g1", Severity: gcos.SeverityHigh,
		Group: "00000000000000000000000000000001", Evidence: map[string]any{}})
	e.raise(t, gcos.Finding{Type: gcos.IssueSnapshotCaptureFailed, Subject: "g2", Severity: gcos.SeverityHigh,
		Group: "00000000000000000000000000000002", Evidence: map[string]any{}})
	e.raise(t, gcos.Finding{Type: gcos.IssueOwnerDispute, Subject: "00000000000000000000000000000001",
		Group: "00000000000000000000000000000001", Evidence: map[string]any{}})
	e.promote(t)
	owners := e.strings(t, `SELECT event_type || ' ' || coalesce(safe_payload->>'coalesce_key', '') || ' → ' ||
			(safe_payload->>'owner_ref') || ' (' || (safe_payload->>'route') || ')'
		FROM event_outbox ORDER BY event_type, safe_payload->>'coalesce_key'`)
	want := []string{
		"governance.coverage.owner_dispute gov:coverage:owner_dispute:00000000000000000000000000000001 → GOV-COUNCIL (council)",
		"governance.snapshot.capture_failed gov:snapshot:capture_failed:g1 → owner-fin (scope_default)",
		"governance.snapshot.capture_failed gov:snapshot:capture_failed:g2 → owner-fin (scope_default)",
	}
	if !slices.Equal(owners, want) {
		t.Fatalf("routes\n%v\nwant\n%v", owners, want)
	}
	ids := e.strings(t, `SELECT id::text FROM event_outbox WHERE event_type = 'governance.snapshot.capture_failed'
		ORDER BY safe_payload->>'coalesce_key'`)
	if _, err := e.loop.MarkRead(e.ctx, ids[0], "owner-fin"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(59 * time.Minute)
	if p := e.promote(t); p.Escalations != 0 {
		t.Fatalf("escalated before the SLA: %+v", p)
	}
	clock.Advance(time.Minute)
	if p := e.promote(t); p.Escalations != 1 {
		t.Fatalf("promote at the SLA %+v, want the unread error escalated", p)
	}
	esc := e.strings(t, `SELECT (safe_payload->>'event_id') || ' → ' || (safe_payload->>'owner_ref')
		FROM event_outbox WHERE event_type = 'governance.lifecycle.escalated'`)
	if !slices.Equal(esc, []string{ids[1] + " → GOV-COUNCIL"}) {
		t.Fatalf("escalations %v, want only the unread one (%s), to the council", esc, ids[1])
	}
	settled := e.strings(t, `SELECT event_id::text || ' ' || outcome FROM gcos_event_escalation ORDER BY outcome`)
	if !slices.Equal(settled, []string{ids[1] + " escalated", ids[0] + " read"}) {
		t.Fatalf("escalation rows %v", settled)
	}
	if p := e.promote(t); p.Escalations != 0 {
		t.Fatalf("escalated twice: %+v", p)
	}
}

// Announcements ride the transaction of the fact they announce: a rolled-back raise announces nothing.
func TestAnnouncementFollowsItsTransaction(t *testing.T) {
	t.Parallel()
	e, _ := newDisciplineEnv(t, gcos.EventsConfig{})
	err := e.store.InTx(e.ctx, func(tx pgx.Tx) error {
		if _, err := postgres.RaiseFindingTx(e.ctx, tx, gcos.NewFinding(gcos.IssueHandoffDLQ, "birth_registry", "", "", nil)); err != nil {
			return err
		}
		return gcos.Errorf(gcos.EINVALID, "roll back")
	})
	if err == nil {
		t.Fatal("the transaction committed")
	}
	if n := e.n(t, `SELECT count(*) FROM event_pending`); n != 0 {
		t.Fatalf("%d announcements of a rolled-back finding", n)
	}
	e.raise(t, gcos.NewFinding(gcos.IssueHandoffDLQ, "birth_registry", "", "", nil))
	e.resolve(t, gcos.IssueHandoffDLQ, "birth_registry")
	e.promote(t)
	got := e.strings(t, `SELECT (safe_payload->>'transition') || ' ' || coalesce(event_severity, '') FROM event_outbox
		WHERE event_type = 'governance.handoff.dlq' ORDER BY created_at`)
	if !slices.Equal(got, []string{"opened error", "resolved info"}) {
		t.Fatalf("announced %v", got)
	}
}
