package intake

// The lossless cursor tail of the handoff intake (SPEC §9.2, doc 32 §5).
//
// A source row's order key (ts, id) is fixed early — ts = now() is its transaction's start, id comes from a
// sequence at insert — but the row becomes visible only at commit, possibly after a cursor has passed it. So each
// poll reads only below a visibility horizon under which no open transaction can still add rows:
//
//	w = least(clock_timestamp(), now(), min(xact_start) over the other open transactions of this database) − guard
//
// Why that is lossless: a row's ts is at least its transaction's start (the column defaults to the database clock
// inside the inserting transaction — a precondition checked at start). If that transaction was still open when w
// was taken, its start is ≥ the minimum, so ts > w and the row is not read yet. If it had already ended, the poll's
// read — a later statement of a READ COMMITTED transaction, hence a later snapshot — sees it committed (or it never
// will be). If it had not started, ts > clock_timestamp() > w. now() (the poll's own start) is in the least() so
// rows the poll's own apply step writes into a tailed table can never fall under its own horizon either. The guard
// only covers the instant between a backend taking its start timestamp and publishing it in pg_stat_activity.
//
// A timestamp-without-time-zone column (registry_changelog."timestamp") stores now() converted to the writing
// session's local time. The horizon is therefore compared in that same local time — (w AT TIME ZONE zone), exactly
// the conversion DEFAULT now() applied — with the zone resolved once (configuration, the zone fixed in the column's
// default such as timezone('UTC', now()), the database's TimeZone setting, or the session's) and kept on the cursor.
// A zone that moves its clocks back (DST) repeats an hour of local times, which no cursor can tail losslessly: the
// precondition check refuses it.
//
// The cursor row is locked FOR UPDATE SKIP LOCKED and advanced in the same transaction as the caller's apply step,
// so a poll is all-or-nothing: killed anywhere, it loses nothing and duplicates nothing. A row the apply step cannot
// handle goes to the retry lane (event_pending) and never blocks the cursor; after the configured attempts it is
// dead-lettered (handoff_dlq) and intake continues. The tail never skips on a timeout: a transaction that holds the
// horizon back is named in handoff_lag instead.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
	"gcos/postgres"
)

const (
	tailDomain       = "governance"               // event_pending.event_domain of retry entries
	tailRetryHint    = "governance.handoff.retry" // event_pending.event_type_hint of retry entries
	tailWorkerPrefix = "gcos.intake."             // worker_name and queue_heartbeat executor_name prefix
	tailErrorMax     = 500                        // characters of an error kept in event_pending.last_error
)

// qualifiedTable is the table as stored on the cursor (schema.table or table).
func qualifiedTable(src postgres.TailSource) string {
	if src.Schema != "" {
		return src.Schema + "." + src.Table
	}
	return src.Table
}

// tableSQL is the quoted table name.
func tableSQL(src postgres.TailSource) string {
	if src.Schema != "" {
		return pgx.Identifier{src.Schema, src.Table}.Sanitize()
	}
	return pgx.Identifier{src.Table}.Sanitize()
}

func tailIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// selectList is the column list every read of the source uses: id, the native ts, the ts as an instant, then
// the kind's fields. zoneParam is the placeholder holding the zone of a timestamp-without-time-zone column.
func selectList(src postgres.TailSource, noTZ bool, zoneParam string) string {
	ts := "t." + tailIdent(src.TSColumn)
	instant := ts
	if noTZ {
		instant = "(" + ts + " AT TIME ZONE " + zoneParam + "::text)"
	}
	parts := []string{"t." + tailIdent(src.IDColumn) + "::bigint", ts, instant}
	for _, f := range src.Fields() {
		parts = append(parts, "t."+tailIdent(src.Column(f))+"::text")
	}
	return strings.Join(parts, ", ")
}

// readSQL is the keyset page below the horizon: $1,$2 the position, $3 the horizon (timestamptz), $4 the page size,
// $5 (timestamp sources) the zone the column's local times are in.
func readSQL(src postgres.TailSource, noTZ bool) string {
	ts, id := "t."+tailIdent(src.TSColumn), "t."+tailIdent(src.IDColumn)
	pos, bound := "($1::timestamptz, $2::bigint)", "$3::timestamptz"
	if noTZ {
		// The horizon in the writers' local time: exactly the conversion DEFAULT now() made when it stored ts.
		pos, bound = "($1::timestamp, $2::bigint)", "($3::timestamptz AT TIME ZONE $5::text)"
	}
	return "SELECT " + selectList(src, noTZ, "$5") + " FROM " + tableSQL(src) + " t" +
		" WHERE (" + ts + ", " + id + ") > " + pos + " AND " + ts + " < " + bound +
		" ORDER BY " + ts + ", " + id + " LIMIT $4"
}

// byIDSQL re-reads rows by id (the retry lane): $1 the ids, $2 (timestamp sources) the zone.
func byIDSQL(src postgres.TailSource, noTZ bool) string {
	return "SELECT " + selectList(src, noTZ, "$2") + " FROM " + tableSQL(src) + " t WHERE t." +
		tailIdent(src.IDColumn) + " = ANY ($1::bigint[])"
}

// RowFailure reports that the apply step could not handle one row. The row leaves no trace of the failed attempt
// (the poll rolls the apply step back and re-applies the other rows) and goes to the retry lane.
type RowFailure struct {
	ID   int64           // the postgres.TailRow.ID
	Kind gcos.ChangeKind // the change kind, when the row got that far (kept in the retry entry's payload)
	Err  error

	row postgres.TailRow // filled by the poll
}

// ApplyFunc hands rows to the caller inside the poll's transaction; whatever it writes with tx commits together
// with the cursor advance. Per-row problems are returned as failures (those rows go to the retry lane); an error
// aborts the whole poll, which then changes nothing and is retried later.
type ApplyFunc func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]RowFailure, error)

// HorizonHolder is an open transaction holding a tail's horizon back (or a prepared transaction stalling it).
type HorizonHolder struct {
	PID             int32     `json:"pid,omitempty"`
	Role            string    `json:"role"`
	ApplicationName string    `json:"application_name,omitempty"`
	State           string    `json:"state,omitempty"`
	BackendType     string    `json:"backend_type,omitempty"`
	XactStart       time.Time `json:"xact_start"` // for a prepared transaction: when it was prepared
	AgeSeconds      float64   `json:"age_seconds"`
	PreparedGID     string    `json:"prepared_gid,omitempty"`
}

// PollResult reports one poll.
type PollResult struct {
	Source       string         `json:"source"`
	Busy         bool           `json:"busy,omitempty"`          // another worker holds the cursor; nothing was done
	Read         int            `json:"read"`                    // rows read below the horizon
	Late         int            `json:"late,omitempty"`          // rows found behind the cursor, handed to apply with the page
	Future       int            `json:"future,omitempty"`        // rows beyond the future tolerance, handed to apply early
	SkippedEarly int            `json:"skipped_early,omitempty"` // page rows already handed off early
	Applied      int            `json:"applied"`
	Failed       int            `json:"failed"`        // rows sent to the retry lane
	DeadLettered int            `json:"dead_lettered"` // of those, dead-lettered at once (max_attempts 1)
	PageFull     bool           `json:"page_full"`     // more rows may be waiting below the horizon
	Horizon      time.Time      `json:"horizon"`
	HeldBy       *HorizonHolder `json:"held_by,omitempty"` // the transaction that bounded the horizon; nil: the clock did
	Stalled      string         `json:"stalled,omitempty"` // why the horizon could not be used at all
	Position     string         `json:"position"`          // the cursor after the poll (a watermark)
}

// tailPos is a cursor position in the column's own type; start means before the first row.
type tailPos struct {
	start bool
	ts    time.Time // an instant, or a local wall time (in UTC fields) for a timestamp column
	id    int64
}

var tailNegInfTS = pgtype.Timestamp{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
var tailNegInfTSTZ = pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}

func (p tailPos) tsArg(noTZ bool) any {
	switch {
	case p.start && noTZ:
		return tailNegInfTS
	case p.start:
		return tailNegInfTSTZ
	case noTZ:
		return pgtype.Timestamp{Time: p.ts, Valid: true}
	}
	return p.ts
}

func (p tailPos) idArg() int64 {
	if p.start {
		return math.MinInt64
	}
	return p.id
}

// less orders positions like the row comparison (ts, id) does.
func (p tailPos) less(q tailPos) bool {
	switch {
	case p.start:
		return !q.start
	case q.start:
		return false
	case !p.ts.Equal(q.ts):
		return p.ts.Before(q.ts)
	}
	return p.id < q.id
}

// watermark renders the position the way ResetCursor reads it.
func (p tailPos) watermark(noTZ bool) string {
	if p.start {
		return "start"
	}
	var s string
	if noTZ {
		s = p.ts.UTC().Format("2006-01-02T15:04:05.999999")
	} else {
		s = p.ts.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
	}
	if p.id == math.MinInt64 {
		return s
	}
	return s + "/" + strconv.FormatInt(p.id, 10)
}

// tailCursorRow is the locked cursor as a poll sees it.
type tailCursorRow struct {
	table, tsColumn, idColumn string
	noTZ                      bool
	zone                      string
	pos                       tailPos
}

func tailScanCursor(row pgx.Row, extra ...any) (tailCursorRow, error) {
	var c tailCursorRow
	var tsType string
	var zone *string
	var ptz pgtype.Timestamptz
	var pts pgtype.Timestamp
	var pid *int64
	dest := append([]any{&c.table, &c.tsColumn, &c.idColumn, &tsType, &zone, &ptz, &pts, &pid}, extra...)
	if err := row.Scan(dest...); err != nil {
		return c, err
	}
	c.noTZ = tsType == "timestamp"
	if zone != nil {
		c.zone = *zone
	}
	switch {
	case pid == nil:
		c.pos = tailPos{start: true}
	case c.noTZ:
		c.pos = tailPos{ts: pts.Time, id: *pid}
	default:
		c.pos = tailPos{ts: ptz.Time, id: *pid}
	}
	return c, nil
}

