package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos/postgres"
)

// HandedOff returns once every source row committed before at has been handed off by the intake: each tail's
// oldest unread row is newer than at. A row is stamped inside its writing transaction, before that commits, so a
// row committed before at is stamped before it too. It polls within timeout. The intake that does the handing off
// may run in another process: when no tail's position moves for idle while rows wait, none is running and HandedOff
// gives up at once instead of at the timeout. The error names the sources still waiting and their oldest rows.
//
// This is the cut every live proof takes (SPEC §13): a source row committed before its instant but not handed off
// yet is in flight, never a lost signal, a count drift or a mismatch. It only reads (presentSQL).
func (s *Stage) HandedOff(ctx context.Context, sources []postgres.TailSource, at time.Time, timeout, idle time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if len(sources) == 0 {
		sources = postgres.DefaultTailSources(s.cfg.Binding)
	}
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	var positions string
	moved := time.Now()
	var waiting []string
	for {
		now, still, err := s.behind(ctx, sources, at)
		switch {
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("handed off: %w", err)
		case err == nil && len(still) == 0:
			return nil
		case err == nil:
			waiting = still // a read the deadline cut short keeps the last full list for the message
		}
		if p := strings.Join(now, ","); err == nil && p != positions {
			positions, moved = p, time.Now()
		}
		if idle > 0 && time.Since(moved) > idle {
			return fmt.Errorf("rows committed before %s are not handed off and no intake moved for %s: %s (is the daemon running?)",
				at.UTC().Format(time.RFC3339Nano), idle, strings.Join(waiting, ", "))
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("rows committed before %s were not handed off within %s: %s",
					at.UTC().Format(time.RFC3339Nano), timeout, strings.Join(waiting, ", "))
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// settlePoll is how often HandedOff looks at the tails' positions.
const settlePoll = 100 * time.Millisecond

// Present reads, in one statement, the database's present and which of the default sources still hold rows
// stamped at or before at (zero at: the statement's own start) that the intake has not handed off. A row is
// stamped inside its writing transaction, before that commits: a row committed before the statement began is
// visible to it, and stamped before at when at is the statement's start.
func (s *Stage) Present(ctx context.Context, at time.Time) (postgres.SourcePresent, error) {
	p, err := s.present(ctx, postgres.DefaultTailSources(s.cfg.Binding), at)
	return p.SourcePresent, err
}

// behind is Present over sources at a given instant, with each source's position (what shows an intake moving).
func (s *Stage) behind(ctx context.Context, sources []postgres.TailSource, at time.Time) (positions, waiting []string, err error) {
	p, err := s.present(ctx, sources, at)
	if err != nil {
		return nil, nil, err
	}
	return p.positions, p.Waiting, nil
}

// presentSQL reads, for each source ($1 names, $2 the bound, null: the statement's start), its cursor's position and
// the instant of its first row after it, and for each watched registry ($3 names) whether it holds what its last
// poll handed off, in one statement: one snapshot for the whole present.
func presentSQL(sources []postgres.TailSource, noTZ []bool, regs []watchedRegistry) string {
	var parts []string
	for i, src := range sources {
		pos, instant := "coalesce(c.position_tstz, '-infinity'::timestamptz)", "{ts}"
		if noTZ[i] {
			pos, instant = "coalesce(c.position_ts, '-infinity'::timestamp)", "({ts} AT TIME ZONE c.time_zone)"
		}
		// GCOS's own rows in the change ledger (governance_audit_row, written in the same transaction) are never
		// acted on, only set aside: nothing waits for them.
		own := ""
		if src.Kind == postgres.TailChangelog {
			own = ` AND NOT EXISTS (SELECT 1 FROM governance_audit_row a WHERE a.changelog_id = {t}.{id})`
		}
		parts = append(parts, src.SQL(fmt.Sprintf(`SELECT %d AS i, c.source IS NOT NULL AS found, c.position_tstz, c.position_ts, c.position_id, f.instant,
	    NULL::boolean AS changed
	FROM (SELECT 1) one
	LEFT JOIN gov_worker_cursor c ON c.source = ($1::text[])[%d]
	LEFT JOIN LATERAL (SELECT `+instant+` AS instant FROM {t}
	                   WHERE ({ts}, {id}) > (`+pos+`, coalesce(c.position_id, -9223372036854775808))`+own+`
	                   ORDER BY {ts}, {id} LIMIT 1) f ON c.source IS NOT NULL`, i, i+1)))
	}
	parts = append(parts, registriesPresentSQL(regs, len(sources))...)
	return `SELECT coalesce($2::timestamptz, statement_timestamp()), pg_current_snapshot()::text, p.*
FROM (` + strings.Join(parts, "\nUNION ALL\n") + `) p ORDER BY p.i`
}

// cursorNoTZ reports whether src's cursor column is a timestamp without time zone, read from its cursor once.
func (s *Stage) cursorNoTZ(ctx context.Context, src postgres.TailSource) (bool, error) {
	if known, ok := s.tsTypes.Load(src.Name); ok {
		return known.(bool), nil
	}
	cur, err := tailScanCursor(s.pool.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c WHERE c.source = $1`, src.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		return false, tailErrNoCursor(src.Name)
	}
	if err != nil {
		return false, fmt.Errorf("cursor %s: %w", src.Name, err)
	}
	if err := cur.matches(src); err != nil {
		return false, err
	}
	known, _ := s.tsTypes.LoadOrStore(src.Name, cur.noTZ)
	return known.(bool), nil
}

// present reads the present over sources (presentSQL); a source's column type (timestamp or timestamptz) is its
// cursor's, read once.
func (s *Stage) present(ctx context.Context, sources []postgres.TailSource, at time.Time) (present, error) {
	names, noTZ := make([]string, len(sources)), make([]bool, len(sources))
	for i, src := range sources {
		names[i] = src.Name
		var err error
		if noTZ[i], err = s.cursorNoTZ(ctx, src); err != nil {
			return present{}, err
		}
	}
	var bound any
	if !at.IsZero() {
		bound = at
	}
	regs := s.registries.Load()
	if regs == nil {
		if _, err := s.watchedRegistries(ctx); err != nil {
			return present{}, err
		}
		regs = s.registries.Load()
	}
	regNames := make([]string, len(*regs))
	for k, r := range *regs {
		regNames[k] = r.Table
	}
	rows, err := s.pool.Query(ctx, presentSQL(sources, noTZ, *regs), names, bound, regNames)
	if err != nil {
		s.tsTypes.Clear() // a cursor reset since may have changed a column's type: read them again
		return present{}, fmt.Errorf("the sources' present: %w", err)
	}
	var p present
	for rows.Next() {
		var i int
		var found bool
		var tstz pgtype.Timestamptz
		var ts pgtype.Timestamp
		var id *int64
		var first pgtype.Timestamptz
		var changed *bool
		if err := rows.Scan(&p.At, &p.Snapshot, &i, &found, &tstz, &ts, &id, &first, &changed); err != nil {
			rows.Close()
			return present{}, fmt.Errorf("the sources' present: %w", err)
		}
		if i >= len(sources) {
			// A watched registry: it waits while it holds what its last poll did not hand off. One never polled
			// waits for nothing: its first poll only records it.
			r := (*regs)[i-len(sources)]
			if found && changed != nil && *changed {
				p.Waiting = append(p.Waiting, fmt.Sprintf("%s (changed since its last poll at %s)", r.Table, tstz.Time.UTC().Format(time.RFC3339Nano)))
			}
			if found {
				p.positions = append(p.positions, tstz.Time.UTC().Format(time.RFC3339Nano))
			}
			continue
		}
		src := sources[i]
		if !found {
			rows.Close()
			return present{}, tailErrNoCursor(src.Name)
		}
		pos := tailPos{start: id == nil}
		if id != nil {
			pos.id, pos.ts = *id, tstz.Time
			if noTZ[i] {
				pos.ts = ts.Time
			}
		}
		p.positions = append(p.positions, pos.watermark(noTZ[i]))
		if first.Valid && first.InfinityModifier == pgtype.Finite && !first.Time.After(p.At) {
			p.Waiting = append(p.Waiting, fmt.Sprintf("%s (oldest unread row %s)", src.Name, first.Time.UTC().Format(time.RFC3339Nano)))
		}
	}
	if err := rows.Err(); err != nil {
		return present{}, fmt.Errorf("the sources' present: %w", err)
	}
	return p, nil
}

// present is a SourcePresent with each source's position.
type present struct {
	postgres.SourcePresent
	positions []string
}
