package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/postgres"
)

// The signal keys half of the logs benchmark: the signals' idempotency keys (governance_signal_key) at -log-rows
// keys, half in each of the two generations the promoter keeps (events.signal_key_keep), beside the same keys in one
// plain table (the table before migration 025, with an index on first_seen_at so that a DELETE by age need not scan
// it). Each rep retires the older half: ours by the promoter's rotation (postgres.RotateSignalKeysTx: one
// generation truncated), naive by a DELETE of the same keys and its VACUUM; then both are filled back untimed. Beside
// it, the price on the hot path: a handoff page's claim of keysClaim keys, new ones and replayed ones (spread over
// both halves), ours looking each up in both generations, naive in its one primary key.

const (
	keysClaim  = 733 // keys a handoff page of 25,000 births claims (BENCHMARKS.md, the intake's page)
	keysClaims = 20  // claims timed per rep and kind
)

func benchSignalKeys(ctx context.Context, r *runner, pool *pgxpool.Pool) ([]row, error) {
	n, reps := r.opts.logRows, r.opts.reps
	keep := gcos.DefaultConfig().Events.SignalKeyKeep.Duration()
	half := n / 2
	t0 := time.Now()
	if _, err := pool.Exec(ctx, `CREATE TABLE keys_naive (source_system text NOT NULL, event_type text NOT NULL, correlation_id text NOT NULL,
		first_seen_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (source_system, event_type, correlation_id));
		CREATE INDEX keys_naive_first_seen_at ON keys_naive (first_seen_at)`); err != nil {
		return nil, err
	}
	// The older half in generation 1, the newer in generation 0, current for a window.
	if err := fillSignalKeys(ctx, pool, 1, 0, half, 2*keep, keep); err != nil {
		return nil, fmt.Errorf("fill the signal keys: %w", err)
	}
	if err := fillSignalKeys(ctx, pool, 0, half, 2*half, keep-time.Minute, 0); err != nil {
		return nil, fmt.Errorf("fill the signal keys: %w", err)
	}
	r.log.Info("logs: signal keys filled", "keys", 2*half, "elapsed", time.Since(t0).Round(time.Second))

	var dropMS, deleteMS, vacuumMS, oursWAL, naiveWAL, newOurs, newNaive, replayOurs, replayNaive []float64
	lo := 0 // the keys k<lo> … are the older half
	for rep := 1; rep <= reps; rep++ {
		if _, err := pool.Exec(ctx, `UPDATE gcos_signal_key_generation SET since = now() - $1::interval - interval '1 minute'`, keep); err != nil {
			return nil, err
		}
		var current int
		if err := pool.QueryRow(ctx, `SELECT current FROM gcos_signal_key_generation`).Scan(&current); err != nil {
			return nil, err
		}
		lsn := walAt(ctx, pool)
		t := time.Now()
		var res postgres.SignalKeysRotated
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = postgres.RotateSignalKeysTx(ctx, tx, keep)
			return err
		})
		if err != nil {
			return nil, err
		}
		dropMS = append(dropMS, ms(time.Since(t)))
		oursWAL = append(oursWAL, walSince(ctx, pool, lsn))
		if !res.Rotated || res.Current != 1-current {
			return nil, fmt.Errorf("rep %d: the rotation did not rotate: %+v", rep, res)
		}

		d, err := deleteAndVacuum(ctx, pool, "keys_naive", "first_seen_at < now() - $1::interval", keep)
		if err != nil {
			return nil, err
		}
		deleteMS, vacuumMS, naiveWAL = append(deleteMS, d.deleteMS), append(vacuumMS, d.vacuumMS), append(naiveWAL, d.walMiB)
		if d.rows != int64(half) {
			return nil, fmt.Errorf("rep %d: naive deleted %d keys, ours emptied a generation of %d", rep, d.rows, half)
		}

		// Filled back: what was the newer half is older now, and a new half is current.
		if _, err := pool.Exec(ctx, `UPDATE keys_naive SET first_seen_at = first_seen_at - $1::interval`, keep); err != nil {
			return nil, err
		}
		lo += half
		if err := fillSignalKeys(ctx, pool, res.Current, lo+half, lo+2*half, keep-time.Minute, 0); err != nil {
			return nil, err
		}

		replay := make([]string, keysClaim) // spread over both halves
		for j := range replay {
			replay[j] = fmt.Sprintf("k%d", lo+j*(2*half)/keysClaim)
		}
		for _, kind := range []string{"new", "replay"} {
			for _, naive := range []bool{false, true} {
				v, err := keysClaimRate(ctx, pool, naive, func(c int) []string {
					if kind == "replay" {
						return replay
					}
					out := make([]string, keysClaim)
					for i := range out {
						out[i] = fmt.Sprintf("new-%d-%d-%d", rep, c, i)
					}
					return out
				}, kind == "replay")
				if err != nil {
					return nil, err
				}
				switch {
				case kind == "new" && naive:
					newNaive = append(newNaive, v)
				case kind == "new":
					newOurs = append(newOurs, v)
				case naive:
					replayNaive = append(replayNaive, v)
				default:
					replayOurs = append(replayOurs, v)
				}
			}
		}
	}
	return []row{{
		Bench: "logs", Metric: fmt.Sprintf("signal keys: retire a window (%s of %s keys)", thousands(int64(half)), thousands(int64(2*half))),
		Unit: "ms", Better: lower, Ours: median(dropMS), Naive: fptr(median(deleteMS) + median(vacuumMS)), Reps: reps,
		OursSamples: dropMS, NaiveSamples: sum2(deleteMS, vacuumMS),
		Note: fmt.Sprintf("ours: the promoter truncates the older generation; naive: DELETE %s + the VACUUM it leaves %s", fmtMS(median(deleteMS)), fmtMS(median(vacuumMS))),
	}, {
		Bench: "logs", Metric: "signal keys: retire a window, WAL written", Unit: "MiB", Better: lower,
		Ours: median(oursWAL), Naive: fptr(median(naiveWAL)), Reps: reps, OursSamples: oursWAL, NaiveSamples: naiveWAL,
	}, {
		Bench: "logs", Metric: fmt.Sprintf("signal keys: claim %d new keys", keysClaim), Unit: "ms", Better: lower,
		Ours: median(newOurs), Naive: fptr(median(newNaive)), Reps: reps, OursSamples: newOurs, NaiveSamples: newNaive,
		Note: fmt.Sprintf("a handoff page's claim, the median of %d per rep; ours looks each key up in both generations", keysClaims),
	}, {
		Bench: "logs", Metric: fmt.Sprintf("signal keys: claim %d replayed keys", keysClaim), Unit: "ms", Better: lower,
		Ours: median(replayOurs), Naive: fptr(median(replayNaive)), Reps: reps, OursSamples: replayOurs, NaiveSamples: replayNaive,
		Note: "keys of both generations, all refused as duplicates",
	}}, nil
}