const tailCursorCols = `c.source_table, c.ts_column, c.id_column, c.ts_type, c.time_zone, c.position_tstz, c.position_ts, c.position_id`

// The horizon, the first statement of every poll. A READ COMMITTED transaction takes a new snapshot per statement,
// so the page read (a later statement) sees every transaction that had ended when this one looked.
const tailHorizonSQL = `
SELECT least(clock_timestamp(), now(), h.xact_start) - $2::bigint * interval '1 microsecond',
       h.pid, h.usename, h.application_name, h.state, h.backend_type, h.xact_start,
       extract(epoch FROM clock_timestamp() - h.xact_start)::float8,
       pg_is_in_recovery(),
       coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false)
           OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT a.pid, a.usename::text AS usename, a.application_name, a.state, a.backend_type, a.xact_start
    FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
      AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
      AND (cardinality($1::text[]) = 0 OR a.usename = ANY ($1::text[]))
    ORDER BY a.xact_start
    LIMIT 1) AS h ON true`

// The cursor lock, after the horizon. Prepared transactions are counted here, after pg_stat_activity was read: a
// transaction that had left pg_stat_activity by then is either prepared (seen here) or ended.
const tailLockSQL = `
SELECT ` + tailCursorCols + `,
       (SELECT count(*) FROM pg_prepared_xacts p WHERE p.database = current_database()),
       c.swept_id, c.sweep_next_id, c.sweep_next_at, c.delivered_ids::text, c.early_ids
FROM gov_worker_cursor c WHERE c.source = $1
FOR UPDATE OF c SKIP LOCKED`

const tailPreparedSQL = `
SELECT gid, owner::text, prepared, extract(epoch FROM clock_timestamp() - prepared)::float8
FROM pg_prepared_xacts WHERE database = current_database() ORDER BY prepared LIMIT 10`

const tailAdvanceSQL = `
UPDATE gov_worker_cursor
SET position_tstz = $2, position_ts = $3, position_id = $4::bigint, last_event_id = ($4::bigint)::text,
    last_created_at = $5, events_seen = events_seen + $6, attempts_written = attempts_written + $7,
    dead_lettered = dead_lettered + $8, last_run_at = now(), last_run_summary = $9, last_horizon = $10,
    updated_at = now()
WHERE source = $1`

const tailTouchSQL = `
UPDATE gov_worker_cursor
SET last_run_at = now(), last_run_summary = $2, last_horizon = coalesce($3, last_horizon), updated_at = now()
WHERE source = $1`

// horizonRead is what tailHorizonSQL reports.
type horizonRead struct {
	at                  time.Time
	heldBy              *HorizonHolder // the open transaction that bounded the horizon; nil: the clock did
	inRecovery, seesAll bool
}

// readHorizon reads the tail horizon (tailHorizonSQL) with the intake's role filter and guard.
func readHorizon(ctx context.Context, q postgres.Querier, cfg gcos.IntakeConfig) (horizonRead, error) {
	roles := cfg.RoleFilter
	if roles == nil {
		roles = []string{}
	}
	var (
		h                   horizonRead
		hPID                *int32
		hRole, hApp, hState *string
		hType               *string
		hStart              pgtype.Timestamptz
		hAge                *float64
	)
	guard := max(cfg.HorizonGuard.Duration(), 0) // a negative guard would read above the horizon
	if err := q.QueryRow(ctx, tailHorizonSQL, roles, guard.Microseconds()).Scan(
		&h.at, &hPID, &hRole, &hApp, &hState, &hType, &hStart, &hAge, &h.inRecovery, &h.seesAll); err != nil {
		return h, err
	}
	if hPID != nil && hStart.Valid && !hStart.Time.After(h.at.Add(guard)) {
		h.heldBy = &HorizonHolder{PID: *hPID, Role: tailDeref(hRole), ApplicationName: tailDeref(hApp), State: tailDeref(hState),
			BackendType: tailDeref(hType), XactStart: hStart.Time, AgeSeconds: tailDerefF(hAge)}
	}
	return h, nil
}

