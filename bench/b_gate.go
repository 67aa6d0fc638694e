package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/postgres"
	"gcos/scan"
)

const gateWorkers = 8

// hammer runs fn from workers goroutines for d and returns decisions/s and every call's latency in ms.
func hammer(ctx context.Context, workers int, d time.Duration, fn func(ctx context.Context, i int) error) (float64, []float64, error) {
	var wg sync.WaitGroup
	lats := make([][]float64, workers)
	errs := make([]error, workers)
	start := time.Now()
	end := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker walks the objects on its own (a shared counter would make the callers contend on it).
			for n := 0; time.Now().Before(end) && ctx.Err() == nil; n++ {
				i := n*workers + w
				t0 := time.Now()
				if err := fn(ctx, i); err != nil {
					errs[w] = err
					return
				}
				lats[w] = append(lats[w], ms(time.Since(t0)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	var all []float64
	for _, l := range lats {
		all = append(all, l...)
	}
	return float64(len(all)) / elapsed.Seconds(), all, nil
}

// gateFigures collects per-repetition figures of one way of asking the gate.
type gateFigures struct{ rate, p50, p99 []float64 }

func (g *gateFigures) add(rate float64, lat []float64) {
	g.rate = append(g.rate, rate)
	g.p50 = append(g.p50, percentile(lat, 50))
	g.p99 = append(g.p99, percentile(lat, 99))
}

func benchGate(ctx context.Context, r *runner) ([]row, error) {
	// The store's pool has database.pool_conns connections, as `gcos up` opens it (unless -pool-conns).
	ws, objs, done, err := r.gateWorld(ctx, "gate")
	if err != nil {
		return nil, err
	}
	defer done()

	// The gate's view, as gcos up runs it: the view's figures go through it, the database figures ask
	// with consistency=full.
	heapBefore := heapInUse()
	view := ws.gate.View()
	vctx, stopView := context.WithCancel(ctx)
	defer stopView()
	go func() { _ = view.Run(vctx) }()
	if err := waitFresh(ctx, view); err != nil {
		return nil, err
	}
	viewHeap := float64(heapInUse()-heapBefore) / (1 << 20)

	var allowed, blocked, fromView, viewCalls atomic.Int64
	inProcess := func(ctx context.Context, i int) error {
		o := objs[i%len(objs)]
		res := ws.gate.GateWith(ctx, o.ref, gcos.ActionWrite, gate.GateOptions{Consistency: gate.ConsistencyFull})
		if res.Decision == gcos.GateAllow {
			allowed.Add(1)
		} else {
			blocked.Add(1)
		}
		return nil
	}
	inView := func(ctx context.Context, i int) error {
		o := objs[i%len(objs)]
		res := ws.gate.Gate(ctx, o.ref, gcos.ActionWrite)
		viewCalls.Add(1)
		if res.Source == gate.SourceView {
			fromView.Add(1)
		}
		return nil
	}
	var naiveAllowed, naiveCalls atomic.Int64
	naive := func(ctx context.Context, i int) error {
		o := objs[i%len(objs)]
		ok, err := naiveGate(ctx, ws.pool, o.coll, o.code)
		naiveCalls.Add(1)
		if ok {
			naiveAllowed.Add(1)
		}
		return err
	}
	// Warm-up, untimed.
	for _, fn := range []func(context.Context, int) error{inProcess, inView, naive} {
		if _, _, err := hammer(ctx, gateWorkers, time.Second, fn); err != nil {
			return nil, err
		}
	}
	allowed.Store(0)
	blocked.Store(0)
	naiveAllowed.Store(0)
	naiveCalls.Store(0)
	fromView.Store(0)
	viewCalls.Store(0)
	var in, vw, nv gateFigures
	for i := 0; i < r.opts.reps; i++ {
		for _, step := range []struct {
			fn  func(context.Context, int) error
			fig *gateFigures
		}{{inProcess, &in}, {inView, &vw}, {naive, &nv}} {
			rate, lat, err := hammer(ctx, gateWorkers, r.opts.gateDuration, step.fn)
			if err != nil {
				return nil, err
			}
			step.fig.add(rate, lat)
		}
		r.log.Info("gate rep", "rep", i+1, "in_process_per_s", int64(in.rate[i]), "view_per_s", int64(vw.rate[i]), "view_p99_ms", vw.p99[i],
			"naive_per_s", int64(nv.rate[i]))
	}
	staleness, err := measureStaleness(ctx, ws, objs, 25)
	if err != nil {
		return nil, err
	}
	p99 := &target{Op: "<=", Value: 5, Text: "≤ 5 ms"}
	rate := &target{Op: ">=", Value: 10_000, Text: "≥ 10,000/s"}
	mk := func(metric, unit, better string, ours, naive []float64, tgt *target, note string) row {
		return row{Bench: "gate", Metric: metric, Unit: unit, Better: better, Ours: median(ours), Naive: fptr(median(naive)),
			Target: tgt, Reps: r.opts.reps, OursSamples: ours, NaiveSamples: naive, Note: note}
	}
	total := allowed.Load() + blocked.Load()
	return []row{
		mk("in-process decisions/s (8 goroutines)", "decisions/s", higher, in.rate, nv.rate, rate,
			fmt.Sprintf("Gate.Gate over %d random objects, action write; %.1f%% allowed (naive %.1f%%); store pool of %d conns (database.pool_conns unless -pool-conns)",
				len(objs), 100*float64(allowed.Load())/float64(max(total, 1)),
				100*float64(naiveAllowed.Load())/float64(max(naiveCalls.Load(), 1)), ws.pool.Config().MaxConns)),
		mk("in-process p50", "ms", lower, in.p50, nv.p50, nil, "the database path: GateWith(consistency=full), one statement per decision"),
		mk("in-process p99", "ms", lower, in.p99, nv.p99, p99, ""),
		mk("view decisions/s (8 goroutines)", "decisions/s", higher, vw.rate, nv.rate, &target{Op: ">=", Value: 500_000, Text: "≥ 500,000/s"},
			fmt.Sprintf("Gate.Gate with the view running (gate.max_staleness %s); %.2f%% answered from the view, the rest read through",
				ws.store.Config().Gate.MaxStaleness.Duration(), 100*float64(fromView.Load())/float64(max(viewCalls.Load(), 1)))),
		mk("view p50", "ms", lower, vw.p50, nv.p50, nil, ""),
		mk("view p99", "ms", lower, vw.p99, nv.p99, &target{Op: "<=", Value: 0.05, Text: "≤ 50 µs"}, ""),
		{Bench: "gate", Metric: "view staleness p50", Unit: "ms", Better: lower, Ours: percentile(staleness, 50), Reps: len(staleness), OursSamples: staleness,
			Note: "a verdict change (a high-risk group marked dirty, then scanned clean) committed → the first view decision that reflects it"},
		{Bench: "gate", Metric: "view staleness p99", Unit: "ms", Better: lower, Ours: percentile(staleness, 99), Reps: len(staleness),
			Target: &target{Op: "<=", Value: 50, Text: "≤ 50 ms"}},
		{Bench: "gate", Metric: "view staleness max", Unit: "ms", Better: lower, Ours: percentile(staleness, 100), Reps: len(staleness),
			Target: &target{Op: "<=", Value: ms(ws.store.Config().Gate.MaxStaleness.Duration()), Text: "≤ gate.max_staleness"}},
		{Bench: "gate", Metric: "view heap", Unit: "MiB", Better: lower, Ours: viewHeap, Reps: 1,
			Target: &target{Op: "<=", Value: 200, Text: "≤ 200 MiB"},
			Note:   fmt.Sprintf("Go heap in use after the view's first load at %d births, minus before (births cached as asked)", r.opts.births)},
	}, nil
}

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// waitFresh waits until the view may answer.
func waitFresh(ctx context.Context, v *gate.VerdictView) error {
	deadline := time.Now().Add(5 * time.Minute)
	for !v.Stats().Fresh {
		if time.Now().After(deadline) {
			return errors.New("gate view: never caught up")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// measureStaleness flips a high-risk allowed object's verdict n times each way — its group marked dirty (block),
// then scanned clean (allow) — and returns, in ms, how long after each commit the view's first decision reflected it.
func measureStaleness(ctx context.Context, ws *worldStore, objs []gateObject, n int) ([]float64, error) {
	var obj, key string
	for _, o := range objs {
		res := ws.gate.Gate(ctx, o.ref, gcos.ActionWrite)
		if res.Decision == gcos.GateAllow && res.Source == gate.SourceView && !slices.Contains(ws.store.Config().Gate.LowRiskClasses, res.RiskClass) {
			for _, c := range res.Consulted {
				if c.Source == gcos.GateSourceGroup {
					obj, key = o.ref, c.Key
					break
				}
			}
		}
		if key != "" {
			break
		}
	}
	if key == "" {
		return nil, errors.New("gate view: no high-risk allowed object to flip")
	}
	stage := scan.New(ws.store)
	reflect := func(want string, since time.Time) (float64, error) {
		deadline := since.Add(time.Minute)
		for {
			res := ws.gate.Gate(ctx, obj, gcos.ActionWrite)
			if res.Decision == want && res.Source == gate.SourceView {
				return ms(time.Since(since)), nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("gate view: %s never answered %s from the view (last: %s from %q, %q)", obj, want, res.Decision, res.Source, res.Reasons)
			}
		}
	}
	var out []float64
	for range n {
		if _, err := ws.store.MarkDirty(ctx, []string{key}, gcos.DirtyAuthority); err != nil {
			return nil, err
		}
		d, err := reflect(gcos.GateBlock, time.Now())
		if err != nil {
			return nil, err
		}
		out = append(out, d)
		// Scan until the group is clean again; the tick that scanned it has committed when it returns.
		var committed time.Time
		for deadline := time.Now().Add(time.Minute); ; {
			res, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeIncremental})
			if err != nil {
				return nil, err
			}
			if res.Claimed > 0 {
				committed = time.Now()
			}
			var dirty bool
			if err := ws.pool.QueryRow(ctx, `SELECT c.dirty FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
				WHERE c.group_key = $1`, key).Scan(&dirty); err != nil {
				return nil, err
			}
			if !dirty && !committed.IsZero() {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("gate view: group %s was not scanned clean within a minute", key)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if d, err = reflect(gcos.GateAllow, committed); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
