package apifuzz_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/httpapi"
)

// The tokens the fuzzing server takes.
const (
	readerToken   = "reader-token-0123456789"
	operatorToken = "operator-token-9876543210"
)

// The API's fuzz targets ask a real server over a real store (one small activated world per fuzzing process, no
// daemon) with the input where outside input enters: the query string and the gate's bodies. The invariants: no
// internal error, every refusal is the JSON error with a known code and a message that repeats input escaped and
// shortened, and the gate never allows what a malformed request asked.

// fuzzAPI is the API over one activated world; objects are some of its objects (allowed and blocked ones).
func fuzzAPI(f *testing.F) (http.Handler, []string) {
	w := gcostest.Ready(f, gcostest.Options{Births: 400, Seed: 63, Config: func(c *gcos.Config) {
		c.Gate.Timeout = gcos.Duration(200 * time.Millisecond) // a question with a token waits for no intake here: it blocks at once
	}})
	g := gate.New(w.Store, nil)
	f.Cleanup(g.ReleaseSearches)
	h, err := httpapi.New(httpapi.Config{Store: w.Store, Gate: g, Registry: prometheus.NewRegistry(), Version: "fuzz",
		HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:0", ReaderTokens: []string{readerToken}, OperatorTokens: []string{operatorToken}}})
	if err != nil {
		f.Fatal(err)
	}
	objects := w.Strings(f, `(SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 3)
		UNION ALL (SELECT e.source_registry || ':' || b.entity_code FROM v_candidate_effective e
		           JOIN birth_registry b ON b.collection_name = e.source_registry
		           WHERE e.candidate_verdict IN ('class_0', 'not_relevant') ORDER BY b.id LIMIT 2)`)
	objects = append(objects, "nowhere:nothing") // well-formed, and blocked: no such collection
	// The allow invariant is only tested if the world holds objects the gate allows: say so if it does not.
	decisions := map[string]int{}
	for _, o := range objects {
		var ans gcos.GateAnswer
		_ = json.Unmarshal(serveFuzz(h, http.MethodGet, "/v1/gate", "object="+url.QueryEscape(o), "").Body.Bytes(), &ans)
		decisions[ans.Decision]++
	}
	if decisions[gcos.GateAllow] == 0 || decisions[gcos.GateBlock] == 0 {
		f.Fatalf("the fuzzing world's objects %v decide %v: want allows and blocks", objects, decisions)
	}
	return h, objects
}

// serveFuzz answers one request in process; the raw query is set as sent (no URL parsing on the way in).
func serveFuzz(h http.Handler, method, path, rawQuery, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.URL.RawQuery = rawQuery
	req.RequestURI = path + "?" + rawQuery
	req.Header.Set("Authorization", "Bearer "+readerToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

var knownCodes = []string{gcos.EINVALID, gcos.ENOTFOUND, gcos.ECONFLICT, gcos.EUNAUTHORIZED, gcos.EFORBIDDEN,
	gcos.EUNAVAILABLE, gcos.EGONE, gcos.EMETHOD}

// checkAnswer fails t on an internal error, and on a refusal that is not the JSON error with a known code and a
// clean message.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	var body httpapi.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || !slices.Contains(knownCodes, body.Error.Code) {
		t.Fatalf("%s: %d is not the API's JSON error: %s", what, rec.Code, rec.Body)
	}
	msg := body.Error.Message
	if msg == "" || !utf8.ValidString(msg) || len(msg) > 2048 || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Fatalf("%s: %d with an unclear message %q", what, rec.Code, msg)
	}
}

// wellFormedCheck reports whether the gate may be asked this object and action at all.
func wellFormedCheck(object, action string) bool {
	return gcos.CheckParam("object", object) == nil && gcos.CheckObjectRef(object) == nil &&
		(action == "" || action == gcos.ActionWrite || action == gcos.ActionRead)
}

// FuzzGateQuery: GET /v1/gate with any query string answers a decision; anything but a 200 is a block, and an allow
// only ever answers a well-formed question (parameters the route takes, each once, a valid object and action).
func FuzzGateQuery(f *testing.F) {
	h, objects := fuzzAPI(f)
	for _, o := range objects {
		q := url.QueryEscape(o)
		for _, s := range []string{"object=" + q, "object=" + q + "&action=read", "object=" + q + "&action=write&explain=1",
			"object=" + q + "&object=" + q, "object=" + q + "&actoin=write", "object=" + q + "&consistency=full",
			"object=" + q + "&at_least=1:2:", "object=" + q + "%zz", "object=" + q + "%1b", "object=" + q + "&action=delete"} {
			f.Add(s)
		}
	}
	f.Add("")
	f.Add("object=a%00:b")
	f.Fuzz(func(t *testing.T, rawQuery string) {
		rec := serveFuzz(h, http.MethodGet, "/v1/gate", rawQuery, "")
		checkAnswer(t, "GET /v1/gate?"+rawQuery, rec)
		var ans gcos.GateAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
			t.Fatalf("%q: not a gate answer: %s", rawQuery, rec.Body)
		}
		if rec.Code != http.StatusOK && (ans.Decision != gcos.GateBlock || rec.Header().Get("X-GCOS-Decision") != gcos.GateBlock) {
			t.Fatalf("%q: %d answers %q", rawQuery, rec.Code, ans.Decision)
		}
		if ans.Decision != gcos.GateAllow {
			return
		}
		q, err := url.ParseQuery(rawQuery)
		if err != nil || rec.Code != http.StatusOK {
			t.Fatalf("%q: allowed a query that does not parse (%v) or with %d", rawQuery, err, rec.Code)
		}
		for name, vs := range q {
			if !slices.Contains([]string{"object", "action", "consistency", "at_least", "explain"}, name) || len(vs) != 1 {
				t.Fatalf("%q: allowed with parameter %q given %d times", rawQuery, name, len(vs))
			}
		}
		if !wellFormedCheck(q.Get("object"), q.Get("action")) {
			t.Fatalf("%q: allowed a malformed question", rawQuery)
		}
	})
}