// tailCursorExists distinguishes "locked by another worker" from "no cursor".
func tailCursorExists(ctx context.Context, q postgres.Querier, source string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gov_worker_cursor WHERE source = $1)`, source).Scan(&ok)
	return ok, err
}

func tailErrNoCursor(source string) error {
	return gcos.Errorf(gcos.ENOTFOUND, "no intake cursor for source %s: run the intake once to create it", source)
}

// PollTail runs one poll of src in one transaction: the horizon, the cursor lock, one keyset page below the
// horizon, apply, the retry lane for failed rows, the cursor advance, commit. Another worker polling the same
// source makes this poll return Busy at once.
func (s *Stage) PollTail(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig, apply ApplyFunc) (res PollResult, err error) {
	defer func() { s.core.NoteConflict(err) }()
	res = PollResult{Source: src.Name}
	if err := src.Validate(); err != nil {
		return res, err
	}
	if apply == nil {
		return res, gcos.Errorf(gcos.EINVALID, "poll %s: no apply step", src.Name)
	}
	page := cfg.PageSize
	if page <= 0 {
		page = 10_000
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return res, fmt.Errorf("poll %s: begin: %w", src.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// 1. The horizon, as the transaction's first statement.
	h, err := readHorizon(ctx, tx, cfg)
	if err != nil {
		return res, fmt.Errorf("poll %s: horizon: %w", src.Name, err)
	}
	if h.inRecovery {
		return res, gcos.Errorf(gcos.EINVALID, "poll %s refused: the server is a standby (pg_is_in_recovery); "+
			"the tail must read the primary", src.Name)
	}
	if !h.seesAll {
		return res, gcos.Errorf(gcos.EINVALID, "poll %s refused: this role cannot see other sessions' transactions "+
			"in pg_stat_activity; grant it pg_read_all_stats", src.Name)
	}
	horizon := h.at
	res.Horizon, res.HeldBy = h.at, h.heldBy

	// 2. The cursor.
	var prepared int64
	var sw sweepState
	cur, err := tailScanCursor(tx.QueryRow(ctx, tailLockSQL, src.Name), &prepared, &sw.swept, &sw.next, &sw.nextAt,
		&sw.delivered, &sw.early)
	if errors.Is(err, pgx.ErrNoRows) {
		ok, err := tailCursorExists(ctx, tx, src.Name)
		if err != nil {
			return res, fmt.Errorf("poll %s: %w", src.Name, err)
		}
		if !ok {
			return res, tailErrNoCursor(src.Name)
		}
		res.Busy = true
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("poll %s: lock cursor: %w", src.Name, err)
	}
	if err := cur.matches(src); err != nil {
		return res, err
	}
	res.Position = cur.pos.watermark(cur.noTZ)
	if prepared > 0 {
		// A prepared transaction has left pg_stat_activity but may still commit rows of any age: stall (never skip)
		// until it is resolved, and say so.
		holders, err := tailPreparedHolders(ctx, tx)
		if err != nil {
			return res, fmt.Errorf("poll %s: %w", src.Name, err)
		}
		res.Stalled = fmt.Sprintf("%d prepared transaction(s) in this database (oldest %q by %s): COMMIT PREPARED or "+
			"ROLLBACK PREPARED them", prepared, holders[0].PreparedGID, holders[0].Role)
		res.HeldBy = &holders[0]
		if _, err := tx.Exec(ctx, tailTouchSQL, src.Name, res.summary(), nil); err != nil {
			return res, fmt.Errorf("poll %s: %w", src.Name, err)
		}
		return res, tailCommit(ctx, tx, src.Name)
	}

	// 3. One page below the horizon.
	args := []any{cur.pos.tsArg(cur.noTZ), cur.pos.idArg(), horizon, page}
	if cur.noTZ {
		args = append(args, cur.zone)
	}
	rows, err := tailReadRows(ctx, tx, src, cur.noTZ, page, readSQL(src, cur.noTZ), args...)
	if err != nil {
		return res, fmt.Errorf("poll %s: read: %w", src.Name, err)
	}
	res.Read, res.PageFull = len(rows), len(rows) == page
	next := cur.pos
	if len(rows) > 0 {
		next = tailPos{ts: rows[len(rows)-1].Raw, id: rows[len(rows)-1].ID}
	}

	// 3b. Rows the order key misplaces: behind the cursor (never to be read) or far in the future (sweep.go).
	sw2, err := s.sweep(ctx, tx, src, cur, sw, rows, next, horizon, cfg, page)
	if err != nil {
		return res, fmt.Errorf("poll %s: %w", src.Name, err)
	}
	hand := rows
	if sw2.skippedEarly > 0 || len(sw2.late)+len(sw2.future) > 0 {
		hand = make([]postgres.TailRow, 0, len(rows)+len(sw2.late)+len(sw2.future))
		for _, r := range rows {
			if !slices.Contains(sw.early, r.ID) {
				hand = append(hand, r)
			}
		}
		hand = append(append(hand, sw2.late...), sw2.future...)
	}
	res.Late, res.Future, res.SkippedEarly = len(sw2.late), len(sw2.future), sw2.skippedEarly

	// 4. Apply; failed rows are rolled back and set aside.
	failures, err := tailApplyRows(ctx, tx, hand, apply)
	if err != nil {
		return res, fmt.Errorf("poll %s: apply: %w", src.Name, err)
	}
	res.Failed, res.Applied = len(failures), len(hand)-len(failures)

	// 5. The retry lane.
	for _, f := range failures {
		dead, err := s.tailEnqueueRetry(ctx, tx, src, cfg, f)
		if err != nil {
			return res, fmt.Errorf("poll %s: %w", src.Name, err)
		}
		if dead {
			res.DeadLettered++
		}
	}

	// 6. The sweep's bookkeeping and the cursor advance, in the same transaction as everything apply wrote.
	if err := s.recordSweep(ctx, tx, src, cur, next, sw2); err != nil {
		return res, fmt.Errorf("poll %s: %w", src.Name, err)
	}
	if len(rows) == 0 {
		if _, err := tx.Exec(ctx, tailTouchSQL, src.Name, res.summary(), horizon); err != nil {
			return res, fmt.Errorf("poll %s: %w", src.Name, err)
		}
		return res, tailCommit(ctx, tx, src.Name)
	}
	last := rows[len(rows)-1]
	res.Position = next.watermark(cur.noTZ)
	var posTZ, posTS any
	if cur.noTZ {
		posTS = pgtype.Timestamp{Time: last.Raw, Valid: true}
	} else {
		posTZ = last.Raw
	}
	if _, err := tx.Exec(ctx, tailAdvanceSQL, src.Name, posTZ, posTS, last.ID, last.TS, res.Read, res.Applied,
		res.DeadLettered, res.summary(), horizon); err != nil {
		return res, postgres.MapError(err, "poll "+src.Name+": advance cursor")
	}
	return res, tailCommit(ctx, tx, src.Name)
}

func tailCommit(ctx context.Context, tx pgx.Tx, source string) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("poll %s: commit: %w", source, err)
	}
	return nil
}

func (r PollResult) summary() map[string]any {
	m := map[string]any{"read": r.Read, "applied": r.Applied, "failed": r.Failed, "dead_lettered": r.DeadLettered,
		"page_full": r.PageFull, "horizon": r.Horizon}
	if r.Late+r.Future+r.SkippedEarly > 0 {
		m["late"], m["future"], m["skipped_early"] = r.Late, r.Future, r.SkippedEarly
	}
	if r.HeldBy != nil {
		m["held_by"] = r.HeldBy
	}
	if r.Stalled != "" {
		m["stalled"] = r.Stalled
	}
	return m
}

// matches refuses a poll whose configured binding differs from the one the cursor's position refers to.
func (c tailCursorRow) matches(src postgres.TailSource) error {
	if c.table != qualifiedTable(src) || c.tsColumn != src.TSColumn || c.idColumn != src.IDColumn {
		return gcos.Errorf(gcos.ECONFLICT, "intake cursor %s is bound to %s(%s, %s) but the configuration says %s(%s, %s): "+
			"run the intake start-up (EnsureCursor) to rebind it", src.Name, c.table, c.tsColumn, c.idColumn,
			qualifiedTable(src), src.TSColumn, src.IDColumn)
	}
	return nil
}

func tailDeref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func tailDerefF(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func tailPreparedHolders(ctx context.Context, q postgres.Querier) ([]HorizonHolder, error) {
	out, err := tailPreparedList(ctx, q)
	if err == nil && len(out) == 0 { // resolved in the meantime; still report the stall that was seen
		out = append(out, HorizonHolder{State: "prepared"})
	}
	return out, err
}

// tailReadRows runs a select built from src.selectList and scans TailRows (sizeHint: the expected row count).
func tailReadRows(ctx context.Context, q postgres.Querier, src postgres.TailSource, noTZ bool, sizeHint int, sql string, args ...any) ([]postgres.TailRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	fields := src.Fields()
	out := make([]postgres.TailRow, 0, min(max(sizeHint, 0), 100_000))
	var (
		r      postgres.TailRow
		rawTS  pgtype.Timestamp
		rawTZ  pgtype.Timestamptz
		inst   pgtype.Timestamptz
		texts  = make([]pgtype.Text, len(fields))
		dest   = make([]any, 0, 3+len(fields))
		rawDst any
	)
	if noTZ {
		rawDst = &rawTS
	} else {
		rawDst = &rawTZ
	}
	dest = append(dest, &r.ID, rawDst, &inst)
	for i := range texts {
		dest = append(dest, &texts[i])
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		row := postgres.TailRow{Source: src.Name, ID: r.ID, TS: inst.Time}
		if noTZ {
			row.Raw = rawTS.Time
		} else {
			row.Raw = rawTZ.Time
		}
		if (noTZ && rawTS.InfinityModifier != pgtype.Finite) || (!noTZ && rawTZ.InfinityModifier != pgtype.Finite) {
			return nil, gcos.Errorf(gcos.EINVALID, "source %s row %d: infinite %s: a database-clock timestamp "+
				"is never infinite", src.Name, row.ID, src.TSColumn)
		}
		for i, f := range fields {
			*row.Field(f) = texts[i].String
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// tailApplyRows hands rows to apply under a savepoint. When apply reports failed rows, their effects (and the others')
// are rolled back and apply runs again on the rest, so a failed row leaves no trace and every other row is applied
// exactly once. Each round removes at least one row, so this ends.
func tailApplyRows(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow, apply ApplyFunc) ([]RowFailure, error) {
	var failed []RowFailure
	for len(rows) > 0 {
		if _, err := tx.Exec(ctx, "SAVEPOINT gcos_tail_apply"); err != nil {
			return nil, err
		}
		fails, err := apply(ctx, tx, rows)
		if err != nil {
			return nil, err
		}
		byID := make(map[int64]RowFailure, len(fails))
		for _, f := range fails {
			if _, dup := byID[f.ID]; !dup && slices.ContainsFunc(rows, func(r postgres.TailRow) bool { return r.ID == f.ID }) {
				if f.Err == nil {
					f.Err = errors.New("apply reported the row as failed without an error")
				}
				byID[f.ID] = f
			}
		}
		if len(byID) == 0 {
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT gcos_tail_apply"); err != nil {
				return nil, err
			}
			return failed, nil
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT gcos_tail_apply"); err != nil {
			return nil, err
		}
		kept := rows[:0:0]
		for _, r := range rows {
			if f, ok := byID[r.ID]; ok {
				f.row = r
				failed = append(failed, f)
				continue
			}
			kept = append(kept, r)
		}
		rows = kept
	}
	return failed, nil
}

// tailBackoff is the delay before retry attempt n+1 after n failed attempts: bounded exponential with jitter,
// uniformly in [d/2, d] where d = min(max, base·2^(n−1)).
func tailBackoff(cfg gcos.IntakeConfig, attempts int) time.Duration {
	base, ceiling := cfg.BackoffBase.Duration(), cfg.BackoffMax.Duration()
	if base <= 0 {
		base = time.Second
	}
	if ceiling < base {
		ceiling = base
	}
	d := ceiling
	if attempts < 1 {
		attempts = 1
	}
	if attempts-1 < 40 {
		if v := base << (attempts - 1); v > 0 && v < ceiling {
			d = v
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func tailTruncateError(err error) string {
	s := err.Error()
	if len(s) > tailErrorMax {
		s = s[:tailErrorMax] + "…"
	}
	return s
}

const tailRetryInsertSQL = `
INSERT INTO event_pending (event_domain, event_type_hint, entity_table, entity_ref, canonical_address, actor_ref,
                           capture_payload, error_count, last_error, next_attempt_at, dead_lettered_at)
SELECT $1, $2, $3, $4, $5, $6, $7, 1, $8, now() + $9::bigint * interval '1 microsecond', CASE WHEN $10 THEN now() END
WHERE NOT EXISTS (
    SELECT 1 FROM event_pending
    WHERE event_domain = $1 AND event_type_hint = $2 AND entity_table = $3 AND entity_ref = $4
      AND processed_at IS NULL AND dead_lettered_at IS NULL)
RETURNING id`

// tailEnqueueRetry puts a failed row on the retry lane (once: a replayed row already waiting there is not added
// again); with max_attempts ≤ 1 it is dead-lettered at once. It reports whether it was dead-lettered.
func (s *Stage) tailEnqueueRetry(ctx context.Context, tx pgx.Tx, src postgres.TailSource, cfg gcos.IntakeConfig, f RowFailure) (bool, error) {
	r := f.row
	payload := map[string]any{"source": src.Name, "object_ref": r.ObjectRef(),
		"occurred_at": r.TS.UTC().Format(time.RFC3339Nano)}
	if f.Kind != "" {
		payload["change_kind"] = string(f.Kind)
	}
	if err := gcos.ValidateSafePayload(payload); err != nil {
		return false, err
	}
	dead := cfg.MaxAttempts <= 1
	ref := strconv.FormatInt(r.ID, 10)
	lastErr := tailTruncateError(f.Err)
	var id int64
	err := tx.QueryRow(ctx, tailRetryInsertSQL, tailDomain, tailRetryHint, src.Name, ref, r.CanonicalRef(), r.Actor(),
		payload, lastErr, tailBackoff(cfg, 1).Microseconds(), dead).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // already waiting on the retry lane
	}
	if err != nil {
		return false, fmt.Errorf("retry lane: %w", err)
	}
	if dead {
		if err := s.tailDeadLetter(ctx, tx, src, id, ref, r.CanonicalRef(), 1, lastErr); err != nil {
			return false, err
		}
	}
	return dead, nil
}

// tailDeadLetter raises handoff_dlq (one open finding per source; repeats escalate) and writes one audit row.
// The caller counts it on the cursor.
func (s *Stage) tailDeadLetter(ctx context.Context, tx pgx.Tx, src postgres.TailSource, pendingID int64, ref, address string, attempts int, lastErr string) error {
	evidence := map[string]any{"source": src.Name, "entity_ref": ref, "canonical_address": address,
		"pending_id": pendingID, "attempts": attempts, "last_error": lastErr}
	if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.IssueHandoffDLQ, src.Name, "", "", evidence)); err != nil {
		return err
	}
	_, err := postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_dlq", EntityCode: src.Name + ":" + ref,
		Action: "dead_letter", AlertLevel: "warning", Actor: "intake", Detail: evidence})
	return err
}

// RetryResult reports one pass over the due retry entries of a source.
type RetryResult struct {
	Source       string `json:"source"`
	Busy         bool   `json:"busy,omitempty"`
	Attempted    int    `json:"attempted"`
	Succeeded    int    `json:"succeeded"`
	Failed       int    `json:"failed"`        // failed again, rescheduled
	DeadLettered int    `json:"dead_lettered"` // failed for the last time
}

const tailRetryDueSQL = `
SELECT id, entity_ref, error_count FROM event_pending
WHERE event_domain = $1 AND event_type_hint = $2 AND entity_table = $3
  AND processed_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at <= now()
