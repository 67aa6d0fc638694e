package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/postgres"
)

// The logs benchmark: GCOS's verdict change log at -log-rows rows (10⁷ by default), partitioned by hour as the
// incremental scan keeps it, beside the same rows in one plain table pruned by DELETE as before. The rows span
// 24 + reps hours back from the hour now is in; each rep retires the oldest hour still kept: ours by the scan's
// maintenance (postgres.MaintainVerdictChangesTx: one partition dropped), naive by a DELETE of the same rows and the VACUUM
// that must follow it sooner or later (autovacuum's work, timed here). Beside it: the WAL each writes, a scan's
// write of a 500-change batch into each, and the newest page the change routes read from each. Then the same for
// the signals' idempotency keys (b_signal_keys.go).

const (
	logsBatch     = 500 // changes per write, as a busy scan tick writes them
	logsWrites    = 40  // batches timed per rep
	logsPageLimit = 100 // the change routes' page
)

func benchLogs(ctx context.Context, r *runner) ([]row, error) {
	name, err := r.env.migrated(ctx, "logs")
	if err != nil {
		return nil, err
	}
	pool, err := r.env.pool(ctx, name, 4, "gcos-bench-logs")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	n, reps := r.opts.logRows, r.opts.reps
	span := 24 + reps
	t0 := time.Now()
	var hour0 time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('hour', now())`).Scan(&hour0); err != nil {
		return nil, err
	}
	if err := fillLogs(ctx, pool, n, span, hour0); err != nil {
		return nil, fmt.Errorf("fill the logs: %w", err)
	}
	r.log.Info("logs: filled", "rows", n, "hours", span, "elapsed", time.Since(t0).Round(time.Second))

	// maintain runs the incremental scan's maintenance of the log once, as the scan does.
	maintain := func(keep time.Duration) (res postgres.LogMaintained, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err = postgres.MaintainVerdictChangesTx(ctx, tx, keep, time.Hour)
			return err
		})
		return res, err
	}
	var idleMS, dropMS, deleteMS, vacuumMS, oursWAL, naiveWAL, writeOurs, writeNaive, readOurs, readNaive []float64
	var removed, left int64
	for rep := 1; rep <= reps; rep++ {
		// Retention: one hour more expires at each rep.
		keep := time.Duration(span-rep)*time.Hour + time.Since(hour0) - 30*time.Minute // the cutoff half an hour inside the next bin
		cutoff := hour0.Add(-time.Duration(span-rep) * time.Hour)
		var due int64
		var alike int64 // the naive table's same rows read too, so that both start warm
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM gcos_verdict_change WHERE changed_at < $1),
			(SELECT count(*) FROM logs_naive WHERE changed_at < $1)`, cutoff).Scan(&due, &alike); err != nil {
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
			return nil, fmt.Errorf("rep %d: the maintenance dropped %d partitions, want 1", rep, res.Dropped)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM gcos_verdict_change WHERE changed_at < $1`, cutoff).Scan(&left); err != nil || left != 0 {
			return nil, fmt.Errorf("rep %d: %d changes older than the cutoff left (%v)", rep, left, err)
		}
		removed += due

		d, err := deleteAndVacuum(ctx, pool, "logs_naive", "changed_at < $1", cutoff)
		if err != nil {
			return nil, err
		}
		deleteMS, vacuumMS, naiveWAL = append(deleteMS, d.deleteMS), append(vacuumMS, d.vacuumMS), append(naiveWAL, d.walMiB)
		if d.rows != due {
			return nil, fmt.Errorf("rep %d: naive deleted %d rows, ours dropped %d", rep, d.rows, due)
		}

		// The scan's maintenance at every incremental tick, with nothing due.
		t = time.Now()
		if res, err = maintain(keep); err != nil {
			return nil, err
		}
		idleMS = append(idleMS, ms(time.Since(t)))
		if res.Dropped != 0 {
			return nil, fmt.Errorf("rep %d: a maintenance with nothing due dropped %d partitions", rep, res.Dropped)
		}

		for _, table := range []string{"gcos_verdict_change", "logs_naive"} {
			w, err := logsWriteRate(ctx, pool, table)
			if err != nil {
				return nil, err
			}
			q, err := logsNewestPage(ctx, pool, table)
			if err != nil {
				return nil, err
			}
			if table == "logs_naive" {
				writeNaive, readNaive = append(writeNaive, w), append(readNaive, q)
			} else {
				writeOurs, readOurs = append(writeOurs, w), append(readOurs, q)
			}
		}
	}
	perHour := thousands(removed / int64(reps))
	parts, err := postgres.LogPartitions(ctx, pool, postgres.VerdictChangeLog)
	if err != nil {
		return nil, err
	}
	keys, err := benchSignalKeys(ctx, r, pool)
	if err != nil {
		return nil, err
	}
	return append([]row{{
		Bench: "logs", Metric: fmt.Sprintf("retire one hour (%s of %s changes)", perHour, thousands(int64(n))), Unit: "ms", Better: lower,
		Ours: median(dropMS), Naive: fptr(median(deleteMS) + median(vacuumMS)), Reps: reps, OursSamples: dropMS, NaiveSamples: sum2(deleteMS, vacuumMS),
		Note: fmt.Sprintf("ours: drop its partition; naive: DELETE %s + the VACUUM it leaves %s", fmtMS(median(deleteMS)), fmtMS(median(vacuumMS))),
	}, {
		Bench: "logs", Metric: "a tick's maintenance, nothing due", Unit: "ms", Better: lower,
		Ours: median(idleMS), Reps: reps, OursSamples: idleMS,
		Note: "the incremental scan's at every tick: the retention mark, the partitions listed, the default partition read",
	}, {
		Bench: "logs", Metric: "retire one hour: WAL written", Unit: "MiB", Better: lower,
		Ours: median(oursWAL), Naive: fptr(median(naiveWAL)), Reps: reps, OursSamples: oursWAL, NaiveSamples: naiveWAL,
		Note: "DELETE and VACUUM write every row's page again; a DROP writes the catalog",
	}, {
		Bench: "logs", Metric: fmt.Sprintf("write %d-change batches", logsBatch), Unit: "rows/s", Better: higher,
		Ours: median(writeOurs), Naive: fptr(median(writeNaive)), Reps: reps, OursSamples: writeOurs, NaiveSamples: writeNaive,
		Note: fmt.Sprintf("%d batches per rep; ours routes into the hour's partition", logsWrites),
	}, {
		Bench: "logs", Metric: fmt.Sprintf("newest page of %d changes", logsPageLimit), Unit: "ms", Better: lower,
		Ours: median(readOurs), Naive: fptr(median(readNaive)), Reps: reps, OursSamples: readOurs, NaiveSamples: readNaive,
		Note: fmt.Sprintf("ORDER BY changed_at DESC, id DESC over %d hourly partitions vs one table", len(parts)),
	}}, keys...), nil
}

// logAheadHours is how many partitions past now's the maintenance makes (one hour wide here).
const logAheadHours = 2

// fillLogs writes n changes spread evenly over the span hours before hour0 plus the hour now is in, into the
// partitioned log (its partitions made first, one per hour, as the maintenance makes them) and into logs_naive, a
// plain table with the log's columns and indexes, then vacuums and analyzes both, as long-lived tables would be.
// Each change's xid is a transaction long ended, one per hour, rising with its time.
func fillLogs(ctx context.Context, pool *pgxpool.Pool, n, span int, hour0 time.Time) error {
	for h := -span; h <= logAheadHours; h++ {
		from := hour0.Add(time.Duration(h) * time.Hour)
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF gcos_verdict_change FOR VALUES FROM ('%s') TO ('%s')`,
			pgx.Identifier{fmt.Sprintf("gcos_verdict_change_bench_%d", h+span)}.Sanitize(), from.Format(time.RFC3339), from.Add(time.Hour).Format(time.RFC3339))); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE logs_naive (LIKE gcos_verdict_change INCLUDING ALL)`); err != nil {
		return err
	}
	// Each hour's changes are stamped with a transaction of their own, ended, in the order of the hours: a fresh
	// cluster has not used that many, so some are used up first.
	for {
		var xmin int64
		if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
			return err
		}
		if xmin > int64(span+3) {
			break
		}
		if _, err := pool.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
			return err
		}
	}
	const chunk = 1_000_000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		if _, err := pool.Exec(ctx, `INSERT INTO gcos_verdict_change (changed_at, subject, key, group_key, scope, ruleset_version, verdict_before,
				verdict_after, why, dirtied_at, run_id, xid)
			SELECT t, 'group', 'g' || (i % 50000), 'g' || (i % 50000), 'commerce', 'rs-1', 'relevant', 'not_relevant', 'handoff:object_born',
				t - interval '40 ms', 'run-' || (i / 500), (1 + floor(i::float8 * $4::int / $3::float8))::bigint::text::xid8
			FROM generate_series($1::int, $2::int - 1) i,
			     LATERAL (SELECT $5::timestamptz + (i::float8 / $3::float8) * ($6::timestamptz - $5::timestamptz)) AS s(t)`,
			lo, hi, n, span+1, hour0.Add(-time.Duration(span)*time.Hour), hour0.Add(time.Hour)); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO logs_naive OVERRIDING SYSTEM VALUE SELECT * FROM gcos_verdict_change`); err != nil {
		return err
	}
	for _, sql := range []string{`SELECT setval(pg_get_serial_sequence('logs_naive', 'id'), (SELECT max(id) FROM logs_naive))`,
		`VACUUM ANALYZE gcos_verdict_change`, `VACUUM ANALYZE logs_naive`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// logsWriteRate times logsWrites batches of logsBatch changes into table, each its own transaction, as a scan tick
// writes its changes; the rows are removed again untimed.
func logsWriteRate(ctx context.Context, pool *pgxpool.Pool, table string) (float64, error) {
	var elapsed time.Duration
	for range logsWrites {
		t := time.Now()
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (subject, key, group_key, scope, ruleset_version, verdict_before, verdict_after, why, run_id)
			SELECT 'group', 'w' || i, 'w' || i, 'commerce', 'rs-1', 'relevant', 'not_relevant', 'handoff:object_born', 'bench-write'
			FROM generate_series(1, $1) i`, logsBatch); err != nil {
			return 0, err
		}
		elapsed += time.Since(t)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE run_id = 'bench-write'`); err != nil {
		return 0, err
	}
	return float64(logsWrites*logsBatch) / elapsed.Seconds(), nil
}

// logsNewestPage times the change routes' newest page on table (the median of five reads).
func logsNewestPage(ctx context.Context, pool *pgxpool.Pool, table string) (float64, error) {
	var samples []float64
	for range 5 {
		t := time.Now()
		rows, err := pool.Query(ctx, `SELECT id, changed_at, key FROM `+table+` ORDER BY changed_at DESC, id DESC LIMIT $1`, logsPageLimit)
		if err != nil {
			return 0, err
		}
		got := 0
		for rows.Next() {
			got++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if got != logsPageLimit {
			return 0, fmt.Errorf("%s: newest page of %d rows, want %d", table, got, logsPageLimit)
		}
		samples = append(samples, ms(time.Since(t)))
	}
	return median(samples), nil
}

// deleted is one naive retirement: a DELETE and the VACUUM it leaves behind, timed, and the WAL both wrote.
type deleted struct {
	rows                       int64
	deleteMS, vacuumMS, walMiB float64
}

// deleteAndVacuum retires the rows of table that match where, as a plain table must: a DELETE, then the VACUUM that
// must follow it sooner or later (autovacuum's work, timed here).
func deleteAndVacuum(ctx context.Context, pool *pgxpool.Pool, table, where string, args ...any) (deleted, error) {
	var d deleted
	lsn := walAt(ctx, pool)
	t := time.Now()
	tag, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE `+where, args...)
	if err != nil {
		return d, err
	}
	d.rows, d.deleteMS = tag.RowsAffected(), ms(time.Since(t))
	t = time.Now()
	if _, err := pool.Exec(ctx, `VACUUM `+table); err != nil {
		return d, err
	}
	d.vacuumMS, d.walMiB = ms(time.Since(t)), walSince(ctx, pool, lsn)
	return d, nil
}

func walAt(ctx context.Context, pool *pgxpool.Pool) string {
	var lsn string
	_ = pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn
}

// walSince is the WAL written since lsn, in MiB.
func walSince(ctx context.Context, pool *pgxpool.Pool, lsn string) float64 {
	var b float64
	_ = pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, lsn).Scan(&b)
	return b / (1 << 20)
}

func sum2(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

func fmtMS(v float64) string { return formatValue(v, "ms") }
