package intake

import (
	"context"
	"fmt"

	"gcos/postgres"
)

// probeSQL reports whether src holds a row beyond its cursor ($1 the source), GCOS's own change-ledger rows aside
// (they are set aside, never acted on, so nothing is worth a poll for them): one index probe, with no lock and no
// write. A cursor at its start compares as null and probes false: the regular poll reads from the start.
func probeSQL(src postgres.TailSource, noTZ bool) string {
	pos := "c.position_tstz"
	if noTZ {
		pos = "c.position_ts"
	}
	own := ""
	if src.Kind == postgres.TailChangelog {
		own = ` AND NOT EXISTS (SELECT 1 FROM governance_audit_row a WHERE a.changelog_id = t.{id})`
	}
	// The position is read first (init plans), so the row comparison bounds the (ts, id) index, and the first row
	// is asked for in the index's order: a join on the cursor's columns, or an EXISTS (which drops the ORDER BY),
	// was planned as a scan of the whole table, the planner guessing a third of it lies past an unknown position.
	return src.SQL(`SELECT coalesce((SELECT true FROM {t} t WHERE (t.{ts}, t.{id}) > ((SELECT ` + pos + ` FROM gov_worker_cursor c WHERE c.source = $1),
		(SELECT c.position_id FROM gov_worker_cursor c WHERE c.source = $1))` + own + ` ORDER BY t.{ts}, t.{id} LIMIT 1), false)`)
}

// Probe reports whether src holds a row beyond its cursor: whether a poll now would have something to read (once
// the row is below the horizon). It reads and locks nothing a poll needs, so an idle worker may ask it often.
func (s *Stage) Probe(ctx context.Context, src postgres.TailSource) (bool, error) {
	noTZ, err := s.cursorNoTZ(ctx, src)
	if err != nil {
		return false, err
	}
	var found bool
	if err := s.pool.QueryRow(ctx, probeSQL(src, noTZ), src.Name).Scan(&found); err != nil {
		s.tsTypes.Delete(src.Name) // a cursor reset may have changed the column's type: read it again
		return false, fmt.Errorf("probe %s: %w", src.Name, err)
	}
	return found, nil
}
