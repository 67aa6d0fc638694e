package gcos

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var testActions = map[string]string{"read": ActionRead, "write": ActionWrite, "can_deploy": ActionWrite}

func TestAuthZENResolve(t *testing.T) {
	subj := &AuthZENEntity{Type: "pipeline", ID: "ci-7"}
	res := &AuthZENEntity{Type: "orders", ID: "E1"}
	write := &AuthZENAction{Name: "write"}
	for _, tc := range []struct {
		name       string
		e          AuthZENEvaluation
		object     string
		action     string
		deny, fail string // substrings of Deny / Err ("" = none)
	}{
		{"write", AuthZENEvaluation{Subject: subj, Action: write, Resource: res}, "orders:E1", ActionWrite, "", ""},
		{"alias", AuthZENEvaluation{Subject: subj, Action: &AuthZENAction{Name: "can_deploy"}, Resource: res}, "orders:E1", ActionWrite, "", ""},
		{"read", AuthZENEvaluation{Subject: subj, Action: &AuthZENAction{Name: "read"}, Resource: res}, "orders:E1", ActionRead, "", ""},
		{"code with colon", AuthZENEvaluation{Subject: subj, Action: write, Resource: &AuthZENEntity{Type: "c", ID: "a:b"}}, "c:a:b", ActionWrite, "", ""},
		{"unknown action is a deny, never an allow", AuthZENEvaluation{Subject: subj, Action: &AuthZENAction{Name: "delete"}, Resource: res}, "orders:E1", ActionWrite, `"delete" is not one the gate answers`, ""},
		{"no subject", AuthZENEvaluation{Action: write, Resource: res}, "", "", "", "subject"},
		{"subject without id", AuthZENEvaluation{Subject: &AuthZENEntity{Type: "user"}, Action: write, Resource: res}, "", "", "", "subject"},
		{"no action", AuthZENEvaluation{Subject: subj, Resource: res}, "", "", "", "action"},
		{"empty action name", AuthZENEvaluation{Subject: subj, Action: &AuthZENAction{}, Resource: res}, "", "", "", "action"},
		{"no resource", AuthZENEvaluation{Subject: subj, Action: write}, "", "", "", "resource"},
		{"resource without id", AuthZENEvaluation{Subject: subj, Action: write, Resource: &AuthZENEntity{Type: "orders"}}, "", "", "", "resource"},
		{"collection with colon", AuthZENEvaluation{Subject: subj, Action: write, Resource: &AuthZENEntity{Type: "a:b", ID: "x"}}, "", "", "", "no colon"},
		{"control characters", AuthZENEvaluation{Subject: subj, Action: write, Resource: &AuthZENEntity{Type: "orders", ID: "x\x1b[2J"}}, "", "", "", "control"},
		{"control characters in the subject", AuthZENEvaluation{Subject: &AuthZENEntity{Type: "u", ID: "\x00"}, Action: write, Resource: res}, "", "", "", "subject.id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := tc.e.Resolve(testActions)
			if tc.fail != "" {
				if it.Err == nil || !strings.Contains(ErrorMessage(it.Err), tc.fail) || ErrorCode(it.Err) != EINVALID {
					t.Fatalf("Err = %v, want EINVALID containing %q", it.Err, tc.fail)
				}
				if d := it.Decide(GateAnswer{Decision: GateAllow}, false); d.Decision || d.Context == nil || d.Context.Error == nil || d.Context.Error.Status != 400 {
					t.Fatalf("an item that cannot be evaluated decides %+v, want false with context.error 400", d)
				}
				return
			}
			if it.Err != nil || it.Check.Object != tc.object || it.Check.Action != tc.action {
				t.Fatalf("Resolve = %+v, want %s %s", it, tc.object, tc.action)
			}
			if tc.deny != "" {
				if !strings.Contains(it.Deny, tc.deny) {
					t.Fatalf("Deny = %q, want %q", it.Deny, tc.deny)
				}
				if d := it.Decide(GateAnswer{Decision: GateAllow}, false); d.Decision {
					t.Fatal("a denied item was allowed by the gate's answer")
				}
			} else if it.Deny != "" {
				t.Fatalf("unexpected Deny %q", it.Deny)
			}
		})
	}
}

