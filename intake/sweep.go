package intake

// Rows the order key misplaces (SPEC §9.2, issue: nothing enters unseen).
//
// The horizon makes the tail lossless for rows whose order key is set by the database clock in the writer's own
// transaction. A row can still carry a key the cursor will not meet in time: a timestamp-without-time-zone column
// written by a session whose TimeZone differs from the zone the tail reads it in, or a writer supplying the value
// itself. Such a row sorts behind the committed cursor (never read) or far in the future (read hours late). Each
// poll therefore also:
//
//   - hands off rows whose key lies beyond the configured future tolerance at once, records their ids (early_ids)
//     and skips them when the cursor reaches them;
//   - sweeps by id: every row with id <= swept_id is accounted for. delivered_ids holds the ids above it the tail has
//     handed off. The next mark (sweep_next_id, the largest id visible at sweep_next_at) becomes final once no
//     transaction that was open at sweep_next_at is still open (the poll's horizon has passed it): every row with an
//     id up to the mark is then visible, so one read of the ids (swept_id, sweep_next_id] finds each row behind the
//     cursor that was never handed off. Those rows are handed off in this poll.
//   - starts the sweep (the first poll, or after a reset) at the largest id visible, and keeps the ids below it that
//     are not visible yet (sweep_pending): a transaction open at the start may hold one of them. Once every such
//     transaction has ended, the rows among them behind the cursor never handed off are handed off too.
//
// Both kinds are counted on the cursor (late_rows, future_rows) and raise handoff_out_of_order, so they are never
// silent and never skipped. The sweep assumes ids come from a sequence in commit-independent order (nextval, no
// per-session cache), as the order key's id does; all of it happens in the poll's transaction.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
	"gcos/postgres"
)

// sweepState is a cursor's out-of-order bookkeeping as the poll locked it.
type sweepState struct {
	swept, next *int64
	nextAt      pgtype.Timestamptz
	delivered   string // delivered_ids as an int8multirange literal
	early       []int64
	pending     string // sweep_pending as an int8multirange literal
}

// sweepResult is what a poll's sweep found and will record.
type sweepResult struct {
	late, future []postgres.TailRow
	swept, next  *int64
	nextAt       pgtype.Timestamptz
	early        []int64 // after the poll
	delivered    []int64 // ids handed off by this poll (page, late, future)
	skippedEarly int     // page rows the cursor reached that had been handed off early
	// pendingSet replaces sweep_pending (the start's gaps, or '{}' once checked); pendingAfter keeps only its ids
	// above it (a full page of pending rows). Either way this poll's handed-off ids leave it.
	pendingSet   *string
	pendingAfter *int64
}

// futureSQL finds rows beyond the future tolerance not handed off yet: $1 the position's ts after this page, $2 the
// tolerance in microseconds, $3 the early ids, $4 the page size, $5 (timestamp sources) the zone. The bound is a
// single stable expression (statement_timestamp(), no row comparison) so the (ts, id) index starts right at it
// instead of the table being scanned on every poll; a row at or behind the position is the cursor's (or the sweep's).
func futureSQL(src postgres.TailSource, noTZ bool) string {
	bound := "greatest(statement_timestamp() + $2::bigint * interval '1 microsecond', $1::timestamptz)"
	if noTZ {
		bound = "greatest((statement_timestamp() + $2::bigint * interval '1 microsecond') AT TIME ZONE $5::text, $1::timestamp)"
	}
	return src.SQL("SELECT " + selectList(src, noTZ, "$5") + " FROM {t} t WHERE t.{ts} > " + bound +
		" AND NOT (t.{id} = ANY (coalesce($3::bigint[], '{}')))" +
		" ORDER BY t.{ts}, t.{id} LIMIT $4")
}

