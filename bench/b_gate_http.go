package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"gcos"
	"gcos/client"
	"gcos/gate"
)

// gateBatchSize is the batch the benchmark asks: a change's objects.
const gateBatchSize = 100

// httpCallers is how many callers ask at once over HTTP: two per core, so the figures are the gate's and not a
// queue of callers waiting for a core (the 8-caller single figure is measured beside, to show that queue).
const httpCallers = 4

// benchGateHTTP asks the gate the way a pipeline does: over HTTP on loopback through the client package (keep-alive),
// one object at a time and 100 at once, from the view and from the database, beside the same questions in-process
// and the naive gate; and it weighs the answers.
func benchGateHTTP(ctx context.Context, r *runner) ([]row, error) {
	ws, objs, done, err := r.gateWorld(ctx, "gate_http")
	if err != nil {
		return nil, err
	}
	defer done()
	view := ws.gate.View()
	vctx, stopView := context.WithCancel(ctx)
	defer stopView()
	go func() { _ = view.Run(vctx) }()
	if err := waitFresh(ctx, view); err != nil {
		return nil, err
	}
	base, stop, err := serveBench(ws.gate, false)
	if err != nil {
		return nil, err
	}
	defer stop()
	c, err := client.New(base, client.WithRetries(0))
	if err != nil {
		return nil, err
	}

	batchAt := func(i int) []gcos.GateCheck {
		checks := make([]gcos.GateCheck, gateBatchSize)
		for k := range checks {
			checks[k] = gcos.GateCheck{Object: objs[(i*gateBatchSize+k)%len(objs)].ref, Action: gcos.ActionWrite}
		}
		return checks
	}
	var answers, fromView, allowed atomic.Int64
	count := func(source string, allow int) {
		answers.Add(1)
		if source == gate.SourceView {
			fromView.Add(1)
		}
		allowed.Add(int64(allow))
	}
	single := func(ask ...client.Ask) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			a := c.Gate(ctx, objs[i%len(objs)].ref, gcos.ActionWrite, ask...)
			if a.Err != nil {
				return a.Err // the benchmark asks a healthy server: an error is a failed run, not a block
			}
			count(a.Source, btoi(a.Allowed()))
			return nil
		}
	}
	batch := func(ask ...client.Ask) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			b := c.GateBatch(ctx, batchAt(i), ask...)
			if b.Err != nil {
				return b.Err
			}
			count(b.Source, b.Allowed)
			return nil
		}
	}
	inProcSingle := func(ctx context.Context, i int) error {
		res := ws.gate.Gate(ctx, objs[i%len(objs)].ref, gcos.ActionWrite)
		count(res.Source, btoi(res.Decision == gcos.GateAllow))
		return nil
	}
	inProcBatch := func(ctx context.Context, i int) error {
		res := ws.gate.GateBatch(ctx, batchAt(i), gate.GateOptions{})
		n := 0
		for _, d := range res.Results {
			n += btoi(d.Decision == gcos.GateAllow)
		}
		count(res.Source, n)
		return nil
	}
	naive := func(ctx context.Context, i int) error {
		o := objs[i%len(objs)]
		ok, err := naiveGate(ctx, ws.pool, o.coll, o.code)
		count("", btoi(ok))
		return err
	}
	// The same questions in OpenID AuthZEN's shape (client.Evaluate / client.Evaluations).
	subject, write := &gcos.AuthZENEntity{Type: "pipeline", ID: "bench"}, &gcos.AuthZENAction{Name: gcos.ActionWrite}
	resource := func(i int) *gcos.AuthZENEntity {
		o := objs[i%len(objs)]
		return &gcos.AuthZENEntity{Type: o.coll, ID: o.code}
	}
	azSingle := func(ctx context.Context, i int) error {
		d, err := c.Evaluate(ctx, gcos.AuthZENEvaluation{Subject: subject, Action: write, Resource: resource(i)}, nil)
		if err != nil {
			return err
		}
		count("", btoi(d.Decision))
		return nil
	}
	azBatch := func(ctx context.Context, i int) error {
		req := gcos.AuthZENRequest{AuthZENEvaluation: gcos.AuthZENEvaluation{Subject: subject, Action: write},
			Evaluations: make([]gcos.AuthZENEvaluation, gateBatchSize)}
		for k := range req.Evaluations {
			req.Evaluations[k].Resource = resource(i*gateBatchSize + k)
		}
		ds, err := c.Evaluations(ctx, req)
		if err != nil {
			return err
		}
		n := 0
		for _, d := range ds {
			n += btoi(d.Decision)
		}
		count("", n)
		return nil
	}
	type way struct {
		name    string
		fn      func(context.Context, int) error
		callers int
		per     float64 // decisions per call
		fig     gateFigures
		viewed  float64 // share of calls answered from the view, over the reps
	}
	ways := []*way{
		{name: "http single, view", fn: single(), callers: httpCallers, per: 1},
		{name: "http single, database", fn: single(client.Full()), callers: httpCallers, per: 1},
		{name: "http batch, view", fn: batch(), callers: httpCallers, per: gateBatchSize},
		{name: "http batch, database", fn: batch(client.Full()), callers: httpCallers, per: gateBatchSize},
		{name: "in-process single, view", fn: inProcSingle, callers: gateWorkers, per: 1},
		{name: "in-process batch, view", fn: inProcBatch, callers: gateWorkers, per: gateBatchSize},
		{name: "naive", fn: naive, callers: gateWorkers, per: 1},
		{name: "http single, view, 8 callers", fn: single(), callers: 8, per: 1},
		{name: "authzen evaluation, view", fn: azSingle, callers: httpCallers, per: 1},
		{name: "authzen evaluations, view", fn: azBatch, callers: httpCallers, per: gateBatchSize},
	}
	for _, w := range ways { // warm-up, untimed: births cached, connections open
		if _, _, err := hammer(ctx, w.callers, r.opts.gateDuration/5, w.fn); err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
	}
	for rep := 0; rep < r.opts.reps; rep++ {
		for _, w := range ways {
			answers.Store(0)
			fromView.Store(0)
			rate, lat, err := hammer(ctx, w.callers, r.opts.gateDuration, w.fn)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.name, err)
			}
			w.fig.add(rate*w.per, lat)
			w.viewed += float64(fromView.Load()) / float64(max(answers.Load(), 1)) / float64(r.opts.reps)
		}
		r.log.Info("gate_http rep", "rep", rep+1, "http_single_per_s", int64(ways[0].fig.rate[rep]), "http_single_p99_ms", ways[0].fig.p99[rep],
			"http_batch_per_s", int64(ways[2].fig.rate[rep]), "naive_per_s", ways[6].fig.rate[rep])
	}

	lean, full, perDecision, err := answerBytes(ctx, base, objs)
	if err != nil {
		return nil, err
	}
	nv := ways[6].fig
	mk := func(metric, unit, better string, ours []float64, tgt *target, note string) row {
		return row{Bench: "gate_http", Metric: metric, Unit: unit, Better: better, Ours: median(ours), Naive: fptr(median(pick(nv, metric))),
			Target: tgt, Reps: r.opts.reps, OursSamples: ours, NaiveSamples: pick(nv, metric), Note: note}
	}
	viewNote := func(w *way) string {
		return fmt.Sprintf("%d callers; %.1f%% of calls answered from the view", w.callers, 100*w.viewed)
	}
	rate := func(v float64, text string) *target { return &target{Op: ">=", Value: v, Text: text} }
	p99 := &target{Op: "<=", Value: 2, Text: "≤ 2 ms"}
	return []row{
		mk("HTTP single decisions/s (view)", "decisions/s", higher, ways[0].fig.rate, rate(15_000, "≥ 15,000/s"),
			"client.Gate over keep-alive loopback, httpapi.NewServer as gcos up serves it; "+viewNote(ways[0])+"; naive column: the naive gate in-process (no HTTP)"),
		mk("HTTP single p50 (view)", "ms", lower, ways[0].fig.p50, nil, ""),
		mk("HTTP single p99 (view)", "ms", lower, ways[0].fig.p99, p99, ""),
		mk("HTTP single p99 (view), 8 callers", "ms", lower, ways[7].fig.p99, nil,
			fmt.Sprintf("the same questions from 8 callers on 2 cores: %.0f decisions/s, p50 %.2f ms; the tail is callers queueing for a core",
				median(ways[7].fig.rate), median(ways[7].fig.p50))),
		mk("HTTP single decisions/s (database)", "decisions/s", higher, ways[1].fig.rate, nil, "consistency=full: one gate statement per decision on the gate's pool"),
		mk("HTTP single p99 (database)", "ms", lower, ways[1].fig.p99, nil, ""),
		mk("HTTP batch of 100 decisions/s (view)", "decisions/s", higher, ways[2].fig.rate, rate(200_000, "≥ 200,000/s"),
			"client.GateBatch, 100 objects per call, each batch from one instant; "+viewNote(ways[2])),
		mk("HTTP batch of 100 p99 per call (view)", "ms", lower, ways[2].fig.p99, nil, ""),
		mk("HTTP batch of 100 decisions/s (database)", "decisions/s", higher, ways[3].fig.rate, nil,
			"consistency=full: one repeatable-read transaction per batch, the 100 statements pipelined"),
		mk("HTTP batch of 100 p99 per call (database)", "ms", lower, ways[3].fig.p99, nil, ""),
		mk("AuthZEN evaluation decisions/s (view)", "decisions/s", higher, ways[8].fig.rate, nil,
			"POST /access/v1/evaluation through client.Evaluate, the same questions as the HTTP single rows; the default answer {\"decision\": …}"),
		mk("AuthZEN evaluation p99 (view)", "ms", lower, ways[8].fig.p99, nil, ""),
		mk("AuthZEN evaluations of 100 decisions/s (view)", "decisions/s", higher, ways[9].fig.rate, nil,
			"POST /access/v1/evaluations through client.Evaluations, execute_all, subject and action as defaults; one gate batch from one instant"),
		mk("AuthZEN evaluations of 100 p99 per call (view)", "ms", lower, ways[9].fig.p99, nil, ""),
		mk("in-process single decisions/s (view)", "decisions/s", higher, ways[4].fig.rate, nil, "Gate.Gate, no HTTP: what the HTTP path adds is the difference"),
		mk("in-process batch of 100 decisions/s (view)", "decisions/s", higher, ways[5].fig.rate, nil, "Gate.GateBatch, no HTTP"),
		{Bench: "gate_http", Metric: "bytes per single answer (median)", Unit: "bytes", Better: lower, Ours: percentile(lean, 50), Naive: fptr(percentile(full, 50)),
			Reps: len(lean), OursSamples: lean, Note: "GET /v1/gate body, lean; naive column: the same answer with explain=1 (the full statement and every consulted row, the answer before the lean one)"},
		{Bench: "gate_http", Metric: "bytes per single answer (max)", Unit: "bytes", Better: lower, Ours: percentile(lean, 100), Naive: fptr(percentile(full, 100)),
			Reps: len(lean), Target: &target{Op: "<=", Value: 512, Text: "≤ 512 bytes"}},
		{Bench: "gate_http", Metric: "bytes per decision in a batch of 100", Unit: "bytes", Better: lower, Ours: perDecision, Reps: 1,
			Note: "POST /v1/gate body / 100 (the batch's as_of, source and token once)"},
	}, nil
}

