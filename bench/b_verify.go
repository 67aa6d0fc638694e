package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"gcos/oracle"
)

// benchVerify times the reference evaluator (package oracle) on the world: reading the substrate in one
// REPEATABLE READ transaction and deriving every group, object row and ledger from scratch, and the whole `gcos
// verify` (that, the comparison, and the gate asked about the sample for write and read). Beside it, in the same
// run, the incremental full audit over the same world, which it checks.
func benchVerify(ctx context.Context, r *runner) ([]row, error) {
	ws, done, err := r.openWorld(ctx, "verify", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := prepare(ctx, ws.store); err != nil {
		return nil, err
	}
	var evaluate, verify, audit []float64
	var rep oracle.Report
	var heap uint64
	for i := 0; i < r.opts.reps; i++ {
		t0 := time.Now()
		if _, err := ws.store.FullAudit(ctx, nil); err != nil {
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
		if rep, err = oracle.Verify(ctx, ws.store, oracle.VerifyOptions{Sample: 2000, Seed: uint64(i + 1)}); err != nil {
			return nil, err
		}
		verify = append(verify, time.Since(t0).Seconds())
		r.log.Info("verify", "rep", i, "evaluate_s", evaluate[i], "verify_s", verify[i], "audit_s", audit[i],
			"mismatches", len(rep.Mismatches), "gate_checks", rep.GateChecks)
	}
	births := thousands(rep.Births)
	return []row{{
		Bench: "verify", Metric: fmt.Sprintf("reference evaluation from scratch, %s births", births), Unit: "s", Better: lower,
		Ours: median(evaluate), Reps: r.opts.reps, OursSamples: evaluate,
		Note: fmt.Sprintf("read the substrate (one REPEATABLE READ) + derive %s groups and %d object rows; Go heap after: %d MiB",
			thousands(int64(rep.Groups)), rep.Objects, heap>>20),
	}, {
		Bench: "verify", Metric: "gcos verify (reference + comparison + gate sample)", Unit: "s", Better: lower,
		Ours: median(verify), Reps: r.opts.reps, OursSamples: verify,
		Note: fmt.Sprintf("%d gate decisions compared; %d mismatches (0 expected right after the audit)", rep.GateChecks, len(rep.Mismatches)),
	}, {
		Bench: "verify", Metric: "for scale: the incremental full audit it checks", Unit: "s", Better: lower,
		Ours: median(audit), Reps: r.opts.reps, OursSamples: audit,
		Note: "gcos scan --mode full: snapshot, reconciliation, expiry, dirty-set scan and invariant",
	}}, nil
}
