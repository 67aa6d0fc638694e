package main

import (
	"context"
	"fmt"
	"time"

	"gcos"
	"gcos/postgres"
	"gcos/scan"
)

// rescanFigures are one world size's samples.
type rescanFigures struct {
	births  int64
	members int64
	group   string
	ours    []float64 // ms per one-group rescan
	naive   []float64 // ms per full re-derive
}

// rescanWorld is one world size ready to be sampled: one() re-evaluates its largest active group (MarkDirty,
// untimed, then one event-mode ScanTick that claims, evaluates and writes it) and returns the tick's time.
type rescanWorld struct {
	f    rescanFigures
	one  func() (time.Duration, error)
	ws   *worldStore
	done func()
}

func openRescanWorld(ctx context.Context, r *runner, births int) (*rescanWorld, error) {
	ws, done, err := r.openWorld(ctx, fmt.Sprintf("rescan%d", births), births, 0)
	if err != nil {
		return nil, err
	}
	w := &rescanWorld{ws: ws, done: done}
	fail := func(err error) (*rescanWorld, error) { done(); return nil, err }
	if _, err := prepare(ctx, ws.store); err != nil {
		return fail(err)
	}
	if err := ws.pool.QueryRow(ctx, `SELECT group_key, member_count FROM governance_group WHERE lifecycle_status = 'active'
		ORDER BY member_count DESC, group_key LIMIT 1`).Scan(&w.f.group, &w.f.members); err != nil {
		return fail(fmt.Errorf("pick group: %w", err))
	}
	if w.f.births, err = countRows(ctx, ws.pool, `SELECT count(*) FROM birth_registry`); err != nil {
		return fail(err)
	}
	stage := scan.New(ws.store) // one per process, as the daemon holds it
	w.one = func() (time.Duration, error) {
		if n, err := ws.store.MarkDirty(ctx, []string{w.f.group}, gcos.DirtyInput); err != nil {
			return 0, err
		} else if n != 1 {
			return 0, fmt.Errorf("MarkDirty dirtied %d groups, want 1", n)
		}
		t0 := time.Now()
		res, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeEvent})
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if res.Scanned != 1 {
			return 0, fmt.Errorf("scan tick scanned %d groups, want 1", res.Scanned)
		}
		return d, nil
	}
	for i := 0; i < 3; i++ { // warm-up
		if _, err := w.one(); err != nil {
			return fail(err)
		}
	}
	return w, nil
}

// rescanBoth samples the two sizes alternately, so whatever else the machine does weighs on both alike, then
// times the naive full re-derive at each size.
func rescanBoth(ctx context.Context, r *runner, small, big, samples int) (rescanFigures, rescanFigures, error) {
	a, err := openRescanWorld(ctx, r, small)
	if err != nil {
		return rescanFigures{}, rescanFigures{}, err
	}
	defer a.done()
	b, err := openRescanWorld(ctx, r, big)
	if err != nil {
		return rescanFigures{}, rescanFigures{}, err
	}
	defer b.done()
	for i := 0; i < samples; i++ {
		for _, w := range []*rescanWorld{a, b} {
			d, err := w.one()
			if err != nil {
				return a.f, b.f, err
			}
			w.f.ours = append(w.f.ours, ms(d))
		}
	}
	for _, w := range []*rescanWorld{a, b} {
		for i := 0; i < r.opts.reps; i++ {
			nr, err := naiveBackfill(ctx, w.ws.pool)
			if err != nil {
				return a.f, b.f, err
			}
			w.f.naive = append(w.f.naive, ms(nr.Elapsed))
		}
		r.log.Info("rescan", "births", w.f.births, "group", w.f.group, "members", w.f.members, "ours_ms", median(w.f.ours), "naive_ms", median(w.f.naive))
	}
	return a.f, b.f, nil
}

func benchRescan(ctx context.Context, r *runner) ([]row, error) {
	small, big := r.opts.births/10, r.opts.births
	if r.opts.scale10m {
		small, big = r.opts.births, 10_000_000
	}
	samples := max(r.opts.reps, 20) // a rescan takes milliseconds: more samples, same median rule
	a, b, err := rescanBoth(ctx, r, small, big, samples)
	if err != nil {
		return nil, err
	}
	label := func(f rescanFigures) string { return thousands(f.births) }
	return []row{{
		Bench: "rescan", Metric: fmt.Sprintf("one dirty group at %s births", label(a)), Unit: "ms", Better: lower,
		Ours: median(a.ours), Naive: fptr(median(a.naive)), Reps: samples, OursSamples: a.ours, NaiveSamples: a.naive,
		Note: fmt.Sprintf("largest group %s (%s members); naive: full re-derive", a.group, thousands(a.members)),
	}, {
		Bench: "rescan", Metric: fmt.Sprintf("one dirty group at %s births", label(b)), Unit: "ms", Better: lower,
		Ours: median(b.ours), Naive: fptr(median(b.naive)), Reps: samples, OursSamples: b.ours, NaiveSamples: b.naive,
		Note: fmt.Sprintf("largest group %s (%s members)", b.group, thousands(b.members)),
	}, {
		Bench: "rescan", Metric: fmt.Sprintf("cost ratio %s vs %s births", label(b), label(a)), Unit: "×", Better: exact,
		Ours: median(b.ours) / median(a.ours), Naive: fptr(median(b.naive) / median(a.naive)),
		Target: &target{Op: "<=", Value: 1.5, Text: "≤ 1.5×"}, Reps: samples,
		Note: "ours: the same work at either size (cost independent of N), the two sizes sampled alternately; naive: grows with N",
	}}, nil
}
