package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"gcos"
	"gcos/httpapi"
)

const gateWorkers = 8

// hammer runs fn from workers goroutines for d and returns decisions/s and every call's latency in ms.
func hammer(ctx context.Context, workers int, d time.Duration, fn func(ctx context.Context, i int) error) (float64, []float64, error) {
	var wg sync.WaitGroup
	lats := make([][]float64, workers)
	errs := make([]error, workers)
	var seq atomic.Int64
	start := time.Now()
	end := start.Add(d)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				i := int(seq.Add(1))
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
	// The store's pool has pgxpool's default size, as `gcos up` opens it (unless -pool-conns).
	ws, objs, done, err := r.gateWorld(ctx, "gate")
	if err != nil {
		return nil, err
	}
	defer done()

	handler, err := httpapi.New(httpapi.Config{Store: ws.store, HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:0", InsecureNoAuth: true}, Version: "bench"})
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var allowed, blocked atomic.Int64
	inProcess := func(ctx context.Context, i int) error {
		o := objs[i%len(objs)]
		res := ws.store.Gate(ctx, o.coll+":"+o.code, gcos.ActionWrite)
		if res.Decision == gcos.GateAllow {
			allowed.Add(1)
		} else {
			blocked.Add(1)
		}
		return nil
	}
	overHTTP := func(ctx context.Context, i int) error {
		o := objs[i%len(objs)]
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/gate?object="+url.QueryEscape(o.coll+":"+o.code)+"&action=write", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v1/gate: %s", resp.Status)
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
	for _, fn := range []func(context.Context, int) error{inProcess, overHTTP, naive} {
		if _, _, err := hammer(ctx, gateWorkers, time.Second, fn); err != nil {
			return nil, err
		}
	}
	allowed.Store(0)
	blocked.Store(0)
	naiveAllowed.Store(0)
	naiveCalls.Store(0)
	var in, web, nv gateFigures
	for i := 0; i < r.opts.reps; i++ {
		for _, step := range []struct {
			fn  func(context.Context, int) error
			fig *gateFigures
		}{{inProcess, &in}, {overHTTP, &web}, {naive, &nv}} {
			rate, lat, err := hammer(ctx, gateWorkers, r.opts.gateDuration, step.fn)
			if err != nil {
				return nil, err
			}
			step.fig.add(rate, lat)
		}
		r.log.Info("gate rep", "rep", i+1, "in_process_per_s", int64(in.rate[i]), "http_per_s", int64(web.rate[i]), "http_p99_ms", web.p99[i], "naive_per_s", int64(nv.rate[i]))
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
			fmt.Sprintf("Store.Gate over %d random objects, action write; %.1f%% allowed (naive %.1f%%); store pool of %d conns (pgxpool's default unless -pool-conns)",
				len(objs), 100*float64(allowed.Load())/float64(max(total, 1)),
				100*float64(naiveAllowed.Load())/float64(max(naiveCalls.Load(), 1)), ws.pool.Config().MaxConns)),
		mk("in-process p50", "ms", lower, in.p50, nv.p50, nil, ""),
		mk("in-process p99", "ms", lower, in.p99, nv.p99, p99, ""),
		mk("HTTP loopback decisions/s (8 clients)", "decisions/s", higher, web.rate, nv.rate, rate,
			"GET /v1/gate on an httptest server with httpapi.New, keep-alive clients; naive column: the naive gate in-process (no HTTP)"),
		mk("HTTP loopback p50", "ms", lower, web.p50, nv.p50, nil, ""),
		mk("HTTP loopback p99", "ms", lower, web.p99, nv.p99, p99,
			"naive: re-derives the object's group verdict from the registries on every call (group members re-aggregated, policy per scope, owner lookup)"),
	}, nil
}
