package intake

import (
	"context"
	"fmt"
	"time"

	"gcos/postgres"
)

// probeSQL reports how long ago the first row beyond src's cursor ($1 the source) had its order key taken, by the
// database clock (NULL: no such row), GCOS's own change-ledger rows aside (they are set aside, never acted on, so
// nothing is worth a poll for them): one index probe, with no lock and no write. A cursor at its start compares as
// null and finds nothing: the regular poll reads from the start.
func probeSQL(src postgres.TailSource, noTZ bool) string {
	pos, clock := "c.position_tstz", "clock_timestamp()"
	if noTZ {
		// The column holds the writers' local time in the cursor's zone.
		pos, clock = "c.position_ts", "(clock_timestamp() AT TIME ZONE (SELECT c.time_zone FROM gov_worker_cursor c WHERE c.source = $1))"
	}
	own := ""
	if src.Kind == postgres.TailChangelog {
		own = ` AND NOT EXISTS (SELECT 1 FROM governance_audit_row a WHERE a.changelog_id = t.{id})`
	}
	// The position is read first (init plans), so the row comparison bounds the (ts, id) index, and the first row
	// is asked for in the index's order: a join on the cursor's columns, or an EXISTS (which drops the ORDER BY),
	// was planned as a scan of the whole table, the planner guessing a third of it lies past an unknown position.
	return src.SQL(`SELECT (SELECT extract(epoch FROM ` + clock + ` - t.{ts})::float8 FROM {t} t WHERE (t.{ts}, t.{id}) > ((SELECT ` + pos + ` FROM gov_worker_cursor c WHERE c.source = $1),
		(SELECT c.position_id FROM gov_worker_cursor c WHERE c.source = $1))` + own + ` ORDER BY t.{ts}, t.{id} LIMIT 1)`)
}

// Probe reports whether src holds a row beyond its cursor: whether a poll now would have something to read (once
// the row is below the horizon), and how long ago that row's order key was taken. It reads and locks nothing a
// poll needs, so an idle worker may ask it often.
func (s *Stage) Probe(ctx context.Context, src postgres.TailSource) (found bool, age time.Duration, err error) {
	noTZ, err := s.cursorNoTZ(ctx, src)
	if err != nil {
		return false, 0, err
	}
	var seconds *float64
	if err := s.pool.QueryRow(ctx, probeSQL(src, noTZ), src.Name).Scan(&seconds); err != nil {
		s.tsTypes.Delete(src.Name) // a cursor reset may have changed the column's type: read it again
		return false, 0, fmt.Errorf("probe %s: %w", src.Name, err)
	}
	if seconds == nil {
		return false, 0, nil
	}
	return true, time.Duration(*seconds * float64(time.Second)), nil
}

// guardLeft is how long a row whose order key was taken age ago waits before the horizon, guard behind the clock,
// has passed it: none once it is older than the guard, the whole guard for a key the clock has not reached.
func guardLeft(guard, age time.Duration) time.Duration {
	return min(max(guard-age, 0), guard)
}
