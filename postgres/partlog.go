package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// A Log is one of GCOS's time-partitioned logs (migration 023): its partitioned table, the time column it is
// partitioned by, and the one-row table whose pruned_below says below which transaction its rows may be gone.
// Each has a default partition, <table>_default, for rows no time partition takes yet.
type Log struct {
	Table, Column, Horizon string
}

// The time-partitioned logs.
var (
	VerdictChangeLog = Log{Table: "gcos_verdict_change", Column: "changed_at", Horizon: "gcos_verdict_change_horizon"}
	ChangeFeedLog    = Log{Table: "gcos_change_feed", Column: "noted_at", Horizon: "gcos_change_feed_horizon"}
)

// LogRetention is what one maintenance of a log does: make the partitions of Width its rows need (now's, those
// ahead of it, and those of any row the default partition caught), and drop every partition whose rows are all
// older than Keep behind the database's clock and whose writers are all below Mark (an xid8, as text; empty: the
// oldest transaction still running).
type LogRetention struct {
	Width, Keep time.Duration
	Mark        string
}

// LogMaintained reports one maintenance of a log.
type LogMaintained struct {
	Created int   // partitions made
	Moved   int64 // rows moved from the default partition into the partitions made
	Dropped int   // partitions dropped (their rows are not counted: that would read them under the log's lock)
	// Deferred: there was work, but the log's lock was not free within logLockTimeout; the next maintenance tries
	// again (partitions are made logAhead widths ahead, so nothing is late for it).
	Deferred bool
}

// logAhead is how many partitions past now's each maintenance makes, so that a maintenance or two missed leaves no
// row in the default partition.
const logAhead = 2

// logLockTimeout bounds the wait for the log's locks (making and dropping a partition lock it briefly): past it the
// maintenance gives up until the next one, so a long reader never queues the log's readers and writers behind it
// for long. Partitions are made logAhead widths ahead, so a maintenance that gives up now and then costs nothing.
const logLockTimeout = "50ms"

// logPartitionsSQL lists a log's time partitions and their bounds (the default partition has none).
const logPartitionsSQL = `SELECT c.relname, b[1]::timestamptz, b[2]::timestamptz
	FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
	     LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), $$^FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)$$) b
	WHERE i.inhparent = $1::regclass AND b IS NOT NULL
	ORDER BY 2`