func TestAuthZENItems(t *testing.T) {
	subj := &AuthZENEntity{Type: "pipeline", ID: "ci"}
	decode := func(s string) AuthZENRequest {
		var r AuthZENRequest
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Run("defaults and overrides", func(t *testing.T) {
		r := decode(`{"subject": {"type": "pipeline", "id": "ci"}, "action": {"name": "write"}, "context": {"k": 1},
			"evaluations": [{"resource": {"type": "a", "id": "1"}}, {"action": {"name": "read"}, "resource": {"type": "b", "id": "2"}},
			{"subject": {"type": "user", "id": "u"}, "resource": {"type": "c", "id": "3"}}, {"action": {"name": "read"}}],
			"unknown_top": true, "options": {"evaluations_semantic": "deny_on_first_deny", "future": 1}}`)
		items, err := r.Items(10, testActions)
		if err != nil {
			t.Fatal(err)
		}
		want := []GateCheck{{"a:1", ActionWrite}, {"b:2", ActionRead}, {"c:3", ActionWrite}}
		for i, w := range want {
			if items[i].Err != nil || items[i].Check != w {
				t.Fatalf("items[%d] = %+v, want %+v", i, items[i], w)
			}
		}
		if items[2].Subject.ID != "u" || items[0].Subject.ID != subj.ID {
			t.Fatalf("subjects %+v %+v", items[0].Subject, items[2].Subject)
		}
		if items[3].Err == nil || !strings.Contains(ErrorMessage(items[3].Err), "evaluations[3]: resource") {
			t.Fatalf("an item with no resource and no default: %v", items[3].Err)
		}
		if s, err := r.Opts().Semantic(); err != nil || s != AuthZENDenyOnFirstDeny {
			t.Fatalf("semantic %q %v", s, err)
		}
	})
	t.Run("no items answers the top-level evaluation", func(t *testing.T) {
		items, err := decode(`{"subject": {"type": "p", "id": "ci"}, "action": {"name": "write"}, "resource": {"type": "a", "id": "1"}, "evaluations": []}`).Items(10, testActions)
		if err != nil || len(items) != 1 || items[0].Check.Object != "a:1" {
			t.Fatalf("%+v %v", items, err)
		}
	})
	for _, tc := range []struct{ name, body, want string }{
		{"nothing to evaluate", `{"evaluations": []}`, "evaluations is empty"},
		{"no items and an incomplete top level", `{"subject": {"type": "p", "id": "ci"}}`, "action"},
		{"over the limit", `{"subject": {"type": "p", "id": "ci"}, "action": {"name": "write"}, "evaluations": [{"resource": {"type": "a", "id": "1"}}, {"resource": {"type": "a", "id": "2"}}, {"resource": {"type": "a", "id": "3"}}]}`, "more than the limit of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decode(tc.body).Items(2, testActions); err == nil || !strings.Contains(ErrorMessage(err), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("unknown semantic", func(t *testing.T) {
		_, err := AuthZENOptions{EvaluationsSemantic: "first\x1b"}.Semantic()
		if err == nil || !strings.Contains(ErrorMessage(err), `"first\x1b"`) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestAuthZENDecide(t *testing.T) {
	it := AuthZENItem{Subject: AuthZENEntity{Type: "p", ID: "ci"}, Check: GateCheck{"a:1", ActionWrite}}
	at := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		a       GateAnswer
		explain bool
		want    string
	}{
		{"allow", GateAnswer{Decision: GateAllow}, false, `{"decision":true}`},
		{"block", GateAnswer{Decision: GateBlock, Reason: "orphan"}, false, `{"decision":false}`},
		{"anything but allow denies", GateAnswer{Decision: "maybe"}, false, `{"decision":false}`},
		{"explained", GateAnswer{Decision: GateBlock, Reason: "orphan", AsOf: at, Source: "view", Token: "t1"}, true,
			`{"decision":false,"context":{"reason":"orphan","object":"a:1","action":"write","subject":{"type":"p","id":"ci"},"as_of":"2026-11-28T08:00:00Z","source":"view","token":"t1"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := json.Marshal(it.Decide(tc.a, tc.explain))
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestShortCircuit(t *testing.T) {
	T, F := AuthZENDecision{Decision: true}, AuthZENDecision{Decision: false}
	for _, tc := range []struct {
		name     string
		semantic string
		in       []AuthZENDecision
		explain  bool
		want     string
	}{
		{"execute all", AuthZENExecuteAll, []AuthZENDecision{T, F, T}, false, `[{"decision":true},{"decision":false},{"decision":true}]`},
		{"deny on first deny", AuthZENDenyOnFirstDeny, []AuthZENDecision{T, F, T}, false, `[{"decision":true},{"decision":false,"context":{"code":"200","reason":"deny_on_first_deny"}}]`},
		{"deny on first deny, none", AuthZENDenyOnFirstDeny, []AuthZENDecision{T, T}, false, `[{"decision":true},{"decision":true}]`},
		{"deny on first deny, the last", AuthZENDenyOnFirstDeny, []AuthZENDecision{T, F}, false, `[{"decision":true},{"decision":false,"context":{"code":"200","reason":"deny_on_first_deny"}}]`},
		{"permit on first permit", AuthZENPermitOnFirstPermit, []AuthZENDecision{F, T, T}, false, `[{"decision":false},{"decision":true}]`},
		{"permit on first permit, none", AuthZENPermitOnFirstPermit, []AuthZENDecision{F, F}, false, `[{"decision":false},{"decision":false}]`},
		{"permit on first permit, explained", AuthZENPermitOnFirstPermit, []AuthZENDecision{{Decision: true, Context: &AuthZENContext{Reason: "covered"}}}, true,
			`[{"decision":true,"context":{"code":"200","reason":"permit_on_first_permit","gate_reason":"covered"}}]`},
		{"an error stops a deny_on_first_deny", AuthZENDenyOnFirstDeny, []AuthZENDecision{{Context: &AuthZENContext{Error: &AuthZENError{400, "bad"}}}, T}, false,
			`[{"decision":false,"context":{"code":"200","reason":"deny_on_first_deny","error":{"status":400,"message":"bad"}}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := json.Marshal(ShortCircuit(tc.semantic, tc.in, tc.explain))
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestAuthZENActionsConfig(t *testing.T) {
	c := DefaultConfig()
	c.Gate.AuthZENActions = map[string]string{"read": ActionRead, "deploy": "delete", "": ActionWrite}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `"deploy" maps to "delete"`) || !strings.Contains(err.Error(), `action name ""`) {
		t.Fatalf("Validate = %v", err)
	}
}

// FuzzAuthZENRequest: any body either fails to decode, is refused with a clear EINVALID error, or resolves into
// items each of which is a well-formed gate check, a deny, or an error; an item that is not a gate check never
// decides true, whatever the gate would have said.
func FuzzAuthZENRequest(f *testing.F) {
	f.Add([]byte(`{"subject":{"type":"p","id":"ci"},"action":{"name":"write"},"resource":{"type":"a","id":"1"}}`))
	f.Add([]byte(`{"subject":{"type":"p","id":"ci"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"a","id":"1"}},{"resource":{"type":"a:b","id":"x"}},{}],"options":{"evaluations_semantic":"deny_on_first_deny"}}`))
	f.Add([]byte(`{"evaluations":[],"options":{"evaluations_semantic":"permit_on_first_permit","explain":true}}`))
	f.Add([]byte(`{"subject":{"type":"p","id":"ci"},"action":{"name":"x\u001b"},"resource":{"type":"a","id":"\u0000"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r AuthZENRequest
		if json.Unmarshal(body, &r) != nil {
			return
		}
		if _, err := r.Opts().Semantic(); err != nil && ErrorCode(err) != EINVALID {
			t.Fatalf("semantic error code %s", ErrorCode(err))
		}
		items, err := r.Items(5, testActions)
		if err != nil {
			if ErrorCode(err) != EINVALID || ErrorMessage(err) == "" {
				t.Fatalf("refusal %v", err)
			}
			return
		}
		ds := make([]AuthZENDecision, len(items))
		for i, it := range items {
			switch {
			case it.Err != nil:
				if ErrorCode(it.Err) != EINVALID {
					t.Fatalf("item error code %s", ErrorCode(it.Err))
				}
			default:
				if CheckObjectRef(it.Check.Object) != nil || (it.Check.Action != ActionWrite && it.Check.Action != ActionRead) {
					t.Fatalf("item %d asks the gate a malformed check %+v", i, it.Check)
				}
			}
			ds[i] = it.Decide(GateAnswer{Decision: GateAllow}, true)
			if ds[i].Decision && (it.Err != nil || it.Deny != "") {
				t.Fatalf("item %d (%+v) decides true", i, it)
			}
		}
		if out := ShortCircuit(AuthZENDenyOnFirstDeny, ds, false); len(out) == 0 || len(out) > len(ds) {
			t.Fatalf("%d answers of %d", len(out), len(ds))
		}
	})
}
