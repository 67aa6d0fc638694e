package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/world"
)

// bundle is what most store tests need: an isolated database, a store over it and a context.
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Store
	cfg   gcos.Config
}

// setup returns an isolated, migrated database with a small synthetic world of births.
func setup(t *testing.T, births int) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	if births > 0 {
		if _, err := world.Generate(ctx, pool, world.Options{Births: births, Seed: 7}); err != nil {
			t.Fatalf("generate world: %v", err)
		}
	}
	cfg := gcos.DefaultConfig()
	return &bundle{ctx: ctx, pool: pool, store: postgres.New(pool, cfg, nil), cfg: cfg}
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.pool.QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// digest is an md5 over a query's rows in order, to prove rows unchanged byte for byte.
func (b *bundle) digest(t *testing.T, query string) string {
	t.Helper()
	var d string
	if err := b.pool.QueryRow(b.ctx, `SELECT coalesce(md5(string_agg(x::text, E'\n' ORDER BY x::text)), '') FROM (`+query+`) x`).Scan(&d); err != nil {
		t.Fatalf("digest %s: %v", query, err)
	}
	return d
}

// objectFingerprint is the object's fingerprint as an operator reads it from explain: what an exception on it pins.
func (b *bundle) objectFingerprint(t *testing.T, object string) string {
	t.Helper()
	ex, err := b.store.ExplainObject(b.ctx, object)
	if err != nil || ex.ObjectFingerprint == "" {
		t.Fatalf("explain %s: no fingerprint (%v)", object, err)
	}
	return ex.ObjectFingerprint
}

func (b *bundle) backfill(t *testing.T) intake.BackfillResult {
	t.Helper()
	res, err := intake.New(b.store).Backfill(b.ctx, intake.BackfillOptions{})
	if err != nil {
		t.Fatalf("backfill: %v", err)
	}
	return res
}

// activate activates the current draft as a different actor than its proposer.
func (b *bundle) activate(t *testing.T, version string) postgres.ActivationResult {
	t.Helper()
	res, err := b.store.ActivateRuleset(b.ctx, version, "APR-TEST-1", "test-approver")
	if err != nil {
		t.Fatalf("activate %s: %v", version, err)
	}
	return res
}

// pgtestClosedPool returns a pool on the bundle's database that is already closed: the store behind it cannot
// reach PostgreSQL.
func pgtestClosedPool(t *testing.T, b *bundle) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(b.ctx, pgtest.DSN(b.pool))
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	return pool
}