ORDER BY next_attempt_at, id
LIMIT $4
FOR UPDATE SKIP LOCKED`

// RetryDue re-applies the source's retry entries that are due, each alone under a savepoint with the row read
// afresh. A success marks the entry processed; a failure reschedules it with backoff, or dead-letters it once it
// has failed max_attempts times (handoff_dlq, one audit row, the cursor's dead_lettered count). Retries never move
// the cursor.
func (s *Stage) RetryDue(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig, apply ApplyFunc) (RetryResult, error) {
	res := RetryResult{Source: src.Name}
	if err := src.Validate(); err != nil {
		return res, err
	}
	if apply == nil {
		return res, gcos.Errorf(gcos.EINVALID, "retry %s: no apply step", src.Name)
	}
	batch := min(max(cfg.PageSize, 1), 500)
	maxAttempts := max(cfg.MaxAttempts, 1)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return res, fmt.Errorf("retry %s: begin: %w", src.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	cur, err := tailScanCursor(tx.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c WHERE c.source = $1
		FOR UPDATE OF c SKIP LOCKED`, src.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		ok, err := tailCursorExists(ctx, tx, src.Name)
		if err != nil {
			return res, fmt.Errorf("retry %s: %w", src.Name, err)
		}
		if !ok {
			return res, tailErrNoCursor(src.Name)
		}
		res.Busy = true
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("retry %s: lock cursor: %w", src.Name, err)
	}
	if err := cur.matches(src); err != nil {
		return res, err
	}
	type entry struct {
		id       int64
		ref      string
		attempts int
	}
	rows, err := tx.Query(ctx, tailRetryDueSQL, tailDomain, tailRetryHint, src.Name, batch)
	if err != nil {
		return res, fmt.Errorf("retry %s: due entries: %w", src.Name, err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		var ref *string
		err := r.Scan(&e.id, &ref, &e.attempts)
		e.ref = tailDeref(ref)
		return e, err
	})
	if err != nil {
		return res, fmt.Errorf("retry %s: due entries: %w", src.Name, err)
	}
	if len(due) == 0 {
		return res, nil
	}
	ids := make([]int64, 0, len(due))
	for _, e := range due {
		if id, err := strconv.ParseInt(e.ref, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	args := []any{ids}
	if cur.noTZ {
		args = append(args, cur.zone)
	}
	fresh, err := tailReadRows(ctx, tx, src, cur.noTZ, len(ids), byIDSQL(src, cur.noTZ), args...)
	if err != nil {
		return res, fmt.Errorf("retry %s: re-read rows: %w", src.Name, err)
	}
	byRef := make(map[string]postgres.TailRow, len(fresh))
	for _, r := range fresh {
		byRef[strconv.FormatInt(r.ID, 10)] = r
	}
	for _, e := range due {
		res.Attempted++
		var failure error
		row, ok := byRef[e.ref]
		if !ok {
			failure = fmt.Errorf("source row %s %s no longer exists", src.Name, e.ref)
		} else {
			failure, err = tailApplyOne(ctx, tx, row, apply)
			if err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
		}
		if failure == nil {
			if _, err := tx.Exec(ctx, `UPDATE event_pending SET processed_at = now() WHERE id = $1`, e.id); err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
			res.Succeeded++
			continue
		}
		attempts, lastErr := e.attempts+1, tailTruncateError(failure)
		if attempts >= maxAttempts {
			if _, err := tx.Exec(ctx, `UPDATE event_pending SET error_count = $2, last_error = $3, dead_lettered_at = now()
				WHERE id = $1`, e.id, attempts, lastErr); err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
			address := "unknown:" + e.ref
			if ok {
				address = row.CanonicalRef()
			}
			if err := s.tailDeadLetter(ctx, tx, src, e.id, e.ref, address, attempts, lastErr); err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
			res.DeadLettered++
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE event_pending SET error_count = $2, last_error = $3,
			next_attempt_at = now() + $4::bigint * interval '1 microsecond' WHERE id = $1`,
			e.id, attempts, lastErr, tailBackoff(cfg, attempts).Microseconds()); err != nil {
			return res, fmt.Errorf("retry %s: %w", src.Name, err)
		}
		res.Failed++
	}
	summary := map[string]any{"retry": res}
	if _, err := tx.Exec(ctx, `UPDATE gov_worker_cursor SET attempts_written = attempts_written + $2,
		dead_lettered = dead_lettered + $3, metadata = metadata || jsonb_build_object('last_retry', $4::jsonb, 'last_retry_at', now()),
		updated_at = now() WHERE source = $1`, src.Name, res.Succeeded, res.DeadLettered, summary["retry"]); err != nil {
		return res, fmt.Errorf("retry %s: count: %w", src.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("retry %s: commit: %w", src.Name, err)
	}
	return res, nil
}

// tailApplyOne applies a single row under a savepoint; the returned failure is the row's own problem (rolled back),
// the error a broken transaction or a cancelled context (the whole retry pass is abandoned).
func tailApplyOne(ctx context.Context, tx pgx.Tx, row postgres.TailRow, apply ApplyFunc) (failure, err error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT gcos_tail_retry"); err != nil {
		return nil, err
	}
	fails, applyErr := apply(ctx, tx, []postgres.TailRow{row})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	switch {
	case applyErr != nil:
		failure = applyErr
	case len(fails) > 0:
		failure = fails[0].Err
		if failure == nil {
			failure = errors.New("apply reported the row as failed without an error")
		}
	}
	if failure == nil {
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT gcos_tail_retry")
		return nil, err
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT gcos_tail_retry"); err != nil {
		return nil, errors.Join(err, failure)
	}
	return failure, nil
}

// Cursor is one intake cursor as ListCursors and ResetCursor report it.
type Cursor struct {
	WorkerName      string          `json:"worker_name"`
	Source          string          `json:"source"`
	Table           string          `json:"table"`
	TSColumn        string          `json:"ts_column"`
	IDColumn        string          `json:"id_column"`
	TSType          string          `json:"ts_type"`
	TimeZone        string          `json:"time_zone,omitempty"`
	Position        string          `json:"position"` // a watermark: "start", "<ts>" or "<ts>/<id>"
	PositionAt      *time.Time      `json:"position_at"`
	PositionID      *int64          `json:"position_id"`
	LastHorizon     *time.Time      `json:"last_horizon"`
	EventsSeen      int64           `json:"events_seen"`
	AttemptsWritten int64           `json:"attempts_written"`
	DeadLettered    int64           `json:"dead_lettered"`
	LateRows        int64           `json:"late_rows"`      // rows found behind the committed cursor, then delivered
	FutureRows      int64           `json:"future_rows"`    // rows whose order key lay beyond the future tolerance, delivered early
	UnmappedRows    int64           `json:"unmapped_rows"`  // rows no mapping rule matches (reported)
	UntrustedRows   int64           `json:"untrusted_rows"` // rows from an untrusted source (quarantined)
	LastRunAt       *time.Time      `json:"last_run_at"`
	LastRunSummary  json.RawMessage `json:"last_run_summary"`
	Metadata        json.RawMessage `json:"metadata"`
	UpdatedAt       time.Time       `json:"updated_at"`
}

const tailCursorSelectSQL = `
SELECT c.worker_name, c.source, ` + tailCursorCols + `, c.last_created_at, c.last_horizon, c.events_seen,
       c.attempts_written, c.dead_lettered, c.late_rows, c.future_rows, c.unmapped_rows, c.untrusted_rows,
       c.last_run_at, c.last_run_summary, c.metadata, c.updated_at
FROM gov_worker_cursor c`

func tailScanCursorRow(row pgx.Row) (Cursor, error) {
	var c Cursor
	var tsType string
	var zone *string
	var ptz pgtype.Timestamptz
	var pts pgtype.Timestamp
	err := row.Scan(&c.WorkerName, &c.Source, &c.Table, &c.TSColumn, &c.IDColumn, &tsType, &zone, &ptz, &pts,
		&c.PositionID, &c.PositionAt, &c.LastHorizon, &c.EventsSeen, &c.AttemptsWritten, &c.DeadLettered,
		&c.LateRows, &c.FutureRows, &c.UnmappedRows, &c.UntrustedRows, &c.LastRunAt, &c.LastRunSummary, &c.Metadata, &c.UpdatedAt)
	if err != nil {
		return c, err
	}
	c.TSType, c.TimeZone = tsType, tailDeref(zone)
	pos := tailPos{start: c.PositionID == nil}
	if !pos.start {
		pos.id = *c.PositionID
		if tsType == "timestamp" {
			pos.ts = pts.Time
		} else {
			pos.ts = ptz.Time
		}
	}
	c.Position = pos.watermark(tsType == "timestamp")
	return c, nil
}

// ListCursors returns every intake cursor, by source.
func (s *Stage) ListCursors(ctx context.Context) ([]Cursor, error) {
	rows, err := s.pool.Query(ctx, tailCursorSelectSQL+` ORDER BY c.source`)
	if err != nil {
		return nil, fmt.Errorf("list cursors: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cursor, error) { return tailScanCursorRow(r) })
	if err != nil {
		return nil, fmt.Errorf("list cursors: %w", err)
	}
	return out, nil
}

// GetCursor returns the cursor of one source.
func (s *Stage) GetCursor(ctx context.Context, source string) (Cursor, error) {
	c, err := tailScanCursorRow(s.pool.QueryRow(ctx, tailCursorSelectSQL+` WHERE c.source = $1`, source))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, tailErrNoCursor(source)
	}
	if err != nil {
		return c, fmt.Errorf("get cursor %s: %w", source, err)
	}
	return c, nil
}

var tailNaiveLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04",
	"2006-01-02 15:04", "2006-01-02"}

// tailWatermark is a watermark before it is put in the cursor's type: an instant, or a local time.
type tailWatermark struct {
	start   bool
	instant bool // ts is an instant (the watermark had an offset), else a local wall time
	ts      time.Time
	id      int64
}

// tailParseWatermark reads "start", "<ts>" (replay every row at or after ts) or "<ts>/<id>" (replay every row after
// (ts, id)). ts is RFC 3339 with an offset; a timestamp-without-time-zone source also takes a local time without
// one (the column's own value).
func tailParseWatermark(s string, noTZ bool) (tailWatermark, error) {
	w := strings.TrimSpace(s)
	bad := func(format string, args ...any) (tailWatermark, error) {
		return tailWatermark{}, gcos.Errorf(gcos.EINVALID, "watermark %q: "+format+
			` (want "start", "<timestamp>" or "<timestamp>/<id>", e.g. 2026-06-01T08:00:00Z/12345)`,
			append([]any{s}, args...)...)
	}
	if w == "" || len(w) > 80 {
		return bad("empty or too long")
	}
	if strings.EqualFold(w, "start") {
		return tailWatermark{start: true}, nil
	}
	tsPart, idPart, hasID := strings.Cut(w, "/")
	p := tailWatermark{id: math.MinInt64}
	if hasID {
		if idPart == "" || strings.Trim(idPart, "0123456789") != "" {
			return bad("id %q is not a non-negative integer", idPart)
		}
		id, err := strconv.ParseInt(idPart, 10, 64)
		if err != nil {
			return bad("id %q out of range", idPart)
		}
		p.id = id
	}
	if t, err := time.Parse(time.RFC3339Nano, tsPart); err == nil {
		p.instant, p.ts = true, t
	} else {
		for _, layout := range tailNaiveLayouts {
			if t, err := time.Parse(layout, tsPart); err == nil {
				p.ts = t
				break
			}
		}
		if p.ts.IsZero() {
			return bad("timestamp %q is not RFC 3339", tsPart)
		}
		if !noTZ {
			return bad("timestamp %q has no UTC offset; this source's column is timestamptz (e.g. append Z)", tsPart)
		}
	}
	if y := p.ts.Year(); y < 1900 || y > 9999 {
		return bad("year %d out of range", y)
	}
	p.ts = p.ts.Truncate(time.Microsecond)
	return p, nil
}

// ResetCursor moves the cursor of source back to watermark so that every row after it is handed off again
// (replay; making that harmless is the apply step's job: dirty marks are idempotent). A watermark that does not
// parse, or that lies after the current position (that would skip rows), is refused with EINVALID and nothing
// changes. The reset is audited.
func (s *Stage) ResetCursor(ctx context.Context, source, watermark string) (Cursor, error) {
	var out Cursor
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := tailScanCursor(tx.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c
			WHERE c.source = $1 FOR UPDATE OF c`, source))
		if errors.Is(err, pgx.ErrNoRows) {
			return tailErrNoCursor(source)
		}
		if err != nil {
			return fmt.Errorf("reset cursor %s: %w", source, err)
		}
		wm, err := tailParseWatermark(watermark, cur.noTZ)
		if err != nil {
			return err
		}
		next := tailPos{start: wm.start, ts: wm.ts, id: wm.id}
		if cur.noTZ && wm.instant {
			// An instant names the local time the writers' clock showed then.
			var local time.Time
			if err := tx.QueryRow(ctx, `SELECT ($1::timestamptz AT TIME ZONE $2::text)`, wm.ts, cur.zone).Scan(&local); err != nil {
				return postgres.MapError(err, "reset cursor "+source)
			}
			next.ts = local
		}
		if cur.pos.less(next) {
			return gcos.Errorf(gcos.EINVALID, "watermark %q lies after the current position %s of %s: a reset only "+
				"replays, moving forward would skip rows", watermark, cur.pos.watermark(cur.noTZ), source)
		}
		var posTZ, posTS, posID, instant any
		if !next.start {
			posID = next.id
			if cur.noTZ {
				posTS = pgtype.Timestamp{Time: next.ts, Valid: true}
				if err := tx.QueryRow(ctx, `SELECT ($1::timestamp AT TIME ZONE $2::text)`, posTS, cur.zone).Scan(&instant); err != nil {
					return postgres.MapError(err, "reset cursor "+source)
				}
			} else {
				posTZ, instant = next.ts, next.ts
			}
		}
		from, to := cur.pos.watermark(cur.noTZ), next.watermark(cur.noTZ)
		if _, err := tx.Exec(ctx, `UPDATE gov_worker_cursor
			SET position_tstz = $2, position_ts = $3, position_id = $4::bigint, last_event_id = ($4::bigint)::text,
			    last_created_at = $5, updated_at = now(),
			    -- a replay starts the out-of-order sweep afresh: rows it skips on purpose are not "behind"
			    swept_id = NULL, sweep_next_id = NULL, sweep_next_at = NULL, delivered_ids = '{}', early_ids = '{}',
			    metadata = metadata || jsonb_build_object('last_reset', jsonb_build_object('from', $6::text, 'to', $7::text, 'at', now()))
			WHERE source = $1`, source, posTZ, posTS, posID, instant, from, to); err != nil {
			return postgres.MapError(err, "reset cursor "+source)
		}
		if source == postgres.BirthTailSource(s.cfg.SourceBinding).Name {
			// The births after the new position are handed off again: the counts kept from them would count them
			// twice, so every collection is counted again.
			if _, err := tx.Exec(ctx, `DELETE FROM governance_collection_count`); err != nil {
				return fmt.Errorf("drop kept counts: %w", err)
			}
		}
		if _, err := postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_cursor", EntityCode: source, Action: "reset",
			Actor: "operator", Detail: map[string]any{"source": source, "from": from, "to": to}}); err != nil {
			return err
		}
		out, err = tailScanCursorRow(tx.QueryRow(ctx, tailCursorSelectSQL+` WHERE c.source = $1`, source))
		return err
	})
	return out, err
}

