package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"gcos"
	"gcos/httpapi"
)

// TestAPIBadInput sends every route the inputs no endpoint takes (an unknown parameter, invalid UTF-8, a NUL
// byte, an over-long value, a malformed escape, a bad path segment) and requires 400 with a JSON error naming the
// parameter, never 500 and never a silently ignored parameter. The gate's 400 still says block.
func TestAPIBadInput(t *testing.T) {
	e := newEnv(t, 2000, true)
	long := strings.Repeat("a", gcos.MaxParamBytes+1)
	var table strings.Builder
	fmt.Fprintf(&table, "\n| route | input | status | error |\n|---|---|---|---|\n")
	for _, rt := range httpapi.Routes() {
		fill := func(v string) string {
			return strings.NewReplacer("{key}", v, "{version}", v, "{source}", v, "{file}", v, "{id}", v).Replace(rt.Path)
		}
		path := strings.NewReplacer("{key}", "k", "{version}", "gov-rs-000000000000", "{source}", "src", "{file}", "app.css", "{id}", "1").Replace(rt.Path)
		type probe struct{ what, target, names string }
		probes := []probe{
			{"unknown parameter", path + "?scpoe=x", "scpoe"},
			{"malformed escape", path + "?%zz=1", "query string"},
		}
		for _, p := range rt.Params {
			probes = append(probes,
				probe{"invalid UTF-8", path + "?" + p + "=x:%FF", p},
				probe{"NUL byte", path + "?" + p + "=x:%00y", p},
				probe{"control character", path + "?" + p + "=x%0Ay", p},
				probe{"over-long value", path + "?" + p + "=" + long, p},
				probe{"given twice", path + "?" + p + "=a&" + p + "=b", p},
			)
		}
		if strings.Contains(rt.Path, "{") {
			probes = append(probes,
				probe{"invalid UTF-8 in the path", fill("%FF"), "path"},
				probe{"NUL byte in the path", fill("a%00b"), "path"},
			)
		}
		for _, p := range probes {
			a := e.call(t, rt.Method, p.target, operatorToken, "")
			check(t, &table, rt, p.target, p.what, a, p.names)
		}
	}
	t.Log(table.String())
}

func check(t *testing.T, table *strings.Builder, rt httpapi.Route, target, what string, a answer, names string) {
	t.Helper()
	var body struct {
		httpapi.ErrorBody
		Decision string `json:"decision"`
	}
	a.json(t, &body)
	shown := target
	if len(shown) > 60 {
		shown = shown[:60] + "…"
	}
	fmt.Fprintf(table, "| %s %s | %s `%s` | %d | %s |\n", rt.Method, rt.Path, what, shown, a.status, body.Error.Message)
	if a.status != 400 {
		t.Errorf("%s %s (%s): status %d, want 400; body %s", rt.Method, target, what, a.status, a.body)
		return
	}
	if body.Error.Code != gcos.EINVALID || !strings.Contains(body.Error.Message, names) {
		t.Errorf("%s %s (%s): error %+v, want EINVALID naming %q", rt.Method, target, what, body.Error, names)
	}
	if rt.Path == "/v1/gate" && (body.Decision != gcos.GateBlock || a.header.Get("X-Gcos-Decision") != gcos.GateBlock) {
		t.Errorf("gate %s (%s): decision %q, header %q; want block", target, what, body.Decision, a.header.Get("X-Gcos-Decision"))
	}
}
