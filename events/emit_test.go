package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/events"
	"gcos/gcostest"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/world"
)

// evEnv is what the SB-11 tests need: an isolated database and a store over it.
type evEnv struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Store
	loop  *events.Loop
}

func newEvEnv(t *testing.T) *evEnv {
	t.Helper()
	pool := pgtest.NewDB(t)
	store := postgres.New(pool, gcos.DefaultConfig(), nil)
	return &evEnv{ctx: context.Background(), pool: pool, store: store, loop: events.New(store)}
}

func (e *evEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (e *evEnv) n(t *testing.T, sql string, args ...any) int {
	t.Helper()
	return int(e.world().Count(t, sql, args...))
}

func (e *evEnv) strings(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	return e.world().Strings(t, sql, args...)
}

func (e *evEnv) world() *gcostest.World {
	return &gcostest.World{Ctx: e.ctx, Pool: e.pool, Store: e.store}
}

func (e *evEnv) register(t *testing.T) events.RegisterResult {
	t.Helper()
	res, err := e.loop.RegisterVocabulary(e.ctx)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	return res
}

func (e *evEnv) activate(t *testing.T, eventType string) events.ActivateResult {
	t.Helper()
	res, err := e.loop.ActivateEventType(e.ctx, eventType, "APR-EV-1", "test-approver")
	if err != nil {
		t.Fatalf("activate %s: %v", eventType, err)
	}
	return res
}

func (e *evEnv) emit(t *testing.T, em postgres.Emit) postgres.EmitResult {
	t.Helper()
	res, err := e.emitSignal(em)
	if err != nil {
		t.Fatalf("emit %s/%s: %v", em.EventType, em.CorrelationID, err)
	}
	return res
}

func (e *evEnv) promote(t *testing.T) postgres.PromoteResult {
	t.Helper()
	res, err := e.loop.PromotePending(e.ctx)
	if err != nil {
		t.Fatalf("promote: %v", err)
	}
	return res
}

// noInactiveOutbox is the register-before-emit invariant: no governance outbox row of a type that is not
// registered and active.
func (e *evEnv) noInactiveOutbox(t *testing.T) {
	t.Helper()
	if n := e.n(t, `
		SELECT count(*) FROM event_outbox o
		WHERE o.event_domain = 'governance'
		  AND NOT EXISTS (SELECT 1 FROM event_type_registry r
		                  WHERE r.event_domain = 'governance' AND r.event_type = o.event_type AND r.active)`); n != 0 {
		t.Fatalf("%d governance outbox rows of a type that is not registered and active", n)
	}
}

func (e *evEnv) outboxCount(t *testing.T) int {
	t.Helper()
	return e.n(t, `SELECT count(*) FROM event_outbox WHERE event_domain = 'governance'`)
}

// pendingCount counts the captured signals, not GCOS's announcements of its findings (which every capture of an
// inactive type and every rejection raises).
func (e *evEnv) pendingCount(t *testing.T) int {
	t.Helper()
	return e.n(t, `SELECT count(*) FROM event_pending WHERE event_domain = 'governance' AND `+notAnnouncement)
}

// notAnnouncement selects the event_pending rows that are not GCOS's own announcements.
const notAnnouncement = `NOT coalesce((capture_payload ->> 'announce')::boolean, false)`

// handoffEmit is a handoff signal of kind about collection:code with correlation id corr.
func handoffEmit(kind gcos.ChangeKind, collection, code, corr string, at time.Time) postgres.Emit {
	sig := gcos.Signal{ObjectType: "invoice", CollectionName: collection, GroupKey: "g-" + collection,
		ChangeKind: kind, Source: "birth_registry", OccurredAt: at}
	return postgres.Emit{
		EventType: kind.EventType(), SubjectTable: "birth_registry", SubjectRef: code,
		CollectionName: collection, EntityCode: code, ActorRef: "svc:birth", SourceSystem: "birth_registry",
		CorrelationID: corr, OccurredAt: at, Payload: sig.SafePayload(),
	}
}

var evBase = time.Date(2026, 6, 10, 8, 0, 0, 0, time.UTC)

// findingRow is one system_issues row of a type and subject.
type findingRow struct {
	status      string
	occurrences int
	evidence    string
}

func (e *evEnv) findings(t *testing.T, issue gcos.IssueType, subject string) []findingRow {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT status, occurrence_count, coalesce(evidence_snapshot::text, '')
		FROM system_issues WHERE issue_type = $1 AND coalesce_key = $2 ORDER BY id`,
		string(issue), gcos.CoalesceKey(issue, subject))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []findingRow
	for rows.Next() {
		var f findingRow
		if err := rows.Scan(&f.status, &f.occurrences, &f.evidence); err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// doc 41 §41.11 (1): no governance outbox row exists until the type is registered AND active; an earlier emit is
// held in event_pending and raises the unregistered-type finding once; activation + promotion moves the held
// signals to the outbox in capture order.
func TestSB11_RegisterBeforeEmit(t *testing.T) {
	t.Parallel()

	t.Run("unregistered then inactive then active", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		born := gcos.ChangeObjectBorn.EventType()
		var corrs []string
		for i := range 3 {
			corr := fmt.Sprintf("birth_registry:%d", i+1)
			corrs = append(corrs, corr)
			res := e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", fmt.Sprintf("INV-%d", i+1), corr, evBase.Add(time.Duration(i)*time.Second)))
			if res.Outcome != postgres.EmitOutcomeCaptured || res.PendingID == 0 || res.FindingID == 0 {
				t.Fatalf("emit %d of an unregistered type: %+v, want captured", i, res)
			}
		}
		e.noInactiveOutbox(t)
		if n := e.outboxCount(t); n != 0 {
			t.Fatalf("%d governance outbox rows before registration", n)
		}
		if n := e.pendingCount(t); n != 3 {
			t.Fatalf("%d pending rows, want 3", n)
		}
		f := e.findings(t, gcos.IssueHandoffUnregisteredType, born)
		if len(f) != 1 || f[0].status != "open" || f[0].occurrences != 3 {
			t.Fatalf("unregistered-type findings %+v, want one open row seen 3 times", f)
		}

		// Registered but inactive: still held (register ≠ activate).
		reg := e.register(t)
		if !slices.Contains(reg.Registered, born) {
			t.Fatalf("register did not write %s", born)
		}
		corrs = append(corrs, "birth_registry:4")
		res := e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-4", "birth_registry:4", evBase.Add(3*time.Second)))
		if res.Outcome != postgres.EmitOutcomeCaptured || !strings.Contains(res.Reason, "not active") {
			t.Fatalf("emit of a registered, inactive type: %+v", res)
		}
		e.noInactiveOutbox(t)
		if n := e.outboxCount(t); n != 0 {
			t.Fatalf("%d governance outbox rows while inactive", n)
		}
		if f := e.findings(t, gcos.IssueHandoffUnregisteredType, born); len(f) != 1 || f[0].occurrences != 4 {
			t.Fatalf("findings %+v, want the same row seen 4 times", f)
		}
		// Held: the 4 signals, and the announcements of the findings their captures raised (their types inactive).
		announced := `SELECT count(*) FROM event_pending WHERE processed_at IS NULL AND coalesce((capture_payload ->> 'announce')::boolean, false)`
		if p := e.promote(t); p.Promoted != 0 || p.Held != 4+e.n(t, announced) {
			t.Fatalf("promote while inactive: %+v, want 0 promoted and 4 held (and %d announcements)", p, e.n(t, announced))
		}

		act := e.activate(t, born)
		if !act.Activated || act.PendingBacklog != 4 {
			t.Fatalf("activate: %+v", act)
		}
		if f := e.findings(t, gcos.IssueHandoffUnregisteredType, born); len(f) != 1 || f[0].status != "resolved" {
			t.Fatalf("finding after activation %+v, want resolved", f)
		}
		p := e.promote(t)
		if p.Promoted != 4 || p.Held != e.n(t, announced) || p.ByType[born] != 4 {
			t.Fatalf("promote: %+v, want 4 promoted", p)
		}
		e.noInactiveOutbox(t)
		got := e.strings(t, `SELECT correlation_id FROM event_outbox WHERE event_domain = 'governance' ORDER BY created_at, occurred_at`)
		if !slices.Equal(got, corrs) {
			t.Fatalf("outbox order %v, want capture order %v", got, corrs)
		}
		if n := e.n(t, `SELECT count(*) FROM event_pending WHERE processed_at IS NULL AND `+notAnnouncement); n != 0 {
			t.Fatalf("%d captures left unprocessed", n)
		}
		if again := e.promote(t); again.Promoted != 0 || again.Duplicates != 0 {
			t.Fatalf("second promote %+v, want a no-op", again)
		}
		// Occurred_at of a promoted signal is when it happened, not when it was promoted.
		if n := e.n(t, `SELECT count(*) FROM event_outbox WHERE correlation_id = 'birth_registry:1' AND occurred_at = $1`, evBase); n != 1 {
			t.Fatal("promoted event lost its occurred_at")
		}
		// Now active: straight to the outbox.
		if res := e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-5", "birth_registry:5", evBase.Add(5*time.Second))); res.Outcome != postgres.EmitOutcomeEmitted || res.EventID == "" {
			t.Fatalf("emit of an active type: %+v", res)
		}
		if n := e.outboxCount(t); n != 5 {
			t.Fatalf("%d outbox rows, want 5", n)
		}
		e.noInactiveOutbox(t)
	})

	t.Run("other streams raise issue_event_gap", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		e.register(t)
		for range 2 {
			res, err := e.heartbeat("candidate", map[string]int64{"groups": 3})
			if err != nil || res.Outcome != postgres.EmitOutcomeCaptured {
				t.Fatalf("heartbeat of an inactive type: %+v, %v", res, err)
			}
		}
		f := e.findings(t, gcos.IssueIssueEventGap, "governance.candidate.scan_completed")
		if len(f) != 1 || f[0].occurrences != 2 {
			t.Fatalf("issue_event_gap findings %+v, want one row seen twice", f)
		}
		e.noInactiveOutbox(t)
	})

	t.Run("an emit of an active type flushes its backlog first", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		e.register(t)
		retired := gcos.ChangeObjectRetired.EventType()
		for i := range 3 {
			e.emit(t, handoffEmit(gcos.ChangeObjectRetired, "fin_invoices", fmt.Sprintf("INV-%d", i), fmt.Sprintf("c%d", i), evBase))
		}
		e.activate(t, retired)
		if res := e.emit(t, handoffEmit(gcos.ChangeObjectRetired, "fin_invoices", "INV-9", "c9", evBase)); res.Outcome != postgres.EmitOutcomeEmitted {
			t.Fatalf("emit: %+v", res)
		}
		got := e.strings(t, `SELECT correlation_id FROM event_outbox ORDER BY created_at`)
		if !slices.Equal(got, []string{"c0", "c1", "c2", "c9"}) {
			t.Fatalf("outbox order %v, want the backlog before the new signal", got)
		}
	})

	t.Run("dead-lettered and retry rows are never promoted", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		e.register(t)
		src := gcos.ChangeSource.EventType()
		dead := e.emit(t, handoffEmit(gcos.ChangeSource, "fin_invoices", "INV-1", "dead-1", evBase))
		e.emit(t, handoffEmit(gcos.ChangeSource, "fin_invoices", "INV-2", "live-2", evBase))
		e.exec(t, `UPDATE event_pending SET dead_lettered_at = now(), error_count = 5 WHERE id = $1`, dead.PendingID)
		e.exec(t, `INSERT INTO event_pending (event_domain, event_type_hint, entity_table, entity_ref, canonical_address,
			actor_ref, capture_payload) VALUES ('governance', 'governance.handoff.retry', 'birth_registry', 'INV-3',
			'fin_invoices:INV-3', 'gcos', '{"gcos_envelope": 1, "event_type": "governance.handoff.retry"}')`)
		e.activate(t, src)
		p := e.promote(t)
		if p.Promoted != 1 {
			t.Fatalf("promote %+v, want only the live capture", p)
		}
		if got := e.strings(t, `SELECT correlation_id FROM event_outbox`); !slices.Equal(got, []string{"live-2"}) {
			t.Fatalf("outbox %v", got)
		}
		if n := e.n(t, `SELECT count(*) FROM event_pending WHERE processed_at IS NULL AND (dead_lettered_at IS NOT NULL OR event_type_hint = 'governance.handoff.retry')`); n != 2 {
			t.Fatalf("%d dead-lettered/retry rows left unprocessed, want 2", n)
		}
		// Replaying the dead-lettered signal stays a no-op: it is visible in the DLQ, not re-captured.
		if res := e.emit(t, handoffEmit(gcos.ChangeSource, "fin_invoices", "INV-1", "dead-1", evBase)); res.Outcome != postgres.EmitOutcomeDuplicate {
			t.Fatalf("replay of a dead-lettered signal: %+v", res)
		}
	})

	t.Run("a tampered capture is dead-lettered, never promoted", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		e.register(t)
		res := e.emit(t, handoffEmit(gcos.ChangeCount, "fin_invoices", "INV-1", "cnt-1", evBase))
		e.exec(t, `UPDATE event_pending SET capture_payload = jsonb_set(capture_payload, '{safe_payload,row}', '"secret"') WHERE id = $1`, res.PendingID)
		e.activate(t, gcos.ChangeCount.EventType())
		if p := e.promote(t); p.Promoted != 0 || p.DeadLettered != 1 {
			t.Fatalf("promote %+v, want the tampered capture dead-lettered", p)
		}
		if n := e.outboxCount(t); n != 0 {
			t.Fatalf("%d outbox rows from a tampered capture", n)
		}
		if f := e.findings(t, gcos.InputIssue(gcos.InputInvalidSchema), "fin_invoices:INV-1"); len(f) != 1 || strings.Contains(f[0].evidence, "secret") {
			t.Fatalf("findings %+v, want one input finding without the value", f)
		}
	})
}

// doc 41 §41.11 (2), SPEC §9.3: a payload with anything but addresses, refs and counts is rejected with an input
// finding and enqueued nowhere; every governance outbox row is safe_metadata.
func TestSB11_SignalNotData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		extra   map[string]any
		badKeys []string
		active  bool
	}{
		{"owner email, active type", map[string]any{"owner_email": "alice@example.com"}, []string{"owner_email"}, true},
		{"whole row, inactive type", map[string]any{"row": "{\"amount\": 1200, \"iban\": \"DE89-secret\"}"}, []string{"row"}, false},
		{"nested contents under an allowed key", map[string]any{"object_ref": map[string]any{"iban": "DE89-secret"}}, []string{"object_ref"}, true},
		{"two bad keys", map[string]any{"row": "x-secret", "body": "y-secret"}, []string{"body", "row"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEvEnv(t)
			e.register(t)
			if tc.active {
				e.activate(t, gcos.ChangeObjectBorn.EventType())
			}
			em := handoffEmit(gcos.ChangeObjectBorn, "crm_accounts", "ACC-7", "acc-7", evBase)
			for k, v := range tc.extra {
				em.Payload[k] = v
			}
			res := e.emit(t, em)
			if res.Outcome != postgres.EmitOutcomeRejected || res.FindingID == 0 {
				t.Fatalf("emit with %v: %+v, want rejected with a finding", tc.badKeys, res)
			}
			if n := e.n(t, `SELECT count(*) FROM event_outbox`); n != 0 {
				t.Fatalf("%d outbox rows after a rejected payload", n)
			}
			if n := e.n(t, `SELECT count(*) FROM event_pending WHERE `+notAnnouncement); n != 0 {
				t.Fatalf("%d pending rows after a rejected payload", n)
			}
			f := e.findings(t, gcos.InputIssue(gcos.InputInvalidSchema), "crm_accounts:ACC-7")
			if len(f) != 1 || f[0].status != "open" {
				t.Fatalf("input findings %+v, want one open input.invalid_schema", f)
			}
			var ev struct {
				RejectedKeys []string `json:"rejected_keys"`
			}
			if err := json.Unmarshal([]byte(f[0].evidence), &ev); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ev.RejectedKeys, tc.badKeys) {
				t.Fatalf("rejected keys %v, want %v", ev.RejectedKeys, tc.badKeys)
			}
			if strings.Contains(f[0].evidence, "secret") || strings.Contains(f[0].evidence, "alice@") {
				t.Fatalf("the finding's evidence carries the rejected contents: %s", f[0].evidence)
			}
			// The same signal with a clean payload goes through: the rejection recorded nothing to dedup against.
			clean := handoffEmit(gcos.ChangeObjectBorn, "crm_accounts", "ACC-7", "acc-7", evBase)
			want := postgres.EmitOutcomeCaptured
			if tc.active {
				want = postgres.EmitOutcomeEmitted
			}
			if res := e.emit(t, clean); res.Outcome != want {
				t.Fatalf("clean emit: %+v, want %s", res, want)
			}
			if n := e.n(t, `SELECT count(*) FROM event_outbox WHERE event_domain = 'governance' AND payload_classification <> 'safe_metadata'`); n != 0 {
				t.Fatalf("%d governance outbox rows not classified safe_metadata", n)
			}
		})
	}
}

// doc 41 §41.11 (5), SPEC §10: an event asserts a fact and carries no instruction; nothing executes off it and no
// job is queued.
func TestSB11_EventNotJob(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	// The organisation's job lane (doc 41 §41.2: job_queue, the Điều 45 JOB lane). Governance signals never go there.
	e.exec(t, `CREATE TABLE job_queue (id bigserial PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL DEFAULT '{}',
		idempotency_key text, lease_owner text, attempts int NOT NULL DEFAULT 0, created_at timestamptz DEFAULT now())`)
	tablesBefore := e.n(t, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`)
	e.register(t)
	for i, k := range gcos.ChangeKinds {
		if i%2 == 0 {
			e.activate(t, k.EventType())
		}
		e.emit(t, handoffEmit(k, "fin_invoices", fmt.Sprintf("INV-%d", i), fmt.Sprintf("job-test-%d", i), evBase))
	}
	if _, err := e.heartbeat("handoff", map[string]int64{"seen": 10, "enqueued": 8}); err != nil {
		t.Fatal(err)
	}
	for _, k := range gcos.ChangeKinds {
		e.activate(t, k.EventType())
	}
	e.activate(t, "governance.handoff.heartbeat")
	e.promote(t)
	if _, err := e.heartbeat("governance.handoff", map[string]int64{"seen": 1}); err != nil {
		t.Fatal(err)
	}
	e.promote(t) // the heartbeat is an announcement: the promoter releases it (the second waits out the cooldown)

	if n := e.n(t, `SELECT count(*) FROM job_queue`); n != 0 {
		t.Fatalf("%d job_queue rows: an event became a job", n)
	}
	if n := e.n(t, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`); n != tablesBefore {
		t.Fatalf("tables %d → %d: the event path created a table", tablesBefore, n)
	}
	if n := e.outboxCount(t); n != len(gcos.ChangeKinds)+1 {
		t.Fatalf("%d outbox rows, want %d", n, len(gcos.ChangeKinds)+1)
	}
	// Facts: every row says when it happened, what it is about and who said so; its payload holds only safe keys.
	if n := e.n(t, `SELECT count(*) FROM event_outbox WHERE occurred_at IS NULL OR canonical_address = '' OR actor_ref = ''
		OR source_system = '' OR event_subject_table = ''`); n != 0 {
		t.Fatalf("%d outbox rows without occurred_at, address or provenance", n)
	}
	for _, key := range e.strings(t, `SELECT DISTINCT jsonb_object_keys(safe_payload) FROM event_outbox ORDER BY 1`) {
		if !slices.Contains(gcos.SafePayloadKeys, key) {
			t.Errorf("outbox payload key %q is not safe metadata", key)
		}
	}
	if n := e.n(t, `SELECT count(*) FROM event_outbox WHERE jsonb_typeof(safe_payload) <> 'object'
		OR EXISTS (SELECT 1 FROM jsonb_each(safe_payload) kv WHERE jsonb_typeof(kv.value) IN ('object', 'array'))`); n != 0 {
		t.Fatalf("%d outbox payloads with nested contents", n)
	}
	// Emitting wrote nothing but the event lanes, findings and audit: no governance state changed off an event.
	if n := e.n(t, `SELECT count(*) FROM governance_candidate_state`); n != 0 {
		t.Fatalf("%d candidate rows written by the event path", n)
	}
}

// doc 41 §41.11 (7): a signal routes to its subscribers; event_read records what an owner has seen; mute
// suppresses the notification but never the finding; a replay does not re-notify.
func TestSB11_NotificationBoundary(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	e.register(t)
	for _, typ := range []string{gcos.ChangeObjectBorn.EventType(), "governance.input.invalid_schema"} {
		e.activate(t, typ)
	}
	e.exec(t, `INSERT INTO event_subscription (recipient_ref, event_domain, event_type, event_stream, scope_subject_table, scope_filter, mute) VALUES
		('owner-handoff', 'governance', NULL, 'governance.handoff', NULL, '{}', false),
		('owner-crm', 'governance', 'governance.handoff.*', NULL, 'birth_registry', '{"collection_name": "crm_accounts"}', false),
		('owner-muted', 'governance', 'governance.*', NULL, NULL, '{}', false),
		('owner-muted', 'governance', 'governance.input.*', NULL, NULL, '{}', true),
		('owner-input', 'governance', 'governance.input.*', NULL, 'governance_candidate_state', '{"owner_ref": "GOV-COUNCIL"}', false),
		('iu-router', 'iu', NULL, NULL, NULL, '{}', false)`)

	fin := e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", "n-1", evBase))
	crm := e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "crm_accounts", "ACC-1", "n-2", evBase.Add(time.Second)))
	// A bad handoff: rejected with a finding, and the finding announced on the input stream.
	bad := handoffEmit(gcos.ChangeObjectBorn, "crm_accounts", "ACC-2", "n-3", evBase)
	bad.Payload["owner_email"] = "bob@example.com"
	rej := e.emit(t, bad)
	if rej.Outcome != postgres.EmitOutcomeRejected {
		t.Fatalf("bad payload: %+v", rej)
	}
	// GCOS announces the finding itself (captured with the finding, released by the promoter): no test emits it.
	e.promote(t)
	ann := e.strings(t, `SELECT id::text FROM event_outbox WHERE event_type = 'governance.input.invalid_schema'
		AND safe_payload->>'issue_id' = $1 AND safe_payload->>'transition' = 'opened' AND source_system = 'gcos'`,
		fmt.Sprint(rej.FindingID))
	if len(ann) != 1 {
		t.Fatalf("the product announced the rejection's finding %d times, want once", len(ann))
	}

	ids := func(recipient string) []string {
		t.Helper()
		ns, err := e.loop.Notifications(e.ctx, recipient, 0)
		if err != nil {
			t.Fatalf("notifications for %s: %v", recipient, err)
		}
		out := []string{}
		for _, n := range ns {
			if n.Recipient != recipient || len(n.Subscriptions) == 0 {
				t.Fatalf("notification %+v", n)
			}
			out = append(out, n.Event.ID)
		}
		return out
	}
	for _, tc := range []struct {
		recipient string
		want      []string
	}{
		{"owner-handoff", []string{fin.EventID, crm.EventID}},
		{"owner-crm", []string{crm.EventID}},
		{"owner-muted", []string{fin.EventID, crm.EventID}}, // the input announcement is muted
		{"owner-input", []string{ann[0]}},                   // routed to it by the announcement's owner
		{"iu-router", []string{}},
		{"nobody", []string{}},
	} {
		if got := ids(tc.recipient); !slices.Equal(got, tc.want) {
			t.Errorf("notifications for %s = %v, want %v", tc.recipient, got, tc.want)
		}
	}
	// Mute suppressed the notification, never the finding.
	if f := e.findings(t, gcos.InputIssue(gcos.InputInvalidSchema), "crm_accounts:ACC-2"); len(f) != 1 || f[0].status != "open" {
		t.Fatalf("muted subscriber's finding %+v, want it open", f)
	}

	// Seen events are not notified again; marking read is idempotent.
	for i, want := range []bool{true, false} {
		wrote, err := e.loop.MarkRead(e.ctx, fin.EventID, "owner-handoff")
		if err != nil || wrote != want {
			t.Fatalf("mark read #%d = %v, %v; want %v", i+1, wrote, err, want)
		}
	}
	if n := e.n(t, `SELECT count(*) FROM event_read WHERE event_id = $1::uuid`, fin.EventID); n != 1 {
		t.Fatalf("%d event_read rows, want 1", n)
	}
	if got := ids("owner-handoff"); !slices.Equal(got, []string{crm.EventID}) {
		t.Fatalf("after read: %v", got)
	}
	if got := ids("owner-muted"); !slices.Equal(got, []string{fin.EventID, crm.EventID}) {
		t.Fatalf("one recipient's read changed another's notifications: %v", got)
	}

	// A replayed emit (cursor reset) adds nothing and re-notifies nobody.
	outbox := e.outboxCount(t)
	if res := e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", "n-1", evBase)); res.Outcome != postgres.EmitOutcomeDuplicate || res.EventID != fin.EventID {
		t.Fatalf("replay: %+v", res)
	}
	if n := e.outboxCount(t); n != outbox {
		t.Fatalf("replay changed the outbox: %d → %d", outbox, n)
	}
	if got := ids("owner-handoff"); !slices.Equal(got, []string{crm.EventID}) {
		t.Fatalf("after replay: %v", got)
	}

	all, err := e.loop.PendingNotifications(e.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for _, n := range all {
		pairs = append(pairs, n.Recipient+"/"+n.Event.ID)
	}
	slices.Sort(pairs)
	want := []string{"owner-crm/" + crm.EventID, "owner-handoff/" + crm.EventID, "owner-muted/" + crm.EventID,
		"owner-muted/" + fin.EventID, "owner-input/" + ann[0]}
	slices.Sort(want)
	if !slices.Equal(pairs, want) {
		t.Fatalf("pending notifications %v, want %v", pairs, want)
	}

	if _, err := e.loop.MarkRead(e.ctx, "00000000-0000-4000-8000-000000000000", "owner-handoff"); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("mark read of an unknown event: %v, want not found", err)
	}
	if _, err := e.loop.MarkRead(e.ctx, "not-a-uuid", "owner-handoff"); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("mark read of a bad id: %v, want invalid", err)
	}
	if _, err := e.loop.Notifications(e.ctx, " ", 0); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("notifications without recipient: %v", err)
	}
}

// Owner resolution for routing: ownership → scope default_owner_hint → GOV-COUNCIL, degrading when the optional
// SB-2 tables are absent.
func TestSB11_NotificationOwnerResolution(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	e.exec(t, `INSERT INTO governance_responsibility_scope (scope_code, default_owner_hint) VALUES
		('health', 'GOV-SIV'), ('policy', NULL)`)
	e.exec(t, `INSERT INTO governance_object_ownership (scope_code, entity_type, collection_name, owner_ref, status) VALUES
		('health', 'invoice', 'fin_invoices', 'OWNER-FIN', 'active'),
		('health', 'account', NULL, 'OWNER-CRM', 'retired'),
		('health', NULL, 'ledger', 'OWNER-A', 'active'),
		('health', NULL, 'ledger', 'OWNER-B', 'active')`)
	for _, tc := range []struct {
		q          events.OwnerQuery
		want, from string
	}{
		{events.OwnerQuery{Scope: "health", EntityType: "invoice", CollectionName: "fin_invoices"}, "OWNER-FIN", events.OwnerFromOwnership},
		{events.OwnerQuery{Scope: "health", EntityType: "account", CollectionName: "crm_accounts"}, "GOV-SIV", events.OwnerFromScopeDefault},
		{events.OwnerQuery{Scope: "health", EntityType: "entry", CollectionName: "ledger"}, events.CouncilOwner, events.OwnerFromCouncil},
		{events.OwnerQuery{Scope: "policy", EntityType: "invoice", CollectionName: "fin_invoices"}, events.CouncilOwner, events.OwnerFromCouncil},
	} {
		got, err := e.loop.ResolveOwner(e.ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got.OwnerRef != tc.want || got.Source != tc.from {
			t.Errorf("ResolveOwner(%+v) = %+v, want %s from %s", tc.q, got, tc.want, tc.from)
		}
	}
	e.exec(t, `DROP TABLE governance_object_ownership`)
	got, err := e.loop.ResolveOwner(e.ctx, events.OwnerQuery{Scope: "health", EntityType: "invoice", CollectionName: "fin_invoices"})
	if err != nil || got.OwnerRef != "GOV-SIV" || !strings.Contains(got.Reason, "absent") {
		t.Fatalf("without ownership: %+v, %v", got, err)
	}
	e.exec(t, `DROP TABLE governance_responsibility_scope`)
	got, err = e.loop.ResolveOwner(e.ctx, events.OwnerQuery{Scope: "health"})
	if err != nil || got.OwnerRef != events.CouncilOwner {
		t.Fatalf("without SB-2 tables: %+v, %v", got, err)
	}
}

// doc 41 §41.11 (8): every GCOS event type and row lives under event_domain 'governance'; the live registry's 40
// rows of other domains are untouched byte for byte.
func TestSB11_OneDomain(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	if _, err := world.Generate(e.ctx, e.pool, world.Options{Births: world.MinBirths, Changes: -1, Seed: 3}); err != nil {
		t.Fatalf("generate world: %v", err)
	}
	const others = `SELECT coalesce(md5(string_agg(r::text, E'\n' ORDER BY r::text)), '') FROM event_type_registry r WHERE event_domain <> 'governance'`
	if n := e.n(t, `SELECT count(*) FROM event_type_registry WHERE event_domain <> 'governance'`); n != 40 {
		t.Fatalf("%d pre-existing registry rows, want the live 40", n)
	}
	before := e.strings(t, others)[0]
	subsBefore := e.strings(t, `SELECT coalesce(md5(string_agg(s::text, E'\n' ORDER BY s::text)), '') FROM event_subscription s`)[0]

	reg := e.register(t)
	if len(reg.Registered) != reg.Total || reg.Total == 0 {
		t.Fatalf("register: %+v", reg)
	}
	if _, err := e.loop.ActivateEventType(e.ctx, "iu.message.received", "APR-X", "someone"); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("activating another domain's type: %v, want not found", err)
	}
	if _, err := e.loop.ActivateEventType(e.ctx, "mother.cut.proposed", "APR-X", "someone"); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("activating another domain's inactive type: %v, want not found", err)
	}
	e.activate(t, gcos.ChangeObjectBorn.EventType())
	e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", "d-1", evBase))
	e.emit(t, handoffEmit(gcos.ChangeObjectRetired, "fin_invoices", "INV-1", "d-2", evBase))
	if _, err := e.heartbeat("handoff", nil); err != nil {
		t.Fatal(err)
	}
	e.register(t)
	e.promote(t)

	if after := e.strings(t, others)[0]; after != before {
		t.Fatal("registering and activating changed another domain's registry rows")
	}
	if after := e.strings(t, `SELECT coalesce(md5(string_agg(s::text, E'\n' ORDER BY s::text)), '') FROM event_subscription s`)[0]; after != subsBefore {
		t.Fatal("the event path changed subscriptions")
	}
	if n := e.n(t, `SELECT count(*) FROM event_type_registry WHERE event_type LIKE 'governance.%' AND event_domain <> 'governance'`); n != 0 {
		t.Fatalf("%d governance types outside the governance domain", n)
	}
	if n := e.n(t, `SELECT count(*) FROM event_type_registry WHERE event_domain = 'governance' AND event_type NOT LIKE 'governance.%'`); n != 0 {
		t.Fatalf("%d non-governance types in the governance domain", n)
	}
	if n := e.n(t, `SELECT count(DISTINCT event_domain) FROM event_type_registry`); n != 6 {
		t.Fatalf("%d domains, want the live 5 plus governance", n)
	}
	if n := e.n(t, `SELECT count(*) FROM event_outbox WHERE event_domain <> 'governance' OR event_type NOT LIKE 'governance.%'`); n != 0 {
		t.Fatalf("%d outbox rows outside the governance domain", n)
	}
	if n := e.n(t, `SELECT count(*) FROM event_pending WHERE event_domain <> 'governance' OR event_type_hint NOT LIKE 'governance.%'`); n != 0 {
		t.Fatalf("%d pending rows outside the governance domain", n)
	}
	if n := e.outboxCount(t); n != 1 {
		t.Fatalf("%d governance outbox rows, want 1", n)
	}
	e.noInactiveOutbox(t)
}

// Registering is idempotent, never re-deactivates, and activation needs an approval and a registered type.
func TestEventRegisterAndActivate(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	v, err := gcos.LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	first := e.register(t)
	if len(first.Registered) != len(v.Types) || first.Present != 0 || first.AuditID == 0 {
		t.Fatalf("first register: %+v", first)
	}
	if n := e.n(t, `SELECT count(*) FROM event_type_registry WHERE event_domain = 'governance' AND active`); n != 0 {
		t.Fatalf("%d types registered active, want none (registering is not activating)", n)
	}
	const all = `SELECT coalesce(md5(string_agg(r::text, E'\n' ORDER BY r::text)), '') FROM event_type_registry r`
	snap := e.strings(t, all)[0]
	second := e.register(t)
	if len(second.Registered) != 0 || second.Present != len(v.Types) || second.AuditID != 0 || len(second.Drifted) != 0 {
		t.Fatalf("second register: %+v, want a no-op", second)
	}
	if e.strings(t, all)[0] != snap {
		t.Fatal("re-registering changed the registry")
	}

	typ := "governance.candidate.stale"
	if _, err := e.loop.ActivateEventType(e.ctx, typ, "  ", "op"); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("activation without approval: %v, want invalid", err)
	}
	if _, err := e.loop.ActivateEventType(e.ctx, "governance.nope.never", "APR-1", "op"); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("activation of an unregistered type: %v, want not found", err)
	}
	res, err := e.loop.ActivateEventType(e.ctx, typ, "APR-42", "op-anna")
	if err != nil || !res.Activated || res.AuditID == 0 {
		t.Fatalf("activate: %+v, %v", res, err)
	}
	var detail, by, action string
	if err := e.pool.QueryRow(e.ctx, `SELECT alert_detail, changed_by, action FROM registry_changelog WHERE id = $1`, res.AuditID).Scan(&detail, &by, &action); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(detail, `"approval_ref":"APR-42"`) || by != "gcos:op-anna" || action != "activate" {
		t.Fatalf("audit row: %s by %s action %s", detail, by, action)
	}
	again, err := e.loop.ActivateEventType(e.ctx, typ, "APR-43", "op-anna")
	if err != nil || again.Activated || again.AuditID != 0 {
		t.Fatalf("second activation: %+v, %v; want a no-op", again, err)
	}
	if n := e.n(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_event_type' AND action = 'activate'`); n != 1 {
		t.Fatalf("%d activation audit rows, want 1", n)
	}

	// A later register never flips an activated type back, and reports (never rewrites) drift.
	e.exec(t, `UPDATE event_type_registry SET description = 'edited by an operator' WHERE event_type = $1`, typ)
	third := e.register(t)
	if !slices.Equal(third.Drifted, []string{typ}) || len(third.Registered) != 0 {
		t.Fatalf("third register: %+v", third)
	}
	var active bool
	var desc string
	if err := e.pool.QueryRow(e.ctx, `SELECT active, description FROM event_type_registry WHERE event_domain = 'governance' AND event_type = $1`, typ).Scan(&active, &desc); err != nil {
		t.Fatal(err)
	}
	if !active || desc != "edited by an operator" {
		t.Fatalf("register rewrote an existing row: active=%v description=%q", active, desc)
	}

	// A type missing from the registry (e.g. deleted by hand) is registered again, inactive.
	e.exec(t, `DELETE FROM event_type_registry WHERE event_type = 'governance.handoff.lag'`)
	if fourth := e.register(t); !slices.Equal(fourth.Registered, []string{"governance.handoff.lag"}) {
		t.Fatalf("fourth register: %+v", fourth)
	}

	list, err := e.loop.ListEventTypes(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(v.Types) {
		t.Fatalf("list has %d types, want %d", len(list), len(v.Types))
	}
	for _, row := range list {
		if !row.InVocabulary || row.Active != (row.EventType == typ) {
			t.Errorf("list row %+v", row)
		}
	}
}

// The same (source, type, correlation id) never produces two outbox rows or two pending rows, even from
// concurrent emitters.
func TestEmitDuplicateCorrelation(t *testing.T) {
	t.Parallel()

	t.Run("replay while held and after promotion", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		e.register(t)
		em := handoffEmit(gcos.ChangeCollection, "fin_invoices", "INV-1", "changelog:77", evBase)
		first := e.emit(t, em)
		if first.Outcome != postgres.EmitOutcomeCaptured {
			t.Fatalf("first: %+v", first)
		}
		if dup := e.emit(t, em); dup.Outcome != postgres.EmitOutcomeDuplicate || dup.PendingID != first.PendingID {
			t.Fatalf("replay while held: %+v", dup)
		}
		if n := e.pendingCount(t); n != 1 {
			t.Fatalf("%d pending rows, want 1", n)
		}
		e.activate(t, em.EventType)
		e.promote(t)
		if dup := e.emit(t, em); dup.Outcome != postgres.EmitOutcomeDuplicate {
			t.Fatalf("replay after promotion: %+v", dup)
		}
		if n := e.outboxCount(t); n != 1 {
			t.Fatalf("%d outbox rows, want 1", n)
		}
		if n := e.pendingCount(t); n != 1 {
			t.Fatalf("%d pending rows, want 1", n)
		}
		// Same key from another source, or for another fact, is another signal.
		other := em
		other.SourceSystem = "registry_changelog"
		if res := e.emit(t, other); res.Outcome != postgres.EmitOutcomeEmitted {
			t.Fatalf("same key, other source: %+v", res)
		}
		otherKind := handoffEmit(gcos.ChangeSource, "fin_invoices", "INV-1", "changelog:77", evBase)
		if res := e.emit(t, otherKind); res.Outcome != postgres.EmitOutcomeCaptured {
			t.Fatalf("same key, other type: %+v", res)
		}
	})

	t.Run("concurrent emitters", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		e.register(t)
		e.activate(t, gcos.ChangeObjectBorn.EventType())
		for _, corr := range []string{"race-active"} {
			var wg sync.WaitGroup
			outcomes := make(chan string, 8)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := e.emitSignal(handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", corr, evBase))
					if err != nil {
						t.Error(err)
						return
					}
					outcomes <- res.Outcome
				}()
			}
			wg.Wait()
			close(outcomes)
			emitted := 0
			for o := range outcomes {
				if o == postgres.EmitOutcomeEmitted {
					emitted++
				}
			}
			if emitted != 1 {
				t.Fatalf("%d emitters won, want exactly 1", emitted)
			}
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.emitSignal(handoffEmit(gcos.ChangeObjectRetired, "fin_invoices", "INV-1", "race-held", evBase)); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n := e.outboxCount(t); n != 1 {
			t.Fatalf("%d outbox rows, want 1", n)
		}
		if n := e.pendingCount(t); n != 1 {
			t.Fatalf("%d pending rows, want 1", n)
		}
	})

	t.Run("bad envelopes write nothing", func(t *testing.T) {
		t.Parallel()
		e := newEvEnv(t)
		good := handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", "x", evBase)
		for name, mutate := range map[string]func(*postgres.Emit){
			"no correlation id": func(m *postgres.Emit) { m.CorrelationID = "" },
			"no source":         func(m *postgres.Emit) { m.SourceSystem = "" },
			"no actor":          func(m *postgres.Emit) { m.ActorRef = "" },
			"no address":        func(m *postgres.Emit) { m.EntityCode = "" },
			"no subject table":  func(m *postgres.Emit) { m.SubjectTable = "" },
			"foreign type":      func(m *postgres.Emit) { m.EventType = "iu.message.received" },
			"bad severity":      func(m *postgres.Emit) { m.Severity = "critical" },
			"foreign stream":    func(m *postgres.Emit) { m.Stream = "iu.message" },
		} {
			m := good
			mutate(&m)
			if _, err := e.emitSignal(m); gcos.ErrorCode(err) != gcos.EINVALID {
				t.Errorf("%s: %v, want invalid", name, err)
			}
		}
		if n := e.n(t, `SELECT (SELECT count(*) FROM event_outbox) + (SELECT count(*) FROM event_pending) + (SELECT count(*) FROM system_issues)`); n != 0 {
			t.Fatalf("%d rows written by refused emits", n)
		}
	})
}

