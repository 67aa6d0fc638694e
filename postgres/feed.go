package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The change feed (migration 014) notes, in each writing transaction, the candidate-state keys it wrote, so that a
// gate's verdict view catches up by reading what committed since its last read. Its kinds are the table a note's
// key is in, and birth for a birth row a change-ledger row named.
const (
	FeedGroup    = "group"
	FeedState    = "state"
	FeedObject   = "object"
	FeedCoverage = "coverage"
	FeedRuleset  = "ruleset"
	FeedBirth    = "birth"
)

// AllBirths is the birth note that drops every birth a view holds (a full audit, which reads silent updates too).
const AllBirths = "*"

// FeedKinds are the change feed's kinds.
var FeedKinds = []string{FeedGroup, FeedState, FeedObject, FeedCoverage, FeedRuleset, FeedBirth}

// NoteBirthsTx tells the gate's views, in the handoff's transaction, that these objects' birth rows may have
// changed (a change-ledger row named them): a view drops its cached copy when it catches up past this commit.
func NoteBirthsTx(ctx context.Context, tx pgx.Tx, objects []string) error {
	if len(objects) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO gcos_change_feed (kind, key) SELECT DISTINCT $2::text, unnest($1::text[])`, objects, FeedBirth); err != nil {
		return fmt.Errorf("note changed births: %w", err)
	}
	return nil
}

// CloseConn closes a connection GCOS holds outside its pools and waits, as a pool does, until its cleanup is done or
// ctx ends: a connection abandoned mid-statement first sends a cancel request, and a process that exits during it
// leaves a pooler a half-done cancel (PgBouncer 1.18 exits on one: pgbouncer/pgbouncer#801).
func CloseConn(ctx context.Context, conn *pgx.Conn) {
	_ = conn.Close(ctx)
	select {
	case <-conn.PgConn().CleanupDone():
	case <-ctx.Done():
	}
}

// SourcePresent is the database's present as a question asked with a consistency token must see it (SPEC §12
// freshness): the bound At, the snapshot of the read, and the sources still holding a row stamped at or before At
// that the intake has not handed off, each named with its oldest such row. None waiting: everything committed before
// At is handed off, and a read at least as fresh as Snapshot sees what those handoffs wrote. The intake reads it
// (intake.Stage.Present); the gate waits on it.
type SourcePresent struct {
	At       time.Time
	Snapshot string
	Waiting  []string
}

// ConsistencyToken is a token for the database's present: taken after a write committed, a gate question passing it
// as at_least reads that write (SPEC §12 freshness). A writer outside GCOS (an exception granted in its registry)
// asks for one after its commit.
func (s *Store) ConsistencyToken(ctx context.Context) (string, error) {
	var token string
	if err := s.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&token); err != nil {
		return "", fmt.Errorf("read a consistency token: %w", err)
	}
	return token, nil
}