// pick is the naive figure a metric is compared with: its rate, else its latency at the same percentile.
func pick(nv gateFigures, metric string) []float64 {
	switch {
	case strings.Contains(metric, "p50"):
		return nv.p50
	case strings.Contains(metric, "p99"):
		return nv.p99
	}
	return nv.rate
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// answerBytes weighs the gate's answers on the wire: the lean and the explained body of single answers for a
// sample of objects, and a batch of 100's body per decision.
func answerBytes(ctx context.Context, base string, objs []gateObject) (lean, full []float64, perDecision float64, err error) {
	get := func(u string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		return int(n), err
	}
	for _, o := range objs[:min(len(objs), 500)] {
		q := base + "/v1/gate?object=" + url.QueryEscape(o.ref)
		n, err := get(q)
		if err != nil {
			return nil, nil, 0, err
		}
		m, err := get(q + "&explain=1")
		if err != nil {
			return nil, nil, 0, err
		}
		lean, full = append(lean, float64(n)), append(full, float64(m))
	}
	slices.Sort(lean)
	slices.Sort(full)
	var body strings.Builder
	body.WriteString(`{"checks":[`)
	for k := range gateBatchSize {
		if k > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"object":%q}`, objs[k%len(objs)].ref)
	}
	body.WriteString("]}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/gate", strings.NewReader(body.String()))
	if err != nil {
		return nil, nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("POST /v1/gate: %s", resp.Status)
	}
	return lean, full, float64(n) / gateBatchSize, err
}
