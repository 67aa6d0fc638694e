package client_test

import (
	"context"
	"strings"
	"testing"

	"gcos"
)

// TestAuthZEN: Evaluate and Evaluations answer as the gate does, in order, cut short as asked; a refused request
// is an error and a deny.
func TestAuthZEN(t *testing.T) {
	t.Parallel()
	w, srv := served(t, 3000, 11)
	c := quick(t, srv.URL)
	ctx := context.Background()
	var objects []string
	rows, err := w.Pool.Query(ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE id % 41 = 0 ORDER BY id LIMIT 30`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	subject := &gcos.AuthZENEntity{Type: "pipeline", ID: "ci-7"}
	eval := func(o string) gcos.AuthZENEvaluation {
		coll, code, _ := strings.Cut(o, ":")
		return gcos.AuthZENEvaluation{Resource: &gcos.AuthZENEntity{Type: coll, ID: code}}
	}
	req := gcos.AuthZENRequest{AuthZENEvaluation: gcos.AuthZENEvaluation{Subject: subject, Action: &gcos.AuthZENAction{Name: "write"}}}
	var want []bool
	for _, o := range objects {
		req.Evaluations = append(req.Evaluations, eval(o))
		g := c.Gate(ctx, o, gcos.ActionWrite)
		if g.Err != nil {
			t.Fatal(g.Err)
		}
		e := eval(o)
		e.Subject, e.Action = subject, &gcos.AuthZENAction{Name: "write"}
		d, err := c.Evaluate(ctx, e, nil)
		if err != nil || d.Decision != g.Allowed() || d.Context != nil {
			t.Fatalf("%s: %+v %v, the gate: %s", o, d, err, g.Decision)
		}
		want = append(want, g.Allowed())
	}
	got, err := c.Evaluations(ctx, req)
	if err != nil || len(got) != len(want) {
		t.Fatalf("%d answers, %v", len(got), err)
	}
	for i := range want {
		if got[i].Decision != want[i] {
			t.Fatalf("item %d: %t, the gate %t", i, got[i].Decision, want[i])
		}
	}
	req.Options = &gcos.AuthZENOptions{EvaluationsSemantic: gcos.AuthZENDenyOnFirstDeny}
	if got, err = c.Evaluations(ctx, req); err != nil || len(got) > len(want) || got[len(got)-1].Decision != (len(got) == len(want) && want[len(want)-1]) {
		t.Fatalf("deny_on_first_deny: %+v %v", got, err)
	}
	// A refused request is an error, and every answer a deny.
	d, err := c.Evaluate(ctx, gcos.AuthZENEvaluation{Subject: subject, Action: &gcos.AuthZENAction{Name: "write"}}, nil)
	if err == nil || d.Decision || !strings.Contains(err.Error(), "resource") {
		t.Fatalf("no resource: %+v %v", d, err)
	}
	req.Options = &gcos.AuthZENOptions{EvaluationsSemantic: "first_wins"}
	if got, err = c.Evaluations(ctx, req); err == nil || len(got) != len(want) || got[0].Decision {
		t.Fatalf("an unknown semantic: %+v %v", got, err)
	}
}
