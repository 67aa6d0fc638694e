package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/httpapi"
	"gcos/intake"
	"gcos/postgres"
	"gcos/world"
)

const (
	readerToken   = "reader-token-0123456789"
	operatorToken = "operator-token-9876543210"
)

// env is a real store over a backfilled small world, served by httptest.
type env struct {
	w       *gcostest.World
	ctx     context.Context
	pool    *pgxpool.Pool
	store   *postgres.Store
	srv     *httptest.Server
	srvGate *gate.Gate // the served gate
	ruleset string     // the backfill's ruleset (active when activated)
}

func newEnv(t *testing.T, births int, activate bool) *env {
	t.Helper()
	// The gate's questions with a token run the intake in the test (gcostest.World.HandOff): a race-instrumented
	// pass on a busy machine may take longer than the default gate.timeout, which no test here is about.
	w := gcostest.New(t, gcostest.Options{Births: births, Seed: 7, Config: func(c *gcos.Config) { c.Gate.Timeout = gcos.Duration(time.Minute) }})
	e := &env{w: w, ctx: w.Ctx, pool: w.Pool, store: w.Store}
	if births > 0 {
		e.ruleset = w.Backfill(t).RulesetVersion
		if activate {
			w.Activate(t, e.ruleset)
		}
	}
	e.serve(t, gcos.HTTPConfig{Listen: "127.0.0.1:0", ReaderTokens: []string{readerToken}, OperatorTokens: []string{operatorToken}})
	return e
}

