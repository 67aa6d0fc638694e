package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/daemon"
	"gcos/postgres"
	"gcos/world"
)

// freshSQL reads how far a change has got: whether the intake cursor has passed the new birth (so its dirty mark
// committed, in the cursor's transaction), whether every group of the birth (one per scope) reads clean in
// v_candidate_effective with a scan_time after the birth's commit (fresh), and the latest such scan_time (the start
// of the transaction that judged the last of them).
const freshSQL = `
SELECT coalesce((SELECT (c.position_tstz, c.position_id) >= ($1::timestamptz, $2::bigint)
                 FROM gov_worker_cursor c WHERE c.source = $3), false),
       f.n = cardinality($4::text[]), f.scanned
FROM (SELECT count(*) AS n, max(e.scan_time) AS scanned FROM v_candidate_effective e
      WHERE e.group_key = ANY($4) AND e.clean AND e.scan_time > $1) f`

const latencyInsertSQL = `
INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
VALUES ($1, $2, $3, 'active', 'birth-api', 'gcos-bench') RETURNING id, born_at`

// latencyClass is a (class, collection) whose active group exists, with its group keys (one per scope).
type latencyClass struct {
	class, coll string
	keys        []string
}

func latencyClasses(ctx context.Context, p *pgxpool.Pool) ([]latencyClass, error) {
	rows, err := p.Query(ctx, `
		SELECT object_class, source_registry, array_agg(group_key ORDER BY group_key)
		FROM governance_group
		WHERE lifecycle_status = 'active' AND object_class IS NOT NULL AND source_registry IS NOT NULL
		GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []latencyClass
	for rows.Next() {
		var c latencyClass
		if err := rows.Scan(&c.class, &c.coll, &c.keys); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 && rows.Err() == nil {
		return nil, errors.New("no active groups to change")
	}
	return out, rows.Err()
}

// changeTiming is one change's way to a fresh verdict, from the commit of its birth: handed off (the intake's
// transaction that marked its groups committed: the poll interval and the handoff), scan started (the wake, the
// debounce and the claim's wait), fresh (the evaluation, the write and its commit, and the poller's own interval).
type changeTiming struct {
	handed, scanned, fresh time.Duration
}

// oneChange inserts one birth (an ordinary INSERT, born_at = now()) and polls until its verdict is fresh, returning
// the time from the commit to the first poll that sees it fresh, and the stages on the way.
func oneChange(ctx context.Context, p *pgxpool.Pool, c latencyClass, source string, seq int) (changeTiming, error) {
	var ct changeTiming
	var id int64
	var born time.Time
	code := fmt.Sprintf("%s-bench%d-%s", c.class, seq, randomHex(4))
	if err := p.QueryRow(ctx, latencyInsertSQL, code, c.coll, c.class).Scan(&id, &born); err != nil {
		return ct, fmt.Errorf("insert change: %w", err)
	}
	t0 := time.Now() // the INSERT's implicit transaction has committed
	deadline := t0.Add(60 * time.Second)
	for {
		var handed, fresh bool
		var scanned *time.Time
		if err := p.QueryRow(ctx, freshSQL, born, id, source, c.keys).Scan(&handed, &fresh, &scanned); err != nil {
			return ct, fmt.Errorf("poll freshness: %w", err)
		}
		if handed && ct.handed == 0 {
			ct.handed = time.Since(t0)
		}
		if fresh {
			ct.fresh = time.Since(t0)
			// scan_time is the database's clock, as born_at is: the scan began this long after the commit.
			ct.scanned = min(max(scanned.Sub(born), ct.handed), ct.fresh)
			return ct, nil
		}
		if time.Now().After(deadline) {
			return ct, fmt.Errorf("change %s:%s not fresh after 60 s", c.coll, code)
		}
		select {
		case <-ctx.Done():
			return ct, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func benchLatency(ctx context.Context, r *runner) ([]row, error) {
	// The store's pool has pgxpool's default size, as `gcos up` opens it.
	ws, done, err := r.openWorld(ctx, "latency", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := prepare(ctx, ws.store); err != nil {
		return nil, err
	}
	cfg := ws.store.Config()
	// The daemon as `gcos up` runs it, less the API, the full audit and promotion: the intake (tailing the birth
	// source: the changes measured are births, the changelog history is not replayed) and the event-driven and
	// incremental scan loops.
	d, err := daemon.New(daemon.Config{Store: ws.store, Logger: r.log,
		Sources:   []postgres.TailSource{postgres.BirthTailSource(cfg.SourceBinding)},
		ScanModes: []string{postgres.ModeEvent, postgres.ModeIncremental}, NoPromotion: true})
	if err != nil {
		return nil, err
	}
	if _, err := d.Intake.Once(ctx); err != nil {
		return nil, fmt.Errorf("intake catch-up: %w", err)
	}
	if _, err := drainScans(ctx, ws.store); err != nil {
		return nil, err
	}
	if err := drainDetections(ctx, ws.store); err != nil {
		return nil, err
	}
	classes, err := latencyClasses(ctx, ws.pool)
	if err != nil {
		return nil, err
	}
	// The writer of changes and the poller, and the churn, are other clients of the database: their own pools.
	client, err := r.env.pool(ctx, ws.db, 4, "gcos-bench-client")
	if err != nil {
		return nil, err
	}
	defer client.Close()
	churnPool, err := r.env.pool(ctx, ws.db, 4, "gcos-bench-churn")
	if err != nil {
		return nil, err
	}
	defer churnPool.Close()

	// The daemon runs until the measurements end.
	dctx, dcancel := context.WithCancel(ctx)
	daemonErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Run(dctx); err != nil {
			daemonErr <- fmt.Errorf("daemon: %w", err)
		}
	}()
	stop := func() {
		dcancel()
		wg.Wait()
	}
	defer stop()
	time.Sleep(time.Second)

	src := postgres.BirthTailSource(cfg.SourceBinding).Name
	rnd := rand.New(rand.NewPCG(7, 11))
	seq := 0
	// stages are each phase's per-change times from the commit to the handoff, from the handoff to the scan's
	// start, and from the scan's start to the fresh read.
	type stages struct{ handoff, wake, scan []float64 }
	split := map[string]*stages{}
	measure := func(phase string, n int) ([]float64, error) {
		var out []float64
		st := &stages{}
		split[phase] = st
		for i := 0; i < n; i++ {
			seq++
			ct, err := oneChange(dctx, client, classes[rnd.IntN(len(classes))], src, seq)
			if err != nil {
				select {
				case derr := <-daemonErr:
					return out, derr
				default:
				}
				return out, err
			}
			out = append(out, ms(ct.fresh))
			st.handoff = append(st.handoff, ms(ct.handed))
			st.wake = append(st.wake, ms(ct.scanned-ct.handed))
			st.scan = append(st.scan, ms(ct.fresh-ct.scanned))
			if (i+1)%50 == 0 {
				r.log.Info("latency", "phase", phase, "changes", i+1, "p50_ms", percentile(out, 50), "p99_ms", percentile(out, 99))
			}
			// A short random pause, so changes do not phase-lock with the pollers' intervals.
			time.Sleep(time.Duration(rnd.IntN(50)) * time.Millisecond)
		}
		return out, nil
	}
	// The naive baseline: a full re-derive per change, timed from the change's commit.
	naive := func(n int) ([]float64, error) {
		var out []float64
		for i := 0; i < n; i++ {
			seq++
			c := classes[rnd.IntN(len(classes))]
			if _, err := client.Exec(dctx, latencyInsertSQL, fmt.Sprintf("%s-naive%d-%s", c.class, seq, randomHex(4)), c.coll, c.class); err != nil {
				return out, err
			}
			t0 := time.Now()
			if _, err := naiveBackfill(dctx, client); err != nil {
				return out, err
			}
			out = append(out, ms(time.Since(t0)))
		}
		return out, nil
	}

	idle, err := measure("idle", r.opts.latencyChanges)
	if err != nil {
		return nil, err
	}
	idleNaive, err := naive(r.opts.reps)
	if err != nil {
		return nil, err
	}

	churn := &world.Churn{Pool: churnPool, BirthsPerSecond: r.opts.loadRate, Seed: 99, Logger: r.log}
	cctx, ccancel := context.WithCancel(dctx)
	var cwg sync.WaitGroup
	cwg.Add(1)
	go func() {
		defer cwg.Done()
		if err := churn.Run(cctx); err != nil {
			r.log.Error("churn", "err", err)
		}
	}()
	stopChurn := func() {
		ccancel()
		cwg.Wait()
	}
	defer stopChurn()
	time.Sleep(5 * time.Second) // reach the steady state
	b0, t0 := churn.Births(), time.Now()
	loaded, err := measure("load", r.opts.latencyChanges)
	if err != nil {
		return nil, err
	}
	loadedNaive, err := naive(r.opts.reps)
	if err != nil {
		return nil, err
	}
	rate := float64(churn.Births()-b0) / time.Since(t0).Seconds()
	stopChurn()
	stop()

	note := fmt.Sprintf("coalesce_window %s, intake poll_interval %s (gcos.DefaultConfig unless overridden); ours: %d changes, naive (full re-derive per change): %d",
		cfg.Scan.CoalesceWindow.Duration(), cfg.Intake.PollInterval.Duration(), r.opts.latencyChanges, r.opts.reps)
	mk := func(metric string, p float64, ours, nv []float64, tgt *target, n string) row {
		return row{Bench: "latency", Metric: metric, Unit: "ms", Better: lower, Ours: percentile(ours, p), Naive: fptr(percentile(nv, p)),
			Target: tgt, Reps: len(ours), OursSamples: ours, NaiveSamples: nv, Note: n}
	}
	load := fmt.Sprintf("under %s births/s", thousands(int64(r.opts.loadRate)))
	rows := []row{
		mk("change → fresh verdict, idle, p50", 50, idle, idleNaive, nil, ""),
		mk("change → fresh verdict, idle, p99", 99, idle, idleNaive, &target{Op: "<=", Value: 250, Text: "≤ 250 ms"}, note),
		mk(load+", p50", 50, loaded, loadedNaive, nil, ""),
		mk(load+", p99", 99, loaded, loadedNaive, &target{Op: "<=", Value: 1000, Text: "≤ 1 s"},
			fmt.Sprintf("churn achieved %s births/s while measured", thousands(int64(rate)))),
	}
	// The breakdown: where each phase's time goes (no naive counterpart: the naive re-derive has no stages).
	for _, ph := range []struct{ key, name string }{{"idle", "idle"}, {"load", load}} {
		st := split[ph.key]
		for _, seg := range []struct {
			name string
			xs   []float64
		}{{"commit → handed off (intake poll + handoff)", st.handoff}, {"handed off → scan starts (wake + claim)", st.wake},
			{"scan starts → fresh (evaluate + write + commit)", st.scan}} {
			for _, p := range []float64{50, 99} {
				rows = append(rows, row{Bench: "latency", Metric: fmt.Sprintf("%s: %s, p%.0f", ph.name, seg.name, p), Unit: "ms",
					Better: lower, Ours: percentile(seg.xs, p), Reps: len(seg.xs), OursSamples: seg.xs})
			}
		}
	}
	return rows, nil
}