// lateSQL finds rows behind the cursor never handed off, among the ids (swept, next], in id order: $1,$2 the position
// after this page, $3 swept, $4 next, $5 the ids handed off (delivered_ids), $6 this poll's ids, $7 the page size, $8
// (timestamp sources) the zone.
func lateSQL(src postgres.TailSource, noTZ bool) string {
	pos := "($1::timestamptz, $2::bigint)"
	if noTZ {
		pos = "($1::timestamp, $2::bigint)"
	}
	return src.SQL("SELECT " + selectList(src, noTZ, "$8") + " FROM {t} t WHERE t.{id} > $3::bigint AND " +
		"t.{id} <= $4::bigint AND (t.{ts}, t.{id}) <= " + pos +
		" AND NOT ($5::text::int8multirange @> t.{id}::bigint) AND NOT (t.{id} = ANY (coalesce($6::bigint[], '{}')))" +
		" ORDER BY t.{id} LIMIT $7")
}

// maxIDSQL is the sweep's next mark: the largest id visible now, and the time after the statement's snapshot.
func maxIDSQL(src postgres.TailSource) string {
	return src.SQL("SELECT coalesce(max({id}), 0)::bigint, clock_timestamp() FROM {t}")
}

// startSQL is the sweep's start, in one statement (one snapshot): the largest id visible now, the time after the
// statement's snapshot, and the ids at or below it not visible in that snapshot. A history without a gap (the count
// of ids fills the range from the smallest) costs one count; only one with gaps (rows rolled back, deleted, or still
// being written) is walked by id to list them. Ids below the smallest are pending too.
func startSQL(src postgres.TailSource) string {
	return src.SQL(`
WITH m AS (SELECT coalesce(max({id}), 0)::bigint AS mark, coalesce(min({id}), 1)::bigint AS lo, count(*) AS n FROM {t})
SELECT m.mark, clock_timestamp(),
       (CASE WHEN m.lo > 1 THEN int8multirange(int8range(1, m.lo)) ELSE '{}'::int8multirange END +
        CASE WHEN m.n >= m.mark - m.lo + 1 THEN '{}'::int8multirange ELSE coalesce((
            SELECT range_agg(int8range(g.prev + 1, g.id)) FROM (
                SELECT t.{id}::bigint AS id, lag(t.{id}::bigint) OVER (ORDER BY t.{id}) AS prev FROM {t} t
                WHERE t.{id} <= (SELECT mark FROM m)
            ) g WHERE g.id > g.prev + 1), '{}') END)::text
FROM m`)
}

// pendingSQL finds the rows among the start's pending ids that sort behind the cursor and were never handed off, in
// id order: $1,$2 the position after this page, $3 the pending ids, $4 this poll's ids, $5 the page size, $6
// (timestamp sources) the zone. Each pending range is one probe of the id index.
func pendingSQL(src postgres.TailSource, noTZ bool) string {
	pos := "($1::timestamptz, $2::bigint)"
	if noTZ {
		pos = "($1::timestamp, $2::bigint)"
	}
	return src.SQL("SELECT " + selectList(src, noTZ, "$6") + " FROM unnest($3::text::int8multirange) AS r(ids) " +
		"JOIN {t} t ON t.{id} >= lower(r.ids) AND t.{id} < upper(r.ids) " +
		"WHERE (t.{ts}, t.{id}) <= " + pos + " AND NOT (t.{id} = ANY (coalesce($4::bigint[], '{}')))" +
		" ORDER BY t.{id} LIMIT $5")
}

const sweepRecordSQL = `
UPDATE gov_worker_cursor
SET swept_id = $2, sweep_next_id = $3, sweep_next_at = $4,
    delivered_ids = CASE WHEN $2::bigint IS NULL THEN '{}'::int8multirange
                         ELSE (delivered_ids + $5::text::int8multirange) * int8multirange(int8range($2::bigint, NULL, '(]')) END,
    early_ids = $6, late_rows = late_rows + $7, future_rows = future_rows + $8,
    sweep_pending = (CASE WHEN $9::text IS NOT NULL THEN $9::text::int8multirange
                          WHEN $10::bigint IS NOT NULL THEN sweep_pending * int8multirange(int8range($10::bigint, NULL, '(]'))
                          ELSE sweep_pending END) - $5::text::int8multirange
WHERE source = $1`

