package gate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/postgres"
)

// bundle is what the gate's tests need: an isolated database with a small world, a store over it, the gate over
// that store and a context (a gcostest.World's, under short names; a test may swap the store for one under another
// configuration, and gets a gate over it).
type bundle struct {
	t     testing.TB // the test that set the bundle up
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Store
	cfg   gcos.Config
	g     *gate.Gate
}

// setup returns an isolated, migrated database with a small synthetic world of births.
func setup(t *testing.T, births int) *bundle {
	w := gcostest.New(t, gcostest.Options{Births: births, Seed: 7})
	return &bundle{t: t, ctx: w.Ctx, pool: w.Pool, store: w.Store, cfg: w.Cfg}
}

// seededWorld is setup, backfilled and activated, under a configuration tweak first applies (nil: the default).
func seededWorld(t *testing.T, births int, tweak func(*gcos.Config)) *bundle {
	t.Helper()
	b := setup(t, births)
	if tweak != nil {
		tweak(&b.cfg)
		b.store = postgres.New(b.pool, b.cfg, nil)
	}
	res := b.world().Backfill(t)
	b.world().Activate(t, res.RulesetVersion)
	return b
}

// gate is the gate over the bundle's current store (one per store, so its follow-up log and view persist), with
// no re-scanner; asked with a token, it runs the intake itself (gcostest.World.HandOff).
func (b *bundle) gate() *gate.Gate {
	if b.g == nil || b.g.Store() != b.store {
		b.g = gate.New(b.store, nil, gate.WithHandOff(b.world().HandOff(b.t)))
	}
	return b.g
}

// world is the bundle as a gcostest.World, over the bundle's current store.
func (b *bundle) world() *gcostest.World {
	return &gcostest.World{Ctx: b.ctx, Pool: b.pool, Store: b.store, Cfg: b.cfg}
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	b.world().Exec(t, sql, args...)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	return b.world().Count(t, sql, args...)
}

// strs is a query's first column as text.
func (b *bundle) strs(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	return b.world().Strings(t, sql, args...)
}

// objectFingerprint is the object's fingerprint as an operator reads it from explain: what an exception on it pins.
func (b *bundle) objectFingerprint(t *testing.T, object string) string {
	t.Helper()
	ex, err := b.gate().ExplainObject(b.ctx, object)
	if err != nil || ex.ObjectFingerprint == "" {
		t.Fatalf("explain %s: no fingerprint (%v)", object, err)
	}
	return ex.ObjectFingerprint
}
