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
// keys, partitioned as the promoter keeps them by default (events.signal_key_partition, events.signal_key_keep),
// beside the same keys in one plain table (the table before migration 025, with an index on first_seen_at so that a
// DELETE by age need not scan it). The keys span the window plus one partition per rep back from now's partition;
// each rep retires the oldest partition still kept: ours by the promoter's maintenance
// (postgres.MaintainSignalKeysTx: one partition dropped), naive by a DELETE of the same keys and its VACUUM. Beside
// it, the price on the hot path: a handoff page's claim of keysClaim keys, new ones and replayed ones (spread over
// the keys kept), ours looking each up in every partition, naive in its one primary key.

const (
	keysClaim  = 733 // keys a handoff page of 25,000 births claims (BENCHMARKS.md, the intake's page)
	keysClaims = 20  // claims timed per rep and kind
	keysAhead  = 2   // partitions past now's the maintenance makes
)

func benchSignalKeys(ctx context.Context, r *runner, pool *pgxpool.Pool) ([]row, error) {
	n, reps := r.opts.logRows, r.opts.reps
	ev := gcos.DefaultConfig().Events
	width, window := ev.SignalKeyPartition.Duration(), ev.SignalKeyKeep.Duration()
	span := int((window+width-1)/width) + reps // partitions filled before now's
	var p0 time.Time                           // now's partition
	if err := pool.QueryRow(ctx, `SELECT date_bin($1::interval, now(), '0001-01-01 00:00:00+00')`, width).Scan(&p0); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := fillSignalKeys(ctx, pool, n, span, p0, width); err != nil {
		return nil, fmt.Errorf("fill the signal keys: %w", err)
	}
	r.log.Info("logs: signal keys filled", "keys", n, "partitions", span+1, "elapsed", time.Since(t0).Round(time.Second))

	maintain := func(keep time.Duration) (res postgres.LogMaintained, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err = postgres.MaintainSignalKeysTx(ctx, tx, keep, width)
			return err
		})
		return res, err
	}
	var dropMS, deleteMS, vacuumMS, oursWAL, naiveWAL, newOurs, newNaive, replayOurs, replayNaive []float64
	var removed int64
	for rep := 1; rep <= reps; rep++ {
		keep := time.Duration(span-rep)*width + time.Since(p0) - width/2 // the cutoff half a partition inside the next
		cutoff := p0.Add(-time.Duration(span-rep) * width)
		var due, alike int64
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM governance_signal_key WHERE first_seen_at < $1),
			(SELECT count(*) FROM keys_naive WHERE first_seen_at < $1)`, cutoff).Scan(&due, &alike); err != nil {
			return nil, err
		}
		lsn := walAt(ctx, pool)
		t := time.Now()
		res, err := maintain(keep)
		if err != nil {
			return nil, err
		}
		dropMS = append(dropMS, ms(time.Since(t)))
		oursWAL = append(oursWAL, walSince(ctx, pool, lsn))
		if res.Dropped != 1 {
			return nil, fmt.Errorf("rep %d: the maintenance dropped %d key partitions, want 1", rep, res.Dropped)
		}
		removed += due

		lsn = walAt(ctx, pool)
		t = time.Now()
		tag, err := pool.Exec(ctx, `DELETE FROM keys_naive WHERE first_seen_at < $1`, cutoff)
		if err != nil {
			return nil, err
		}
		deleteMS = append(deleteMS, ms(time.Since(t)))
		t = time.Now()
		if _, err := pool.Exec(ctx, `VACUUM keys_naive`); err != nil {
			return nil, err
		}
		vacuumMS = append(vacuumMS, ms(time.Since(t)))
		naiveWAL = append(naiveWAL, walSince(ctx, pool, lsn))
		if tag.RowsAffected() != due || alike != due {
			return nil, fmt.Errorf("rep %d: naive deleted %d keys, ours dropped %d", rep, tag.RowsAffected(), due)
		}

		// Replayed keys: spread over the keys kept (the retired partitions held at most the first rep/span of them),
		// all duplicates.
		lo := rep*n/span + 1
		replay := make([]string, keysClaim)
		for j := range replay {
			replay[j] = fmt.Sprintf("k%d", lo+j*(n-lo)/keysClaim)
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
	parts, err := postgres.LogPartitions(ctx, pool, postgres.SignalKeyLog)
	if err != nil {
		return nil, err
	}
	return []row{{
		Bench: "logs", Metric: fmt.Sprintf("signal keys: retire one partition (%s of %s keys)", thousands(removed/int64(reps)), thousands(int64(n))),
		Unit: "ms", Better: lower, Ours: median(dropMS), Naive: fptr(median(deleteMS) + median(vacuumMS)), Reps: reps,
		OursSamples: dropMS, NaiveSamples: sum2(deleteMS, vacuumMS),
		Note: fmt.Sprintf("ours: the promoter drops its partition; naive: DELETE %s + the VACUUM it leaves %s", fmtMS(median(deleteMS)), fmtMS(median(vacuumMS))),
	}, {
		Bench: "logs", Metric: "signal keys: retire one partition, WAL written", Unit: "MiB", Better: lower,
		Ours: median(oursWAL), Naive: fptr(median(naiveWAL)), Reps: reps, OursSamples: oursWAL, NaiveSamples: naiveWAL,
	}, {
		Bench: "logs", Metric: fmt.Sprintf("signal keys: claim %d new keys", keysClaim), Unit: "ms", Better: lower,
		Ours: median(newOurs), Naive: fptr(median(newNaive)), Reps: reps, OursSamples: newOurs, NaiveSamples: newNaive,
		Note: fmt.Sprintf("a handoff page's claim, the median of %d per rep; ours looks each key up in %d partitions of %s (and the default)", keysClaims, len(parts), width),
	}, {
		Bench: "logs", Metric: fmt.Sprintf("signal keys: claim %d replayed keys", keysClaim), Unit: "ms", Better: lower,
		Ours: median(replayOurs), Naive: fptr(median(replayNaive)), Reps: reps, OursSamples: replayOurs, NaiveSamples: replayNaive,
		Note: "keys from every kept day, all refused as duplicates",
	}}, nil
}

// fillSignalKeys writes n keys first seen evenly from span partitions before p0 up to now, into the partitioned key
// table (its partitions made first, keysAhead ahead, as the promoter makes them) and into keys_naive, then vacuums
// and analyzes both.
func fillSignalKeys(ctx context.Context, pool *pgxpool.Pool, n, span int, p0 time.Time, width time.Duration) error {
	for d := -span; d <= keysAhead; d++ {
		from := p0.Add(time.Duration(d) * width)
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF governance_signal_key FOR VALUES FROM ('%s') TO ('%s')`,
			pgx.Identifier{fmt.Sprintf("governance_signal_key_bench_%d", d+span)}.Sanitize(), from.Format(time.RFC3339),
			from.Add(width).Format(time.RFC3339))); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE keys_naive (source_system text NOT NULL, event_type text NOT NULL, correlation_id text NOT NULL,
		first_seen_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (source_system, event_type, correlation_id));
		CREATE INDEX keys_naive_first_seen_at ON keys_naive (first_seen_at)`); err != nil {
		return err
	}
	const chunk = 1_000_000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		if _, err := pool.Exec(ctx, `INSERT INTO governance_signal_key (source_system, event_type, correlation_id, first_seen_at)
			SELECT 'birth_registry', 'governance.handoff.object_born', 'k' || i,
				date_bin('1 hour', $4::timestamptz + (i::float8 / $3::float8) * ($5::timestamptz - $4::timestamptz), '0001-01-01 00:00:00+00')
			FROM generate_series($1::int, $2::int - 1) i`,
			lo, hi, n, p0.Add(-time.Duration(span)*width), time.Now()); err != nil {
			return err
		}
	}
	for _, sql := range []string{`INSERT INTO keys_naive SELECT * FROM governance_signal_key`,
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
