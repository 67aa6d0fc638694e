package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/intake"
	"gcos/postgres"
)

// bundle is what most store tests need: an isolated database, a store over it and a context (a gcostest.World's,
// under the names these tests use; a test may swap the store for one under another configuration).
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Store
	cfg   gcos.Config
	g     *gate.Gate // the gate over store (gateOf)
}

// setup returns an isolated, migrated database with a small synthetic world of births.
func setup(t *testing.T, births int) *bundle {
	return bundleOf(gcostest.New(t, gcostest.Options{Births: births, Seed: 7}))
}

func bundleOf(w *gcostest.World) *bundle {
	return &bundle{ctx: w.Ctx, pool: w.Pool, store: w.Store, cfg: w.Cfg}
}

// world is the bundle as a gcostest.World, over the bundle's current store.
func (b *bundle) world() *gcostest.World {
	return &gcostest.World{Ctx: b.ctx, Pool: b.pool, Store: b.store, Cfg: b.cfg}
}

// gate is the gate over the bundle's current store (one per store, so its follow-up log and view persist), with
// no re-scanner.
func (b *bundle) gate() *gate.Gate {
	if b.g == nil || b.g.Store() != b.store {
		b.g = gate.New(b.store, nil)
	}
	return b.g
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

// pairs is a two-column query as a map.
func (b *bundle) pairs(t *testing.T, sql string, args ...any) map[string]string {
	t.Helper()
	return b.world().Pairs(t, sql, args...)
}

// digest is an md5 over a query's rows in order, to prove rows unchanged byte for byte.
func (b *bundle) digest(t *testing.T, query string) string {
	t.Helper()
	return b.world().Digest(t, query)
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

func (b *bundle) backfill(t *testing.T) intake.BackfillResult {
	t.Helper()
	return b.world().Backfill(t)
}

// activate activates the current draft as a different actor than its proposer.
func (b *bundle) activate(t *testing.T, version string) postgres.ActivationResult {
	t.Helper()
	return b.world().Activate(t, version)
}

// seededWorld returns a bundle whose world is backfilled under an active ruleset, every group clean.
func seededWorld(t *testing.T, births int, tweak func(*gcos.Config)) *bundle {
	t.Helper()
	b := setup(t, births)
	if tweak != nil {
		tweak(&b.cfg)
		b.store = postgres.New(b.pool, b.cfg, nil)
	}
	res := b.backfill(t)
	b.activate(t, res.RulesetVersion)
	return b
}

// groupWhere returns one group key matching a condition on v_candidate_effective.
func (b *bundle) groupWhere(t *testing.T, cond string) string {
	t.Helper()
	var key string
	// Groups whose objects all have their own rows are skipped: the gate would consult those rows instead.
	if err := b.pool.QueryRow(b.ctx, `SELECT group_key FROM v_candidate_effective WHERE `+cond+`
		AND object_class NOT IN (SELECT object_type FROM governance_candidate_object)
		ORDER BY group_member_count DESC, group_key LIMIT 1`).Scan(&key); err != nil {
		t.Fatalf("no group where %s: %v", cond, err)
	}
	return key
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