// IntakeHeartbeat ticks queue_heartbeat for the intake of source (executor gcos.intake.<source>), so a monitor can
// tell a quiet source from a dead worker.
func (s *Stage) IntakeHeartbeat(ctx context.Context, source, status string) error {
	if len(status) > 200 {
		status = status[:200]
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status)
		VALUES ($1, 'gcos.intake', now(), $2)
		ON CONFLICT (executor_name) DO UPDATE
		SET executor_kind = excluded.executor_kind, last_tick_at = now(), last_tick_status = excluded.last_tick_status`,
		tailWorkerPrefix+source, status)
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", source, err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------------------------
// Start-up: the cursor row and the preconditions of a lossless tail.

// tailClockDefault is what a column default says about the database clock.
type tailClockDefault struct {
	ok        bool   // the default is the database clock (possibly cast or converted to a fixed zone)
	zone      string // a zone fixed in the expression: timezone('UTC', now()) or now() AT TIME ZONE 'UTC'
	local     bool   // LOCALTIMESTAMP: the session's local time
	precision int    // fractional digits kept (6 = microseconds, all there are)
	why       string // when not ok
}

var (
	tailClockFnRE = regexp.MustCompile(`^(now|transaction_timestamp|statement_timestamp|clock_timestamp)\(\)$`)
	tailClockKwRE = regexp.MustCompile(`^(CURRENT_TIMESTAMP|LOCALTIMESTAMP)(?:\((\d)\))?$`)
	tailCastRE    = regexp.MustCompile(`^(.*)::timestamp(?:\((\d)\))? (with|without) time zone$`)
	tailZoneFnRE  = regexp.MustCompile(`^timezone\('((?:[^']|'')+)'::text, (.*)\)$`)
	tailAtZoneRE  = regexp.MustCompile(`^(.*) AT TIME ZONE '((?:[^']|'')+)'::text$`)
)

// tailStripParens removes one pair of parentheses that encloses the whole expression.
func tailStripParens(e string) (string, bool) {
	if len(e) < 2 || e[0] != '(' || e[len(e)-1] != ')' {
		return e, false
	}
	depth, inQuote := 0, false
	for i, c := range e {
		switch {
		case c == '\'':
			inQuote = !inQuote
		case inQuote:
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 && i != len(e)-1 {
				return e, false
			}
		}
	}
	return strings.TrimSpace(e[1 : len(e)-1]), true
}

// tailParseClockDefault reads pg_get_expr of a column default. It accepts the database clock (now(),
// CURRENT_TIMESTAMP[(p)], transaction_timestamp(), statement_timestamp(), clock_timestamp(), LOCALTIMESTAMP[(p)]),
// through casts and at most one conversion to a fixed zone; anything else is not the database clock.
func tailParseClockDefault(expr string, tzColumn bool) tailClockDefault {
	d := tailClockDefault{precision: 6}
	e := strings.TrimSpace(expr)
	castToTZ := false
	for range 20 {
		if inner, ok := tailStripParens(e); ok {
			e = inner
			continue
		}
		if m := tailCastRE.FindStringSubmatch(e); m != nil {
			if m[2] != "" {
				d.precision = min(d.precision, int(m[2][0]-'0'))
			}
			if m[3] == "with" && d.zone == "" && !d.local {
				castToTZ = true
			}
			e = strings.TrimSpace(m[1])
			continue
		}
		m := tailZoneFnRE.FindStringSubmatch(e)
		if m == nil {
			if a := tailAtZoneRE.FindStringSubmatch(e); a != nil {
				m = []string{a[0], a[2], a[1]}
			}
		}
		if m != nil {
			if d.zone != "" {
				return tailClockDefault{why: "the default converts between time zones twice"}
			}
			d.zone = strings.ReplaceAll(m[1], "''", "'")
			e = strings.TrimSpace(m[2])
			continue
		}
		break
	}
	switch m := tailClockKwRE.FindStringSubmatch(e); {
	case tailClockFnRE.MatchString(e):
	case m != nil:
		d.local = m[1] == "LOCALTIMESTAMP"
		if m[2] != "" {
			d.precision = min(d.precision, int(m[2][0]-'0'))
		}
	default:
		return tailClockDefault{why: "the default is not the database clock"}
	}
	if d.zone != "" && d.local {
		return tailClockDefault{why: "the default converts a local time to another zone"}
	}
	if (d.zone != "" || d.local) && (tzColumn || castToTZ) {
		return tailClockDefault{why: "the default turns the clock into a local time and back into an instant"}
	}
	d.ok = true
	return d
}