// sweep runs the poll's out-of-order checks after its page was read. page is the page as read; pos is the position
// the cursor will commit (the page's last row, or the position it had). It returns what to hand off besides the
// page's rows and what to record.
func (s *Stage) sweep(ctx context.Context, tx pgx.Tx, src postgres.TailSource, cur tailCursorRow, st sweepState, page []postgres.TailRow,
	pos tailPos, horizon time.Time, cfg gcos.IntakeConfig, pageSize int) (sweepResult, error) {
	res := sweepResult{swept: st.swept, next: st.next, nextAt: st.nextAt}
	early := map[int64]bool{}
	for _, id := range st.early {
		early[id] = true
	}
	for _, r := range page {
		res.delivered = append(res.delivered, r.ID)
		if early[r.ID] {
			delete(early, r.ID) // the cursor has reached it; it was handed off before
			res.skippedEarly++
		}
	}
	zoneArg := func(args []any) []any {
		if cur.noTZ {
			return append(args, cur.zone)
		}
		return args
	}
	earlyIDs := make([]int64, 0, len(early))
	for id := range early {
		earlyIDs = append(earlyIDs, id)
	}
	slices.Sort(earlyIDs)

	// Rows beyond the future tolerance.
	tol := max(cfg.FutureTolerance.Duration(), 0)
	future, err := tailReadRows(ctx, tx, src, cur.noTZ, 0, futureSQL(src, cur.noTZ),
		zoneArg([]any{pos.tsArg(cur.noTZ), tol.Microseconds(), earlyIDs, pageSize})...)
	if err != nil {
		return res, fmt.Errorf("find future rows: %w", err)
	}
	for i, r := range future {
		future[i].OutOfOrder = "future"
		earlyIDs = append(earlyIDs, r.ID)
		res.delivered = append(res.delivered, r.ID)
	}
	res.future = future

	// The id sweep.
	switch {
	case st.swept == nil || st.next == nil:
		// First poll (or after a reset): the sweep starts at the rows visible now; the ids below the mark not visible
		// now stay pending until every transaction open now has ended (the mark's time is the start's).
		var mark int64
		var at time.Time
		var gaps string
		if err := tx.QueryRow(ctx, startSQL(src)).Scan(&mark, &at, &gaps); err != nil {
			return res, fmt.Errorf("start the id sweep: %w", err)
		}
		res.swept, res.next, res.nextAt, res.pendingSet = &mark, &mark, pgtype.Timestamptz{Time: at, Valid: true}, &gaps
	case res.nextAt.Valid && horizon.After(res.nextAt.Time):
		// Every transaction open when the mark was taken has ended: the ids up to it are final.
		if st.pending != "" && st.pending != "{}" {
			// The start's pending ids: the first mark after the start is the start's own, so its transactions have
			// ended too. Rows among them behind the cursor were never handed off.
			found, err := tailReadRows(ctx, tx, src, cur.noTZ, 0, pendingSQL(src, cur.noTZ),
				zoneArg([]any{pos.tsArg(cur.noTZ), pos.idArg(), st.pending, res.delivered, pageSize})...)
			if err != nil {
				return res, fmt.Errorf("find pending rows behind the cursor: %w", err)
			}
			for i, r := range found {
				found[i].OutOfOrder = "behind"
				res.delivered = append(res.delivered, r.ID)
			}
			res.late = found
			if len(found) == pageSize {
				// A full page: the pending ids after the last one found are checked by the next poll.
				last := found[len(found)-1].ID
				res.pendingAfter, res.early = &last, earlyIDs
				return res, nil
			}
			none := "{}"
			res.pendingSet = &none
		}
		if *st.next > *st.swept {
			late, err := tailReadRows(ctx, tx, src, cur.noTZ, 0, lateSQL(src, cur.noTZ),
				zoneArg([]any{pos.tsArg(cur.noTZ), pos.idArg(), *st.swept, *st.next, st.delivered, res.delivered, pageSize})...)
			if err != nil {
				return res, fmt.Errorf("find rows behind the cursor: %w", err)
			}
			for i, r := range late {
				late[i].OutOfOrder = "behind"
				res.delivered = append(res.delivered, r.ID)
			}
			res.late = append(res.late, late...)
			if len(late) == pageSize {
				// A full page: the ids after the last one found are checked by the next poll, against the same mark.
				swept := late[len(late)-1].ID
				res.swept, res.early = &swept, earlyIDs
				return res, nil
			}
		}
		var mark int64
		var at time.Time
		if err := tx.QueryRow(ctx, maxIDSQL(src)).Scan(&mark, &at); err != nil {
			return res, fmt.Errorf("advance the id sweep: %w", err)
		}
		swept := *st.next
		res.swept, res.next, res.nextAt = &swept, &mark, pgtype.Timestamptz{Time: at, Valid: true}
	}
	res.early = earlyIDs
	return res, nil
}