// Heartbeats go through the same emit path: captured while inactive, emitted once active, safe payload only.
func TestEmitHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	e.register(t)
	res, err := e.heartbeat("handoff", map[string]int64{"seen": 5, "coalesced": 2, "enqueued": 3})
	if err != nil || res.Outcome != postgres.EmitOutcomeCaptured {
		t.Fatalf("inactive heartbeat: %+v, %v", res, err)
	}
	if f := e.findings(t, gcos.IssueHandoffUnregisteredType, "governance.handoff.heartbeat"); len(f) != 1 {
		t.Fatalf("findings %+v", f)
	}
	e.activate(t, "governance.handoff.heartbeat")
	res, err = e.heartbeat("governance.handoff", map[string]int64{"seen": 1})
	if err != nil || res.Outcome != postgres.EmitOutcomeCaptured {
		t.Fatalf("active heartbeat: %+v, %v", res, err)
	}
	// A heartbeat is an announcement: the promoter releases it under the discipline, whose cooldown on the
	// stream coalesces the first into the second (the counts are running totals, so nothing is lost).
	e.promote(t)
	got := e.strings(t, `SELECT (safe_payload->>'count') || ' seen=' || (safe_payload->>'seen') FROM event_outbox
		WHERE event_type = 'governance.handoff.heartbeat' ORDER BY created_at`)
	if !slices.Equal(got, []string{"1 seen=1"}) {
		t.Fatalf("heartbeats %v, want the latest", got)
	}
	if n := e.n(t, `SELECT count(*) FROM event_pending WHERE event_type_hint = 'governance.handoff.heartbeat'
		AND processed_at IS NOT NULL AND last_error LIKE 'coalesced%' AND capture_payload->'safe_payload'->>'coalesced' = '2'`); n != 1 {
		t.Fatal("the first heartbeat, with its counts, should be coalesced into the second")
	}
	if _, err := e.heartbeat("", nil); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Fatalf("heartbeat without stream: %v", err)
	}
	// A stream without a heartbeat type in the vocabulary is held like any unregistered type.
	res, err = e.heartbeat("lifecycle", nil)
	if err != nil || res.Outcome != postgres.EmitOutcomeCaptured {
		t.Fatalf("heartbeat of a stream without one: %+v, %v", res, err)
	}
	e.noInactiveOutbox(t)
}

// heartbeat emits the heartbeat signal of stream, as the intake's worker does.
func (e *evEnv) heartbeat(stream string, counts map[string]int64) (postgres.EmitResult, error) {
	beat, err := postgres.Heartbeat(stream, counts)
	if err != nil {
		return postgres.EmitResult{}, err
	}
	return e.emitSignal(beat)
}

// emitSignal emits one signal in a transaction of its own, as the intake's worker does.
func (e *evEnv) emitSignal(em postgres.Emit) (postgres.EmitResult, error) {
	var res postgres.EmitResult
	err := e.store.InTx(e.ctx, func(tx pgx.Tx) error {
		var err error
		res, err = postgres.EmitSignal(e.ctx, tx, em)
		return err
	})
	return res, err
}
