package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/intake"
	"gcos/postgres"
)

// naiveTailSQL is a plain keyset tail: no horizon, no cursor row, no mapping.
const naiveTailSQL = `
SELECT id, entity_code, collection_name, entity_type, status, born_at, parent_code, canonical_address, source_system, actor_ref
FROM birth_registry WHERE (born_at, id) > ($1, $2) ORDER BY born_at, id LIMIT $3`

// naiveTail reads every birth in keyset pages of page rows into Go values.
func naiveTail(ctx context.Context, p *pgxpool.Pool, page int) (int, time.Duration, error) {
	t0 := time.Now()
	ts := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
	var id int64
	total := 0
	for {
		rows, err := p.Query(ctx, naiveTailSQL, ts, id, page)
		if err != nil {
			return total, 0, fmt.Errorf("naive tail: %w", err)
		}
		n := 0
		for rows.Next() {
			var code, coll, typ, status string
			var parent, canon, src, actor *string
			var born time.Time
			if err := rows.Scan(&id, &code, &coll, &typ, &status, &born, &parent, &canon, &src, &actor); err != nil {
				rows.Close()
				return total, 0, err
			}
			ts = pgtype.Timestamptz{Time: born, Valid: true}
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, 0, fmt.Errorf("naive tail: %w", err)
		}
		total += n
		if n < page {
			return total, time.Since(t0), nil
		}
	}
}

func benchIntake(ctx context.Context, r *runner) ([]row, error) {
	tmpl, err := r.env.worldDB(ctx, "intake", r.opts.births)
	defer r.env.dropLater(tmpl)
	if err != nil {
		return nil, err
	}
	// The daemon's soft memory limit, as gcos up sets it, for the passes this process runs (ours and the floor).
	defer limitMemory(benchConfig(r.opts))()
	var ours, naive, ratios []float64
	var rowsRead, polls, page, catchUp int
	var st intake.HandoffStats
	for i := 0; i < r.opts.reps; i++ {
		// Each repetition is a first pass over the whole inventory on a fresh clone of the world, prepared as the
		// daemon would be (backfilled, ruleset and event types active), its cursor reset to start: a replay of the
		// same rows would be cheaper (its signals are deduplicated), so it would not measure the intake's real work.
		if err := func() error {
			clone, err := r.env.createDB(ctx, "intake_rep", tmpl)
			if err != nil {
				return err
			}
			defer r.env.dropLater(clone)
			ws, closeStore, err := r.openStore(ctx, clone, 0)
			if err != nil {
				return err
			}
			defer closeStore()
			if _, err := prepare(ctx, ws.store); err != nil {
				return err
			}
			cfg := ws.store.Config()
			src := postgres.BirthTailSource(cfg.SourceBinding)
			check, err := intake.New(ws.store).CheckTail(ctx, src, cfg.Intake)
			if err != nil {
				return err
			}
			if err := check.Err(); err != nil {
				return err
			}
			if _, err := intake.New(ws.store).EnsureCursor(ctx, src); err != nil {
				return err
			}
			// The backfill started the cursor at its seed horizon (nothing left to hand off): measure a first pass
			// over the whole inventory instead.
			if _, err := intake.New(ws.store).ResetCursor(ctx, src.Name, "start"); err != nil {
				return err
			}
			page, catchUp = cfg.Intake.Pages()
			// Warm-up, untimed: one naive pass reads the table and its (born_at, id) index once.
			if _, _, err := naiveTail(ctx, ws.pool, catchUp); err != nil {
				return err
			}
			stage := intake.New(ws.store) // one per process, as the daemon holds it
			ourStep := func() error {
				polls, rowsRead = 0, 0
				before := stage.HandoffTotals()
				t0 := time.Now()
				for {
					res, err := stage.PollTail(ctx, src, cfg.Intake, stage.Apply)
					if err != nil {
						return err
					}
					if res.Busy {
						return fmt.Errorf("intake cursor busy")
					}
					polls++
					rowsRead += res.Read
					if !res.PageFull {
						break
					}
				}
				ours = append(ours, float64(rowsRead)/time.Since(t0).Seconds())
				st = handoffSince(before, stage.HandoffTotals())
				return nil
			}
			naiveStep := func() error {
				n, d, err := naiveTail(ctx, ws.pool, catchUp)
				if err != nil {
					return err
				}
				naive = append(naive, float64(n)/d.Seconds())
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
			ratios = append(ratios, ours[len(ours)-1]/naive[len(naive)-1])
			r.log.Info("intake rep", "rep", i+1, "ours_rows_s", int64(ours[len(ours)-1]), "naive_rows_s", int64(naive[len(naive)-1]))
			return nil
		}(); err != nil {
			return nil, err
		}
	}
	return []row{{
		Bench: "intake", Metric: fmt.Sprintf("tail + map + coalesce %s births", thousands(int64(rowsRead))), Unit: "rows/s", Better: higher,
		Ours: median(ours), Naive: fptr(median(naive)), Target: &target{Op: ">=", Value: 300_000, Text: "≥ 300,000 rows/s"}, Reps: r.opts.reps,
		OursSamples: ours, NaiveSamples: naive,
		Note: fmt.Sprintf("ours: first pass from the start on a fresh clone: PollTail (horizon, cursor lock, keyset page of %d, then pages of %d "+
			"read ahead while it catches up, cursor advance) + ApplyHandoff (mapping, coalescing into %d signals, %d dirty marks, %d events emitted) "+
			"in %d polls; naive: keyset pages of %d (the catch-up size) read into Go values with no horizon, cursor or mapping — a floor, not a competitor (gain < 1 is expected)",
			page, catchUp, st.Signals, st.Dirtied, st.Emitted+st.Captured, polls, catchUp),
	}, {
		Bench: "intake", Metric: "rows/s as a share of the floor's, same rep", Unit: "×", Better: higher,
		Ours: median(ratios), Target: &target{Op: ">=", Value: 0.5, Text: "≥ 0.5× (half the floor)"}, Reps: r.opts.reps, OursSamples: ratios,
		Note: "each rep's rate divided by the floor's in the same rep (the machine's speed moves both); the median of the reps",
	}}, nil
}
