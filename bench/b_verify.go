package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/oracle"
	"gcos/scan"
)

// benchVerify times the reference evaluator (package oracle) on the world: reading the substrate in one
// REPEATABLE READ transaction and deriving every group, object row and ledger from scratch, and the whole `gcos
// verify` (that, the comparison, and the gate asked about the sample for write and read). Beside them, in the same
// run, the incremental full audit over the same world, which they check, and what each audit's own proof costs: one
// slice of the rotating cover (scan.verify_slices), every slice timed in turn.
func benchVerify(ctx context.Context, r *runner) ([]row, error) {
	ws, done, err := r.openWorld(ctx, "verify", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := prepare(ctx, ws.store); err != nil {
		return nil, err
	}
	cfg := ws.store.Config().Scan
	rows, err := ws.pool.Query(ctx, `SELECT DISTINCT collection_name FROM birth_registry`)
	if err != nil {
		return nil, err
	}
	collections, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	cover := make([][]string, cfg.VerifySlices)
	for _, c := range collections {
		i := gcos.CoverSlice(c, cfg.VerifySlices)
		cover[i] = append(cover[i], c)
	}
	sample := gcos.CoverSample(cfg.VerifySample, cfg.VerifySlices)

	var evaluate, verify, audit, slice, share []float64
	var rep oracle.Report
	var heap uint64
	for i := 0; i < r.opts.reps; i++ {
		t0 := time.Now()
		if _, err := scan.New(ws.store).FullAudit(ctx, nil); err != nil {
			return nil, fmt.Errorf("full audit: %w", err)
		}
		audit = append(audit, time.Since(t0).Seconds())
		runtime.GC()
		t0 = time.Now()
		ref, err := oracle.ReferenceOf(ctx, ws.store)
		if err != nil {
			return nil, err
		}
		evaluate = append(evaluate, time.Since(t0).Seconds())
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		heap = max(heap, m.HeapAlloc)
		runtime.KeepAlive(ref)
		t0 = time.Now()
		if rep, err = oracle.Verify(ctx, ws.store, oracle.VerifyOptions{Sample: cfg.VerifySample, Seed: uint64(i + 1)}); err != nil {
			return nil, err
		}
		verify = append(verify, time.Since(t0).Seconds())
		for s, only := range cover {
			t0 := time.Now()
			part, err := oracle.Verify(ctx, ws.store, oracle.VerifyOptions{Only: append([]string{}, only...), Sample: sample, // never nil: an empty slice proves nothing
				GateLimit: sample, Seed: uint64(s + 1)})
			if err != nil {
				return nil, err
			}
			if !part.Clean() {
				return nil, fmt.Errorf("slice %d: %d mismatches right after an audit: %v", s, len(part.Mismatches), part.Mismatches[0])
			}
			slice = append(slice, time.Since(t0).Seconds())
			share = append(share, slice[len(slice)-1]/audit[i])
			r.log.Debug("verify slice", "slice", s, "collections", only, "births", part.Births, "objects", part.Objects,
				"gate_checks", part.GateChecks, "elapsed_s", slice[len(slice)-1])
		}
		r.log.Info("verify", "rep", i, "evaluate_s", evaluate[i], "verify_s", verify[i], "audit_s", audit[i],
			"mismatches", len(rep.Mismatches), "gate_checks", rep.GateChecks, "slice_median_s", median(slice), "slice_max_s", slices.Max(slice))
	}
	births := thousands(rep.Births)
	return []row{{
		Bench: "verify", Metric: fmt.Sprintf("reference evaluation from scratch, %s births", births), Unit: "s", Better: lower,
		Ours: median(evaluate), Reps: r.opts.reps, OursSamples: evaluate,
		Note: fmt.Sprintf("read the substrate (one REPEATABLE READ; members counted in SQL) + derive %s groups and %d object rows; Go heap after: %d MiB",
			thousands(int64(rep.Groups)), rep.Objects, heap>>20),
	}, {
		Bench: "verify", Metric: "gcos verify (reference + comparison + gate sample)", Unit: "s", Better: lower,
		Ours: median(verify), Reps: r.opts.reps, OursSamples: verify,
		Note: fmt.Sprintf("%d gate decisions compared; %d mismatches (0 expected right after the audit)", rep.GateChecks, len(rep.Mismatches)),
	}, {
		Bench: "verify", Metric: "for scale: the incremental full audit it checks", Unit: "s", Better: lower,
		Ours: median(audit), Reps: r.opts.reps, OursSamples: audit,
		Note: "gcos scan --mode full: snapshot, reconciliation, expiry, dirty-set scan and invariant",
	}, {
		Bench: "verify", Metric: fmt.Sprintf("one audit's proof: a slice of the cover (1/%d of the collections), median", cfg.VerifySlices),
		Unit: "s", Better: lower, Ours: median(slice), Reps: len(slice), OursSamples: slice,
		Note: fmt.Sprintf("every slice timed in turn, %d gate objects each; max %.2f s", sample, slices.Max(slice)),
	}, {
		Bench: "verify", Metric: "one audit's proof as a share of the audit's own time, median", Unit: "ratio", Better: lower,
		Ours: median(share), Reps: len(share), OursSamples: share, Target: &target{Op: "<=", Value: 0.25, Text: "≤ 25 %"},
		Note: fmt.Sprintf("mean %.2f, max %.2f (the slice that holds the largest collection)", mean(share), slices.Max(share)),
	}}, nil
}
