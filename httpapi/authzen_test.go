package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"gcos"
	"gcos/httpapi"
)

// AuthZEN request bodies for an object C:E.
func azResource(object string) string {
	coll, code, _ := strings.Cut(object, ":")
	b, _ := json.Marshal(gcos.AuthZENEntity{Type: coll, ID: code})
	return string(b)
}

func azEvalAction(object, action, options string) string {
	s := `{"subject":{"type":"pipeline","id":"ci-7"},"action":{"name":"` + action + `"},"resource":` + azResource(object)
	if options != "" {
		s += `,"options":` + options
	}
	return s + `}`
}

func azEval(object string) string          { return azEvalAction(object, "write", "") }
func azEvalExplained(object string) string { return azEvalAction(object, "write", `{"explain":true}`) }

func azBatch(object, semantic string) string {
	return `{"subject":{"type":"pipeline","id":"ci-7"},"action":{"name":"write"},"options":{"evaluations_semantic":"` + semantic + `"},
		"evaluations":[{"resource":` + azResource(object) + `},{"resource":{"type":"no_such_collection","id":"x"}},{"action":{"name":"read"},"resource":` + azResource(object) + `}]}`
}

func azSearch(object string, limit int, token string) string {
	coll, _, _ := strings.Cut(object, ":")
	page := fmt.Sprintf(`{"limit":%d}`, limit)
	if token != "" {
		page = fmt.Sprintf(`{"limit":%d,"token":%q}`, limit, token)
	}
	return `{"subject":{"type":"pipeline","id":"ci-7"},"action":{"name":"write"},"resource":{"type":"` + coll + `"},"page":` + page + `}`
}

