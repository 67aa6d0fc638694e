package intake

import (
	"context"
	"fmt"
	"gcos/postgres"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backfill seeds, handoff sustains (doc 32 §6, "boundary handshake"). The seed evaluates every group from a
// snapshot of the sources and from the registries as they are when it seeds, so every source row committed below a
// tail horizon read before that snapshot is already reflected in the seeded verdicts. A source whose cursor is
// still before its first row therefore starts at that horizon: re-handing-off the whole history would only re-dirty
// every group the seed has just evaluated. Rows at or above the horizon are tailed as usual (overlap is harmless:
// dirty marks are idempotent). A cursor that has moved is never touched, and when the horizon cannot be trusted the
// cursors stay at start (the safe, slower path).

// seedHorizon is the tail horizon read before the seed snapshot is taken; ok is false when it cannot be trusted: a
// standby, a role that cannot see other sessions' transactions, or a prepared transaction (which may still commit
// rows of any age).
type seedHorizon struct {
	at time.Time
	ok bool
}

func (s *Stage) readSeedHorizon(ctx context.Context) (seedHorizon, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return seedHorizon{}, fmt.Errorf("seed horizon: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	read, err := readHorizon(ctx, tx, s.cfg.Intake, nil)
	if err != nil {
		return seedHorizon{}, fmt.Errorf("seed horizon: %w", err)
	}
	var prepared int64
	// Counted after pg_stat_activity was read, as a poll does: a transaction gone from it by then has ended or
	// is prepared.
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`).Scan(&prepared); err != nil {
		return seedHorizon{}, fmt.Errorf("seed horizon: %w", err)
	}
	h := seedHorizon{at: read.at, ok: !read.inRecovery && read.seesAll && prepared == 0}
	if !h.ok {
		s.logger.Warn("backfill: the tail horizon cannot be trusted here; intake cursors stay at start and will re-hand-off the history",
			"standby", read.inRecovery, "sees_all_sessions", read.seesAll, "prepared_transactions", prepared)
	}
	return h, nil
}

// ensureSeedCursors creates the cursor of every configured tail source whose table exists, so the seeding
// transaction can position those still at start.
func (s *Stage) ensureSeedCursors(ctx context.Context) ([]string, error) {
	var names []string
	for _, src := range postgres.DefaultTailSources(s.cfg.Binding) {
		ok, err := postgres.TableExists(ctx, s.pool, qualifiedTable(src))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if _, err := s.EnsureCursor(ctx, src); err != nil {
			// The intake will refuse this source with the same message; the seed does not depend on it.
			s.logger.Warn("backfill: no cursor for tail source; it will start from its first row", "source", src.Name, "err", err)
			continue
		}
		names = append(names, src.Name)
	}
	return names, nil
}

// startCursorsAtHorizon moves, inside the seeding transaction, each named cursor that is still at start to the
// horizon (rows at or after it will be tailed), audited; it returns the sources it moved.
func startCursorsAtHorizon(ctx context.Context, tx pgx.Tx, sources []string, h seedHorizon, runID string) ([]string, error) {
	if !h.ok || len(sources) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `
		UPDATE gov_worker_cursor
		SET position_tstz = CASE WHEN ts_type = 'timestamptz' THEN $2::timestamptz END,
		    position_ts = CASE WHEN ts_type = 'timestamp' THEN $2::timestamptz AT TIME ZONE time_zone END,
		    position_id = $3::bigint, last_event_id = ($3::bigint)::text, last_created_at = $2, updated_at = now(),
		    metadata = metadata || jsonb_build_object('seeded_at_horizon', jsonb_build_object('run_id', $4::text, 'horizon', $2::timestamptz))
		WHERE source = ANY($1) AND position_id IS NULL
		RETURNING source`, sources, h.at, int64(math.MinInt64), runID)
	if err != nil {
		return nil, fmt.Errorf("start cursors at the seed horizon: %w", err)
	}
	moved, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("start cursors at the seed horizon: %w", err)
	}
	for _, src := range moved {
		if _, err := postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_cursor", EntityCode: src, Action: "seed_horizon", Actor: "gcos",
			Detail: map[string]any{"source": src, "horizon": h.at, "run_id": runID,
				"why": "the backfill's seed already reflects every row committed below the horizon"}}); err != nil {
			return nil, err
		}
	}
	return moved, nil
}
