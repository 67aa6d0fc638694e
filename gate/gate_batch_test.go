package gate_test

// A batch question is answered in request order from one instant, each answer the one the single question gets,
// and a batch the gate does not take is blocked whole (SPEC §12).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
)

// checksOf asks write and read, alternately, on each object.
func checksOf(objects []string) []gcos.GateCheck {
	out := make([]gcos.GateCheck, len(objects))
	for i, o := range objects {
		out[i] = gcos.GateCheck{Object: o, Action: gcos.ActionWrite}
		if i%2 == 1 {
			out[i].Action = gcos.ActionRead
		}
	}
	return out
}

// sameInstant fails unless every answer of the batch was read from the batch's state.
func sameInstant(t *testing.T, res gate.GateBatchResult, source string) {
	t.Helper()
	if res.Source != source || res.Token == "" || res.AsOf.IsZero() {
		t.Fatalf("batch answered from %q at %s (token %q), want %s with a token", res.Source, res.AsOf, res.Token, source)
	}
	for i, r := range res.Results {
		if r.Source != res.Source || r.Token != res.Token || !r.AsOf.Equal(res.AsOf) {
			t.Fatalf("answer %d (%s) read from %s at %s (token %s), the batch from %s at %s (token %s)",
				i, r.Object, r.Source, r.AsOf, r.Token, res.Source, res.AsOf, res.Token)
		}
	}
}

func TestGateBatch_AnswersEachCheckInOrderAsTheSingleQuestion(t *testing.T) {
	t.Parallel()
	b, v := viewWorld(t, 3000, time.Hour)
	objects := b.viewSample(t)
	if len(objects) > 400 {
		objects = objects[:400]
	}
	slices.Reverse(objects) // request order, not the database's
	objects = append(objects, objects[0])
	for _, tc := range []struct {
		name    string
		objects []string
		opt     gate.GateOptions
		source  string
	}{
		{"from the view", objects, gate.GateOptions{}, gate.SourceView},
		{"consistency full", objects, gate.GateOptions{Consistency: gate.ConsistencyFull}, gate.SourceDatabase},
		// The view answers no object without a birth: the whole batch reads through, from one instant still.
		{"an unknown object reads the batch through", append(slices.Clone(objects[:50]), "nosuch:object"), gate.GateOptions{}, gate.SourceDatabase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := v.CatchUp(b.ctx); err != nil {
				t.Fatal(err)
			}
			checks := checksOf(tc.objects)
			want := make([]gate.GateResult, len(checks))
			for i, c := range checks {
				want[i] = b.gate().Decide(b.ctx, c.Object, c.Action)
			}
			res := b.gate().GateBatch(b.ctx, checks, tc.opt)
			if len(res.Results) != len(checks) {
				t.Fatalf("%d answers to %d checks", len(res.Results), len(checks))
			}
			sameInstant(t, res, tc.source)
			allowed := 0
			for i, c := range checks {
				got := res.Results[i]
				if got.Object != c.Object || got.Action != c.Action {
					t.Fatalf("answer %d is for %s %s, the check was %s %s", i, got.Object, got.Action, c.Object, c.Action)
				}
				got.RescanScheduled = want[i].RescanScheduled // a follow-up of the batch's own, after the decision
				sameAnswer(t, c.Object, c.Action, want[i], got)
				if got.Decision == gcos.GateAllow {
					allowed++
				}
			}
			if allowed == 0 || allowed == len(checks) {
				t.Fatalf("%d of %d allowed: the sample shows nothing", allowed, len(checks))
			}
			answers := res.Answers()
			for i, a := range answers {
				if a.Decision != res.Results[i].Decision || a.Reason != res.Results[i].Reasons[0] || a.Token != "" || a.Source != "" {
					t.Fatalf("lean answer %d: %+v, from %s %q", i, a, res.Results[i].Decision, res.Results[i].Reasons)
				}
			}
		})
	}
}

