package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"gcos"
	"gcos/events"
	"gcos/gcostest"
	"gcos/httpapi"
	"gcos/postgres"
)

// openFinding raises a candidate_stale finding about one group of e's world and returns its id.
func openFinding(t *testing.T, e *env) int64 {
	t.Helper()
	key := e.anyGroupKey(t)
	id, err := e.store.RaiseFinding(e.ctx, gcos.Finding{Type: gcos.IssueCandidateStale, Subject: key, Group: key,
		Evidence: map[string]any{"group_key": key}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// principalsEnv serves a world whose configuration names principals with tokens:
// dana (operator and approver), erin (approver), rita (reader); plus a plain operator token.
func principalsEnv(t *testing.T) (*env, *gcostest.World) {
	t.Helper()
	w := gcostest.New(t, gcostest.Options{Births: 3000, Seed: 11, Config: func(c *gcos.Config) {
		c.Events.Rules = nil // every announcement goes out at once: this is about the loop, not the discipline
		c.Principals = []gcos.Principal{
			{Name: "dana", Roles: []string{gcos.RoleReader, gcos.RoleOperator, gcos.RoleApprover}, Tokens: []string{"tok-dana-0123456789"}},
			{Name: "erin", Roles: []string{gcos.RoleApprover}, Tokens: []string{"tok-erin-0123456789"}},
			{Name: "rita", Roles: []string{gcos.RoleReader}, Tokens: []string{"tok-rita-0123456789"}},
		}
	}})
	e := &env{w: w, ctx: w.Ctx, pool: w.Pool, store: w.Store}
	e.ruleset = w.Backfill(t).RulesetVersion
	e.serve(t, gcos.HTTPConfig{Listen: "127.0.0.1:0", OperatorTokens: []string{operatorToken}, LocalTokens: []string{"tok-local-0123456789"}})
	return e, w
}

// newDraft changes the rule registries so that they hash to a ruleset version nobody has proposed yet.
func newDraft(t *testing.T, w *gcostest.World, n int) {
	t.Helper()
	w.Exec(t, `INSERT INTO measurement_registry (measurement_id, law_code, method, source_query, target_query, severity)
		SELECT $1, min(law_code), 1, 'select 1', 'select 1', 'low' FROM law_jurisdiction`, fmt.Sprintf("M-PRINCIPAL-%d", n))
}

// TestPrincipalsSelfApproval: who proposes and who approves is the token's principal, never a name in the body.
// One token proposing under one name and approving under another is refused; two principals are allowed; a
// principal without the approver role is refused before anything changes; the audit row names both.
func TestPrincipalsSelfApproval(t *testing.T) {
	t.Parallel()
	e, w := principalsEnv(t)
	const dana, erin, rita = "tok-dana-0123456789", "tok-erin-0123456789", "tok-rita-0123456789"
	propose := func(token, name string) postgres.RulesetRow {
		t.Helper()
		a := e.call(t, "POST", "/v1/rulesets", token, `{"proposer":"`+name+`"}`)
		var res httpapi.ProposeResult
		a.json(t, &res)
		if a.status != 200 || !res.Created {
			t.Fatalf("propose as %s: %d %s", name, a.status, a.body)
		}
		return res.Ruleset
	}
	newDraft(t, w, 1)
	rs := propose(dana, "alice")
	if rs.ProposedBy != "dana" {
		t.Fatalf("proposed by %q, want the token's principal dana", rs.ProposedBy)
	}
	activate := "/v1/rulesets/" + rs.Version + "/activate"
	// Same token, another name: refused.
	if a := e.call(t, "POST", activate, dana, `{"approval_ref":"APR-1","actor":"bob"}`); a.status != 409 || !strings.Contains(string(a.body), "no self-approval") {
		t.Fatalf("self-approval under a second name: %d %s", a.status, a.body)
	}
	// A reader, and an operator token without the approver role (principals configured): refused by role.
	if a := e.call(t, "POST", activate, rita, `{"approval_ref":"APR-1"}`); a.status != 403 {
		t.Fatalf("reader activates: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", activate, operatorToken, `{"approval_ref":"APR-1"}`); a.status != 403 {
		t.Fatalf("plain operator token activates with principals configured: %d %s", a.status, a.body)
	}
	if n := w.Count(t, `SELECT count(*) FROM governance_ruleset WHERE status = 'active'`); n != 0 {
		t.Fatalf("a refused activation activated something (%d active)", n)
	}
	// Another principal, claiming to be the proposer's name: the name is not the identity, but claiming the
	// proposer's name is refused too.
	if a := e.call(t, "POST", activate, erin, `{"approval_ref":"APR-1","actor":"dana"}`); a.status != 409 {
		t.Fatalf("approver claiming the proposer's name: %d %s", a.status, a.body)
	}
	a := e.call(t, "POST", activate, erin, `{"approval_ref":"APR-1","actor":"Erin E."}`)
	var res postgres.ActivationResult
	a.json(t, &res)
	if a.status != 200 {
		t.Fatalf("two principals: %d %s", a.status, a.body)
	}
	var changedBy string
	var detail map[string]any
	if err := e.pool.QueryRow(e.ctx, `SELECT changed_by, alert_detail::jsonb FROM registry_changelog WHERE id = $1`, res.AuditID).Scan(&changedBy, &detail); err != nil {
		t.Fatal(err)
	}
	approver, _ := detail["approver"].(map[string]any)
	proposer, _ := detail["proposer"].(map[string]any)
	if changedBy != "gcos:erin" || approver["principal"] != "erin" || approver["name"] != "Erin E." || approver["via"] != "http" || proposer["principal"] != "dana" {
		t.Fatalf("audit row: %s %v", changedBy, detail)
	}
	// The proposal's own audit row names the name given beside the principal.
	if n := w.Count(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_ruleset' AND action = 'propose'
		AND entity_code = $1 AND changed_by = 'gcos:dana' AND alert_detail::jsonb -> 'proposer' ->> 'name' = 'alice'`, rs.Version); n != 1 {
		t.Fatalf("%d propose audit rows naming dana as alice", n)
	}

	// The CLI's run token acts as the principal it names (as the CLI does on the database path), still under
	// no self-approval: dana cannot approve dana's proposal through it either.
	const local = "tok-local-0123456789"
	newDraft(t, w, 2)
	a = e.call(t, "POST", "/v1/rulesets", local, `{}`, httpapi.PrincipalHeader, "dana", httpapi.OSUserHeader, "ops")
	var prop httpapi.ProposeResult
	a.json(t, &prop)
	if a.status != 200 || prop.Ruleset.ProposedBy != "dana" {
		t.Fatalf("propose through the run token as dana: %d %s", a.status, a.body)
	}
	activate = "/v1/rulesets/" + prop.Ruleset.Version + "/activate"
	if a := e.call(t, "POST", activate, local, `{"approval_ref":"APR-2"}`, httpapi.PrincipalHeader, "dana"); a.status != 409 {
		t.Fatalf("run token, same principal: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", activate, local, `{"approval_ref":"APR-2"}`, httpapi.PrincipalHeader, "mallory"); a.status != 403 {
		t.Fatalf("run token naming no configured principal: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", activate, local, `{"approval_ref":"APR-2"}`, httpapi.PrincipalHeader, "erin", httpapi.OSUserHeader, "ops"); a.status != 200 {
		t.Fatalf("run token as erin: %d %s", a.status, a.body)
	}
	// Every mutation names the token's principal: a cursor reset too.
	e.addCursor(t, "birth_registry")
	if a := e.call(t, "POST", "/v1/cursors/birth_registry/reset", dana, `{"to":"start"}`); a.status != 200 {
		t.Fatalf("reset as dana: %d %s", a.status, a.body)
	}
	if n := w.Count(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_cursor' AND action = 'reset'
		AND changed_by = 'gcos:dana' AND alert_detail::jsonb -> 'actor' ->> 'via' = 'http'`); n != 1 {
		t.Fatalf("%d cursor reset audit rows naming dana", n)
	}
	// On a principal's token the CLI's --by is recorded as the name given, the principal stays the token's.
	newDraft(t, w, 3)
	a = e.call(t, "POST", "/v1/rulesets", dana, `{}`, httpapi.PrincipalHeader, "alice", httpapi.OSUserHeader, "ops")
	a.json(t, &prop)
	if a.status != 200 || prop.Ruleset.ProposedBy != "dana" {
		t.Fatalf("propose with dana's token naming alice: %d %s", a.status, a.body)
	}
	if n := w.Count(t, `SELECT count(*) FROM registry_changelog WHERE action = 'propose' AND entity_code = $1
		AND alert_detail::jsonb -> 'proposer' @> '{"principal": "dana", "name": "alice", "os_user": "ops", "via": "http"}'`, prop.Ruleset.Version); n != 1 {
		t.Fatalf("%d propose rows naming dana as alice from ops", n)
	}
	// A principal's token ignores the header: rita stays rita.
	var me httpapi.Me
	e.call(t, "GET", "/v1/me", rita, "", httpapi.PrincipalHeader, "dana").json(t, &me)
	if me.Principal != "rita" || strings.Join(me.Roles, ",") != "reader" || me.Local {
		t.Fatalf("rita's token naming dana: %+v", me)
	}
}

// TestPrincipalsNotificationLoop: a principal subscribes, lists its unread notifications, reads one, mutes a
// finding; the finding keeps counting while muted and notifies nobody; resolving it needs the operator role and a
// reason; a resolved finding that recurs reopens with its count. Reads and mutes are per principal.
func TestPrincipalsNotificationLoop(t *testing.T) {
	t.Parallel()
	e, w := principalsEnv(t)
	const dana, rita = "tok-dana-0123456789", "tok-rita-0123456789"
	w.ActivateVocabulary(t, "erin")
	for _, sub := range []string{dana} {
		if a := e.call(t, "POST", "/v1/notifications/subscribe", sub, `{"event_type":"governance.candidate.*"}`); a.status != 200 {
			t.Fatalf("subscribe: %d %s", a.status, a.body)
		}
	}
	// rita may not subscribe (reader), nor read dana's inbox.
	if a := e.call(t, "POST", "/v1/notifications/subscribe", rita, `{"event_type":"governance.candidate.*"}`); a.status != 403 {
		t.Fatalf("reader subscribes: %d %s", a.status, a.body)
	}
	if a := e.call(t, "GET", "/v1/notifications?recipient=dana", rita, ""); a.status != 403 {
		t.Fatalf("reader reads another inbox: %d %s", a.status, a.body)
	}
	id := openFinding(t, e)
	promote := func() {
		t.Helper()
		if _, err := events.New(e.store).PromotePending(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	promote()
	inbox := func(token string) events.NotificationInbox {
		t.Helper()
		var in events.NotificationInbox
		a := e.call(t, "GET", "/v1/notifications", token, "")
		if a.status != 200 {
			t.Fatalf("inbox: %d %s", a.status, a.body)
		}
		a.json(t, &in)
		return in
	}
	in := inbox(dana)
	if in.Recipient != "dana" || in.Unread != 1 || len(in.Notifications) != 1 || in.Notifications[0].Event.Payload["transition"] != "opened" {
		t.Fatalf("dana's inbox after the finding opened: %+v", in)
	}
	if r := inbox(rita); r.Unread != 0 {
		t.Fatalf("rita, not subscribed, has %d unread", r.Unread)
	}
	var me httpapi.Me
	e.call(t, "GET", "/v1/me", dana, "").json(t, &me)
	if me.Principal != "dana" || me.Unread != 1 {
		t.Fatalf("me: %+v", me)
	}
	// Read it: dana's count drops; an unknown id is 404 and marks nothing.
	if a := e.call(t, "POST", "/v1/notifications/read", dana, `{"event_ids":["`+in.Notifications[0].Event.ID+`","00000000-0000-0000-0000-000000000001"]}`); a.status != 404 {
		t.Fatalf("read with an unknown id: %d %s", a.status, a.body)
	}
	if inbox(dana).Unread != 1 {
		t.Fatal("a refused read marked something")
	}
	var read events.ReadResult
	e.call(t, "POST", "/v1/notifications/read", dana, `{"event_ids":["`+in.Notifications[0].Event.ID+`"]}`).json(t, &read)
	if read.Marked != 1 || inbox(dana).Unread != 0 {
		t.Fatalf("read: %+v", read)
	}
	// Mute the finding: it keeps counting, and its resolution and reopening notify dana of nothing.
	body := fmt.Sprintf(`{"finding_id":%d}`, id)
	if a := e.call(t, "POST", "/v1/notifications/mute", dana, body); a.status != 200 {
		t.Fatalf("mute: %d %s", a.status, a.body)
	}
	// Resolve: a reader may not, a reason is required, an operator with a reason may.
	resolve := "/v1/findings/" + strconv.FormatInt(id, 10) + "/resolve"
	if a := e.call(t, "POST", resolve, rita, `{"reason":"fixed"}`); a.status != 403 {
		t.Fatalf("reader resolves: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", resolve, dana, `{"reason":"  "}`); a.status != 400 {
		t.Fatalf("resolve without a reason: %d %s", a.status, a.body)
	}
	var row events.FindingRow
	a := e.call(t, "POST", resolve, dana, `{"reason":"the registry row was fixed upstream"}`)
	a.json(t, &row)
	if a.status != 200 || row.Status != "resolved" {
		t.Fatalf("resolve: %d %s", a.status, a.body)
	}
	// The condition recurs: the finding reopens with its counts.
	again := openFinding(t, e)
	promote()
	var d events.FindingDetail
	e.call(t, "GET", "/v1/findings/"+strconv.FormatInt(id, 10), rita, "").json(t, &d)
	if again != id || d.Status != "open" || d.ReopenCount != 1 || d.OccurrenceCount != 2 {
		t.Fatalf("recurring finding: id %d (was %d), %+v", again, id, d.FindingRow)
	}
	if len(d.Resolutions) != 1 || d.Resolutions[0].By != "dana" || d.Resolutions[0].Reason != "the registry row was fixed upstream" {
		t.Fatalf("resolutions: %+v", d.Resolutions)
	}
	if d.Explain == nil || d.Explain.Group == "" || !strings.HasPrefix(d.Explain.Path, "/v1/explain?group=") {
		t.Fatalf("explain link: %+v", d.Explain)
	}
	transitions := map[string]bool{}
	for _, ev := range d.Events {
		transitions[fmt.Sprint(ev.Payload["transition"])] = true
	}
	if !transitions["opened"] || !transitions["resolved"] || !transitions["reopened"] {
		t.Fatalf("announcements about the finding: %v", transitions)
	}
	if in := inbox(dana); in.Unread != 0 {
		t.Fatalf("muted finding notified dana: %+v", in.Notifications)
	}
	// Unmute: the next transition notifies again.
	if a := e.call(t, "POST", "/v1/notifications/unmute", dana, body); a.status != 200 {
		t.Fatalf("unmute: %d %s", a.status, a.body)
	}
	if a := e.call(t, "POST", resolve, dana, `{"reason":"fixed for good"}`); a.status != 200 {
		t.Fatalf("second resolve: %d %s", a.status, a.body)
	}
	promote()
	if in := inbox(dana); in.Unread != 1 || in.Notifications[0].Event.Payload["transition"] != "resolved" || in.Notifications[0].Event.ActorRef != "dana" {
		t.Fatalf("after unmute: %+v", in.Notifications)
	}
	// Bad input changes nothing.
	for _, c := range []struct{ path, body string }{
		{"/v1/notifications/mute", `{"event_type":"governance.nothing.*"}`},
		{"/v1/notifications/mute", `{"stream":"["}`},
		{"/v1/notifications/mute", `{}`},
	} {
		if a := e.call(t, "POST", c.path, dana, c.body); a.status != 400 {
			t.Errorf("%s %s: %d %s", c.path, c.body, a.status, a.body)
		}
	}
	var subs int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM event_subscription WHERE recipient_ref = 'dana'`).Scan(&subs); err != nil || subs != 1 {
		t.Fatalf("dana's subscriptions after refused mutes: %d %v", subs, err)
	}
	var audits []string
	rows, err := e.pool.Query(e.ctx, `SELECT action FROM registry_changelog WHERE entity_type IN ('governance_subscription', 'governance_finding') ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		audits = append(audits, s)
	}
	if got, _ := json.Marshal(audits); string(got) != `["subscribe","mute","resolve","unmute","resolve"]` {
		t.Fatalf("audit rows %s", got)
	}
}
