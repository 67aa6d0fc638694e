// Package gcostest is the one fixture builder GCOS's tests share: a test's own database with a synthetic world, a
// store over it, the world backfilled and its ruleset activated, and a daemon assembled over it.
// Every test that needs one of these builds it here (River's riverdbtest plays the same part), so a new test says
// which world it wants, not how a world is made.
package gcostest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/daemon"
	"gcos/events"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/world"
)

// Approval and Approver activate a ruleset in tests: the approver is never the backfill's proposer.
const (
	Approval = "APR-1"
	Approver = "approver"
)

// Options say which world a test wants.
type Options struct {
	Births  int                // births to generate; 0 leaves the migrated database empty
	Seed    uint64             // world seed (the same seed gives the same rows)
	Changes int                // registry_changelog history rows (world.Options.Changes: 0 the default, <0 none)
	Config  func(*gcos.Config) // adjusts the default configuration before the store is made
}

// World is a test's own migrated database, the world generated into it, and a store over it.
type World struct {
	Ctx     context.Context
	Pool    *pgxpool.Pool
	Store   *postgres.Store
	Cfg     gcos.Config
	Ruleset string // the version the last Backfill computed
}

// New builds the world opts asks for in a fresh database, dropped when the test ends.
func New(t testing.TB, opts Options) *World {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	if opts.Births > 0 {
		if _, err := world.Generate(ctx, pool, world.Options{Births: opts.Births, Seed: opts.Seed, Changes: opts.Changes}); err != nil {
			t.Fatalf("generate the world: %v", err)
		}
	}
	return Over(t, pool, opts.Config)
}

// Over is a World over an existing database (a clone, a renamed substrate), with the default configuration as
// adjust changes it.
func Over(t testing.TB, pool *pgxpool.Pool, adjust func(*gcos.Config)) *World {
	t.Helper()
	cfg := config(t, adjust)
	return &World{Ctx: context.Background(), Pool: pool, Store: postgres.New(pool, cfg, nil), Cfg: cfg}
}

// config is the default configuration as adjust changes it, validated.
func config(t testing.TB, adjust func(*gcos.Config)) gcos.Config {
	t.Helper()
	cfg := gcos.DefaultConfig()
	if adjust != nil {
		adjust(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	return cfg
}

// Seed builds the world opts asks for in a database the test brings (an end-to-end test's own cluster): the
// substrate and GCOS's schema are created there, the world generated, backfilled and its ruleset activated. The
// store logs nowhere; ctx bounds every step.
func Seed(ctx context.Context, t testing.TB, pool *pgxpool.Pool, opts Options) *World {
	t.Helper()
	cfg := config(t, opts.Config)
	w := &World{Ctx: ctx, Pool: pool, Store: postgres.New(pool, cfg, slog.New(slog.DiscardHandler)), Cfg: cfg}
	if _, err := w.Store.Prepare(ctx, postgres.PrepareOptions{CreateSubstrate: true}); err != nil {
		t.Fatalf("prepare the database: %v", err)
	}
	if _, err := world.Generate(ctx, pool, world.Options{Births: opts.Births, Seed: opts.Seed, Changes: opts.Changes}); err != nil {
		t.Fatalf("generate the world: %v", err)
	}
	w.Activate(t, w.Backfill(t).RulesetVersion)
	return w
}

// Ready is New, then Backfill and Activate: the seeded, active state most stage tests start from.
func Ready(t testing.TB, opts Options) *World {
	t.Helper()
	w := New(t, opts)
	w.Activate(t, w.Backfill(t).RulesetVersion)
	return w
}

// Backfill runs the first full pass (the intake stage's seed) and remembers the ruleset it computed.
func (w *World) Backfill(t testing.TB) intake.BackfillResult {
	t.Helper()
	res, err := intake.New(w.Store).Backfill(w.Ctx, intake.BackfillOptions{})
	if err != nil {
		t.Fatalf("backfill: %v", err)
	}
	w.Ruleset = res.RulesetVersion
	return res
}

// Activate activates a draft as Approver with Approval.
func (w *World) Activate(t testing.TB, version string) postgres.ActivationResult {
	t.Helper()
	res, err := w.Store.ActivateRuleset(w.Ctx, version, Approval, Approver)
	if err != nil {
		t.Fatalf("activate %s: %v", version, err)
	}
	return res
}

// ActivateVocabulary registers the governance event vocabulary and activates every type of it, approved by
// approver, so announcements reach the outbox when promoted.
func (w *World) ActivateVocabulary(t testing.TB, approver string) {
	t.Helper()
	if err := events.New(w.Store).ActivateVocabulary(w.Ctx, "APR-EV", approver); err != nil {
		t.Fatal(err)
	}
}

// Daemon assembles the daemon over the world's store (cfg.Store is set), not started.
func (w *World) Daemon(t testing.TB, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	cfg.Store = w.Store
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatalf("assemble the daemon: %v", err)
	}
	return d
}

// Exec runs statements, failing the test on an error.
func (w *World) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := w.Pool.Exec(w.Ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Count is a query's one integer.
func (w *World) Count(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := w.Pool.QueryRow(w.Ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Pairs is a two-column query as a map from the first column to the second. A key on two rows fails the test: the
// map would keep whichever row the scan returned last, and a comparison of two such maps would be a coin toss.
func (w *World) Pairs(t testing.TB, sql string, args ...any) map[string]string {
	t.Helper()
	rows, err := w.Pool.Query(w.Ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out := map[string]string{}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		if was, ok := out[k]; ok {
			return fmt.Errorf("key %q on two rows (%q, %q)", k, was, v)
		}
		out[k] = v
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// Strings is a query's first column as text.
func (w *World) Strings(t testing.TB, sql string, args ...any) []string {
	t.Helper()
	rows, err := w.Pool.Query(w.Ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}
