package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"gcos"
	"gcos/embeddedpg"
	"gcos/gate"
	"gcos/intake"
	"gcos/postgres"
	"gcos/world"
)

// benchGateReplica asks the gate through (no view) with a streaming replica of the benchmark's cluster configured,
// under a birth load on the primary: decisions/s routed to the replica while it is proven within
// gate.max_staleness, beside the same questions asked of the primary (consistency=full), and the replica's lag as
// the store measures it.
func benchGateReplica(ctx context.Context, r *runner) ([]row, error) {
	if r.env.cluster == nil {
		r.log.Warn("gate_replica needs the benchmark's own embedded cluster to start a replica of; skipped with -database-url")
		return nil, nil
	}
	ws, objs, done, err := r.gateWorld(ctx, "gate_replica")
	if err != nil {
		return nil, err
	}
	defer done()
	// The embedded default commits without waiting for the WAL flush, which is also what a standby streams: a
	// primary that serves a replica's readers flushes at commit.
	if _, err := ws.pool.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s SET synchronous_commit = on`, postgres.Quote(ws.db))); err != nil {
		return nil, err
	}
	replica, err := r.env.cluster.StartReplica(ctx, embeddedpg.Config{DataDir: filepath.Join(r.env.tmpDir, "replica"), Ephemeral: true,
		RemoveOnStop: true, Logger: r.log})
	if err != nil {
		return nil, err
	}
	defer func() { _ = replica.Stop(context.Background()) }()
	cfg := benchConfig(r.opts)
	cfg.Gate.View = false
	store, err := postgres.Open(ctx, postgres.Databases{URL: r.env.dsnFor(ws.db), ReplicaURL: replica.DatabaseDSN(ws.db)}, cfg, r.log.With("system", "gcos"))
	if err != nil {
		return nil, err
	}
	defer store.Close()
	g := gate.New(store, nil, gate.WithHandOff(intake.New(store).Present))
	mctx, stopMonitor := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Run(mctx) }()
	defer func() { stopMonitor(); wg.Wait() }()

	churnPool, err := r.env.pool(ctx, ws.db, 4, "gcos-bench-churn")
	if err != nil {
		return nil, err
	}
	defer churnPool.Close()
	churn := &world.Churn{Pool: churnPool, BirthsPerSecond: r.opts.loadRate, Seed: 7, Logger: r.log}
	cctx, stopChurn := context.WithCancel(ctx)
	wg.Add(1)
	go func() { defer wg.Done(); _ = churn.Run(cctx) }()
	defer stopChurn()
	time.Sleep(3 * time.Second) // the load and the monitor reach their steady state

	// The lag, sampled while the gate is asked.
	var lags []float64
	var lmu sync.Mutex
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if l := g.ReplicaStats().LagSeconds; l >= 0 {
					lmu.Lock()
					lags = append(lags, l*1000)
					lmu.Unlock()
				}
			}
		}
	}()
	full := gate.GateOptions{Consistency: gate.ConsistencyFull}
	var viaReplica, viaPrimary gateFigures
	before := g.ReplicaStats()
	b0, t0 := churn.Births(), time.Now()
	for i := 0; i < r.opts.reps; i++ {
		rate, lat, err := hammer(ctx, gateWorkers, r.opts.gateDuration, func(ctx context.Context, i int) error {
			g.Gate(ctx, objs[i%len(objs)].ref, gcos.ActionRead)
			return nil
		})
		if err != nil {
			return nil, err
		}
		viaReplica.add(rate, lat)
		if rate, lat, err = hammer(ctx, gateWorkers, r.opts.gateDuration, func(ctx context.Context, i int) error {
			g.GateWith(ctx, objs[i%len(objs)].ref, gcos.ActionRead, full)
			return nil
		}); err != nil {
			return nil, err
		}
		viaPrimary.add(rate, lat)
	}
	births := float64(churn.Births()-b0) / time.Since(t0).Seconds()
	stopSampling()
	after := g.ReplicaStats()
	reads, fallbacks := after.Reads-before.Reads, after.Fallbacks-before.Fallbacks
	share := 0.0
	if reads+fallbacks > 0 {
		share = 100 * float64(reads) / float64(reads+fallbacks)
	}
	lmu.Lock()
	defer lmu.Unlock()
	load := fmt.Sprintf("under %s births/s on the primary", thousands(int64(births)))
	return []row{
		{Bench: "gate_replica", Metric: "gate read-through decisions/s, replica vs primary, " + load, Unit: "decisions/s", Better: higher,
			Ours: median(viaReplica.rate), Naive: fptr(median(viaPrimary.rate)), Reps: r.opts.reps, OursSamples: viaReplica.rate, NaiveSamples: viaPrimary.rate,
			Note: fmt.Sprintf("%d callers, no view; %.1f%% of the replica-routed questions read the replica (the rest its proof was older than gate.max_staleness %s); p99 %.2f ms vs %.2f ms on the primary",
				gateWorkers, share, cfg.Gate.MaxStaleness.Duration(), median(viaReplica.p99), median(viaPrimary.p99))},
		{Bench: "gate_replica", Metric: "replica lag as measured (p50), " + load, Unit: "ms", Better: lower, Ours: percentile(lags, 50), Reps: len(lags), OursSamples: lags,
			Note: fmt.Sprintf("p99 %.1f ms, max %.1f ms over %d samples every 50 ms; measured every gate.view_refresh (%s) from the primary's WAL insert position and the replica's replay position",
				percentile(lags, 99), percentile(lags, 100), len(lags), cfg.Gate.ViewRefresh.Duration())},
	}, nil
}
