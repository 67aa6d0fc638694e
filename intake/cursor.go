package intake

// The intake's cursors: one gov_worker_cursor row per tailed source, listed, read, reset to a watermark (a replay),
// and the heartbeat each source ticks.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
	"gcos/postgres"
)

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
		if tsType == TSLocalTime {
			pos.ts = pts.Time
		} else {
			pos.ts = ptz.Time
		}
	}
	c.Position = pos.watermark(tsType == TSLocalTime)
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
// changes. The reset is audited (as "operator"; ResetCursorAs names who).
func (s *Stage) ResetCursor(ctx context.Context, source, watermark string) (Cursor, error) {
	return s.ResetCursorAs(ctx, source, watermark, gcos.NamedActor("operator", ""))
}

// ResetCursorAs is ResetCursor by by: the audit row names its principal and the rest of the actor.
func (s *Stage) ResetCursorAs(ctx context.Context, source, watermark string, by gcos.Actor) (Cursor, error) {
	if strings.TrimSpace(by.Principal) == "" {
		by.Principal = "operator"
	}
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
			    swept_id = NULL, sweep_next_id = NULL, sweep_next_at = NULL, delivered_ids = '{}', early_ids = '{}', sweep_pending = '{}',
			    metadata = metadata || jsonb_build_object('last_reset', jsonb_build_object('from', $6::text, 'to', $7::text, 'at', now()))
			WHERE source = $1`, source, posTZ, posTS, posID, instant, from, to); err != nil {
			return postgres.MapError(err, "reset cursor "+source)
		}
		switch {
		case source != postgres.BirthTailSource(s.cfg.Binding).Name:
		case next.start:
			// Nothing is handed off through the start: every kept collection has no member through it, exactly, so
			// the replay's first page adds to its counts instead of counting the collection from the source.
			if _, err := tx.Exec(ctx, `DELETE FROM governance_base_count`); err != nil {
				return fmt.Errorf("zero kept counts: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE governance_collection_count SET counted_at = clock_timestamp()`); err != nil {
				return fmt.Errorf("zero kept counts: %w", err)
			}
		default:
			// The births after the new position are handed off again: the counts kept from them would count them
			// twice, so every collection is counted again.
			if _, err := tx.Exec(ctx, `DELETE FROM governance_collection_count`); err != nil {
				return fmt.Errorf("drop kept counts: %w", err)
			}
		}
		if _, err := postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_cursor", EntityCode: source, Action: "reset",
			Actor: by.Principal, Detail: map[string]any{"source": source, "from": from, "to": to, "actor": by.Audit()}}); err != nil {
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
