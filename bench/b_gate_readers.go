package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gcos"
	gclient "gcos/client"
	"gcos/gate"
	"gcos/httpapi"
	"gcos/postgres"
)

// invariantReaders is how many dashboards read /v1/invariant in a loop beside the gate.
const invariantReaders = 40

// benchGateReaders asks the gate over HTTP idle and beside 40 clients reading /v1/invariant in a loop, on the
// server `gcos up` runs (the gate on its own pool, expensive reads computed once per interval); the naive column
// is the same server with one shared pool and no read cache, as before the gate had its own connections.
func benchGateReaders(ctx context.Context, r *runner) ([]row, error) {
	ws, objs, done, err := r.gateWorld(ctx, "gate_readers")
	if err != nil {
		return nil, err
	}
	defer done()
	cfg := benchConfig(r.opts)
	gatePool, err := r.env.pool(ctx, ws.db, int32(cfg.Gate.PoolConns), "gcos-bench-gate")
	if err != nil {
		return nil, err
	}
	defer gatePool.Close()
	ours := gate.New(postgres.New(ws.pool, cfg, r.log.With("system", "gcos")).WithGatePool(gatePool), nil)
	// Ours answers from the gate's view, kept current as `gcos up` keeps it (gate.view).
	view := ours.View()
	vctx, stopView := context.WithCancel(ctx)
	defer stopView()
	go func() { _ = view.Run(vctx) }()
	if err := waitFresh(ctx, view); err != nil {
		return nil, err
	}
	oursURL, stopOurs, err := serveBench(ours, false)
	if err != nil {
		return nil, err
	}
	defer stopOurs()
	// Naive, as before the gate had its own pool: one shared pool, every /v1/invariant computed for its caller.
	naiveURL, stopNaive, err := serveBench(ws.gate, true)
	if err != nil {
		return nil, err
	}
	defer stopNaive()

	tr := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	type phase struct {
		rate, p99, blockPct, starved []float64
		readsPerS                    []float64
	}
	measure := func(base string, readers int, ph *phase) error {
		var blocked, starved, reads atomic.Int64
		gc, err := gclient.New(base, gclient.WithRetries(0), gclient.WithHTTPClient(client), gclient.WithTimeout(30*time.Second))
		if err != nil {
			return err
		}
		gate := func(ctx context.Context, i int) error {
			res := gc.Gate(ctx, objs[i%len(objs)].ref, gcos.ActionWrite)
			if res.Err != nil {
				return res.Err // the server answered no decision: a failed run
			}
			if !res.Allowed() {
				blocked.Add(1)
				if strings.Contains(res.Reason, "could not read the candidate state") {
					starved.Add(1)
				}
			}
			return nil
		}
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		readErr := make(chan error, readers)
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rctx.Err() == nil {
					req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"/v1/invariant", nil)
					resp, err := client.Do(req)
					if err != nil {
						if rctx.Err() == nil {
							readErr <- err
						}
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					reads.Add(1)
				}
			}()
		}
		t0 := time.Now()
		rate, lat, err := hammer(ctx, gateWorkers, r.opts.gateDuration, gate)
		elapsed := time.Since(t0)
		stop()
		wg.Wait()
		close(readErr)
		if err != nil {
			return err
		}
		if err := <-readErr; err != nil {
			return fmt.Errorf("invariant reader: %w", err)
		}
		total := float64(len(lat))
		ph.rate = append(ph.rate, rate)
		ph.p99 = append(ph.p99, percentile(lat, 99))
		ph.blockPct = append(ph.blockPct, 100*float64(blocked.Load())/max(total, 1))
		ph.starved = append(ph.starved, float64(starved.Load()))
		ph.readsPerS = append(ph.readsPerS, float64(reads.Load())/elapsed.Seconds())
		return nil
	}
	// Warm-up, untimed.
	for _, base := range []string{oursURL, naiveURL} {
		if err := measure(base, 0, &phase{}); err != nil {
			return nil, err
		}
	}
	var oursIdle, oursLoaded, naiveIdle, naiveLoaded phase
	viewStart := view.Stats()
	for i := 0; i < r.opts.reps; i++ {
		for _, step := range []struct {
			base    string
			readers int
			ph      *phase
		}{{oursURL, 0, &oursIdle}, {oursURL, invariantReaders, &oursLoaded}, {naiveURL, 0, &naiveIdle}, {naiveURL, invariantReaders, &naiveLoaded}} {
			if err := measure(step.base, step.readers, step.ph); err != nil {
				return nil, err
			}
		}
		r.log.Info("gate_readers rep", "rep", i+1,
			"ours_p99_idle_ms", oursIdle.p99[i], "ours_p99_readers_ms", oursLoaded.p99[i], "ours_block_idle_pct", oursIdle.blockPct[i], "ours_block_readers_pct", oursLoaded.blockPct[i],
			"ours_starved", oursLoaded.starved[i], "ours_reads_per_s", int64(oursLoaded.readsPerS[i]),
			"naive_p99_idle_ms", naiveIdle.p99[i], "naive_p99_readers_ms", naiveLoaded.p99[i], "naive_block_readers_pct", naiveLoaded.blockPct[i],
			"naive_starved", naiveLoaded.starved[i], "naive_reads_per_s", int64(naiveLoaded.readsPerS[i]))
	}
	viewEnd := view.Stats()
	viewShare := 100 * float64(viewEnd.Answered-viewStart.Answered) / max(float64(viewEnd.Answered-viewStart.Answered+viewEnd.ReadThrough-viewStart.ReadThrough), 1)
	ratio := func(a, b []float64) []float64 {
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] / max(b[i], 1e-9)
		}
		return out
	}
	mk := func(metric, unit, better string, ours, naive []float64, tgt *target, note string) row {
		return row{Bench: "gate_readers", Metric: metric, Unit: unit, Better: better, Ours: median(ours), Naive: fptr(median(naive)),
			Target: tgt, Reps: r.opts.reps, OursSamples: ours, NaiveSamples: naive, Note: note}
	}
	return []row{
		mk("gate p99, idle", "ms", lower, oursIdle.p99, naiveIdle.p99, nil,
			fmt.Sprintf("GET /v1/gate, %d keep-alive clients, httpapi.NewServer on loopback; ours: the gate's view (%.1f%% of its answers; the rest read through to its own pool of %d, gate.pool_conns), reads cached per http.read_cache_interval; naive: one shared pool, no view, no read cache",
				gateWorkers, viewShare, cfg.Gate.PoolConns)),
		mk(fmt.Sprintf("gate p99, %d /v1/invariant readers", invariantReaders), "ms", lower, oursLoaded.p99, naiveLoaded.p99, nil, ""),
		mk("gate p99 with readers ÷ idle", "×", lower, ratio(oursLoaded.p99, oursIdle.p99), ratio(naiveLoaded.p99, naiveIdle.p99), &target{Op: "<=", Value: 2, Text: "≤ 2×"}, ""),
		mk("gate decisions/s, idle", "decisions/s", higher, oursIdle.rate, naiveIdle.rate, nil, ""),
		mk(fmt.Sprintf("gate decisions/s, %d readers", invariantReaders), "decisions/s", higher, oursLoaded.rate, naiveLoaded.rate, nil, ""),
		mk("gate block %, idle", "%", lower, oursIdle.blockPct, naiveIdle.blockPct, nil, "same objects in the same order in every phase"),
		mk(fmt.Sprintf("gate block %%, %d readers", invariantReaders), "%", lower, oursLoaded.blockPct, naiveLoaded.blockPct, nil, ""),
		mk("blocks for lack of an answer, with readers", "decisions", lower, oursLoaded.starved, naiveLoaded.starved, &target{Op: "<=", Value: 0, Text: "0"},
			"blocks whose reason is that the candidate state could not be read in gate.timeout (starvation), per repetition"),
		mk("/v1/invariant answers/s to the readers", "answers/s", higher, oursLoaded.readsPerS, naiveLoaded.readsPerS, nil, ""),
	}, nil
}