// TestAuthZEN checks the standard's endpoints against the gate's own answers on a served world at rest.
func TestAuthZEN(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5000, true)
	objects := e.strs(t, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE id % 53 = 0 ORDER BY id LIMIT 60`)
	objects = append(objects, "no_such_collection:nothing")
	gateSays := func(t *testing.T, object, action string) gcos.GateAnswer {
		t.Helper()
		var a gcos.GateAnswer
		e.get(t, "/v1/gate?consistency=full&object="+url.QueryEscape(object)+"&action="+action).json(t, &a)
		return a
	}
	post := func(t *testing.T, path, body string, headers ...string) answer {
		t.Helper()
		return e.call(t, "POST", path, readerToken, body, headers...)
	}

	t.Run("EvaluationIsTheGatesDecision", func(t *testing.T) {
		t.Parallel()
		var allowed, denied int
		for _, o := range objects {
			for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
				want := gateSays(t, o, action).Allowed()
				a := post(t, "/access/v1/evaluation", azEvalAction(o, action, ""), "X-Request-ID", "req-"+o)
				if a.status != 200 || a.header.Get("X-Request-ID") != "req-"+o {
					t.Fatalf("%s %s: %d, X-Request-ID %q: %s", o, action, a.status, a.header.Get("X-Request-ID"), a.body)
				}
				// The default answer is exactly {"decision": …}.
				if got := strings.TrimSpace(string(a.body)); got != fmt.Sprintf(`{"decision":%t}`, want) {
					t.Fatalf("%s %s: %s, the gate says allowed=%t", o, action, got, want)
				}
				if want {
					allowed++
				} else {
					denied++
				}
			}
		}
		if allowed == 0 || denied == 0 {
			t.Fatalf("%d allowed, %d denied: the sample shows nothing", allowed, denied)
		}
	})

	t.Run("Explained", func(t *testing.T) {
		t.Parallel()
		for _, o := range []string{objects[0], "no_such_collection:nothing"} {
			var d gcos.AuthZENDecision
			a := post(t, "/access/v1/evaluation", azEvalAction(o, "write", `{"explain":true,"consistency":"full"}`))
			a.json(t, &d)
			g := gateSays(t, o, gcos.ActionWrite)
			c := d.Context
			if a.status != 200 || c == nil || c.Reason != g.Reason || c.Object != o || c.Token == "" || c.AsOf.IsZero() ||
				c.Subject == nil || c.Subject.ID != "ci-7" || d.Decision != g.Allowed() {
				t.Fatalf("%s: %d %s; the gate: %+v", o, a.status, a.body, g)
			}
		}
		// An action the gate does not answer is a deny, with its reason when asked.
		var d gcos.AuthZENDecision
		post(t, "/access/v1/evaluation", azEvalAction(objects[0], "delete", `{"explain":true}`)).json(t, &d)
		if d.Decision || d.Context == nil || !strings.Contains(d.Context.Reason, `"delete" is not one the gate answers`) {
			t.Fatalf("delete: %+v", d)
		}
	})

	t.Run("Evaluations", func(t *testing.T) {
		t.Parallel()
		var items []string
		var want []bool
		for i, o := range objects {
			action := []string{gcos.ActionWrite, gcos.ActionRead}[i%2]
			items = append(items, `{"action":{"name":"`+action+`"},"resource":`+azResource(o)+`}`)
			want = append(want, gateSays(t, o, action).Allowed())
		}
		// An item that cannot be evaluated (no resource, and none by default) is a deny with context.error.
		items = append(items, `{"action":{"name":"write"}}`)
		want = append(want, false)
		firstDeny, firstPermit := slices.Index(want, false), slices.Index(want, true)
		for _, semantic := range []string{"", gcos.AuthZENExecuteAll, gcos.AuthZENDenyOnFirstDeny, gcos.AuthZENPermitOnFirstPermit} {
			// The first item must stop neither short-circuit semantic, or it proves nothing about order.
			body := `{"subject":{"type":"pipeline","id":"ci-7"},"unknown_field":{"ignored":true},"options":{"evaluations_semantic":"` + semantic + `"},"evaluations":[` + strings.Join(items, ",") + `]}`
			var got gcos.AuthZENEvaluationsAnswer
			a := post(t, "/access/v1/evaluations", body)
			a.json(t, &got)
			n := len(want)
			switch semantic {
			case gcos.AuthZENDenyOnFirstDeny:
				n = firstDeny + 1
			case gcos.AuthZENPermitOnFirstPermit:
				n = firstPermit + 1
			}
			if a.status != 200 || len(got.Evaluations) != n {
				t.Fatalf("%q: %d, %d answers, want %d: %.300s", semantic, a.status, len(got.Evaluations), n, a.body)
			}
			for i, d := range got.Evaluations {
				if d.Decision != want[i] {
					t.Fatalf("%q: item %d decides %t, the gate %t", semantic, i, d.Decision, want[i])
				}
				last := i == n-1
				switch {
				case i == len(want)-1:
					if d.Context == nil || d.Context.Error == nil || d.Context.Error.Status != 400 || !strings.Contains(d.Context.Error.Message, "resource") {
						t.Fatalf("%q: the item that cannot be evaluated: %+v", semantic, d)
					}
				case semantic == gcos.AuthZENDenyOnFirstDeny && last:
					if d.Context == nil || d.Context.Reason != gcos.AuthZENDenyOnFirstDeny || d.Context.Code != "200" {
						t.Fatalf("the stopping deny: %+v", d)
					}
				case d.Context != nil:
					t.Fatalf("%q: item %d carries a context unasked: %+v", semantic, i, d.Context)
				}
			}
		}
		// No evaluations: the top-level fields are one evaluation.
		a := post(t, "/access/v1/evaluations", azEval(objects[0]))
		if a.status != 200 || strings.TrimSpace(string(a.body)) != fmt.Sprintf(`{"decision":%t}`, gateSays(t, objects[0], gcos.ActionWrite).Allowed()) {
			t.Fatalf("no evaluations: %d %s", a.status, a.body)
		}
	})

	t.Run("BadInputIsRefusedAndDenied", func(t *testing.T) {
		t.Parallel()
		many := strings.Repeat(`{"resource":`+azResource(objects[0])+`},`, e.store.Config().Gate.BatchMax)
		for _, tc := range []struct{ name, path, body, want string }{
			{"not an object", "/access/v1/evaluation", `[1,2]`, "body"},
			{"a field of the wrong type", "/access/v1/evaluation", `{"subject":"alice","action":{"name":"write"},"resource":` + azResource(objects[0]) + `}`, "body"},
			{"no resource", "/access/v1/evaluation", `{"subject":{"type":"p","id":"ci"},"action":{"name":"write"}}`, "resource"},
			{"no subject", "/access/v1/evaluation", `{"action":{"name":"write"},"resource":` + azResource(objects[0]) + `}`, "subject"},
			{"control characters", "/access/v1/evaluation", `{"subject":{"type":"p","id":"ci"},"action":{"name":"write"},"resource":{"type":"a","id":"\u001b[2J"}}`, "control"},
			{"a malformed token", "/access/v1/evaluation", azEvalAction(objects[0], "write", `{"at_least":"tomorrow"}`), "token"},
			{"a token the database never issued", "/access/v1/evaluation", azEvalAction(objects[0], "write", `{"at_least":"900000000:900000000:"}`), "was not issued"},
			{"an unknown consistency", "/access/v1/evaluation", azEvalAction(objects[0], "write", `{"consistency":"eventual"}`), "consistency"},
			{"an unknown semantic", "/access/v1/evaluations", azBatch(objects[0], "first_wins"), "evaluations_semantic"},
			{"empty evaluations", "/access/v1/evaluations", `{"evaluations":[]}`, "evaluations is empty"},
			{"over the limit", "/access/v1/evaluations", `{"subject":{"type":"p","id":"ci"},"action":{"name":"write"},"evaluations":[` + many + `{}]}`, "more than the limit"},
			{"trailing data", "/access/v1/evaluations", azEval(objects[0]) + `{}`, "trailing"},
		} {
			a := post(t, tc.path, tc.body)
			var got struct {
				Decision *bool               `json:"decision"`
				Error    httpapi.ErrorDetail `json:"error"`
			}
			a.json(t, &got)
			if a.status != 400 || got.Decision == nil || *got.Decision || !strings.Contains(got.Error.Message, tc.want) || strings.ContainsRune(string(a.body), 0x1b) {
				t.Errorf("%s: %d %s, want 400, a deny and %q", tc.name, a.status, a.body, tc.want)
			}
		}
	})

	t.Run("Discovery", func(t *testing.T) {
		t.Parallel()
		a := e.call(t, "GET", "/.well-known/authzen-configuration", "", "")
		var m gcos.AuthZENMetadata
		a.json(t, &m)
		if a.status != 200 || m.PolicyDecisionPoint != e.srv.URL || m.AccessEvaluationEndpoint != e.srv.URL+"/access/v1/evaluation" ||
			m.AccessEvaluationsEndpoint != e.srv.URL+"/access/v1/evaluations" || m.SearchResourceEndpoint != e.srv.URL+"/access/v1/search/resource" {
			t.Fatalf("%d %s (served at %s)", a.status, a.body, e.srv.URL)
		}
	})
}

// search runs a whole resource search (every page) and returns the codes found and the pages taken.
func (e *env) search(t *testing.T, object string, limit int) ([]string, int) {
	t.Helper()
	var codes []string
	token := ""
	for pages := 1; ; pages++ {
		var got gcos.AuthZENSearchAnswer
		a := e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, limit, token))
		a.json(t, &got)
		if a.status != 200 || got.Page.Count != len(got.Results) || len(got.Results) > limit {
			t.Fatalf("page %d: %d %.300s", pages, a.status, a.body)
		}
		for _, r := range got.Results {
			codes = append(codes, r.ID)
		}
		if token = got.Page.NextToken; token == "" {
			return codes, pages
		}
	}
}

func TestAuthZENSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3000, true)
	var object string
	if err := e.pool.QueryRow(e.ctx, `SELECT collection_name || ':' || min(entity_code) FROM birth_registry
		GROUP BY collection_name ORDER BY count(*) DESC LIMIT 1`).Scan(&object); err != nil {
		t.Fatal(err)
	}
	coll, _, _ := strings.Cut(object, ":")
	all := e.strs(t, `SELECT entity_code FROM birth_registry WHERE collection_name = '`+coll+`' ORDER BY entity_code`)

	t.Run("EveryPageIsTheGatesAllows", func(t *testing.T) {
		var want []string
		for _, code := range all {
			var a gcos.GateAnswer
			e.get(t, "/v1/gate?consistency=full&object="+url.QueryEscape(coll+":"+code)).json(t, &a)
			if a.Allowed() {
				want = append(want, code)
			}
		}
		if len(want) == 0 || len(want) == len(all) {
			t.Fatalf("%d of %d objects of %s allowed: the world shows nothing", len(want), len(all), coll)
		}
		got, pages := e.search(t, object, 7)
		if !slices.Equal(got, want) || pages < 2 {
			t.Fatalf("search found %d in %d pages, the gate allows %d:\n%v\n%v", len(got), pages, len(want), got, want)
		}
		if n := e.srvGate.Held(); n != 0 {
			t.Fatalf("%d snapshots held after the last page", n)
		}
	})

	t.Run("PagesAreOneInstant", func(t *testing.T) {
		before, _ := e.search(t, object, 5)
		var first gcos.AuthZENSearchAnswer
		e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 5, "")).json(t, &first)
		if first.Page.NextToken == "" {
			t.Fatal("one page: nothing to prove")
		}
		// The state moves between the pages: every group of the collection turns stale.
		if _, err := e.pool.Exec(e.ctx, `UPDATE governance_candidate_state SET scan_time = now() - interval '2 hours',
			stale_after = now() - interval '1 hour', recompute_status = 'failed'
			WHERE group_key IN (SELECT group_key FROM governance_group WHERE source_registry = $1)`, coll); err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, r := range first.Results {
			got = append(got, r.ID)
		}
		token := first.Page.NextToken
		for token != "" {
			var p gcos.AuthZENSearchAnswer
			a := e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 5, token))
			a.json(t, &p)
			if a.status != 200 {
				t.Fatalf("%d %s", a.status, a.body)
			}
			for _, r := range p.Results {
				got = append(got, r.ID)
			}
			token = p.Page.NextToken
		}
		if !slices.Equal(got, before) {
			t.Fatalf("a search begun before the change found %v, the state before it allows %v", got, before)
		}
		if after, _ := e.search(t, object, 5); slices.Equal(after, before) {
			t.Fatal("the change flips nothing: the test proves nothing")
		}
	})

	t.Run("BadPages", func(t *testing.T) {
		var first gcos.AuthZENSearchAnswer
		e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 3, "")).json(t, &first)
		for _, tc := range []struct{ name, body, want string }{
			{"another limit", azSearch(object, 4, first.Page.NextToken), "differs"},
			{"another collection", azSearch("other:x", 3, first.Page.NextToken), "differs"},
			{"an invented token", azSearch(object, 3, "bm90LWEtdG9rZW4"), "not a token"},
			{"a limit over batch_max", azSearch(object, 5000, ""), "page.limit"},
			{"no resource type", `{"subject":{"type":"p","id":"ci"},"action":{"name":"write"},"resource":{}}`, "resource"},
		} {
			a := e.call(t, "POST", "/access/v1/search/resource", readerToken, tc.body)
			if a.status != 400 || !strings.Contains(string(a.body), tc.want) {
				t.Errorf("%s: %d %s, want 400 %q", tc.name, a.status, a.body, tc.want)
			}
		}
		e.srvGate.ReleaseSearches()
		// At most gate.search_max snapshots are held at once: past it a first page is turned away (503), and a
		// search already begun goes on.
		max := e.store.Config().Gate.SearchMax
		var begun gcos.AuthZENSearchAnswer
		for i := 0; i < max; i++ {
			e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 1, "")).json(t, &begun)
		}
		if a := e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 1, "")); a.status != 503 || e.srvGate.Held() != max {
			t.Fatalf("search %d: %d %s, %d held", max+1, a.status, a.body, e.srvGate.Held())
		}
		if a := e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 1, begun.Page.NextToken)); a.status != 200 {
			t.Fatalf("a search begun: %d %s", a.status, a.body)
		}
		e.srvGate.ReleaseSearches()
		if a := e.call(t, "POST", "/access/v1/search/resource", readerToken, azSearch(object, 1, begun.Page.NextToken)); a.status != 400 || !strings.Contains(string(a.body), "no longer held") {
			t.Fatalf("a released search: %d %s", a.status, a.body)
		}
		// An action the gate does not answer is allowed on nothing.
		a := e.call(t, "POST", "/access/v1/search/resource", readerToken, strings.Replace(azSearch(object, 3, ""), `"write"`, `"delete"`, 1))
		if a.status != 200 || !strings.Contains(string(a.body), `"results":[]`) {
			t.Fatalf("delete: %d %s", a.status, a.body)
		}
	})
}