// MaintainLogTx makes and drops log's partitions by r, in tx (one maintainer at a time per log: it takes the log's
// advisory lock). A partition is dropped only under the log's exclusive lock, after its newest writer is read again
// under it, so no row of a transaction at or above the mark is ever dropped; the horizon moves just past the newest
// transaction dropped (gcos.LogPartitionsToDrop).
func MaintainLogTx(ctx context.Context, tx pgx.Tx, log Log, r LogRetention) (LogMaintained, error) {
	var res LogMaintained
	fail := func(what string, err error) (LogMaintained, error) {
		return res, fmt.Errorf("maintain %s: %s: %w", log.Table, what, err)
	}
	if r.Width <= 0 {
		return fail("partition width", fmt.Errorf("%v is not positive", r.Width))
	}
	table, def := pgx.Identifier{log.Table}.Sanitize(), pgx.Identifier{log.Table + "_default"}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.log.' || $1, 0))`, log.Table); err != nil {
		return fail("lock", err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+logLockTimeout+`'`); err != nil {
		return fail("lock timeout", err)
	}
	var now time.Time
	var mark uint64
	if err := tx.QueryRow(ctx, `SELECT now(), coalesce(nullif($1, '')::xid8, pg_snapshot_xmin(pg_current_snapshot()))::text::bigint`,
		r.Mark).Scan(&now, &mark); err != nil {
		return fail("read the clock and the mark", err)
	}
	parts, err := logPartitions(ctx, tx, log)
	if err != nil {
		return fail("list partitions", err)
	}
	need := make([]time.Time, 0, logAhead+1)
	for i := range logAhead + 1 {
		need = append(need, now.Add(time.Duration(i)*r.Width))
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT DISTINCT date_bin($1::interval, %s, '0001-01-01 00:00:00+00') FROM %s`,
		pgx.Identifier{log.Column}.Sanitize(), def), r.Width)
	if err != nil {
		return fail("read the default partition", err)
	}
	caught, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return fail("read the default partition", err)
	}
	spans := make([]gcos.Span, len(parts))
	for i, p := range parts {
		spans[i] = p.Span
	}
	create := gcos.LogPartitionsToCreate(spans, append(need, caught...), r.Width)

	// Which expired partitions could go: their newest writer read without the table's lock first, so a quiet
	// maintenance takes no exclusive lock. A writer that comes after can only raise it.
	cutoff := now.Add(-r.Keep)
	var expired []logPartition
	for _, p := range parts {
		if !p.To.After(cutoff) {
			expired = append(expired, p)
		}
	}
	if err := newestWriters(ctx, tx, expired); err != nil {
		return fail("read the newest writers", err)
	}
	drop, _ := gcos.LogPartitionsToDrop(logSpans(expired), cutoff, mark, 0)
	if len(create) == 0 && len(drop) == 0 {
		return res, nil
	}
	// The whole log's lock, taken first, so that no reader or writer of the log waits on this maintenance while
	// holding what it waits for. Attaching alone locks less, but a writer that routed its row by the partitions it
	// saw before would then put it into the default partition after the attach, and fail its constraint.
	if ok, err := lockLog(ctx, tx, table); err != nil {
		return fail("lock the log", err)
	} else if !ok {
		res.Deferred = true
		return res, nil
	}
	for _, s := range create {
		name := pgx.Identifier{log.Table + "_p" + strings.ReplaceAll(s.From.UTC().Format("20060102t150405.999999"), ".", "_")}.Sanitize()
		from, to := "'"+s.From.UTC().Format(time.RFC3339Nano)+"'", "'"+s.To.UTC().Format(time.RFC3339Nano)+"'"
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, name, table)); err != nil {
			return fail("make partition "+name, err)
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf(`WITH moved AS (DELETE FROM %[1]s WHERE %[2]s >= %[3]s AND %[2]s < %[4]s RETURNING *)
			INSERT INTO %[5]s SELECT * FROM moved`, def, pgx.Identifier{log.Column}.Sanitize(), from, to, name))
		if err != nil {
			return fail("move rows into partition "+name, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, table, name, from, to)); err != nil {
			return fail("attach partition "+name, err)
		}
		res.Created++
		res.Moved += tag.RowsAffected()
	}

	if len(drop) == 0 {
		return res, nil
	}
	// Under the log's lock no one writes: the newest writers read again are final.
	if err := newestWriters(ctx, tx, expired); err != nil {
		return fail("read the newest writers", err)
	}
	var horizon uint64
	if err := tx.QueryRow(ctx, `SELECT pruned_below::text::bigint FROM `+pgx.Identifier{log.Horizon}.Sanitize()).Scan(&horizon); err != nil {
		return fail("read the horizon", err)
	}
	drop, moved := gcos.LogPartitionsToDrop(logSpans(expired), cutoff, mark, horizon)
	for _, i := range drop {
		name := pgx.Identifier{expired[i].Name}.Sanitize()
		if _, err := tx.Exec(ctx, `DROP TABLE `+name); err != nil {
			return fail("drop partition "+name, err)
		}
		res.Dropped++
	}
	if moved != horizon {
		if _, err := tx.Exec(ctx, `UPDATE `+pgx.Identifier{log.Horizon}.Sanitize()+` SET pruned_below = greatest(pruned_below, $1::xid8)`,
			strconv.FormatUint(moved, 10)); err != nil {
			return fail("move the horizon", err)
		}
	}
	return res, nil
}

// verdictChangesMarkSQL is the verdict change log's retention mark: the oldest transaction that wrote a change in a
// partition still kept (whole partitions from the one the cutoff falls in: the oldest of each by its xid index, not
// a scan for the oldest kept change), or the oldest still running if that is older. A partition goes only when its
// writers are all below it, so the horizon it moves never passes a change kept: a cursor issued anywhere in the kept
// window reads on.
const verdictChangesMarkSQL = `SELECT least(
	(SELECT min(xid) FROM gcos_verdict_change WHERE changed_at >= date_bin($2::interval, now() - $1::interval, '0001-01-01 00:00:00+00')),
	pg_snapshot_xmin(pg_current_snapshot()))::text`

// MaintainVerdictChangesTx keeps the verdict change log (scan.verdict_changes_keep, scan.verdict_changes_partition):
// its partitions made ahead, and those older than keep dropped below the mark of verdictChangesMarkSQL.
func MaintainVerdictChangesTx(ctx context.Context, tx pgx.Tx, keep, width time.Duration) (LogMaintained, error) {
	var mark string
	if err := tx.QueryRow(ctx, verdictChangesMarkSQL, keep, width).Scan(&mark); err != nil {
		return LogMaintained{}, fmt.Errorf("maintain the verdict change log: read the retention mark: %w", err)
	}
	return MaintainLogTx(ctx, tx, VerdictChangeLog, LogRetention{Width: width, Keep: keep, Mark: mark})
}

// lockLog takes the log's exclusive lock within logLockTimeout, under a savepoint: false when it was not free in
// time, with tx still usable.
func lockLog(ctx context.Context, tx pgx.Tx, table string) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	_, err = sp.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
	if IsPgCode(err, "55P03") { // lock_not_available
		return false, sp.Rollback(ctx)
	}
	if err != nil {
		return false, err
	}
	return true, sp.Commit(ctx)
}

// logPartition is one time partition of a log, by name.
type logPartition struct {
	Name string
	gcos.LogPartition
}

func logPartitions(ctx context.Context, q Querier, log Log) ([]logPartition, error) {
	rows, err := q.Query(ctx, logPartitionsSQL, log.Table)
	if err != nil {
		return nil, err
	}
	var out []logPartition
	var p logPartition
	_, err = pgx.ForEachRow(rows, []any{&p.Name, &p.From, &p.To}, func() error {
		out = append(out, p)
		return nil
	})
	return out, err
}

// LogPartitions returns the bounds of log's time partitions, oldest first.
func LogPartitions(ctx context.Context, q Querier, log Log) ([]gcos.Span, error) {
	parts, err := logPartitions(ctx, q, log)
	if err != nil {
		return nil, fmt.Errorf("list %s partitions: %w", log.Table, err)
	}
	out := make([]gcos.Span, len(parts))
	for i, p := range parts {
		out[i] = p.Span
	}
	return out, nil
}

// newestWriters reads each partition's newest writer (0 when it is empty) by its xid index.
func newestWriters(ctx context.Context, tx pgx.Tx, parts []logPartition) error {
	for i := range parts {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(xid)::text, '0')::bigint FROM `+pgx.Identifier{parts[i].Name}.Sanitize()).
			Scan(&parts[i].Newest); err != nil {
			return err
		}
	}
	return nil
}

func logSpans(parts []logPartition) []gcos.LogPartition {
	out := make([]gcos.LogPartition, len(parts))
	for i, p := range parts {
		out[i] = p.LogPartition
	}
	return out
}
