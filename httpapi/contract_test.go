package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"gcos/events"
	"gcos/gate"
	"gcos/httpapi"
	"gcos/intake"
	"gcos/postgres"
)

// contractCase is one live request whose answer must match /openapi.json.
type contractCase struct {
	method, path, token, body string
	contentType               string // "" sends application/json when there is a body
	status                    int
	// docRefuses: the request breaks a constraint the document states (a limit's maximum, an enum), so validating
	// the request against the document must fail too: the contract states what the server refuses.
	docRefuses bool
	// stream: the answer is an event stream; its first event is read and the stream closed.
	stream bool
}

// TestOpenAPIContract sends success and error requests to every endpoint of a live server over a real store and
// validates each answer (status, headers, body) against the served /openapi.json with kin-openapi's validator.
// A status the document does not declare fails, and so does a field the server sends that a closed schema does
// not list. Every route must be exercised with at least one 2xx and one 4xx answer.
func TestOpenAPIContract(t *testing.T) {
	t.Parallel()
	// The document types the dashboard's assets as strings; read them as such.
	for _, ct := range []string{"text/html", "text/javascript", "text/css", "image/svg+xml"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.FileBodyDecoder)
	}
	e := newEnv(t, 3000, false)
	ctx := context.Background()

	served := e.call(t, "GET", "/openapi.json", "", "")
	if served.status != 200 {
		t.Fatalf("GET /openapi.json: %d", served.status)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(served.body)
	if err != nil {
		t.Fatalf("load /openapi.json: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("/openapi.json is not a valid OpenAPI document: %v", err)
	}
	if doc.Info.License == nil || doc.Info.License.Name == "" || doc.Info.Contact == nil {
		t.Errorf("info must carry a licence and a contact: %+v", doc.Info)
	}
	if len(doc.Servers) != 1 || strings.Contains(doc.Servers[0].URL, "://") {
		t.Errorf("servers must be one relative URL (the document's own origin), got %+v", doc.Servers)
	}
	// Relative to where it was served: route against this server.
	doc.Servers = openapi3.Servers{{URL: e.srv.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}

	var object, group, scope string
	if err := e.pool.QueryRow(ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`).Scan(&object); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `SELECT group_key, scope FROM governance_group WHERE scope IS NOT NULL ORDER BY group_key LIMIT 1`).Scan(&group, &scope); err != nil {
		t.Fatal(err)
	}
	activate := "/v1/rulesets/" + e.ruleset + "/activate"
	finding := strconv.FormatInt(openFinding(t, e), 10)
	q := url.QueryEscape
	checks := `{"checks":[{"object":"` + object + `","action":"write"},{"object":"` + object + `","action":"read"}]}`
	r, o := readerToken, operatorToken
	var minted struct {
		URL string `json:"url"`
	}
	if a := e.call(t, "POST", "/v1/login-links", r, `{}`); a.status != 201 || json.Unmarshal(a.body, &minted) != nil || !strings.Contains(minted.URL, "/login?code=") {
		t.Fatalf("POST /v1/login-links: %d %s", a.status, a.body)
	}
	loginCode := minted.URL[strings.Index(minted.URL, "/login?"):]

	cases := []contractCase{
		// the gate
		{method: "GET", path: "/v1/gate?object=" + q(object) + "&action=write", token: r, status: 200},
		{method: "GET", path: "/v1/gate?object=" + q(object) + "&explain=1&consistency=full", token: r, status: 200},
		{method: "GET", path: "/v1/gate?object=nocolon", token: r, status: 400},
		{method: "GET", path: "/v1/gate?object=" + q(object) + "&action=delete", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/gate?object=" + q(object) + "&consistency=eventual", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/gate?object=" + q(object), status: 401, docRefuses: true},
		{method: "POST", path: "/v1/gate", token: r, body: checks, status: 200},
		{method: "POST", path: "/v1/gate?explain=1", token: r, body: checks, status: 200},
		{method: "POST", path: "/v1/gate", token: r, body: `{"checks":[]}`, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/gate", token: r, body: checks, contentType: "text/plain", status: 415, docRefuses: true},
		{method: "POST", path: "/v1/gate", token: r, body: `{"checks":[` + strings.Repeat(`{"object":"a:b","action":"write"},`, 40000) + `]}`, status: 413, docRefuses: true},
		// the gate as OpenID AuthZEN 1.0
		{method: "POST", path: "/access/v1/evaluation", token: r, body: azEval(object), status: 200},
		{method: "POST", path: "/access/v1/evaluation", token: r, body: azEvalExplained(object), status: 200},
		{method: "POST", path: "/access/v1/evaluation", token: r, body: `{"subject":{"type":"p","id":"ci"},"action":{"name":"write"}}`, status: 400, docRefuses: true},
		{method: "POST", path: "/access/v1/evaluation", token: r, body: azEval(object), contentType: "text/plain", status: 415, docRefuses: true},
		{method: "POST", path: "/access/v1/evaluation", body: azEval(object), status: 401, docRefuses: true},
		{method: "POST", path: "/access/v1/evaluations", token: r, body: azBatch(object, "deny_on_first_deny"), status: 200},
		{method: "POST", path: "/access/v1/evaluations", token: r, body: azBatch(object, "permit_on_first_permit"), status: 200},
		{method: "POST", path: "/access/v1/evaluations", token: r, body: azEval(object), status: 200},
		{method: "POST", path: "/access/v1/evaluations", token: r, body: azBatch(object, "first_wins"), status: 400, docRefuses: true},
		{method: "POST", path: "/access/v1/evaluations", token: r, body: `{"evaluations":[]}`, status: 400},
		{method: "POST", path: "/access/v1/search/resource", token: r, body: azSearch(object, 2, ""), status: 200},
		{method: "POST", path: "/access/v1/search/resource", token: r, body: azSearch(object, 5000, ""), status: 400, docRefuses: true},
		{method: "POST", path: "/access/v1/search/resource", token: r, body: azSearch(object, 2, "bm90LWEtdG9rZW4"), status: 400},
		{method: "GET", path: "/.well-known/authzen-configuration", status: 200},
		{method: "GET", path: "/.well-known/authzen-configuration?x=1", status: 400},
		{method: "GET", path: "/v1/token", token: r, status: 200},
		{method: "GET", path: "/v1/token", status: 401, docRefuses: true},
		// the change feed
		{method: "GET", path: "/v1/changes?limit=5", token: r, status: 200},
		{method: "GET", path: "/v1/changes?after=start&limit=5", token: r, status: 200},
		{method: "GET", path: "/v1/changes?since=2026-01-01T00:00:00Z", token: r, status: 200},
		{method: "GET", path: "/v1/changes?after=not-a-cursor", token: r, status: 400},
		{method: "GET", path: "/v1/changes?after=now&since=2026-01-01T00:00:00Z", token: r, status: 400},
		{method: "GET", path: "/v1/changes/watch?after=now", token: r, status: 200, stream: true},
		{method: "GET", path: "/v1/changes/watch?after=not-a-cursor", token: r, status: 400},
		// the reads
		{method: "GET", path: "/v1/explain?object=" + q(object), token: r, status: 200},
		{method: "GET", path: "/v1/explain?group=" + group, token: r, status: 200},
		{method: "GET", path: "/v1/explain", token: r, status: 400},
		{method: "GET", path: "/v1/explain?object=no_such_collection:x", token: r, status: 404},
		{method: "GET", path: "/v1/groups", token: r, status: 200},
		{method: "GET", path: "/v1/groups?scope=" + q(scope) + "&dirty=false&limit=5", token: r, status: 200},
		{method: "GET", path: "/v1/groups?limit=100000", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/groups?limit=0", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/groups?scope=nosuch", token: r, status: 400},
		{method: "GET", path: "/v1/groups?object_class=nosuch", token: r, status: 400},
		{method: "GET", path: "/v1/groups?verdict=great", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/groups/" + group, token: r, status: 200},
		{method: "GET", path: "/v1/groups/" + strings.Repeat("0", 32), token: r, status: 404},
		{method: "GET", path: "/v1/groups/not-a-key", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/invariant", token: r, status: 200},
		{method: "GET", path: "/v1/invariant?scope=" + q(scope), token: r, status: 200},
		{method: "GET", path: "/v1/invariant?scope=nosuch", token: r, status: 400},
		{method: "GET", path: "/v1/summary", token: r, status: 200},
		{method: "GET", path: "/v1/summary?verbose=1", token: r, status: 400},
		{method: "GET", path: "/v1/rulesets", token: r, status: 200},
		{method: "GET", path: "/v1/rulesets", token: "unknown-token", status: 401},
		{method: "GET", path: "/v1/snapshots?limit=2", token: r, status: 200},
		{method: "GET", path: "/v1/snapshots?limit=1001", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/findings?open=true", token: r, status: 200},
		{method: "GET", path: "/v1/findings?type=no_such_finding", token: r, status: 400},
		{method: "GET", path: "/v1/findings?limit=-1", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/workers", token: r, status: 200},
		{method: "GET", path: "/v1/workers", status: 401, docRefuses: true},
		{method: "GET", path: "/v1/changes?limit=5", token: r, status: 200},
		{method: "GET", path: "/v1/changes?since=yesterday", token: r, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/changes?limit=501", token: r, status: 400, docRefuses: true},
		// the operator's actions (the self-approval first: it must change nothing)
		{method: "POST", path: activate, token: r, body: `{"approval_ref":"APR-1","actor":"approver"}`, status: 403},
		{method: "POST", path: activate, token: o, body: `{"approval_ref":"APR-1","actor":"gcos"}`, status: 409},
		{method: "POST", path: "/v1/rulesets/latest/activate", token: o, body: `{"approval_ref":"APR-1","actor":"approver"}`, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/rulesets/gov-rs-000000000000/activate", token: o, body: `{"approval_ref":"APR-1","actor":"approver"}`, status: 404},
		{method: "POST", path: activate, token: o, body: `{"actor":"approver"}`, status: 400, docRefuses: true},
		{method: "POST", path: activate, token: o, body: `{"approval_ref":"APR-1","actor":"approver"}`, contentType: "text/plain", status: 415, docRefuses: true},
		{method: "POST", path: activate, token: o, body: `{"approval_ref":"APR-1","actor":"approver"}`, status: 200},
		{method: "POST", path: "/v1/cursors/birth_registry/reset", token: o, body: `{"to":"start"}`, status: 200},
		// the loop a person works
		{method: "GET", path: "/v1/me", token: r, status: 200},
		{method: "GET", path: "/v1/me", status: 401, docRefuses: true},
		{method: "POST", path: "/v1/login-links", token: r, body: `{}`, status: 201},
		{method: "POST", path: "/v1/login-links", body: `{}`, status: 401, docRefuses: true},
		{method: "GET", path: loginCode, status: 303},
		{method: "GET", path: loginCode, status: 401},
		{method: "GET", path: "/login?code=x&next=/v1", status: 400},
		{method: "POST", path: "/v1/rulesets", token: o, body: `{"proposer":"someone"}`, status: 200},
		{method: "POST", path: "/v1/preview", token: r, body: previewBody(object), status: 200},
		{method: "POST", path: "/v1/preview", token: r, body: `{"changes":[{"kind":"owner_revoke","ownership_id":999999999}]}`, status: 400},
		{method: "POST", path: "/v1/preview", token: r, body: `{"changes":[{"kind":"owner_fire"}]}`, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/preview", body: previewBody(object), status: 401, docRefuses: true},
		{method: "POST", path: "/v1/rulesets", token: r, body: `{}`, status: 403},
		{method: "POST", path: "/v1/rulesets", token: o, body: `{"proposer":"` + strings.Repeat("x", 300) + `"}`, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/findings/" + finding, token: r, status: 200},
		{method: "GET", path: "/v1/findings/999999999", token: r, status: 404},
		{method: "GET", path: "/v1/findings/zero", token: r, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/findings/" + finding + "/resolve", token: o, body: `{"reason":""}`, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/findings/" + finding + "/resolve", token: r, body: `{"reason":"fixed"}`, status: 403},
		{method: "POST", path: "/v1/findings/999999999/resolve", token: o, body: `{"reason":"fixed"}`, status: 404},
		{method: "POST", path: "/v1/findings/" + finding + "/resolve", token: o, body: `{"reason":"fixed upstream"}`, status: 200},
		{method: "POST", path: "/v1/findings/" + finding + "/resolve", token: o, body: `{"reason":"again"}`, status: 409},
		{method: "POST", path: "/v1/notifications/subscribe", token: o, body: `{"event_type":"governance.*"}`, status: 200},
		{method: "POST", path: "/v1/notifications/subscribe", token: o, body: `{"findings":true}`, status: 200},
		{method: "POST", path: "/v1/notifications/subscribe", token: o, body: `{"event_type":"nothing.*"}`, status: 400},
		{method: "GET", path: "/v1/notifications?limit=10", token: o, status: 200},
		{method: "GET", path: "/v1/notifications?limit=0", token: o, status: 400, docRefuses: true},
		{method: "GET", path: "/v1/notifications?recipient=GOV-COUNCIL", token: r, status: 403},
		{method: "POST", path: "/v1/notifications/read", token: o, body: `{"all":true}`, status: 200},
		{method: "POST", path: "/v1/notifications/read", token: o, body: `{"event_ids":["00000000-0000-0000-0000-000000000001"]}`, status: 404},
		{method: "POST", path: "/v1/notifications/read", token: o, body: `{"event_ids":["not-a-uuid"]}`, status: 400},
		{method: "POST", path: "/v1/notifications/mute", token: o, body: `{"finding_id":` + finding + `}`, status: 200},
		{method: "POST", path: "/v1/notifications/mute", token: r, body: `{"finding_id":` + finding + `}`, status: 403},
		{method: "POST", path: "/v1/notifications/mute", token: o, body: `{"finding_id":999999999}`, status: 404},
		{method: "POST", path: "/v1/notifications/mute", token: o, body: `{}`, status: 400},
		{method: "POST", path: "/v1/notifications/unmute", token: o, body: `{"finding_id":` + finding + `}`, status: 200},
		{method: "POST", path: "/v1/notifications/unmute", token: o, body: `{"finding_id":` + finding + `}`, status: 404},
		{method: "POST", path: "/v1/notifications/unmute", token: o, body: `{"finding_id":0}`, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/cursors/no_such_source/reset", token: o, body: `{"to":"start"}`, status: 404},
		{method: "POST", path: "/v1/cursors/birth_registry/reset", token: o, body: `{}`, status: 400, docRefuses: true},
		{method: "POST", path: "/v1/cursors/birth_registry/reset", token: o, body: `{"to":"start"}`, contentType: "text/plain", status: 415, docRefuses: true},
		{method: "POST", path: "/v1/cursors/birth_registry/reset", token: o, body: `{"to":"` + strings.Repeat("x", 2<<20) + `"}`, status: 413},
		// the operator's plumbing
		{method: "GET", path: "/metrics", token: r, status: 200},
		{method: "GET", path: "/metrics", status: 401, docRefuses: true},
		{method: "GET", path: "/healthz", status: 200},
		{method: "GET", path: "/healthz?deep=1", status: 400},
		{method: "GET", path: "/readyz", status: 200},
		{method: "GET", path: "/readyz?x=1", status: 400},
		{method: "GET", path: "/openapi.json", status: 200},
		{method: "GET", path: "/openapi.json?format=yaml", status: 400},
		{method: "GET", path: "/", status: 200},
		{method: "GET", path: "/?x=1", status: 400},
		{method: "GET", path: "/static/app.js", status: 200},
		{method: "GET", path: "/static/nosuch.js", status: 404},
		{method: "GET", path: "/favicon.ico", status: 200},
		{method: "GET", path: "/favicon.ico?v=2", status: 400},
		{method: "GET", path: "/v1", status: 200},
		{method: "GET", path: "/v1?x=1", status: 400},
	}

	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if in.RequestValidationInput.Request.Header.Get("Authorization") == "" {
				return fmt.Errorf("no bearer token")
			}
			return nil
		}}
	exercised := map[string][2]bool{} // route pattern → {a success (2xx, or the login's 303) seen, a 4xx seen}
	for _, c := range cases {
		name := c.method + " " + c.path
		if len(name) > 120 {
			name = name[:120] + "…"
		}
		req, resp, body := contractCall(t, e.srv.Client(), e.srv.URL, c)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d: %.300s", name, resp.StatusCode, c.status, body)
			continue
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s: the document has no operation for it: %v", name, err)
			continue
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		reqErr := openapi3filter.ValidateRequest(ctx, in)
		switch {
		case c.docRefuses && reqErr == nil:
			t.Errorf("%s: the server refuses it (%d) but the document's constraints accept it", name, c.status)
		case !c.docRefuses && c.status < 300 && reqErr != nil:
			t.Errorf("%s: the server accepts it but the document refuses the request: %v", name, reqErr)
		}
		respOpts := opts
		if c.stream && resp.StatusCode < 300 {
			o := *opts
			o.ExcludeResponseBody = true // an event stream has no schema to hold its bytes to: its status and type are checked
			respOpts = &o
		}
		if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Body: io.NopCloser(bytes.NewReader(body)), Options: respOpts,
		}); err != nil {
			t.Errorf("%s: the answer (%d) does not match the document: %v\nbody: %.400s", name, resp.StatusCode, err, body)
		}
		seen := exercised[route.Method+" "+route.Path]
		switch {
		case resp.StatusCode < 400:
			seen[0] = true
		case resp.StatusCode < 500:
			seen[1] = true
		}
		exercised[route.Method+" "+route.Path] = seen
	}
	for _, rt := range httpapi.Routes() {
		if seen := exercised[rt.Method+" "+rt.Path]; !seen[0] || !seen[1] {
			t.Errorf("%s %s: exercised 2xx=%v 4xx=%v; the contract test must answer both", rt.Method, rt.Path, seen[0], seen[1])
		}
	}

	// What no route takes answers the same JSON error, declared once as the Error schema.
	errorSchema := doc.Components.Schemas["Error"]
	if errorSchema == nil {
		t.Fatal("the document declares no Error schema")
	}
	for _, c := range []contractCase{
		{method: "GET", path: "/nosuch", status: 404},
		{method: "GET", path: "/v1/nosuch", status: 404},
		{method: "GET", path: "/static/", status: 404},
		{method: "POST", path: "/v1/summary", token: r, body: `{}`, status: 405},
		{method: "DELETE", path: "/v1/gate", token: r, status: 405},
	} {
		_, resp, body := contractCall(t, e.srv.Client(), e.srv.URL, c)
		var v any
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &v) != nil {
			t.Errorf("%s %s: %d %q %s; want %d with a JSON error", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status)
			continue
		}
		if err := errorSchema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s %s: the answer is not the Error schema: %v", c.method, c.path, err)
		}
		if c.status == 405 && (resp.Header.Get("Allow") == "" || !strings.Contains(string(body), `"code":"method_not_allowed"`)) {
			t.Errorf("%s %s: 405 without an Allow header or its own code: %s", c.method, c.path, body)
		}
	}
}

// contractCall sends c and returns the request (for validation, body rewound), the response and its body.
func contractCall(t *testing.T, client *http.Client, base string, c contractCase) (*http.Request, *http.Response, []byte) {
	t.Helper()
	newReq := func() *http.Request {
		var rd io.Reader = http.NoBody
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, base+c.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.body != "" {
			ct := c.contentType
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
		}
		return req
	}
	noFollow := *client // a redirect (the login link's) is the answer checked, not where it leads
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Do(newReq())
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	var body []byte
	if c.stream && resp.StatusCode < 300 {
		// One event (a comment opens the stream), then the stream is closed.
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil {
			t.Fatalf("%s %s: read the stream: %v", c.method, c.path, err)
		}
		body = []byte(line)
	} else if body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains([]string{"GET", "POST", "DELETE"}, c.method) {
		t.Fatalf("unexpected method %s", c.method)
	}
	return newReq(), resp, body
}

// TestOpenAPISchemasListEveryField holds each closed schema of /openapi.json to the Go type the server encodes:
// every JSON field of the type (nested structs too) is a property of the schema and every property is a field.
// A live answer only shows the fields it happened to carry; this shows all of them.
func TestOpenAPISchemasListEveryField(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"Error":           httpapi.ErrorBody{},
		"GateAnswer":      httpapi.GateRefusal{},
		"GateResult":      httpapi.ExplainedGateResult{},
		"GateBatchAnswer": httpapi.GateBatchRefusal{},
		"Explanation":     gate.Explanation{},
		"GroupView":       postgres.GroupView{},
		"GroupPage":       postgres.GroupPage{},
		"Ledger":          httpapi.LedgerView{},
		"Invariant":       httpapi.InvariantView{},
		"VerdictCount":    postgres.VerdictCount{},
		"Summary":         httpapi.SummaryView{},
		"Ruleset":         postgres.RulesetRow{},
		"Snapshot":        postgres.SnapshotInfo{},
		"Finding":         events.FindingRow{},
		"Workers":         postgres.WorkersReport{},
		"Activation":      postgres.ActivationResult{},
		"Cursor":          intake.Cursor{},
		"ChangePage":      postgres.ChangePage{},
		"VerdictChange":   postgres.VerdictChange{},
		"Readiness":       httpapi.Readiness{},
	} {
		ref := doc.Components.Schemas[name]
		if ref == nil {
			t.Errorf("schema %s is missing", name)
			continue
		}
		compareFields(t, name, reflect.TypeOf(v), ref.Value)
	}
}

// compareFields compares a Go type's JSON fields with an object schema's properties, recursively.
func compareFields(t *testing.T, at string, typ reflect.Type, s *openapi3.Schema) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if s.Items != nil {
			s = s.Items.Value
		}
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeOf(time.Time{}) {
		return
	}
	if len(s.Properties) == 0 && len(s.OneOf) > 0 && !slices.ContainsFunc(s.OneOf, func(a *openapi3.SchemaRef) bool { return a.Ref == "" }) {
		return // alternatives of other components, each compared where it is
	}
	s = objectVariant(s)
	if s == nil || len(s.Properties) == 0 {
		t.Errorf("%s: the schema is not an object with properties, but %s has fields", at, typ)
		return
	}
	if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
		t.Errorf("%s: the schema is not closed (additionalProperties: false)", at)
	}
	fields := jsonFields(typ)
	for name, ft := range fields {
		prop := s.Properties[name]
		if prop == nil {
			t.Errorf("%s: the server sends %q, the schema does not list it", at, name)
			continue
		}
		compareFields(t, at+"."+name, ft, prop.Value)
	}
	for name := range s.Properties {
		if _, ok := fields[name]; !ok {
			t.Errorf("%s: the schema lists %q, the server never sends it", at, name)
		}
	}
}

// objectVariant is s, or its one object alternative when s is a oneOf/anyOf with null.
func objectVariant(s *openapi3.Schema) *openapi3.Schema {
	if len(s.Properties) > 0 {
		return s
	}
	for _, alts := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf} {
		for _, a := range alts {
			if a.Value != nil && len(a.Value.Properties) > 0 {
				return a.Value
			}
		}
	}
	return nil
}

// jsonFields lists the JSON names encoding/json gives typ's fields (embedded structs flattened, outer names win).
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var embedded []reflect.Type
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			embedded = append(embedded, f.Type)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	for _, et := range embedded {
		for name, ft := range jsonFields(et) {
			if _, ok := out[name]; !ok {
				out[name] = ft
			}
		}
	}
	return out
}

// The document lists every event type GCOS announces (x-gcos-event-types), exactly.
func TestOpenAPIListsTheAnnouncedEventTypes(t *testing.T) {
	t.Parallel()
	var doc struct {
		EventTypes struct {
			Types []string `json:"types"`
		} `json:"x-gcos-event-types"`
	}
	if err := json.Unmarshal(httpapi.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	if want := postgres.AnnouncedEventTypes(); !slices.Equal(doc.EventTypes.Types, want) {
		t.Fatalf("x-gcos-event-types lists\n%v\nthe product announces\n%v", doc.EventTypes.Types, want)
	}
}
