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
// A births source's horizon passes over this process's scan transactions (postgres.Store.InScanTx): they insert no
// birth, so they cannot add a row under it.
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
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
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
	tailDomain       = RetryDomain                // event_pending.event_domain of retry entries
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

// selectList is the column list every read of the source uses: id, the native ts, the ts as an instant, then
// the kind's fields, over the source's placeholders (postgres.TailSource.Names). zoneParam is the placeholder
// holding the zone of a timestamp-without-time-zone column.
func selectList(src postgres.TailSource, noTZ bool, zoneParam string) string {
	instant := "t.{ts}"
	if noTZ {
		instant = "(t.{ts} AT TIME ZONE " + zoneParam + "::text)"
	}
	parts := []string{"t.{id}::bigint", "t.{ts}", instant}
	for _, f := range src.Fields() {
		parts = append(parts, "t.{"+f+"}::text")
	}
	return strings.Join(parts, ", ")
}

// readSQL is the keyset page below the horizon: $1,$2 the position, $3 the horizon (timestamptz), $4 the page size,
// $5 (timestamp sources) the zone the column's local times are in.
func readSQL(src postgres.TailSource, noTZ bool) string {
	pos, bound := "($1::timestamptz, $2::bigint)", "$3::timestamptz"
	if noTZ {
		// The horizon in the writers' local time: exactly the conversion DEFAULT now() made when it stored ts.
		pos, bound = "($1::timestamp, $2::bigint)", "($3::timestamptz AT TIME ZONE $5::text)"
	}
	return src.SQL("SELECT " + selectList(src, noTZ, "$5") + " FROM {t} t" +
		" WHERE (t.{ts}, t.{id}) > " + pos + " AND t.{ts} < " + bound +
		" ORDER BY t.{ts}, t.{id} LIMIT $4")
}