// recordSweep writes the sweep's bookkeeping and reports what it found (one coalesced finding per source and kind).
func (s *Stage) recordSweep(ctx context.Context, tx pgx.Tx, src postgres.TailSource, cur tailCursorRow, pos tailPos, res sweepResult) error {
	if _, err := tx.Exec(ctx, sweepRecordSQL, src.Name, res.swept, res.next, res.nextAt, idRanges(res.delivered),
		res.early, len(res.late), len(res.future), res.pendingSet, res.pendingAfter); err != nil {
		return fmt.Errorf("record the sweep of %s: %w", src.Name, err)
	}
	report := func(kind string, rows []postgres.TailRow, what, fix string) error {
		if len(rows) == 0 {
			return nil
		}
		var ids []int64
		var keys []string
		for i, r := range rows {
			if i < 10 {
				ids = append(ids, r.ID)
				keys = append(keys, r.Raw.Format("2006-01-02T15:04:05.999999"))
			}
		}
		_, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueHandoffOutOfOrder, Subject: src.Name + ":" + kind,
			Evidence: map[string]any{"source": src.Name, "kind": kind, "rows": len(rows), "sample_ids": ids,
				"sample_order_keys": keys, "cursor": pos.watermark(cur.noTZ), "time_zone": cur.zone, "what": what,
				"handled": "handed off in this poll", "fix": fix}})
		return err
	}
	fix := "make the writers set " + src.TSColumn + " from the database clock in the zone the tail reads it in"
	if cur.noTZ {
		fix += " (" + cur.zone + "; a session SET TimeZone changes what DEFAULT now() stores in a timestamp column)"
	}
	if err := report("behind", res.late, "rows committed with an order key behind the committed cursor", fix); err != nil {
		return err
	}
	return report("future", res.future, "rows whose order key lies beyond intake.future_tolerance ahead of the database clock", fix)
}

// idRanges renders ids as an int8multirange literal of runs of consecutive ids, e.g. {[1,4),[7,8)}.
func idRanges(ids []int64) string {
	if len(ids) == 0 {
		return "{}"
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	var b strings.Builder
	b.WriteByte('{')
	start, prev := sorted[0], sorted[0]
	flush := func() {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		b.WriteString(strconv.FormatInt(start, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(prev+1, 10))
		b.WriteByte(')')
	}
	for _, id := range sorted[1:] {
		if id <= prev+1 {
			prev = max(prev, id)
			continue
		}
		flush()
		start, prev = id, id
	}
	flush()
	b.WriteByte('}')
	return b.String()
}