func TestGateBatch_RefusedWholeWhenMalformed(t *testing.T) {
	t.Parallel()
	b, _ := viewWorld(t, 500, time.Hour)
	good := b.strs(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 5`)
	allowedAlone := 0
	for _, o := range good {
		if b.gate().Decide(b.ctx, o, gcos.ActionRead).Decision == gcos.GateAllow {
			allowedAlone++
		}
	}
	if allowedAlone == 0 {
		t.Fatal("no object of the sample is allowed alone: the test shows nothing")
	}
	many := make([]string, b.store.Config().Gate.BatchMax+1)
	for i := range many {
		many[i] = good[i%len(good)]
	}
	for _, tc := range []struct {
		name   string
		checks []gcos.GateCheck
		opt    gate.GateOptions
		want   string
	}{
		{"over the limit", checksOf(many), gate.GateOptions{}, fmt.Sprintf("more than the limit of %d", len(many)-1)},
		{"empty", nil, gate.GateOptions{}, "no checks"},
		{"a malformed object", append(checksOf(good), gcos.GateCheck{Object: "no-colon"}), gate.GateOptions{}, fmt.Sprintf("checks[%d]", len(good))},
		{"an unknown action", append(checksOf(good), gcos.GateCheck{Object: good[0], Action: "delete"}), gate.GateOptions{}, "action \"delete\""},
		{"an unknown consistency", checksOf(good), gate.GateOptions{Consistency: "eventual"}, "consistency \"eventual\""},
		{"a malformed token", checksOf(good), gate.GateOptions{AtLeast: "not-a-token"}, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.gate().GateBatch(b.ctx, tc.checks, tc.opt)
			if len(res.Results) != len(tc.checks) {
				t.Fatalf("%d answers to %d checks", len(res.Results), len(tc.checks))
			}
			for i, r := range res.Results {
				if r.Decision != gcos.GateBlock || len(r.Reasons) != 1 || !strings.Contains(r.Reasons[0], tc.want) {
					t.Fatalf("answer %d: %s %q, want a block naming %q", i, r.Decision, r.Reasons, tc.want)
				}
			}
		})
	}
}

// TestGateBatch_OneInstantWhileAVerdictFlips: a writer flips a high-risk group's verdict between fresh and expired
// as fast as it can commit while batches ask about its objects; every batch agrees with itself, on the database
// path (one repeatable-read transaction) and on the view's (one state).
func TestGateBatch_OneInstantWhileAVerdictFlips(t *testing.T) {
	t.Parallel()
	// The view catches up every second (its bound / 4), so batches from the view see the flips too.
	b, v := viewWorld(t, 3000, 4*time.Second)
	var object, key string
	for _, o := range b.strs(t, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 400`) {
		res := b.gate().Decide(b.ctx, o, gcos.ActionWrite)
		if res.Decision != gcos.GateAllow || slices.Contains(b.store.Config().Gate.LowRiskClasses, res.RiskClass) {
			continue
		}
		for _, c := range res.Consulted {
			if c.Source == gcos.GateSourceGroup {
				object, key = o, c.Key
				break
			}
		}
		break
	}
	if key == "" {
		t.Fatal("no high-risk object allowed at rest")
	}
	checks := make([]gcos.GateCheck, 200)
	for i := range checks {
		checks[i] = gcos.GateCheck{Object: object, Action: gcos.ActionWrite}
	}
	ctx, stop := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			// A block's follow-up marks the group dirty for a re-scan: each flip stands in for that scan too.
			_, _ = b.pool.Exec(ctx, `UPDATE governance_candidate_state SET
				stale_after = CASE WHEN stale_after > now() THEN now() - interval '1 second' ELSE now() + interval '1 day' END,
				dirty = false, dirty_reason = NULL, dirtied_at = NULL, recompute_status = 'ok'
				WHERE group_key = $1`, key)
		}
	}()
	go func() {
		defer wg.Done()
		_ = v.Run(ctx)
	}()
	for _, tc := range []struct {
		opt    gate.GateOptions
		source string
	}{{gate.GateOptions{Consistency: gate.ConsistencyFull}, gate.SourceDatabase}, {gate.GateOptions{}, gate.SourceView}} {
		opt, seen := tc.opt, map[string]int{}
		for deadline := time.Now().Add(2 * time.Minute); seen[gcos.GateAllow] < 3 || seen[gcos.GateBlock] < 3; {
			if time.Now().After(deadline) {
				t.Fatalf("consistency %q: batches from the %s seen %v within the deadline; want both decisions", opt.Consistency, tc.source, seen)
			}
			res := b.gate().GateBatch(ctx, checks, opt)
			for i, r := range res.Results {
				if r.Decision != res.Results[0].Decision {
					t.Fatalf("consistency %q, source %s: answer %d is %s, answer 0 %s: the batch was not read from one instant",
						opt.Consistency, res.Source, i, r.Decision, res.Results[0].Decision)
				}
			}
			if res.Source == tc.source {
				seen[res.Results[0].Decision]++
			}
		}
	}
}
