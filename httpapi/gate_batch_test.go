package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"gcos"
	"gcos/httpapi"
)

// batchBody is a POST /v1/gate body asking about objects, write and read alternately.
func batchBody(t *testing.T, objects []string) (string, []gcos.GateCheck) {
	t.Helper()
	checks := make([]gcos.GateCheck, len(objects))
	for i, o := range objects {
		checks[i] = gcos.GateCheck{Object: o, Action: gcos.ActionWrite}
		if i%2 == 1 {
			checks[i].Action = gcos.ActionRead
		}
	}
	b, err := json.Marshal(gcos.GateBatch{Checks: checks})
	if err != nil {
		t.Fatal(err)
	}
	return string(b), checks
}

func TestGateBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5000, true)
	objects := e.strs(t, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE id % 37 = 0 ORDER BY id DESC LIMIT 120`)
	objects = append(objects, "no_such_collection:nothing", objects[3])
	limit := e.store.Config().Gate.BatchMax

	t.Run("InOrderFromOneInstant", func(t *testing.T) {
		t.Parallel()
		body, checks := batchBody(t, objects)
		a := e.call(t, "POST", "/v1/gate", readerToken, body)
		var got gcos.GateBatchAnswer
		a.json(t, &got)
		if a.status != 200 || len(got.Decisions) != len(checks) || got.Token == "" || got.AsOf.IsZero() || got.Source == "" {
			t.Fatalf("batch: %d, %d decisions for %d checks: %.400s", a.status, len(got.Decisions), len(checks), a.body)
		}
		if got.Allowed == 0 || got.Blocked == 0 || got.Decision != gcos.GateBlock || a.header.Get("X-Gcos-Decision") != gcos.GateBlock {
			t.Fatalf("batch: %s, %d allowed, %d blocked (header %q): the sample shows nothing", got.Decision, got.Allowed, got.Blocked, a.header.Get("X-Gcos-Decision"))
		}
		for i, c := range checks {
			d := got.Decisions[i]
			if d.Object != c.Object || d.Action != c.Action {
				t.Fatalf("decision %d is for %s %s, the check was %s %s", i, d.Object, d.Action, c.Object, c.Action)
			}
			// The single question, at rest, answers the same.
			var one gcos.GateAnswer
			e.get(t, "/v1/gate?object="+url.QueryEscape(c.Object)+"&action="+c.Action).json(t, &one)
			if d.Decision != one.Decision || d.Reason != one.Reason || d.Token != "" {
				t.Fatalf("decision %d (%s %s): batch %s %q, single %s %q", i, c.Object, c.Action, d.Decision, d.Reason, one.Decision, one.Reason)
			}
		}
		// All allowed: the batch allows.
		var allowed []string
		for i, d := range got.Decisions {
			if d.Allowed() && i%2 == 0 {
				allowed = append(allowed, checks[i].Object)
			}
		}
		body, _ = batchBody(t, allowed[:1])
		var all gcos.GateBatchAnswer
		if a := e.call(t, "POST", "/v1/gate", readerToken, body); a.status != 200 || a.header.Get("X-Gcos-Decision") != gcos.GateAllow {
			t.Fatalf("an allowed batch: %d %s", a.status, a.body)
		} else if a.json(t, &all); all.Decision != gcos.GateAllow || all.Allowed != 1 {
			t.Fatalf("an allowed batch: %s", a.body)
		}
		// explain=1: every decision in full.
		body, _ = batchBody(t, objects[:5])
		var full httpapi.GateBatchExplained
		e.call(t, "POST", "/v1/gate?explain=1", readerToken, body).json(t, &full)
		if len(full.Decisions) != 5 || full.Decisions[0].Statement == "" || len(full.Decisions[0].Consulted) == 0 || full.Decisions[0].Reason == "" {
			t.Fatalf("explained batch: %+v", full)
		}
	})

	t.Run("RefusedWhole", func(t *testing.T) {
		t.Parallel()
		many := make([]string, limit+1)
		for i := range many {
			many[i] = objects[i%len(objects)]
		}
		over, _ := batchBody(t, many)
		withBad, _ := batchBody(t, append(objects[:3:3], "nocolon"))
		good, _ := batchBody(t, objects[:3])
		for _, tc := range []struct {
			name, path, body string
			headers          []string
			status, blocked  int
			want             string
		}{
			{"over the limit", "/v1/gate", over, nil, 400, limit + 1, fmt.Sprintf("more than the limit of %d", limit)},
			{"no checks", "/v1/gate", `{"checks":[]}`, nil, 400, 0, "no checks"},
			{"no checks field", "/v1/gate", `{}`, nil, 400, 0, "no checks"},
			{"a malformed check", "/v1/gate", withBad, nil, 400, 4, "checks[3]"},
			{"an unknown action", "/v1/gate", `{"checks":[{"object":"a:b"},{"object":"a:c","action":"delete"}]}`, nil, 400, 2, `checks[1]: action "delete"`},
			{"an unknown field", "/v1/gate", `{"checks":[{"object":"a:b","why":"x"}]}`, nil, 400, 1, "unknown field"},
			{"not JSON", "/v1/gate", `{"checks":[{"object":`, nil, 400, 0, "body"},
			{"trailing data", "/v1/gate", good + `{}`, nil, 400, 3, "trailing data"},
			{"a bad parameter", "/v1/gate?explain=maybe", good, nil, 400, 3, "explain"},
			{"an unknown parameter", "/v1/gate?object=a:b", good, nil, 400, 0, "unknown query parameter"},
			{"not application/json", "/v1/gate", good, []string{"Content-Type", "text/plain"}, 415, 0, "JSON"},
			{"too large", "/v1/gate", `{"checks":[{"object":"` + strings.Repeat("x", 2<<20) + `"}]}`, nil, 413, 0, "exceeds"},
		} {
			a := e.call(t, "POST", tc.path, readerToken, tc.body, tc.headers...)
			var got httpapi.GateBatchRefusal
			a.json(t, &got)
			if a.status != tc.status || got.Decision != gcos.GateBlock || got.Allowed != 0 || got.Blocked != tc.blocked ||
				len(got.Decisions) != tc.blocked || !strings.Contains(got.Error.Message, tc.want) || a.header.Get("X-Gcos-Decision") != gcos.GateBlock {
				t.Errorf("%s: %d %.300s; want %d, %d blocked, an error naming %q", tc.name, a.status, a.body, tc.status, tc.blocked, tc.want)
				continue
			}
			for _, d := range got.Decisions {
				if d.Decision != gcos.GateBlock || !strings.Contains(d.Reason, tc.want) {
					t.Errorf("%s: decision %+v, want a block naming %q", tc.name, d, tc.want)
				}
			}
		}
	})
}

// strs runs a query of one text column.
func (e *env) strs(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