// FuzzGateBatchBody: POST /v1/gate with any body answers one decision per check it read; a refused batch blocks
// every check, and an allowed check is always a well-formed one of a batch that was accepted whole.
func FuzzGateBatchBody(f *testing.F) {
	h, objects := fuzzAPI(f)
	checks := func(cs ...[2]string) string {
		var out []map[string]string
		for _, c := range cs {
			out = append(out, map[string]string{"object": c[0], "action": c[1]})
		}
		b, _ := json.Marshal(map[string]any{"checks": out})
		return string(b)
	}
	for _, o := range objects {
		f.Add(checks([2]string{o, "write"}, [2]string{o, "read"}))
		f.Add(checks([2]string{o, "write"}, [2]string{o + "\x1b", "write"}))
		f.Add(checks([2]string{o, "delete"}))
		f.Add(`{"checks":[{"object":"` + o + `","action":"read","extra":1}]}`)
	}
	f.Add(`{"checks":[]}`)
	f.Add(`{"checks":null}`)
	f.Add(`{"checks":[{"object":"a:b"}]}{}`)
	f.Add(`[`)
	f.Fuzz(func(t *testing.T, body string) {
		rec := serveFuzz(h, http.MethodPost, "/v1/gate", "", body)
		checkAnswer(t, "POST /v1/gate", rec)
		var out gcos.GateBatchAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%q: not a batch answer: %s", body, rec.Body)
		}
		allowed := 0
		for i, d := range out.Decisions {
			if d.Decision != gcos.GateAllow {
				continue
			}
			allowed++
			if rec.Code != http.StatusOK || !wellFormedCheck(d.Object, d.Action) || d.Action == "" {
				t.Fatalf("%q: check %d (%q, %q) allowed with status %d", body, i, d.Object, d.Action, rec.Code)
			}
		}
		if allowed > 0 {
			var req struct {
				Checks []gcos.GateCheck `json:"checks"`
			}
			dec := json.NewDecoder(bytes.NewReader([]byte(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil || len(req.Checks) != len(out.Decisions) {
				t.Fatalf("%q: %d allowed from a body that is not a batch of %d checks (%v)", body, allowed, len(out.Decisions), err)
			}
		}
	})
}

// fuzzRoutes are the read routes whose query string the fuzzer writes (the gate has its own targets; the watch
// streams).
var fuzzRoutes = []string{"/v1/explain", "/v1/groups", "/v1/invariant", "/v1/snapshots", "/v1/findings", "/v1/notifications",
	"/v1/changes", "/v1/summary", "/v1/token", "/v1/me", "/v1/rulesets", "/v1/workers", "/login", "/healthz"}

// FuzzQueryParameters: every read route answers any query string with its answer or the API's JSON error, never an
// internal error, and a refusal repeats what it refuses escaped and shortened.
func FuzzQueryParameters(f *testing.F) {
	h, objects := fuzzAPI(f)
	for i := range fuzzRoutes {
		for _, s := range []string{"", "limit=5", "limit=0", "limit=99999999999999999999", "after=start", "after=now",
			"object=" + url.QueryEscape(objects[0]), "group=00000000000000000000000000000000", "scope=approval", "verdict=stale",
			"since=2026-11-26T08:00:00Z", "open=true&type=handoff_lag", "code=x", "x=%1b%5b2J", "limit=1&limit=2", "%zz"} {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, rawQuery string) {
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		rec := serveFuzz(h, http.MethodGet, path, rawQuery, "")
		checkAnswer(t, "GET "+path+"?"+rawQuery, rec)
		if path == "/login" && rec.Header().Get("Set-Cookie") != "" {
			t.Fatalf("%q: a login with no minted link set a cookie", rawQuery)
		}
	})
}