// serve starts the API over e's store with these tokens, for the test's lifetime.
func (e *env) serve(t *testing.T, cfg gcos.HTTPConfig) {
	t.Helper()
	// No daemon runs: a question with a token runs the intake itself.
	g := gate.New(e.store, nil, gate.WithHandOff(e.w.HandOff(t)))
	e.srvGate = g
	t.Cleanup(g.ReleaseSearches) // a search's held snapshot would keep the test's database open
	h, err := httpapi.New(httpapi.Config{Store: e.store, Gate: g, HTTP: cfg, Registry: prometheus.NewRegistry(), Version: "test"})
	if err != nil {
		t.Fatalf("httpapi.New: %v", err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("decode %s: %v", a.body, err)
	}
}

func (a answer) errorCode(t *testing.T) string {
	t.Helper()
	var b httpapi.ErrorBody
	a.json(t, &b)
	return b.Error.Code
}

// call sends one request; token "" sends none. Extra headers come as name, value pairs.
func (e *env) call(t *testing.T, method, path, token, body string, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) get(t *testing.T, path string) answer { return e.call(t, "GET", path, readerToken, "") }

// addCursor puts an intake cursor at a known position (the backfill may have created it) so the reset route has
// something to reset.
func (e *env) addCursor(t *testing.T, source string) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO gov_worker_cursor (worker_name, source, source_table, ts_column, id_column, ts_type,
		position_tstz, position_id, last_created_at, last_event_id)
		VALUES ('gcos.intake.' || $1, $1, 'birth_registry', 'born_at', 'id', 'timestamptz', now() - interval '1 minute', 7,
		        now() - interval '1 minute', '7')
		ON CONFLICT (worker_name) DO UPDATE SET position_tstz = excluded.position_tstz, position_id = excluded.position_id,
		    last_created_at = excluded.last_created_at, last_event_id = excluded.last_event_id`, source); err != nil {
		t.Fatal(err)
	}
}

func (e *env) anyGroupKey(t *testing.T) string {
	t.Helper()
	var key string
	if err := e.pool.QueryRow(e.ctx, `SELECT min(group_key) FROM governance_group`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

// TestAPI runs the read-mostly checks against one served world.
func TestAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20000, true)
	e.addCursor(t, "birth_registry")
	groupKey := e.anyGroupKey(t)
	var object string
	if err := e.pool.QueryRow(e.ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`).Scan(&object); err != nil {
		t.Fatal(err)
	}

	t.Run("EveryRouteAnswers", func(t *testing.T) {
		t.Parallel()
		// One request per route in the table, with the statuses it may answer. A route missing here fails the test,
		// so a new route cannot go untested.
		cases := map[string]struct {
			path, body string
			want       []int
		}{
			"GET /v1/gate":                           {"/v1/gate?object=" + url.QueryEscape(object) + "&action=read", "", []int{200}},
			"POST /v1/gate":                          {"/v1/gate", `{"checks":[{"object":"` + object + `","action":"read"}]}`, []int{200}},
			"GET /v1/explain":                        {"/v1/explain?object=" + url.QueryEscape(object), "", []int{200}},
			"GET /v1/token":                          {"/v1/token", "", []int{200}},
			"GET /v1/groups":                         {"/v1/groups?limit=5", "", []int{200}},
			"GET /v1/groups/{key}":                   {"/v1/groups/" + groupKey, "", []int{200}},
			"GET /v1/invariant":                      {"/v1/invariant", "", []int{200}},
			"GET /v1/summary":                        {"/v1/summary", "", []int{200}},
			"GET /v1/rulesets":                       {"/v1/rulesets", "", []int{200}},
			"GET /v1/snapshots":                      {"/v1/snapshots", "", []int{200}},
			"GET /v1/findings":                       {"/v1/findings?open=true", "", []int{200}},
			"GET /v1/workers":                        {"/v1/workers", "", []int{200}},
			"GET /v1/changes":                        {"/v1/changes?limit=5", "", []int{200}},
			"GET /v1/changes/watch":                  {"/v1/changes/watch?after=not-a-cursor", "", []int{400}}, // a stream otherwise
			"POST /v1/rulesets/{version}/activate":   {"/v1/rulesets/" + e.ruleset + "/activate", `{"approval_ref":"APR-2","actor":"someone"}`, []int{409}},
			"POST /v1/rulesets":                      {"/v1/rulesets", `{"proposer":"someone"}`, []int{200}},
			"POST /v1/preview":                       {"/v1/preview", previewBody(object), []int{200}},
			"GET /v1/findings/{id}":                  {"/v1/findings/999999999", "", []int{404}},
			"POST /v1/findings/{id}/resolve":         {"/v1/findings/999999999/resolve", `{"reason":"fixed upstream"}`, []int{404}},
			"GET /v1/notifications":                  {"/v1/notifications?limit=5", "", []int{200}},
			"POST /v1/notifications/read":            {"/v1/notifications/read", `{"all":true}`, []int{200}},
			"POST /v1/notifications/mute":            {"/v1/notifications/mute", `{"stream":"governance.handoff"}`, []int{200}},
			"POST /v1/notifications/unmute":          {"/v1/notifications/unmute", `{"stream":"governance.handoff"}`, []int{200, 404}},
			"POST /v1/notifications/subscribe":       {"/v1/notifications/subscribe", `{"event_type":"governance.*"}`, []int{200}},
			"GET /v1/me":                             {"/v1/me", "", []int{200}},
			"GET /login":                             {"/login?code=never-minted", "", []int{401}},
			"POST /v1/login-links":                   {"/v1/login-links", `{}`, []int{201}},
			"POST /v1/cursors/{source}/reset":        {"/v1/cursors/birth_registry/reset", `{"to":"start"}`, []int{200}},
			"GET /metrics":                           {"/metrics", "", []int{200}},
			"GET /healthz":                           {"/healthz", "", []int{200}},
			"GET /readyz":                            {"/readyz", "", []int{200}},
			"GET /openapi.json":                      {"/openapi.json", "", []int{200}},
			"GET /":                                  {"/", "", []int{200}},
			"GET /static/{file}":                     {"/static/app.js", "", []int{200}},
			"GET /favicon.ico":                       {"/favicon.ico", "", []int{200}},
			"GET /v1":                                {"/v1", "", []int{200}},
			"POST /access/v1/evaluation":             {"/access/v1/evaluation", azEval(object), []int{200}},
			"POST /access/v1/evaluations":            {"/access/v1/evaluations", `{"subject":{"type":"pipeline","id":"ci"},"action":{"name":"read"},"evaluations":[{"resource":` + azResource(object) + `}]}`, []int{200}},
			"POST /access/v1/search/resource":        {"/access/v1/search/resource", `{"subject":{"type":"pipeline","id":"ci"},"action":{"name":"read"},"resource":{"type":"` + strings.Split(object, ":")[0] + `"},"page":{"limit":5}}`, []int{200}},
			"GET /.well-known/authzen-configuration": {"/.well-known/authzen-configuration", "", []int{200}},
		}
		for _, r := range httpapi.Routes() {
			name := r.Method + " " + r.Path
			c, ok := cases[name]
			if !ok {
				t.Errorf("route %s has no case in this test", name)
				continue
			}
			delete(cases, name)
			a := e.call(t, r.Method, c.path, operatorToken, c.body)
			if !containsInt(c.want, a.status) {
				t.Errorf("%s: status %d, want %v: %s", name, a.status, c.want, a.body)
			}
			if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
				t.Errorf("%s: CSP %q", name, csp)
			}
			if a.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s: no nosniff", name)
			}
			if strings.HasPrefix(r.Path, "/v1/") {
				if ct := a.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("%s: content type %q", name, ct)
				}
				if !json.Valid(a.body) {
					t.Errorf("%s: body is not JSON: %s", name, a.body)
				}
			}
		}
		for name := range cases {
			t.Errorf("case %s names no route", name)
		}
	})

	t.Run("AuthMatrix", func(t *testing.T) {
		t.Parallel()
		activate := "/v1/rulesets/" + e.ruleset + "/activate"
		body := `{"approval_ref":"APR-3","actor":"someone"}`
		for _, tc := range []struct {
			name, method, path, token, body string
			want                            int
		}{
			{"read without token", "GET", "/v1/summary", "", "", 401},
			{"read with unknown token", "GET", "/v1/summary", "not-a-token", "", 401},
			{"read with token prefix", "GET", "/v1/summary", readerToken[:10], "", 401},
			{"read with reader", "GET", "/v1/summary", readerToken, "", 200},
			{"read with operator", "GET", "/v1/summary", operatorToken, "", 200},
			{"gate without token", "GET", "/v1/gate?object=a:b", "", "", 401},
			{"batch gate without token", "POST", "/v1/gate", "", `{"checks":[{"object":"a:b"}]}`, 401},
			{"batch gate with reader", "POST", "/v1/gate", readerToken, `{"checks":[{"object":"a:b"}]}`, 200},
			{"metrics without token", "GET", "/metrics", "", "", 401},
			{"metrics with reader", "GET", "/metrics", readerToken, "", 200},
			{"mutate without token", "POST", activate, "", body, 401},
			{"mutate with unknown token", "POST", activate, "nope", body, 401},
			{"mutate with reader", "POST", activate, readerToken, body, 403},
			{"mutate with operator", "POST", activate, operatorToken, body, 409}, // authorized; already active
			{"reset with reader", "POST", "/v1/cursors/birth_registry/reset", readerToken, `{"to":"start"}`, 403},
			{"healthz public", "GET", "/healthz", "", "", 200},
			{"readyz public", "GET", "/readyz", "", "", 200},
			{"dashboard public", "GET", "/", "", "", 200},
			{"static public", "GET", "/static/app.css", "", "", 200},
			{"openapi public", "GET", "/openapi.json", "", "", 200},
		} {
			a := e.call(t, tc.method, tc.path, tc.token, tc.body)
			if a.status != tc.want {
				t.Errorf("%s: status %d, want %d: %s", tc.name, a.status, tc.want, a.body)
				continue
			}
			switch tc.want {
			case 401:
				if a.errorCode(t) != gcos.EUNAUTHORIZED || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s: %s / %q", tc.name, a.body, a.header.Get("WWW-Authenticate"))
				}
			case 403:
				if a.errorCode(t) != gcos.EFORBIDDEN {
					t.Errorf("%s: %s", tc.name, a.body)
				}
			}
		}
		// A non-Bearer scheme is no token.
		if a := e.call(t, "GET", "/v1/summary", "", "", "Authorization", "Basic "+readerToken); a.status != 401 {
			t.Errorf("basic auth: %d", a.status)
		}
	})

	t.Run("CrossOrigin", func(t *testing.T) {
		t.Parallel()
		activate := "/v1/rulesets/" + e.ruleset + "/activate"
		body := `{"approval_ref":"APR-4","actor":"someone"}`
		for name, hdr := range map[string][]string{
			"sec-fetch-site": {"Sec-Fetch-Site", "cross-site"},
			"origin":         {"Origin", "http://evil.example"},
		} {
			a := e.call(t, "POST", activate, operatorToken, body, hdr...)
			if a.status != 403 || a.errorCode(t) != gcos.EFORBIDDEN {
				t.Errorf("%s: cross-origin POST answered %d: %s", name, a.status, a.body)
			}
		}
		// Same-origin browser requests and reads pass.
		if a := e.call(t, "POST", activate, operatorToken, body, "Sec-Fetch-Site", "same-origin"); a.status != 409 {
			t.Errorf("same-origin POST: %d %s", a.status, a.body)
		}
		if a := e.call(t, "GET", "/v1/summary", readerToken, "", "Sec-Fetch-Site", "cross-site"); a.status != 200 {
			t.Errorf("cross-site GET: %d", a.status)
		}
	})

	t.Run("Gate", func(t *testing.T) {
		t.Parallel()
		// An allowed object, found by asking the store, and the same answer over HTTP.
		allowed := ""
		rows, err := e.pool.Query(e.ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 200`)
		if err != nil {
			t.Fatal(err)
		}
		var candidates []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			candidates = append(candidates, s)
		}
		rows.Close()
		for _, o := range candidates {
			res := gate.New(e.store, nil).Gate(e.ctx, o, gcos.ActionWrite)
			if res.Decision == gcos.GateAllow && res.RiskClass != "read_descriptive" {
				allowed = o
				break
			}
		}
		if allowed == "" {
			t.Fatal("no allowed high-risk object in the world")
		}
		// The lean answer: the decision, its reason and the state it was read from, in a few hundred bytes.
		var lean gcos.GateAnswer
		a := e.get(t, "/v1/gate?object="+url.QueryEscape(allowed)+"&action=write")
		a.json(t, &lean)
		if a.status != 200 || lean.Decision != gcos.GateAllow || a.header.Get("X-Gcos-Decision") != gcos.GateAllow ||
			lean.Reason == "" || lean.Token == "" || lean.Source == "" || lean.AsOf.IsZero() || len(a.body) > 512 {
			t.Fatalf("allowed object (%d bytes): %d %s", len(a.body), a.status, a.body)
		}
		// explain=1: the full statement and every consulted row, with the lean answer's fields.
		var res httpapi.ExplainedGateResult
		a = e.get(t, "/v1/gate?object="+url.QueryEscape(allowed)+"&action=write&explain=1")
		a.json(t, &res)
		if a.status != 200 || res.Decision != gcos.GateAllow || res.Reason != lean.Reason || res.Statement == "" ||
			len(res.Reasons) == 0 || len(res.Consulted) == 0 {
			t.Fatalf("allowed object, explained: %d %s", a.status, a.body)
		}

		// A consistency token for the present; a question at least as fresh answers from a state that covers it.
		var tok httpapi.TokenAnswer
		if a := e.get(t, "/v1/token"); a.status != 200 {
			t.Fatalf("token: %d %s", a.status, a.body)
		} else {
			a.json(t, &tok)
		}
		a = e.get(t, "/v1/gate?object="+url.QueryEscape(allowed)+"&action=write&at_least="+url.QueryEscape(tok.Token))
		a.json(t, &lean)
		want, err := gcos.ParseConsistencyToken(tok.Token)
		if err != nil {
			t.Fatalf("GET /v1/token: %v", err)
		}
		if got, err := gcos.ParseConsistencyToken(lean.Token); a.status != 200 || lean.Decision != gcos.GateAllow || err != nil || !got.Covers(want) {
			t.Fatalf("gate at_least %s: %d %s", tok.Token, a.status, a.body)
		}

		// Blocks are answers (200): an object with no birth, and the allowed object once its groups are dirty.
		a = e.get(t, "/v1/gate?object=no_such_collection:nothing")
		a.json(t, &lean)
		if a.status != 200 || lean.Decision != gcos.GateBlock || a.header.Get("X-Gcos-Decision") != gcos.GateBlock || lean.Reason == "" {
			t.Errorf("unknown object: %d %s", a.status, a.body)
		}
		var allowedRes gate.GateResult
		e.get(t, "/v1/gate?explain=1&object="+url.QueryEscape(allowed)).json(t, &allowedRes)
		var keys []string
		for _, c := range allowedRes.Consulted {
			keys = append(keys, c.Key)
		}
		if _, err := e.store.MarkDirty(e.ctx, keys, gcos.DirtyInput); err != nil {
			t.Fatal(err)
		}
		a = e.get(t, "/v1/gate?object="+url.QueryEscape(allowed)+"&action=write&explain=true")
		a.json(t, &res)
		if a.status != 200 || res.Decision != gcos.GateBlock || res.EffectiveVerdict != gcos.VerdictStale {
			t.Errorf("dirty high-risk object: %d %s", a.status, a.body)
		}

		// Bad input is 400, and the body still says block.
		for _, q := range []string{"object=nocolon", "object=", "", "object=a:b&action=delete", "object=a:b&object=c:d",
			"object=" + url.QueryEscape("a:b\x01"), "object=a:b&action=write&action=read", "object=a:b&at_least=soon",
			"object=a:b&at_least=" + url.QueryEscape("9:3:"), "object=a:b&explain=2", "object=a:b&consistency=eventual"} {
			a := e.get(t, "/v1/gate?"+q)
			var res httpapi.GateRefusal
			a.json(t, &res)
			if a.status != 400 || res.Decision != gcos.GateBlock || res.Reason == "" || res.Error.Code != gcos.EINVALID ||
				!strings.Contains(string(a.body), `"error"`) || strings.Contains(string(a.body), "0001-01-01") {
				t.Errorf("gate?%s: %d %s", q, a.status, a.body)
			}
		}
	})

	t.Run("GroupsPagination", func(t *testing.T) {
		t.Parallel()
		var want int
		if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM governance_group`).Scan(&want); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		after, pages := "", 0
		for {
			var page postgres.GroupPage
			a := e.get(t, "/v1/groups?limit=250&after="+after)
			if a.status != 200 {
				t.Fatalf("page %d: %d %s", pages, a.status, a.body)
			}
			a.json(t, &page)
			pages++
			for _, g := range page.Groups {
				seen[g.GroupKey]++
			}
			if page.Next == "" {
				break
			}
			after = page.Next
			if pages > want {
				t.Fatal("pagination does not end")
			}
		}
		if len(seen) != want {
			t.Errorf("paged %d distinct groups, registry has %d", len(seen), want)
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("group %s listed %d times", k, n)
			}
		}
		// Filters and their validation.
		var page postgres.GroupPage
		e.get(t, "/v1/groups?verdict=relevant&dirty=false&limit=500").json(t, &page)
		for _, g := range page.Groups {
			if g.EffectiveVerdict != "relevant" || g.Dirty {
				t.Fatalf("filtered page holds %s dirty=%v", g.EffectiveVerdict, g.Dirty)
			}
		}
		for _, q := range []string{"verdict=great", "after=xyz", "limit=-1", "limit=abc", "dirty=maybe", "colour=red", "scope=a&scope=b"} {
			if a := e.get(t, "/v1/groups?"+q); a.status != 400 || a.errorCode(t) != gcos.EINVALID {
				t.Errorf("groups?%s: %d %s", q, a.status, a.body)
			}
		}
		if a := e.get(t, "/v1/groups/0123456789abcdef0123456789abcdef"); a.status != 404 || a.errorCode(t) != gcos.ENOTFOUND {
			t.Errorf("unknown group: %d %s", a.status, a.body)
		}
		if a := e.get(t, "/v1/groups/NOT-A-KEY"); a.status != 400 {
			t.Errorf("bad group key: %d %s", a.status, a.body)
		}
	})

	t.Run("ReadEndpoints", func(t *testing.T) {
		t.Parallel()
		var inv httpapi.InvariantView
		e.get(t, "/v1/invariant").json(t, &inv)
		if len(inv.Ledgers) == 0 || inv.SnapshotID == nil {
			t.Fatalf("invariant: %+v", inv)
		}
		for _, l := range inv.Ledgers {
			if l.Closes != (l.Total == l.Sum) || l.Difference != l.Total-l.Sum {
				t.Errorf("ledger %+v is inconsistent", l)
			}
		}
		if a := e.get(t, "/v1/invariant?scope="+inv.Ledgers[0].Scope); a.status != 200 {
			t.Errorf("one scope: %d", a.status)
		}
		if a := e.get(t, "/v1/invariant?scope=no-such-scope"); a.status != 400 || !strings.Contains(string(a.body), "not a responsibility scope") {
			t.Errorf("unknown scope: %d %s; want 400 naming the known scopes", a.status, a.body)
		}
		var sum postgres.Summary
		e.get(t, "/v1/summary").json(t, &sum)
		if sum.Groups == 0 || sum.Ruleset == nil || sum.Ruleset.Version != e.ruleset || sum.LastSnapshot == nil {
			t.Errorf("summary: %+v", sum)
		}
		var ex gate.Explanation
		e.get(t, "/v1/explain?group="+groupKey).json(t, &ex)
		if len(ex.Statements) == 0 {
			t.Errorf("explain group: %+v", ex)
		}
		for _, q := range []string{"", "object=a:b&group=" + groupKey, "group=bad", "object=nocolon"} {
			if a := e.get(t, "/v1/explain?"+q); a.status != 400 {
				t.Errorf("explain?%s: %d %s", q, a.status, a.body)
			}
		}
		if a := e.get(t, "/v1/explain?object=no_such:thing"); a.status != 404 {
			t.Errorf("explain unknown object: %d %s", a.status, a.body)
		}
		var rs struct{ Rulesets []postgres.RulesetRow }
		e.get(t, "/v1/rulesets").json(t, &rs)
		if len(rs.Rulesets) == 0 || rs.Rulesets[0].Version != e.ruleset {
			t.Errorf("rulesets: %+v", rs)
		}
		var snaps struct{ Snapshots []postgres.SnapshotInfo }
		e.get(t, "/v1/snapshots?limit=5").json(t, &snaps)
		if len(snaps.Snapshots) == 0 {
			t.Error("no snapshots listed")
		}
		if a := e.get(t, "/v1/findings?open=perhaps"); a.status != 400 {
			t.Errorf("findings bad open: %d", a.status)
		}
		if a := e.get(t, "/v1/findings?type="+url.QueryEscape("x'; drop")); a.status != 400 {
			t.Errorf("findings bad type: %d", a.status)
		}
		var ws postgres.WorkersReport
		e.get(t, "/v1/workers").json(t, &ws)
		if len(ws.Cursors) == 0 {
			t.Errorf("workers: %+v", ws)
		}
	})

	t.Run("Bodies", func(t *testing.T) {
		t.Parallel()
		reset := "/v1/cursors/birth_registry/reset"
		for _, tc := range []struct {
			name, body, ctype string
			want              int
		}{
			{"unknown field", `{"to":"start","force":true}`, "application/json", 400},
			{"trailing data", `{"to":"start"}{"to":"start"}`, "application/json", 400},
			{"empty", ``, "application/json", 400},
			{"not json", `to=start`, "application/x-www-form-urlencoded", 415},
			{"too large", `{"to":"` + strings.Repeat("x", int(gcos.DefaultConfig().HTTP.MaxBodyBytes)) + `"}`, "application/json", 413},
			{"bad watermark", `{"to":"yesterday"}`, "application/json", 400},
			{"missing to", `{}`, "application/json", 400},
		} {
			req, _ := http.NewRequest("POST", e.srv.URL+reset, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+operatorToken)
			req.Header.Set("Content-Type", tc.ctype)
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s: %d, want %d: %.200s", tc.name, resp.StatusCode, tc.want, b)
			}
		}
		if a := e.call(t, "POST", "/v1/cursors/no_such_source/reset", operatorToken, `{"to":"start"}`); a.status != 404 {
			t.Errorf("unknown source: %d %s", a.status, a.body)
		}
		if a := e.call(t, "POST", "/v1/cursors/Bad-Name/reset", operatorToken, `{"to":"start"}`); a.status != 400 {
			t.Errorf("bad source: %d %s", a.status, a.body)
		}
		var cur intake.Cursor
		a := e.call(t, "POST", reset, operatorToken, `{"to":"start"}`)
		a.json(t, &cur)
		if a.status != 200 || cur.Source != "birth_registry" || cur.Position != "start" {
			t.Errorf("reset: %d %s", a.status, a.body)
		}
	})

	t.Run("Metrics", func(t *testing.T) {
		t.Parallel()
		e.get(t, "/v1/gate?object=no_such_collection:x")
		a := e.get(t, "/metrics")
		if a.status != 200 {
			t.Fatalf("metrics: %d", a.status)
		}
		text := string(a.body)
		for _, want := range []string{
			`gcos_gate_decisions_total{channel="http",decision="block",source="database"}`,
			`gcos_gate_duration_seconds_bucket`,
			`gcos_http_requests_total{code="200",route="GET /v1/gate"}`,
			`gcos_state_up 1`,
			`gcos_dirty_groups `,
			`gcos_groups{scope="policy",verdict="relevant"}`,
			`gcos_group_objects{scope="policy",verdict="stale"}`,
			`gcos_scan_lag_seconds `,
			`gcos_build_info{version="test"} 1`,
			`gcos_route_fallbacks_total 0`,
			`gcos_tx_retries_total 0`,
			`gcos_intake_rows_total{outcome="behind",source="birth_registry"} 0`,
			`gcos_intake_rows_total{outcome="unmapped",source="registry_changelog"}`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})

	t.Run("OpenAPI", func(t *testing.T) {
		t.Parallel()
		a := e.call(t, "GET", "/openapi.json", "", "")
		var doc struct {
			OpenAPI string                                `json:"openapi"`
			Paths   map[string]map[string]json.RawMessage `json:"paths"`
		}
		a.json(t, &doc)
		if doc.OpenAPI != "3.1.0" {
			t.Errorf("openapi %q", doc.OpenAPI)
		}
		ops := 0
		for _, ms := range doc.Paths {
			ops += len(ms)
		}
		routes := httpapi.Routes()
		if ops != len(routes) {
			t.Errorf("the document has %d operations, the mux %d routes", ops, len(routes))
		}
		for _, r := range routes {
			raw, ok := doc.Paths[r.Path][strings.ToLower(r.Method)]
			if !ok {
				t.Errorf("route %s %s is not in /openapi.json", r.Method, r.Path)
				continue
			}
			var op struct {
				Access     string           `json:"x-gcos-access"`
				Security   []map[string]any `json:"security"`
				Responses  map[string]any   `json:"responses"`
				Parameters []struct {
					Name string `json:"name"`
					In   string `json:"in"`
				} `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			var query []string
			for _, p := range op.Parameters {
				if p.In == "query" {
					query = append(query, p.Name)
				}
			}
			if !slices.Equal(query, r.Params) {
				t.Errorf("%s %s: document's query parameters %q, route's %q", r.Method, r.Path, query, r.Params)
			}
			if op.Access != string(r.Access) {
				t.Errorf("%s %s: document says access %q, route %q", r.Method, r.Path, op.Access, r.Access)
			}
			if (len(op.Security) == 0) != (r.Access == httpapi.AccessPublic) {
				t.Errorf("%s %s: security %v for access %s", r.Method, r.Path, op.Security, r.Access)
			}
			if len(op.Responses) == 0 {
				t.Errorf("%s %s: no responses", r.Method, r.Path)
			}
		}
	})

	t.Run("Dashboard", func(t *testing.T) {
		t.Parallel()
		a := e.call(t, "GET", "/", "", "")
		if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Fatalf("content type %q", ct)
		}
		page := string(a.body)
		for _, id := range []string{`id="ledger"`, `id="verdicts"`, `id="dirty"`, `id="workers"`, `id="ruleset"`, `id="findings"`,
			`id="dirty-spark"`, `id="lag-spark"`, `id="token"`, `src="/static/app.js"`, `href="/static/app.css"`, `data-auth="token"`} {
			if !strings.Contains(page, id) {
				t.Errorf("dashboard lacks %s", id)
			}
		}
		if regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`).MatchString(page) {
			t.Error("dashboard loads something from another origin")
		}
		if regexp.MustCompile(`(?i)<script(\s[^>]*)?>\s*[^<\s]`).MatchString(page) || strings.Contains(page, "style=") || strings.Contains(page, "onclick") {
			t.Error("dashboard has inline script or style (the CSP forbids it)")
		}
		js := e.call(t, "GET", "/static/app.js", "", "")
		if ct := js.header.Get("Content-Type"); !strings.Contains(ct, "javascript") {
			t.Errorf("app.js content type %q", ct)
		}
		for _, want := range []string{"/v1/summary", "/v1/invariant", "/v1/workers", "/v1/findings", "sessionStorage", "Bearer "} {
			if !strings.Contains(string(js.body), want) {
				t.Errorf("app.js lacks %s", want)
			}
		}
		if strings.Contains(string(js.body), "innerHTML") || strings.Contains(string(js.body), "eval(") {
			t.Error("app.js uses innerHTML or eval")
		}
		if a := e.call(t, "GET", "/static/nope.js", "", ""); a.status != 404 {
			t.Errorf("missing asset: %d", a.status)
		}
		if a := e.call(t, "GET", "/static/..%2fopenapi.json", "", ""); a.status == 200 {
			t.Errorf("path traversal answered 200: %s", a.body)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					req, _ := http.NewRequest("GET", e.srv.URL+"/v1/gate?object="+url.QueryEscape(object), nil)
					req.Header.Set("Authorization", "Bearer "+readerToken)
					resp, err := e.srv.Client().Do(req)
					if err != nil {
						errs <- err
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						errs <- fmt.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("InsecureNoAuth", func(t *testing.T) {
		t.Parallel()
		if _, err := httpapi.New(httpapi.Config{Store: e.store, HTTP: gcos.HTTPConfig{Listen: "0.0.0.0:8080", InsecureNoAuth: true},
			Registry: prometheus.NewRegistry()}); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("insecure on 0.0.0.0: %v, want EINVALID", err)
		}
		h, err := httpapi.New(httpapi.Config{Store: e.store, HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:8080", InsecureNoAuth: true},
			Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		insecure := &env{srv: srv}
		if a := insecure.call(t, "GET", "/v1/summary", "", ""); a.status != 200 {
			t.Errorf("insecure read without token: %d %s", a.status, a.body)
		}
		if a := insecure.call(t, "GET", "/", "", ""); !strings.Contains(string(a.body), `data-auth="none"`) {
			t.Error("insecure dashboard still asks for a token")
		}
		// A rebound DNS name pointing at loopback is not served.
		if a := insecure.call(t, "GET", "/v1/summary", "", "", "Host", "evil.example"); a.status != 403 {
			t.Errorf("insecure with foreign Host: %d %s", a.status, a.body)
		}
		if a := insecure.call(t, "POST", "/v1/cursors/birth_registry/reset", "", `{"to":"start"}`, "Origin", "http://evil.example"); a.status != 403 {
			t.Errorf("insecure cross-origin POST: %d %s", a.status, a.body)
		}
	})
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// TestAPIActivate activates the backfill's draft over HTTP: self-approval is refused, an approval works once.
func TestAPIActivate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20000, false)
	path := "/v1/rulesets/" + e.ruleset + "/activate"
	for _, tc := range []struct {
		name, path, body string
		want             int
	}{
		{"self-approval", path, `{"approval_ref":"APR-1","actor":"gcos"}`, 409},
		{"no approval", path, `{"approval_ref":"","actor":"approver"}`, 400},
		{"actor with a control character", path, `{"approval_ref":"APR-1","actor":"a\u0001b"}`, 400},
		{"bad version", "/v1/rulesets/latest/activate", `{"approval_ref":"APR-1","actor":"approver"}`, 400},
		{"unknown version", "/v1/rulesets/gov-rs-000000000000/activate", `{"approval_ref":"APR-1","actor":"approver"}`, 404},
	} {
		if a := e.call(t, "POST", tc.path, operatorToken, tc.body); a.status != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, a.status, tc.want, a.body)
		}
	}
	var sum postgres.Summary
	e.get(t, "/v1/summary").json(t, &sum)
	if sum.Ruleset == nil || sum.Ruleset.Status != gcos.RulesetDraft {
		t.Fatalf("before activation: %+v", sum.Ruleset)
	}

	a := e.call(t, "POST", path, operatorToken, `{"approval_ref":"APR-1","actor":"approver"}`)
	var res postgres.ActivationResult
	a.json(t, &res)
	if a.status != 200 || res.Version != e.ruleset || res.AuditID == 0 {
		t.Fatalf("activate: %d %s", a.status, a.body)
	}
	e.get(t, "/v1/summary").json(t, &sum)
	if sum.Ruleset == nil || sum.Ruleset.Status != gcos.RulesetActive || sum.Ruleset.ApprovalRef == nil || *sum.Ruleset.ApprovalRef != "APR-1" {
		t.Errorf("after activation: %+v", sum.Ruleset)
	}
	if a := e.call(t, "POST", path, operatorToken, `{"approval_ref":"APR-1","actor":"approver"}`); a.status != 409 {
		t.Errorf("second activation: %d %s", a.status, a.body)
	}
}

// TestAPIReadyz: /readyz is ready only while the database answers, the gate can give answers other than block
// (an active ruleset with seeded candidate rows) and every added check (the daemon's intake) holds; /healthz does
// not follow them; the gate blocks while the store is unreachable.
func TestAPIReadyz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, false)
	readiness := func(a answer) httpapi.Readiness {
		var r httpapi.Readiness
		a.json(t, &r)
		return r
	}
	if a := e.call(t, "GET", "/readyz", "", ""); a.status != 503 || !strings.Contains(readiness(a).Checks["gate"], "no ruleset is active") {
		t.Fatalf("readyz before any ruleset: %d %s", a.status, a.body)
	}
	if _, err := world.Generate(e.ctx, e.pool, world.Options{Births: 500, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	bf, err := intake.New(e.store).Backfill(e.ctx, intake.BackfillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := e.call(t, "GET", "/readyz", "", ""); a.status != 503 {
		t.Fatalf("readyz with only a draft ruleset: %d %s", a.status, a.body)
	}
	if _, err := e.store.ActivateRuleset(e.ctx, bf.RulesetVersion, "APR-1", "approver"); err != nil {
		t.Fatal(err)
	}
	if a := e.call(t, "GET", "/readyz", "", ""); a.status != 200 || readiness(a).Checks["gate"] != "ok" || readiness(a).Checks["database"] != "ok" {
		t.Fatalf("readyz with an active, seeded ruleset: %d %s", a.status, a.body)
	}

	// An added check that fails (the daemon's intake) makes the server not ready, named.
	var stalled atomic.Bool
	h, err := httpapi.New(httpapi.Config{Store: e.store, HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:0", InsecureNoAuth: true},
		Registry: prometheus.NewRegistry(), Ready: []httpapi.ReadyCheck{{Name: "intake", Check: func(context.Context) error {
			if stalled.Load() {
				return gcos.Errorf(gcos.EUNAVAILABLE, "intake has not completed a poll for 2m0s")
			}
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	probe := func() (int, httpapi.Readiness) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r httpapi.Readiness
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, r
	}
	if code, r := probe(); code != 200 || r.Checks["intake"] != "ok" {
		t.Fatalf("readyz with a live intake: %d %+v", code, r)
	}
	stalled.Store(true)
	if code, r := probe(); code != 503 || !strings.Contains(r.Checks["intake"], "has not completed a poll") {
		t.Fatalf("readyz with a stalled intake: %d %+v", code, r)
	}

	e.pool.Close()
	a := e.call(t, "GET", "/readyz", "", "")
	if a.status != 503 {
		t.Errorf("readyz with a closed pool: %d %s", a.status, a.body)
	}
	if a := e.call(t, "GET", "/healthz", "", ""); a.status != 200 {
		t.Errorf("healthz: %d", a.status)
	}
	var res gate.GateResult
	g := e.get(t, "/v1/gate?object=a:b")
	g.json(t, &res)
	if g.status != 200 || res.Decision != gcos.GateBlock {
		t.Errorf("gate with a closed pool: %d %s", g.status, g.body)
	}
	if a := e.get(t, "/v1/summary"); a.status < 500 || strings.Contains(string(a.body), "closed pool") {
		t.Errorf("summary with a closed pool: %d %s (want 5xx and no internals)", a.status, a.body)
	}
}

// previewBody proposes that the collection of object becomes exempt.
func previewBody(object string) string {
	return `{"changes":[{"kind":"coverage_status","collection":"` + strings.Split(object, ":")[0] + `","coverage_status":"BIRTH_EXEMPT_SYSTEM"}]}`
}
