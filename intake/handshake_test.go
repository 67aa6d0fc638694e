package intake_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
)

// TestBackfillHandshake: the backfill starts every tail cursor still at start at the horizon read before its seed
// snapshot, so the first intake hands off only what was born after the seed (never the whole history again), a
// birth committed after the backfill is still handed off, and a cursor that has already moved is left alone.
func TestBackfillHandshake(t *testing.T) {
	t.Parallel()
	b := gcostest.New(t, gcostest.Options{Births: 3000, Seed: 7})
	res := b.Backfill(t)
	if len(res.CursorsAtHorizon) != 2 {
		t.Fatalf("cursors started at the horizon: %v, want birth_registry and registry_changelog", res.CursorsAtHorizon)
	}
	for _, c := range []string{"birth_registry", "registry_changelog"} {
		cur, err := intake.New(b.Store).GetCursor(b.Ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Position == "start" {
			t.Fatalf("cursor %s still at start after the backfill", c)
		}
	}
	// Everything below the horizon is in the seed: a poll hands off nothing of the 3,000 births or the history.
	var handed []int64
	poll := func(source string) int {
		t.Helper()
		src := postgres.BirthTailSource(b.Cfg.SourceBinding)
		if source != src.Name {
			src = postgres.ChangelogTailSource()
		}
		res, err := intake.New(b.Store).PollTail(b.Ctx, src, b.Cfg.Intake, func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
			for _, r := range rows {
				handed = append(handed, r.ID)
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Read
	}
	if n := poll("birth_registry"); n != 0 {
		t.Fatalf("first poll of birth_registry after the backfill read %d rows", n)
	}
	// On the changelog, only the backfill's own audit rows (written in and after its seed) follow the horizon.
	if n := poll("registry_changelog"); n != int(b.Count(t, `SELECT count(*) FROM registry_changelog
		WHERE entity_type LIKE 'governance\_%' AND id = ANY($1)`, handed)) {
		t.Fatalf("first poll of registry_changelog after the backfill read %d rows, not all GCOS's own audit rows", n)
	}
	var id int64
	if err := b.Pool.QueryRow(b.Ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status)
		SELECT 'handshake-1', collection_name, entity_type, 'active' FROM birth_registry ORDER BY id LIMIT 1 RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	handed = nil
	wait.Until(10*time.Second, func() bool { return poll("birth_registry") > 0 }) // until the horizon passes the birth
	if len(handed) != 1 || handed[0] != id {
		t.Fatalf("after the backfill, a new birth was handed off as %v, want [%d]", handed, id)
	}
	// A second backfill (sources changed: the new birth) moves no cursor: neither is at start any more.
	if res := b.Backfill(t); len(res.CursorsAtHorizon) != 0 {
		t.Fatalf("a re-run moved cursors %v", res.CursorsAtHorizon)
	}
}
