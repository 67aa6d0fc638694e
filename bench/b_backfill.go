package main

import (
	"context"
	"fmt"
	"gcos/intake"
)

// backfillFigures are the medians of one world size.
type backfillFigures struct {
	births                 int64
	ours, naive            []float64
	groups, objects        int
	rowsWritten, naiveRows int64
}

// backfillAt measures reps backfills of a world of births births. Each repetition runs on a fresh clone of the
// world (a re-run of the backfill over unchanged sources is a no-op by design, so it cannot be repeated in place);
// GCOS and the naive baseline run on the same clone, in alternating order, after one warm-up read of the table.
func backfillAt(ctx context.Context, r *runner, births, reps int) (backfillFigures, error) {
	var f backfillFigures
	label := fmt.Sprintf("backfill%d", births)
	tmpl, err := r.env.worldDB(ctx, label, births)
	defer r.env.dropLater(tmpl)
	if err != nil {
		return f, err
	}
	for i := 0; i < reps; i++ {
		if err := func() error {
			clone, err := r.env.createDB(ctx, label+"_rep", tmpl)
			if err != nil {
				return err
			}
			defer r.env.dropLater(clone)
			ws, closeStore, err := r.openStore(ctx, clone, 0)
			if err != nil {
				return err
			}
			defer closeStore()
			if _, err := ws.pool.Exec(ctx, `SELECT sum(length(entity_code)) FROM birth_registry`); err != nil {
				return err
			}
			ourStep := func() error {
				res, err := intake.New(ws.store).Backfill(ctx, intake.BackfillOptions{})
				if err != nil {
					return fmt.Errorf("backfill: %w", err)
				}
				if res.SnapshotReused {
					return fmt.Errorf("backfill reused a snapshot on a fresh clone")
				}
				f.ours = append(f.ours, secs(res.Elapsed))
				f.births, f.groups, f.rowsWritten, f.objects = res.Births, res.Groups, res.RowsWritten, int(res.ObjectsMaterialized)
				return nil
			}
			naiveStep := func() error {
				nr, err := naiveBackfill(ctx, ws.pool)
				if err != nil {
					return err
				}
				f.naive, f.naiveRows = append(f.naive, secs(nr.Elapsed)), nr.RowsWritten
				return nil
			}
			steps := []func() error{ourStep, naiveStep}
			if i%2 == 1 {
				steps[0], steps[1] = naiveStep, ourStep
			}
			for _, s := range steps {
				if err := s(); err != nil {
					return err
				}
			}
			r.log.Info("backfill rep", "births", births, "rep", i+1, "ours_s", f.ours[len(f.ours)-1], "naive_s", f.naive[len(f.naive)-1])
			return nil
		}(); err != nil {
			return f, err
		}
	}
	return f, nil
}

func benchBackfill(ctx context.Context, r *runner) ([]row, error) {
	f, err := backfillAt(ctx, r, r.opts.births, r.opts.reps)
	if err != nil {
		return nil, err
	}
	tv, tt := scaledTarget(2, r.opts.births)
	rows := []row{{
		Bench: "backfill", Metric: fmt.Sprintf("backfill %s births", thousands(f.births)), Unit: "s", Better: lower,
		Ours: median(f.ours), Naive: fptr(median(f.naive)), Target: &target{Op: "<=", Value: tv, Text: tt}, Reps: r.opts.reps,
		OursSamples: f.ours, NaiveSamples: f.naive,
		Note: "ours: Store.Backfill (snapshot + ruleset + seeding + object materialization, one run row) on a fresh clone; " +
			"naive: the seeds' md5 snapshot + ruleset hash + one evaluated candidate row per birth (INSERT … SELECT into a temp table)",
	}, {
		Bench: "backfill", Metric: "candidate rows written", Unit: "rows", Better: lower,
		Ours: float64(f.rowsWritten), Naive: fptr(float64(f.naiveRows)),
		Target: &target{Op: "==", Value: float64(f.groups), Text: fmt.Sprintf("= #groups (%s)", thousands(int64(f.groups)))}, Reps: r.opts.reps,
		Note: fmt.Sprintf("ours: one row per group; plus %s materialized object rows (authoritative / high-risk write-path objects, exceptions)", thousands(int64(f.objects))),
	}}
	if !r.opts.scale10m {
		return rows, nil
	}
	const big = 10_000_000
	g, err := backfillAt(ctx, r, big, r.opts.reps)
	if err != nil {
		return rows, err
	}
	perSmall := median(f.ours) / float64(f.births)
	perBig := median(g.ours) / float64(g.births)
	rows = append(rows, row{
		Bench: "backfill", Metric: fmt.Sprintf("backfill %s births", thousands(g.births)), Unit: "s", Better: lower,
		Ours: median(g.ours), Naive: fptr(median(g.naive)), Target: &target{Op: "<=", Value: 20, Text: "≤ 20 s"}, Reps: r.opts.reps,
		OursSamples: g.ours, NaiveSamples: g.naive,
	}, row{
		Bench: "backfill", Metric: fmt.Sprintf("per-birth cost %s vs %s", thousands(g.births), thousands(f.births)), Unit: "×", Better: exact,
		Ours: perBig / perSmall, Naive: fptr((median(g.naive) / float64(g.births)) / (median(f.naive) / float64(f.births))),
		Target: &target{Op: "<=", Value: 1.25, Text: "≤ 1.25× (linear)"}, Reps: r.opts.reps,
		Note: "ratio of the per-birth backfill cost at the large size to that at the small size; 1.00× is exactly linear",
	})
	return rows, nil
}
