package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/daemon"
	"gcos/gate"
	"gcos/postgres"
)

// churnObjects is how many high-risk objects allowed at rest the gate is asked about under churn.
const churnObjects = 200

// churnBase is the base group of an object asked about: births go into it.
type churnBase struct{ class, coll, status string }

// benchGateChurn asks the gate about high-risk objects it allows at rest (8 paced callers, in-process) while births
// arrive in those objects' own groups at -load-births-per-second — alone, then with an update of a sibling every
// churnChangeEvery births — with the daemon running as `gcos up` runs it (intake, event and incremental scans, the
// gate's view and its synchronous re-scan). SPEC §12: churn elsewhere blocks no write. The naive column is the gate
// without the view and without the synchronous re-scan: the database read per decision, a stale group blocking
// until the scan loops reach it.
func benchGateChurn(ctx context.Context, r *runner) ([]row, error) {
	ws, done, err := r.openWorld(ctx, "gate_churn", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := prepare(ctx, ws.store); err != nil {
		return nil, err
	}
	cfg := ws.store.Config()
	// The daemon as `gcos up` runs it, less the API, the full audit and promotion; it tails both sources (the
	// churn writes births and change-ledger updates).
	d, err := daemon.New(daemon.Config{Store: ws.store, Logger: r.log,
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
	objects, bases, err := allowedAtRest(ctx, ws)
	if err != nil {
		return nil, err
	}
	naiveCfg := cfg
	naiveCfg.Gate.View, naiveCfg.Gate.RescanDeadline = false, 0
	naive := postgres.New(ws.pool, naiveCfg, r.log.With("system", "naive"))

	dctx, dcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	daemonErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		if err := d.Run(dctx); err != nil {
			daemonErr <- err
		}
	}()
	defer func() {
		dcancel()
		wg.Wait()
	}()
	if err := waitFresh(dctx, d.Gate.View()); err != nil {
		return nil, err
	}
	churnPool, err := r.env.pool(ctx, ws.db, 4, "gcos-bench-churn")
	if err != nil {
		return nil, err
	}
	defer churnPool.Close()

	type phase struct{ blockedPct, blocks, viewPct, rescanned, p99, achieved []float64 }
	// measure asks the gate from 8 callers, each once every churnAsk: a pipeline's pace, so the share of blocked
	// decisions is the share of the time an object is blocked (unpaced callers would weigh a fast allow thousands
	// of times against a block that waited for its re-scan).
	measure := func(g *gate.Gate, births *atomic.Int64, ph *phase) error {
		var blocked, fromView, rescanned atomic.Int64
		b0, t0 := births.Load(), time.Now()
		lats := make([][]float64, gateWorkers)
		var wg sync.WaitGroup
		for w := range gateWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next, end := time.Now(), time.Now().Add(r.opts.gateDuration)
				for i := w; next.Before(end) && dctx.Err() == nil; i += gateWorkers {
					q0 := time.Now()
					res := g.Gate(dctx, objects[i%len(objects)], gcos.ActionWrite)
					lats[w] = append(lats[w], ms(time.Since(q0)))
					if res.Decision != gcos.GateAllow {
						blocked.Add(1)
					}
					if res.Source == gate.SourceView {
						fromView.Add(1)
					}
					if res.Rescanned {
						rescanned.Add(1)
					}
					next = next.Add(churnAsk)
					time.Sleep(time.Until(next))
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-daemonErr:
			return fmt.Errorf("daemon: %w", err)
		default:
		}
		var lat []float64
		for _, l := range lats {
			lat = append(lat, l...)
		}
		n := float64(max(len(lat), 1))
		ph.blockedPct = append(ph.blockedPct, 100*float64(blocked.Load())/n)
		ph.blocks = append(ph.blocks, float64(blocked.Load()))
		ph.viewPct = append(ph.viewPct, 100*float64(fromView.Load())/n)
		ph.rescanned = append(ph.rescanned, float64(rescanned.Load()))
		ph.p99 = append(ph.p99, percentile(lat, 99))
		ph.achieved = append(ph.achieved, float64(births.Load()-b0)/time.Since(t0).Seconds())
		return nil
	}
	var rows []row
	type churnKind struct {
		name        string
		changeEvery int
	}
	churns := []churnKind{{"births", 0}}
	for _, every := range churnChangeEvery {
		churns = append(churns, churnKind{fmt.Sprintf("births and 1 sibling update per %s births", thousands(int64(every))), every})
	}
	for _, churn := range churns {
		births, stopChurn := bornInto(dctx, churnPool, bases, r.opts.loadRate, churn.changeEvery, r)
		time.Sleep(5 * time.Second) // reach the steady state: the groups are dirtied and scanned over and over
		var ours, nv phase
		for rep := 0; rep < r.opts.reps; rep++ {
			if err := measure(d.Gate, births, &ours); err != nil {
				stopChurn()
				return nil, err
			}
			if err := measure(gate.New(naive, nil), births, &nv); err != nil {
				stopChurn()
				return nil, err
			}
			r.log.Info("gate_churn", "churn", churn.name, "rep", rep+1, "ours_blocked_pct", ours.blockedPct[rep], "naive_blocked_pct", nv.blockedPct[rep],
				"ours_rescanned", ours.rescanned[rep], "births_per_s", ours.achieved[rep])
		}
		stopChurn()
		note := fmt.Sprintf("%d high-risk objects the gate allows at rest over %d base groups, 8 callers asking once per %s each; births into those groups at %s/s achieved (asked %s/s); "+
			"%s per phase; ours: %.1f%% answered from the view, %.0f blocks, %.0f answers after a synchronous re-scan (medians); naive: %.0f blocks",
			len(objects), len(bases), churnAsk, thousands(int64(median(ours.achieved))), thousands(int64(r.opts.loadRate)), r.opts.gateDuration,
			median(ours.viewPct), median(ours.blocks), median(ours.rescanned), median(nv.blocks))
		var tgt *target
		if churn.changeEvery == 0 {
			tgt = &target{Op: "<=", Value: 1, Text: "≤ 1 %"}
		}
		rows = append(rows,
			row{Bench: "gate_churn", Metric: "high-risk allowed at rest, answered block, under " + churn.name, Unit: "%", Better: lower,
				Ours: median(ours.blockedPct), Naive: fptr(median(nv.blockedPct)), Reps: r.opts.reps, OursSamples: ours.blockedPct, NaiveSamples: nv.blockedPct,
				Target: tgt, Note: note},
			row{Bench: "gate_churn", Metric: "decision p99, under " + churn.name, Unit: "ms", Better: lower,
				Ours: median(ours.p99), Naive: fptr(median(nv.p99)), Reps: r.opts.reps, OursSamples: ours.p99, NaiveSamples: nv.p99})
	}
	return rows, nil
}

// allowedAtRest draws up to churnObjects anchors (no parent) the gate allows for write, high risk, and their bases.
func allowedAtRest(ctx context.Context, ws *worldStore) ([]string, []churnBase, error) {
	rows, err := ws.pool.Query(ctx, `SELECT collection_name, entity_code, entity_type, status FROM birth_registry
		WHERE parent_code IS NULL ORDER BY hashint8(id) LIMIT 20000`)
	if err != nil {
		return nil, nil, err
	}
	type cand struct {
		ref  string
		base churnBase
	}
	var cands []cand
	for rows.Next() {
		var coll, code string
		var b churnBase
		if err := rows.Scan(&coll, &code, &b.class, &b.status); err != nil {
			rows.Close()
			return nil, nil, err
		}
		b.coll = coll
		cands = append(cands, cand{coll + ":" + code, b})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	low := ws.store.Config().Gate.LowRiskClasses
	seen := map[churnBase]bool{}
	var objects []string
	var bases []churnBase
	for _, c := range cands {
		if len(objects) == churnObjects {
			break
		}
		res := ws.gate.Decide(ctx, c.ref, gcos.ActionWrite)
		if res.Decision != gcos.GateAllow || res.RiskClass == "" || slices.Contains(low, res.RiskClass) {
			continue
		}
		objects = append(objects, c.ref)
		if !seen[c.base] {
			seen[c.base] = true
			bases = append(bases, c.base)
		}
	}
	if len(objects) == 0 {
		return nil, nil, fmt.Errorf("no high-risk object allowed at rest among %d births", len(cands))
	}
	return objects, bases, nil
}

// churnChangeEvery are, in the churns after births alone, how many births arrive per change to an object born in
// the same groups (a change-ledger 'update': its groups are dirty for a reason a verdict may rest on, not for
// membership): at 1 per 100 the event scanner is busy all the time with the objects' groups.
var churnChangeEvery = []int{1000, 100}

// churnAsk is how often each caller asks the gate under churn.
const churnAsk = 2 * time.Millisecond

// bornInto inserts births into the bases at about rate per second (one multi-row INSERT every 20 ms), and, when
// changeEvery > 0, one change-ledger update of a newborn per changeEvery births, until stopped; it returns the
// running count of births committed.
func bornInto(ctx context.Context, pool *pgxpool.Pool, bases []churnBase, rate float64, changeEvery int, r *runner) (*atomic.Int64, func()) {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		const tick = 20 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		start, seq, run := time.Now(), 0, randomHex(4)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			due := int(rate*time.Since(start).Seconds()) - int(n.Load())
			if due <= 0 {
				continue
			}
			due = min(due, int(rate)) // never a burst of more than a second's births after a stall
			codes, colls, classes, statuses := make([]string, due), make([]string, due), make([]string, due), make([]string, due)
			for i := range due {
				b := bases[seq%len(bases)]
				seq++
				codes[i], colls[i], classes[i], statuses[i] = fmt.Sprintf("%s-churn%s-%d", b.class, run, seq), b.coll, b.class, b.status
			}
			// Updates of objects born a moment ago, spread over the bases as the births are.
			changes := 0
			if changeEvery > 0 {
				changes = (seq / changeEvery) - ((seq - due) / changeEvery)
			}
			var changeCodes, changeClasses []string
			for i := range changes {
				j := (i * changeEvery) % due
				changeCodes, changeClasses = append(changeCodes, codes[j]), append(changeClasses, classes[j])
			}
			if _, err := pool.Exec(ctx, `WITH b AS (INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
				SELECT c, l, t, s, 'birth-api', 'gcos-bench' FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(c, l, t, s))
				INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by, alert_detail)
				SELECT t, c, 'update', 'registry-sync', 'gcos-bench' FROM unnest($5::text[], $6::text[]) AS u(c, t)`,
				codes, colls, classes, statuses, changeCodes, changeClasses); err != nil {
				if ctx.Err() == nil {
					r.log.Error("gate_churn: births", "err", err)
				}
				return
			}
			n.Add(int64(due))
		}
	}()
	return &n, func() {
		cancel()
		wg.Wait()
	}
}