// gateObject is one object the gate benchmarks ask about.
// gateObject is an object the gate benchmarks ask about; ref is its name as a caller holds it (collection:code).
type gateObject struct{ coll, code, ref string }

// gateWorld opens a prepared world (backfilled, ruleset and event types active, as `gcos up --demo` leaves it) and
// draws the objects the gate benchmarks ask about.
func (r *runner) gateWorld(ctx context.Context, label string) (*worldStore, []gateObject, func(), error) {
	ws, done, err := r.openWorld(ctx, label, r.opts.births, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := prepare(ctx, ws.store); err != nil {
		done()
		return nil, nil, nil, err
	}
	objs, err := gateObjects(ctx, ws)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return ws, objs, done, nil
}

// gateObjects draws up to 10,000 objects of the world in a random but repeatable order.
func gateObjects(ctx context.Context, ws *worldStore) ([]gateObject, error) {
	rows, err := ws.pool.Query(ctx, `SELECT collection_name, entity_code FROM birth_registry ORDER BY hashint8(id) LIMIT 10000`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var objs []gateObject
	for rows.Next() {
		var o gateObject
		if err := rows.Scan(&o.coll, &o.code); err != nil {
			return nil, err
		}
		o.ref = o.coll + ":" + o.code
		objs = append(objs, o)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no objects to gate")
	}
	return objs, nil
}

// serveBench serves g with httpapi.NewServer, as `gcos up` does, on a loopback port. uncached (the naive
// server) routes /v1/invariant past the API's read cache: each caller runs the ledger query.
func serveBench(g *gate.Gate, uncached bool) (string, func(), error) {
	limits := gcos.HTTPConfig{Listen: "127.0.0.1:0", InsecureNoAuth: true}
	srv, err := httpapi.NewServer(httpapi.Config{Store: g.Store(), Gate: g, HTTP: limits, Version: "bench"})
	if err != nil {
		return "", nil, err
	}
	if uncached {
		api := srv.Handler
		mux := http.NewServeMux()
		mux.Handle("/", api)
		mux.HandleFunc("GET /v1/invariant", func(w http.ResponseWriter, r *http.Request) {
			rep, err := g.Invariant(r.Context(), "")
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(httpapi.NewInvariantView(rep))
		})
		srv.Handler = mux
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