// fillSignalKeys writes the keys k<from> … k<to-1> into generation gen, first seen evenly from startedAgo to endedAgo
// before now, and the same keys into keys_naive, then vacuums and analyzes both.
func fillSignalKeys(ctx context.Context, pool *pgxpool.Pool, gen, from, to int, startedAgo, endedAgo time.Duration) error {
	const chunk = 1_000_000
	for lo := from; lo < to; lo += chunk {
		hi := min(lo+chunk, to)
		if _, err := pool.Exec(ctx, `INSERT INTO governance_signal_key (source_system, event_type, correlation_id, generation, first_seen_at)
			SELECT 'birth_registry', 'governance.handoff.object_born', 'k' || i, $5::smallint,
				now() - $3::interval + ((i - $6)::float8 / ($7 - $6)::float8) * ($3::interval - $4::interval)
			FROM generate_series($1::int, $2::int - 1) i`, lo, hi, startedAgo, endedAgo, gen, from, to); err != nil {
			return err
		}
	}
	for _, sql := range []string{
		fmt.Sprintf(`INSERT INTO keys_naive SELECT source_system, event_type, correlation_id, first_seen_at FROM governance_signal_key_g%d`, gen),
		`VACUUM ANALYZE governance_signal_key`, `VACUUM ANALYZE keys_naive`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// keysClaimRate times keysClaims claims of the keys batch(c) gives, each its own transaction, and returns the
// median claim in ms: ours by postgres.ClaimSignalKeysTx, naive by the one-table claim before migration 025. New
// keys are removed again untimed; replayed ones must all be refused.
func keysClaimRate(ctx context.Context, pool *pgxpool.Pool, naive bool, batch func(int) []string, replay bool) (float64, error) {
	const src, typ = "birth_registry", "governance.handoff.object_born"
	var samples []float64
	for c := range keysClaims {
		corrs := batch(c)
		srcs, types := make([]string, len(corrs)), make([]string, len(corrs))
		for i := range corrs {
			srcs[i], types[i] = src, typ
		}
		var claimed int
		t := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if !naive {
				got, err := postgres.ClaimSignalKeysTx(ctx, tx, srcs, types, corrs)
				claimed = len(got)
				return err
			}
			tag, err := tx.Exec(ctx, `INSERT INTO keys_naive (source_system, event_type, correlation_id)
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT DO NOTHING`, srcs, types, corrs)
			claimed = int(tag.RowsAffected())
			return err
		})
		if err != nil {
			return 0, err
		}
		samples = append(samples, ms(time.Since(t)))
		if want := map[bool]int{true: 0, false: len(corrs)}[replay]; claimed != want {
			return 0, fmt.Errorf("claimed %d of %d keys (naive %v, replay %v), want %d", claimed, len(corrs), naive, replay, want)
		}
	}
	for _, table := range []string{"governance_signal_key", "keys_naive"} {
		if _, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE correlation_id LIKE 'new-%'`); err != nil {
			return 0, err
		}
	}
	return median(samples), nil
}