// tailColumn is one column of a source table as the catalog describes it.
type tailColumn struct {
	typ     string
	typmod  int32
	notNull bool
	def     *string
}

const tailColumnsSQL = `
SELECT a.attname::text, a.atttypid::regtype::text, a.atttypmod, a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

func tailInspectColumns(ctx context.Context, q postgres.Querier, src postgres.TailSource) (map[string]tailColumn, error) {
	rows, err := q.Query(ctx, tailColumnsSQL, tableSQL(src))
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", qualifiedTable(src), err)
	}
	cols := map[string]tailColumn{}
	for rows.Next() {
		var name string
		var c tailColumn
		if err := rows.Scan(&name, &c.typ, &c.typmod, &c.notNull, &c.def); err != nil {
			rows.Close()
			return nil, fmt.Errorf("inspect %s: %w", qualifiedTable(src), err)
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", qualifiedTable(src), err)
	}
	return cols, nil
}

// tailTSTypeOf maps a column type to the cursor's ts_type ("" when it cannot order a tail).
func tailTSTypeOf(typ string) string {
	switch typ {
	case "timestamp with time zone":
		return "timestamptz"
	case "timestamp without time zone":
		return "timestamp"
	}
	return ""
}

// tailResolveZone decides the zone a timestamp-without-time-zone column's values are local to: the configured
// one, the one fixed in the column default, the database's TimeZone setting, or this session's TimeZone.
func tailResolveZone(ctx context.Context, q pgx.Tx, src postgres.TailSource, def tailClockDefault) (zone, how string, err error) {
	switch {
	case src.TimeZone != "":
		zone, how = src.TimeZone, "configured for the source"
	case def.zone != "":
		zone, how = def.zone, "fixed in the column default"
	default:
		var dbZone *string
		if err := q.QueryRow(ctx, `
			SELECT split_part(cfg, '=', 2) FROM pg_db_role_setting s CROSS JOIN LATERAL unnest(s.setconfig) AS cfg
			WHERE s.setrole = 0 AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND lower(split_part(cfg, '=', 1)) = 'timezone'
			LIMIT 1`).Scan(&dbZone); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return "", "", fmt.Errorf("resolve time zone: %w", err)
		}
		if dbZone != nil && *dbZone != "" {
			zone, how = *dbZone, "the database's TimeZone setting"
		} else {
			if err := q.QueryRow(ctx, `SELECT current_setting('TimeZone')`).Scan(&zone); err != nil {
				return "", "", fmt.Errorf("resolve time zone: %w", err)
			}
			how = "the server's TimeZone setting"
		}
	}
	// Validate under a savepoint: an unknown zone is an error that would otherwise abort the caller's transaction.
	err = pgx.BeginFunc(ctx, q, func(sp pgx.Tx) error {
		var ignored time.Time
		return sp.QueryRow(ctx, `SELECT now() AT TIME ZONE $1::text`, zone).Scan(&ignored)
	})
	if err != nil {
		if postgres.IsPgCode(err, "22023") {
			return "", "", gcos.Errorf(gcos.EINVALID, "source %s: time zone %q (%s) is not known to PostgreSQL", src.Name, zone, how)
		}
		return "", "", fmt.Errorf("resolve time zone: %w", err)
	}
	return zone, how, nil
}

// EnsureCursor creates the cursor row of src if it is missing ("before the first row") and keeps its binding
// (table, order key, type, zone) current. A binding change under a cursor that already has a position is refused
// (ECONFLICT): the position would not mean anything in the new table.
func (s *Stage) EnsureCursor(ctx context.Context, src postgres.TailSource) (Cursor, error) {
	if err := src.Validate(); err != nil {
		return Cursor{}, err
	}
	var out Cursor
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cols, err := tailInspectColumns(ctx, tx, src)
		if err != nil {
			return err
		}
		ts, ok := cols[src.TSColumn]
		if !ok {
			return gcos.Errorf(gcos.EINVALID, "source %s: table %s has no column %s", src.Name, qualifiedTable(src), src.TSColumn)
		}
		tsType := tailTSTypeOf(ts.typ)
		if tsType == "" {
			return gcos.Errorf(gcos.EINVALID, "source %s: %s.%s is %s; a tail needs timestamptz or timestamp",
				src.Name, qualifiedTable(src), src.TSColumn, ts.typ)
		}
		var zone *string
		meta := map[string]any{"kind": string(src.Kind)}
		if tsType == "timestamp" {
			var def tailClockDefault
			if ts.def != nil {
				def = tailParseClockDefault(*ts.def, false)
			}
			z, how, err := tailResolveZone(ctx, tx, src, def)
			if err != nil {
				return err
			}
			zone, meta["time_zone_from"] = &z, how
		}
		// Workers starting together race to create the cursor: the insert yields to a row another one committed (or
		// waits for one it has not committed yet), and the row is then read locked either way.
		tag, err := tx.Exec(ctx, `
			INSERT INTO gov_worker_cursor (worker_name, source, source_table, ts_column, id_column, ts_type, time_zone, metadata)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`, tailWorkerPrefix+src.Name, src.Name,
			qualifiedTable(src), src.TSColumn, src.IDColumn, tsType, zone, meta)
		if err != nil {
			return postgres.MapError(err, "ensure cursor "+src.Name)
		}
		existing, err := tailScanCursor(tx.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c
			WHERE c.source = $1 FOR UPDATE OF c`, src.Name))
		if err != nil {
			return fmt.Errorf("ensure cursor %s: %w", src.Name, err)
		}
		if tag.RowsAffected() == 0 {
			rebind := existing.table != qualifiedTable(src) || existing.tsColumn != src.TSColumn ||
				existing.idColumn != src.IDColumn || existing.noTZ != (tsType == "timestamp")
			if rebind && !existing.pos.start {
				return gcos.Errorf(gcos.ECONFLICT, "intake cursor %s is at %s of %s(%s, %s); it cannot be rebound to %s(%s, %s) "+
					"(%s) without losing its meaning: reset it to start first", src.Name,
					existing.pos.watermark(existing.noTZ), existing.table, existing.tsColumn, existing.idColumn,
					qualifiedTable(src), src.TSColumn, src.IDColumn, tsType)
			}
			if _, err := tx.Exec(ctx, `
				UPDATE gov_worker_cursor SET source_table = $2, ts_column = $3, id_column = $4, ts_type = $5, time_zone = $6,
				       metadata = metadata || $7::jsonb, updated_at = now()
				WHERE source = $1`, src.Name, qualifiedTable(src), src.TSColumn, src.IDColumn, tsType, zone, meta); err != nil {
				return postgres.MapError(err, "ensure cursor "+src.Name)
			}
		}
		out, err = tailScanCursorRow(tx.QueryRow(ctx, tailCursorSelectSQL+` WHERE c.source = $1`, src.Name))
		return err
	})
	return out, err
}

// Tail check statuses.
const (
	CheckOK   = "ok"
	CheckWarn = "warn" // reported, not refused
	CheckFail = "fail" // the intake refuses to start
)

// TailCheckItem is one precondition and what was found.
type TailCheckItem struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn or fail
	Detail string `json:"detail"`
}

// TailCheck is the precondition report of one source.
type TailCheck struct {
	Source   string          `json:"source"`
	TSType   string          `json:"ts_type,omitempty"`
	TimeZone string          `json:"time_zone,omitempty"`
	Items    []TailCheckItem `json:"items"`
}