// byIDSQL re-reads rows by id (the retry lane): $1 the ids, $2 (timestamp sources) the zone.
func byIDSQL(src postgres.TailSource, noTZ bool) string {
	return src.SQL("SELECT " + selectList(src, noTZ, "$2") + " FROM {t} t WHERE t.{id} = ANY ($1::bigint[])")
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
	Failed       int            `json:"failed"`               // rows sent to the retry lane
	DeadLettered int            `json:"dead_lettered"`        // of those, dead-lettered at once (max_attempts 1)
	PageFull     bool           `json:"page_full"`            // more rows may be waiting below the horizon
	ReadAhead    bool           `json:"read_ahead,omitempty"` // the page was read ahead, while the one before it was applied
	Horizon      time.Time      `json:"horizon"`              // the horizon the page was read below
	HeldBy       *HorizonHolder `json:"held_by,omitempty"`    // the transaction that bounded the horizon; nil: the clock did
	Stalled      string         `json:"stalled,omitempty"`    // why the horizon could not be used at all
	Position     string         `json:"position"`             // the cursor after the poll (a watermark)
	Dirtied      int64          `json:"dirtied"`              // groups the committed poll newly marked dirty

	marked []string // their keys
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
	c.noTZ = tsType == TSLocalTime
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
// so the page read (a later statement) sees every transaction that had ended when this one looked. The open
// transactions $3/$4 (pid, xact_start) are passed over: for a births source, this process's scan transactions,
// which insert no birth (postgres.Store.InScanTx), with the parallel workers of their queries (each its own backend,
// under its leader's pid and the same transaction start: a scan counting a collection from the source runs one).
const tailHorizonSQL = `
SELECT least(clock_timestamp(), now(), h.xact_start) - $2::bigint * interval '1 microsecond',
       h.pid, h.usename, h.application_name, h.state, h.backend_type, h.xact_start,
       extract(epoch FROM clock_timestamp() - h.xact_start)::float8,
       pg_is_in_recovery(),
       now(),
       coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false)
           OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT a.pid, a.usename::text AS usename, a.application_name, a.state, a.backend_type, a.xact_start
    FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
      AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')
      AND (cardinality($1::text[]) = 0 OR a.usename = ANY ($1::text[]))
      AND NOT EXISTS (SELECT 1 FROM unnest($3::int4[], $4::timestamptz[]) AS q(pid, xact_start)
                      WHERE (q.pid = a.pid OR q.pid = a.leader_pid) AND q.xact_start = a.xact_start)
    ORDER BY a.xact_start
    LIMIT 1) AS h ON true`

// The cursor lock, after the horizon. Prepared transactions are counted here, after pg_stat_activity was read: a
// transaction that had left pg_stat_activity by then is either prepared (seen here) or ended.
const tailLockSQL = `
SELECT ` + tailCursorCols + `,
       (SELECT count(*) FROM pg_prepared_xacts p WHERE p.database = current_database()),
       c.swept_id, c.sweep_next_id, c.sweep_next_at, c.delivered_ids::text, c.early_ids, c.sweep_pending::text
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
	txStart             time.Time // the reading transaction's own start (its xact_start)
}

// readHorizon reads the tail horizon (tailHorizonSQL) with the intake's role filter and guard, passing over the
// open transactions skip names (they write nothing the tail reads).
func readHorizon(ctx context.Context, q postgres.Querier, cfg gcos.IntakeConfig, skip []postgres.ScanTx) (horizonRead, error) {
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
	pids, starts := postgres.ScanTxArrays(skip)
	if err := q.QueryRow(ctx, tailHorizonSQL, roles, guard.Microseconds(), pids, starts).Scan(
		&h.at, &hPID, &hRole, &hApp, &hState, &hType, &hStart, &hAge, &h.inRecovery, &h.txStart, &h.seesAll); err != nil {
		return h, err
	}
	if hPID != nil && hStart.Valid && !hStart.Time.After(h.at.Add(guard)) {
		h.heldBy = &HorizonHolder{PID: *hPID, Role: tailDeref(hRole), ApplicationName: tailDeref(hApp), State: tailDeref(hState),
			BackendType: tailDeref(hType), XactStart: hStart.Time, AgeSeconds: tailDerefF(hAge)}
	}
	return h, nil
}

// writesNone are the open transactions that write nothing src's tail reads: for a births source, this process's
// scan transactions (they write GCOS's tables and the change ledger, never a birth); none for another source.
func (s *Stage) writesNone(src postgres.TailSource) []postgres.ScanTx {
	if src.Kind != postgres.TailBirth {
		return nil
	}
	return s.core.ScanTransactions()
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
	ctx, tally := withTally(ctx)
	// A page read ahead is a catch-up page: the tail was behind when it was started (its page came back full).
	page, catchUp := cfg.Pages()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return res, fmt.Errorf("poll %s: begin: %w", src.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// 1. The horizon, as the transaction's first statement.
	h, err := readHorizon(ctx, tx, cfg, s.writesNone(src))
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
		&sw.delivered, &sw.early, &sw.pending)
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
	// The page read ahead while the last one was applied (readahead.go), if it starts where the cursor is: taken by
	// whichever poll locks the cursor next, so one that stalls drops it too.
	rows, ahead, plan, ok := s.takeReadAhead(ctx, src, cfg, cur, catchUp)
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

	// 3. One page below the horizon: the page read ahead, or one read now. pageHorizon is the horizon it was read below.
	pageHorizon, size := horizon, page
	if ok {
		pageHorizon, res.Horizon, res.HeldBy, res.ReadAhead, size = ahead.at, ahead.at, ahead.heldBy, true, catchUp
	} else {
		rows, err = readPage(ctx, tx, src, cur.noTZ, cur.zone, cur.pos, horizon, page)
		if err != nil {
			return res, fmt.Errorf("poll %s: read: %w", src.Name, err)
		}
	}
	res.Read, res.PageFull = len(rows), len(rows) == size
	next := cur.pos
	if len(rows) > 0 {
		next = tailPos{ts: rows[len(rows)-1].Raw, id: rows[len(rows)-1].ID}
	}
	if res.PageFull && src.Kind == postgres.TailBirth && cfg.ReadAhead {
		// More rows wait: read the next page while this one is applied. This transaction writes no birth, so the
		// read-ahead's horizon passes over it.
		s.startReadAhead(ctx, src, cfg, cur, next, catchUp, postgres.ScanTx{PID: int32(tx.Conn().PgConn().PID()), Start: h.txStart})
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

	// 4. Apply; failed rows are rolled back and set aside. A page read ahead was read before this transaction began:
	// the births handoff compares that with when a change last recounted a collection (postgres.RecountKept). Its
	// plan, worked out while the page before was applied, serves the apply if the page is handed off as read.
	actx := ctx
	if ok {
		actx = postgres.WithRowsReadAt(ctx, ahead.txStart)
		if plan != nil && len(hand) == len(rows) && len(rows) > 0 && &hand[0] == &rows[0] {
			actx = withBirthPlan(actx, plan)
		}
	}
	failures, err := tailApplyRows(actx, tx, hand, apply)
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
		if _, err := tx.Exec(ctx, tailTouchSQL, src.Name, res.summary(), pageHorizon); err != nil {
			return res, fmt.Errorf("poll %s: %w", src.Name, err)
		}
		return res.committed(ctx, tx, tally)
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
		res.DeadLettered, res.summary(), pageHorizon); err != nil {
		return res, postgres.MapError(err, "poll "+src.Name+": advance cursor")
	}
	if err := auditBatch(ctx, tx, src, cur.pos.watermark(cur.noTZ), res, rows, tally); err != nil {
		return res, fmt.Errorf("poll %s: %w", src.Name, err)
	}
	return res.committed(ctx, tx, tally)
}

// committed commits the poll's transaction and, once it has, counts the groups its apply step dirtied (a poll
// that rolls back dirtied nothing).
func (r PollResult) committed(ctx context.Context, tx pgx.Tx, t *batchTally) (PollResult, error) {
	if err := tailCommit(ctx, tx, r.Source); err != nil {
		return r, err
	}
	r.Dirtied, r.marked = t.dirtied, t.marked
	return r, nil
}

// auditBatch writes the audit row of one delivered batch (registry_changelog, entity governance_intake, action
// batch): the source, the cursor before and after, the rows read and applied, the signals they became, the rows
// sent to the retry lane and dead-lettered. A batch of nothing but GCOS's own audit rows (the ledger's echo of the
// previous batch's audit row) is not audited, or each audit row would beget the next.
func auditBatch(ctx context.Context, tx pgx.Tx, src postgres.TailSource, before string, res PollResult,
	rows []postgres.TailRow, t *batchTally) error {
	echo := 0
	if src.Kind == postgres.TailChangelog {
		ids := make([]int64, len(rows))
		for i := range rows {
			ids[i] = rows[i].ID
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM governance_audit_row WHERE changelog_id = ANY($1)`, ids).Scan(&echo); err != nil {
			return fmt.Errorf("audit batch: %w", err)
		}
	}
	if echo >= len(rows) && res.Failed == 0 {
		return nil
	}
	_, err := postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_intake", EntityCode: src.Name,
		Action: "batch", Detail: map[string]any{"source": src.Name, "cursor_before": before, "cursor_after": res.Position,
			"rows": res.Read, "applied": res.Applied, "signals": t.signals, "emitted": t.emitted, "captured": t.captured,
			"dirtied": t.dirtied, "failed": res.Failed, "dead_lettered": res.DeadLettered, "own_rows": echo}})
	return err
}

