package intake

// The lag of a tail: how far behind its source it is, and which open transactions hold its horizon back.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
	"gcos/postgres"
)

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
  AND NOT EXISTS (SELECT 1 FROM unnest($3::int4[], $4::timestamptz[]) AS q(pid, xact_start)
                  WHERE (q.pid = a.pid OR q.pid = a.leader_pid) AND q.xact_start = a.xact_start)
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
		pids, starts := postgres.ScanTxArrays(s.writesNone(src)) // not holding the horizon (tailHorizonSQL)
		rows, err := tx.Query(ctx, tailHoldersSQL, roles, threshold.Microseconds(), pids, starts)
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

		instant, pos, zoneArg := "{ts}", "($1::timestamptz, $2::bigint)", []any{}
		if cur.noTZ {
			instant, pos, zoneArg = "({ts} AT TIME ZONE $3::text)", "($1::timestamp, $2::bigint)", []any{cur.zone}
		}
		var clock time.Time
		var first, head pgtype.Timestamptz
		err = tx.QueryRow(ctx, src.SQL(`SELECT clock_timestamp(),
			(SELECT `+instant+` FROM {t} WHERE ({ts}, {id}) > `+pos+` ORDER BY {ts}, {id} LIMIT 1),
			(SELECT `+instant+` FROM {t} ORDER BY {ts} DESC, {id} DESC LIMIT 1)`),
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
	if err == nil {
		s.lags.Store(src.Name, rep)
	}
	return rep, err
}

// Lags are the last lag this stage measured of each source (CheckTailLag), for /metrics: a tail measures its lag
// on its own cadence, and a scrape must not raise or resolve findings.
func (s *Stage) Lags() []LagReport {
	var out []LagReport
	s.lags.Range(func(_, v any) bool {
		out = append(out, v.(LagReport))
		return true
	})
	return out
}