func (c *TailCheck) add(name, status, format string, args ...any) {
	c.Items = append(c.Items, TailCheckItem{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// Err is nil when no precondition failed, else an EINVALID error naming every failed one.
func (c TailCheck) Err() error {
	var failed []string
	for _, it := range c.Items {
		if it.Status == CheckFail {
			failed = append(failed, it.Name+": "+it.Detail)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return gcos.Errorf(gcos.EINVALID, "intake of %s refused, the tail would not be lossless: %s", c.Source,
		strings.Join(failed, "; "))
}

// CheckTail verifies the preconditions of a lossless tail of src (SPEC §9.2): the server is the primary, this role
// sees every session's xact_start (superuser or pg_read_all_stats), no prepared transaction is pending, the order
// key is (timestamptz|timestamp, integer) with the timestamp set by the database clock inside the inserting
// transaction, its precision is covered by the guard, a timestamp-without-time-zone column has a zone that never
// moves back, and a role filter leaves out no role that can write the table. It returns the report and, when
// something failed, TailCheck.Err.
func (s *Stage) CheckTail(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig) (TailCheck, error) {
	c := TailCheck{Source: src.Name}
	if err := src.Validate(); err != nil {
		return c, err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error { return tailCheck(ctx, tx, src, cfg, &c) })
	if err != nil {
		return c, err
	}
	return c, c.Err()
}

func tailCheck(ctx context.Context, tx pgx.Tx, src postgres.TailSource, cfg gcos.IntakeConfig, c *TailCheck) error {
	var inRecovery, super, stats bool
	var user string
	if err := tx.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_user::text,
		coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
		pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')`).Scan(&inRecovery, &user, &super, &stats); err != nil {
		return fmt.Errorf("check %s: %w", src.Name, err)
	}
	if inRecovery {
		c.add("primary", CheckFail, "the server is a standby (pg_is_in_recovery() is true); point the intake at the primary")
	} else {
		c.add("primary", CheckOK, "the server is the primary")
	}
	switch {
	case super:
		c.add("activity_visibility", CheckOK, "role %s is a superuser and sees every session's xact_start", user)
	case stats:
		c.add("activity_visibility", CheckOK, "role %s has pg_read_all_stats", user)
	default:
		c.add("activity_visibility", CheckFail, "role %s cannot see other roles' xact_start in pg_stat_activity, so an open "+
			"writer would go unnoticed; run GRANT pg_read_all_stats TO %s", user, tailIdent(user))
	}
	holders, err := tailPreparedList(ctx, tx)
	if err != nil {
		return err
	}
	if len(holders) > 0 {
		var names []string
		for _, h := range holders {
			names = append(names, fmt.Sprintf("%q by %s, prepared %s ago", h.PreparedGID, h.Role,
				time.Duration(h.AgeSeconds*float64(time.Second)).Round(time.Millisecond)))
		}
		c.add("prepared_transactions", CheckFail, "prepared transactions are pending in this database (%s); they can "+
			"commit rows of any age after leaving pg_stat_activity: COMMIT PREPARED or ROLLBACK PREPARED them",
			strings.Join(names, ", "))
	} else {
		c.add("prepared_transactions", CheckOK, "no prepared transaction in this database")
	}

	cols, err := tailInspectColumns(ctx, tx, src)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		c.add("source_table", CheckFail, "table %s does not exist (or this role cannot see it)", qualifiedTable(src))
		return nil
	}
	var missing []string
	for _, f := range src.Fields() {
		if _, ok := cols[src.Column(f)]; !ok {
			missing = append(missing, src.Column(f))
		}
	}
	if len(missing) > 0 {
		c.add("source_table", CheckFail, "table %s lacks column(s) %s", qualifiedTable(src), strings.Join(missing, ", "))
	} else {
		c.add("source_table", CheckOK, "table %s has every mapped column", qualifiedTable(src))
	}
	idCol, ok := cols[src.IDColumn]
	switch {
	case !ok:
		c.add("id_column", CheckFail, "%s.%s does not exist", qualifiedTable(src), src.IDColumn)
	case idCol.typ != "bigint" && idCol.typ != "integer" && idCol.typ != "smallint":
		c.add("id_column", CheckFail, "%s.%s is %s; the tie-breaker must be an integer", qualifiedTable(src), src.IDColumn, idCol.typ)
	default:
		c.add("id_column", CheckOK, "%s.%s is %s", qualifiedTable(src), src.IDColumn, idCol.typ)
		// The sweep for rows behind the cursor (sweep.go) reads ids in nextval order; a per-session cache breaks it.
		var seq *string
		var cache *int64
		if err := tx.QueryRow(ctx, `SELECT q, (SELECT s.cache_size FROM pg_sequences s
			    WHERE format('%I.%I', s.schemaname, s.sequencename)::regclass = q::regclass)
			FROM pg_get_serial_sequence($1, $2) AS q`, tableSQL(src), src.IDColumn).Scan(&seq, &cache); err != nil {
			return fmt.Errorf("check %s: id sequence: %w", src.Name, err)
		}
		if seq != nil && cache != nil && *cache > 1 {
			c.add("id_sequence", CheckWarn, "%s.%s comes from sequence %s with CACHE %d: sessions hand out ids out of order, so "+
				"the sweep for rows behind the cursor can miss one; run ALTER SEQUENCE %s CACHE 1", qualifiedTable(src),
				src.IDColumn, *seq, *cache, *seq)
		}
	}
	tsCol, ok := cols[src.TSColumn]
	if !ok {
		c.add("ts_column", CheckFail, "%s.%s does not exist", qualifiedTable(src), src.TSColumn)
		return nil
	}
	c.TSType = tailTSTypeOf(tsCol.typ)
	if c.TSType == "" {
		c.add("ts_column", CheckFail, "%s.%s is %s; the order key must be timestamptz or timestamp", qualifiedTable(src),
			src.TSColumn, tsCol.typ)
		return nil
	}
	c.add("ts_column", CheckOK, "%s.%s is %s", qualifiedTable(src), src.TSColumn, tsCol.typ)
	if !tsCol.notNull {
		c.add("ts_not_null", CheckWarn, "%s.%s is nullable; a row inserted with NULL there is never handed off",
			qualifiedTable(src), src.TSColumn)
	}

	var def tailClockDefault
	switch {
	case tsCol.def == nil:
		c.add("clock_default", CheckFail, "%s.%s has no default; the tail is lossless only when the database clock sets it "+
			"inside the inserting transaction (e.g. DEFAULT now())", qualifiedTable(src), src.TSColumn)
	default:
		def = tailParseClockDefault(*tsCol.def, c.TSType == "timestamptz")
		if !def.ok {
			c.add("clock_default", CheckFail, "%s.%s defaults to %s: %s; the tail is lossless only when the database clock "+
				"sets it inside the inserting transaction (e.g. DEFAULT now())", qualifiedTable(src), src.TSColumn, *tsCol.def, def.why)
		} else {
			c.add("clock_default", CheckOK, "%s.%s defaults to %s (the database clock; rows must not supply it)",
				qualifiedTable(src), src.TSColumn, *tsCol.def)
		}
	}
	precision := def.precision
	if tsCol.typmod >= 0 && int(tsCol.typmod) < precision {
		precision = int(tsCol.typmod)
	}
	if def.ok && precision < 6 {
		// Rounding to p digits can put ts up to half a unit before the transaction's start.
		need := time.Duration(5 * math.Pow10(8-precision))
		if cfg.HorizonGuard.Duration() < need {
			c.add("precision", CheckFail, "%s.%s keeps %d fractional digit(s), so a row's timestamp can round to %s before its "+
				"transaction began; set intake.horizon_guard to at least %s", qualifiedTable(src), src.TSColumn, precision, need, need)
		} else {
			c.add("precision", CheckOK, "rounding to %d digit(s) is covered by the horizon guard %s", precision, cfg.HorizonGuard)
		}
	}
	var hasIndex bool
	if err := tx.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_index i
		               WHERE i.indrelid = to_regclass($1) AND i.indnkeyatts >= 2
		                 AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = $2)
		                 AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = $3))`,
		tableSQL(src), src.TSColumn, src.IDColumn).Scan(&hasIndex); err != nil {
		return fmt.Errorf("check %s: index: %w", src.Name, err)
	}
	if hasIndex {
		c.add("order_index", CheckOK, "an index on (%s, %s) exists", src.TSColumn, src.IDColumn)
	} else {
		c.add("order_index", CheckWarn, "no index on (%s, %s): every poll scans the table; run CREATE INDEX CONCURRENTLY ON %s (%s, %s)",
			src.TSColumn, src.IDColumn, tableSQL(src), tailIdent(src.TSColumn), tailIdent(src.IDColumn))
	}

	if c.TSType == "timestamp" && def.ok {
		if err := tailCheckZone(ctx, tx, src, def, c); err != nil {
			return err
		}
	}
	if len(cfg.RoleFilter) > 0 {
		rows, err := tx.Query(ctx, `
			SELECT r.rolname::text FROM pg_roles r
			WHERE r.rolcanlogin AND NOT (r.rolname = ANY ($2::text[]))
			  AND (r.rolsuper OR EXISTS (SELECT 1 FROM pg_roles w
			                             WHERE pg_has_role(r.oid, w.oid, 'MEMBER')
			                               AND has_table_privilege(w.oid, to_regclass($1), 'INSERT')))
			ORDER BY 1`, tableSQL(src), cfg.RoleFilter)
		if err != nil {
			return fmt.Errorf("check %s: role filter: %w", src.Name, err)
		}
		writers, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("check %s: role filter: %w", src.Name, err)
		}
		if len(writers) > 0 {
			c.add("role_filter", CheckFail, "login role(s) %s can write %s but are not in intake.role_filter %v; their open "+
				"transactions would not hold the horizon back", strings.Join(writers, ", "), qualifiedTable(src), cfg.RoleFilter)
		} else {
			c.add("role_filter", CheckOK, "every login role that can write %s is in the role filter %v (sessions are "+
				"matched by login role: a SET ROLE to a writer from another login is not seen)", qualifiedTable(src), cfg.RoleFilter)
		}
	}
	return nil
}

// tailCheckZone checks the zone of a timestamp-without-time-zone column: it is known, it never moves its clock
// back (a repeated local hour would put new rows behind the cursor), and no writer role is set to another zone.
func tailCheckZone(ctx context.Context, tx pgx.Tx, src postgres.TailSource, def tailClockDefault, c *TailCheck) error {
	zone, how, err := tailResolveZone(ctx, tx, src, def)
	if err != nil {
		if gcos.ErrorCode(err) == gcos.EINVALID {
			c.add("time_zone", CheckFail, "%s", gcos.ErrorMessage(err))
			return nil
		}
		return err
	}
	c.TimeZone = zone
	var back *time.Time
	if err := tx.QueryRow(ctx, `
		SELECT min(t) FROM (
		    SELECT t, (t AT TIME ZONE $1::text) - (t AT TIME ZONE 'UTC') AS off,
		           lead((t AT TIME ZONE $1::text) - (t AT TIME ZONE 'UTC')) OVER (ORDER BY t) AS next_off
		    FROM generate_series(now() - interval '1 year', now() + interval '2 years', interval '1 day') AS t) s
		WHERE next_off < off`, zone).Scan(&back); err != nil {
		return fmt.Errorf("check %s: time zone: %w", src.Name, err)
	}
	if back != nil {
		c.add("time_zone", CheckFail, "%s.%s holds local times in %s (%s), which sets its clocks back around %s: local times "+
			"repeat and rows written then would sort behind the cursor; have the writers use a zone without DST (e.g. "+
			"ALTER DATABASE ... SET timezone = 'UTC') or default the column to timezone('UTC', now())",
			qualifiedTable(src), src.TSColumn, zone, how, back.UTC().Format(time.RFC3339))
		return nil
	}
	if def.zone != "" {
		c.add("time_zone", CheckOK, "local times in %s, fixed in the column default", zone)
		return nil
	}
	rows, err := tx.Query(ctx, `
		SELECT coalesce(r.rolname::text, 'every role') || ' (' || CASE WHEN s.setdatabase = 0 THEN 'all databases'
		       ELSE 'this database' END || '): ' || split_part(cfg, '=', 2)
		FROM pg_db_role_setting s
		LEFT JOIN pg_roles r ON r.oid = s.setrole
		CROSS JOIN LATERAL unnest(s.setconfig) AS cfg
		WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
		  AND lower(split_part(cfg, '=', 1)) = 'timezone'
		  AND (s.setrole = 0 OR has_table_privilege(s.setrole, to_regclass($2), 'INSERT'))
		  AND ((now() AT TIME ZONE split_part(cfg, '=', 2)) <> (now() AT TIME ZONE $1::text)
		       OR (now() + interval '6 months') AT TIME ZONE split_part(cfg, '=', 2)
		          <> (now() + interval '6 months') AT TIME ZONE $1::text)
		ORDER BY 1`, zone, tableSQL(src))
	if err != nil {
		return fmt.Errorf("check %s: writer time zones: %w", src.Name, err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("check %s: writer time zones: %w", src.Name, err)
	}
	if len(others) > 0 {
		c.add("time_zone", CheckFail, "%s.%s is read as local times in %s (%s) but writers are set to other zones: %s",
			qualifiedTable(src), src.TSColumn, zone, how, strings.Join(others, "; "))
		return nil
	}
	c.add("time_zone", CheckOK, "local times in %s (%s); a writer session that sets another TimeZone stores its own local "+
		"time, and its rows are handed off out of order and reported (handoff_out_of_order)", zone, how)
	return nil
}

func tailPreparedList(ctx context.Context, q postgres.Querier) ([]HorizonHolder, error) {
	rows, err := q.Query(ctx, tailPreparedSQL)
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HorizonHolder, error) {
		var h HorizonHolder
		err := r.Scan(&h.PreparedGID, &h.Role, &h.XactStart, &h.AgeSeconds)
		h.State = "prepared"
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------------------------------
// Lag.

// LagReport says how far a tail is behind and who holds it back.
type LagReport struct {
	Source                 string          `json:"source"`
	Position               string          `json:"position"`
	OldestUnreadAt         *time.Time      `json:"oldest_unread_at"` // the first committed row after the cursor
	OldestUnreadAgeSeconds float64         `json:"oldest_unread_age_seconds"`
	HeadAt                 *time.Time      `json:"head_at"` // the source's newest committed row
	BehindHeadSeconds      float64         `json:"behind_head_seconds"`
	Holders                []HorizonHolder `json:"holders"` // open transactions older than the threshold, oldest first
	ThresholdSeconds       float64         `json:"threshold_seconds"`
	Lagging                bool            `json:"lagging"`
	Reason                 string          `json:"reason,omitempty"`
}

const tailHoldersSQL = `
SELECT a.pid, a.usename::text, a.application_name, a.state, a.backend_type, a.xact_start,
       extract(epoch FROM clock_timestamp() - a.xact_start)::float8
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
  AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
  AND (cardinality($1::text[]) = 0 OR a.usename = ANY ($1::text[]))
  AND clock_timestamp() - a.xact_start > $2::bigint * interval '1 microsecond'
ORDER BY a.xact_start
LIMIT 10`

// CheckTailLag measures the lag of src and raises handoff_lag (subject: the source) when the oldest row not yet
// handed off has waited longer than intake.lag_threshold, or when a transaction older than the threshold holds the
// horizon back (each named by pid, role, age and state), or a prepared transaction stalls it; otherwise it resolves
// an open handoff_lag of the source. Waiting is measured from the oldest unread row, not as head − cursor, so a
// source that is merely quiet never looks late.
func (s *Stage) CheckTailLag(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig) (LagReport, error) {
	rep := LagReport{Source: src.Name, Holders: []HorizonHolder{}}
	if err := src.Validate(); err != nil {
		return rep, err
	}
	threshold := cfg.LagThreshold.Duration()
	if threshold <= 0 {
		threshold = time.Minute
	}
	rep.ThresholdSeconds = threshold.Seconds()
	roles := cfg.RoleFilter
	if roles == nil {
		roles = []string{}
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := tailScanCursor(tx.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c WHERE c.source = $1`, src.Name))
		if errors.Is(err, pgx.ErrNoRows) {
			return tailErrNoCursor(src.Name)
		}
		if err != nil {
			return fmt.Errorf("lag %s: %w", src.Name, err)
		}
		if err := cur.matches(src); err != nil {
			return err
		}
		rep.Position = cur.pos.watermark(cur.noTZ)
		rows, err := tx.Query(ctx, tailHoldersSQL, roles, threshold.Microseconds())
		if err != nil {
			return fmt.Errorf("lag %s: holders: %w", src.Name, err)
		}
		rep.Holders, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (HorizonHolder, error) {
			var h HorizonHolder
			var app, state, typ *string
			err := r.Scan(&h.PID, &h.Role, &app, &state, &typ, &h.XactStart, &h.AgeSeconds)
			h.ApplicationName, h.State, h.BackendType = tailDeref(app), tailDeref(state), tailDeref(typ)
			return h, err
		})
		if err != nil {
			return fmt.Errorf("lag %s: holders: %w", src.Name, err)
		}
		prepared, err := tailPreparedList(ctx, tx)
		if err != nil {
			return err
		}
		rep.Holders = append(rep.Holders, prepared...)

		ts, id := tailIdent(src.TSColumn), tailIdent(src.IDColumn)
		instant, pos, zoneArg := ts, "($1::timestamptz, $2::bigint)", []any{}
		if cur.noTZ {
			instant, pos, zoneArg = "("+ts+" AT TIME ZONE $3::text)", "($1::timestamp, $2::bigint)", []any{cur.zone}
		}
		var clock time.Time
		var first, head pgtype.Timestamptz
		err = tx.QueryRow(ctx, `SELECT clock_timestamp(),
			(SELECT `+instant+` FROM `+tableSQL(src)+` WHERE (`+ts+`, `+id+`) > `+pos+` ORDER BY `+ts+`, `+id+` LIMIT 1),
			(SELECT `+instant+` FROM `+tableSQL(src)+` ORDER BY `+ts+` DESC, `+id+` DESC LIMIT 1)`,
			append([]any{cur.pos.tsArg(cur.noTZ), cur.pos.idArg()}, zoneArg...)...).Scan(&clock, &first, &head)
		if err != nil {
			return fmt.Errorf("lag %s: head: %w", src.Name, err)
		}
		if first.Valid && first.InfinityModifier == pgtype.Finite {
			rep.OldestUnreadAt = &first.Time
			rep.OldestUnreadAgeSeconds = clock.Sub(first.Time).Seconds()
			if head.Valid && head.InfinityModifier == pgtype.Finite {
				rep.HeadAt = &head.Time
				from := first.Time
				if !cur.pos.start {
					var posInstant time.Time
					if cur.noTZ {
						if err := tx.QueryRow(ctx, `SELECT $1::timestamp AT TIME ZONE $2::text`,
							pgtype.Timestamp{Time: cur.pos.ts, Valid: true}, cur.zone).Scan(&posInstant); err != nil {
							return fmt.Errorf("lag %s: %w", src.Name, err)
						}
					} else {
						posInstant = cur.pos.ts
					}
					from = posInstant
				}
				rep.BehindHeadSeconds = max(head.Time.Sub(from).Seconds(), 0)
			}
		}
		var reasons []string
		if rep.OldestUnreadAt != nil && rep.OldestUnreadAgeSeconds > threshold.Seconds() {
			reasons = append(reasons, fmt.Sprintf("the oldest row not yet handed off has waited %s",
				time.Duration(rep.OldestUnreadAgeSeconds*float64(time.Second)).Round(time.Millisecond)))
		}
		for _, h := range rep.Holders {
			if h.PreparedGID != "" {
				reasons = append(reasons, fmt.Sprintf("prepared transaction %q (role %s) stalls the tail", h.PreparedGID, h.Role))
				continue
			}
			reasons = append(reasons, fmt.Sprintf("pid %d (role %s, %s) has held a transaction open for %s", h.PID, h.Role,
				h.State, time.Duration(h.AgeSeconds*float64(time.Second)).Round(time.Millisecond)))
		}
		rep.Lagging = len(reasons) > 0
		rep.Reason = strings.Join(reasons, "; ")
		if !rep.Lagging {
			_, err := postgres.ResolveFindingTx(ctx, tx, gcos.IssueHandoffLag, src.Name, "")
			return err
		}
		evidence := map[string]any{"source": src.Name, "position": rep.Position, "reason": rep.Reason,
			"oldest_unread_at": rep.OldestUnreadAt, "oldest_unread_age_seconds": rep.OldestUnreadAgeSeconds,
			"behind_head_seconds": rep.BehindHeadSeconds, "threshold_seconds": rep.ThresholdSeconds, "holders": rep.Holders}
		_, err = postgres.RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.IssueHandoffLag, src.Name, "", "", evidence))
		return err
	})
	return rep, err
}