// batchTally is what the apply step of one poll reports for the poll's audit row: ApplyHandoff records its last
// (applied) attempt in the tally its context carries.
type batchTally struct {
	signals, emitted, captured int
	dirtied                    int64
	marked                     []string
}

type tallyKey struct{}

func withTally(ctx context.Context) (context.Context, *batchTally) {
	t := &batchTally{}
	return context.WithValue(ctx, tallyKey{}, t), t
}

func tallyOf(ctx context.Context) *batchTally {
	t, _ := ctx.Value(tallyKey{}).(*batchTally)
	return t
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

// tailReadRows runs a select built from src.selectList and reads TailRows (sizeHint: the expected row count). It
// decodes each row's raw values itself: the id and the order key through the type map's plans, made once per page,
// and the text fields through an interner, so a value a page repeats (a collection, a class, a status, a source
// system) is one string, not one allocation per row.
func tailReadRows(ctx context.Context, q postgres.Querier, src postgres.TailSource, noTZ bool, sizeHint int, sql string, args ...any) ([]postgres.TailRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	fields := src.Fields()
	fds := rows.FieldDescriptions()
	if len(fds) != 3+len(fields) {
		return nil, fmt.Errorf("source %s: the read returned %d columns, want %d", src.Name, len(fds), 3+len(fields))
	}
	var (
		id    int64
		rawTS pgtype.Timestamp
		rawTZ pgtype.Timestamptz
		inst  pgtype.Timestamptz
	)
	dest := []any{&id, &rawTZ, &inst}
	if noTZ {
		dest[1] = &rawTS
	}
	types := rows.Conn().TypeMap()
	plans := make([]pgtype.ScanPlan, len(dest))
	for i, d := range dest {
		plans[i] = types.PlanScan(fds[i].DataTypeOID, fds[i].Format, d)
	}
	strs := newInterner(len(fields))
	out := make([]postgres.TailRow, 0, min(max(sizeHint, 0), 100_000))
	for rows.Next() {
		vals := rows.RawValues()
		for i, d := range dest {
			if err := plans[i].Scan(vals[i], d); err != nil {
				return nil, fmt.Errorf("source %s: column %s: %w", src.Name, fds[i].Name, err)
			}
		}
		row := postgres.TailRow{Source: src.Name, ID: id, TS: inst.Time}
		infinite := rawTZ.InfinityModifier != pgtype.Finite
		if noTZ {
			row.Raw, infinite = rawTS.Time, rawTS.InfinityModifier != pgtype.Finite
		} else {
			row.Raw = rawTZ.Time
		}
		if infinite {
			return nil, gcos.Errorf(gcos.EINVALID, "source %s row %d: infinite %s: a database-clock timestamp "+
				"is never infinite", src.Name, row.ID, src.TSColumn)
		}
		for i, f := range fields {
			*row.Field(f) = strs.get(i, vals[3+i])
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// internMax is how many distinct values a column of one page may show before its values stop being interned: a
// column whose values do not repeat (an entity code) would only fill the map.
const internMax = 4096

// interner shares the repeated values of a page's text columns (NULL reads as "").
type interner struct {
	seen []map[string]string
}

func newInterner(columns int) *interner {
	in := &interner{seen: make([]map[string]string, columns)}
	for i := range in.seen {
		in.seen[i] = map[string]string{}
	}
	return in
}

func (in *interner) get(column int, b []byte) string {
	seen := in.seen[column]
	switch {
	case b == nil:
		return ""
	case seen == nil: // this column's values do not repeat
		return string(b)
	}
	if s, ok := seen[string(b)]; ok {
		return s
	}
	if len(seen) >= internMax {
		in.seen[column] = nil
		return string(b)
	}
	s := string(b)
	seen[s] = s
	return s
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
