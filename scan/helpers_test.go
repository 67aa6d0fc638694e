package scan_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/gcostest"
	"gcos/postgres/pgtest"
)

// groupWhere returns one group key matching a condition on v_candidate_effective.
func groupWhere(t *testing.T, w *gcostest.World, cond string) string {
	t.Helper()
	var key string
	// Groups whose objects all have their own rows are skipped: the gate would consult those rows instead.
	if err := w.Pool.QueryRow(w.Ctx, `SELECT group_key FROM v_candidate_effective WHERE `+cond+`
		AND object_class NOT IN (SELECT object_type FROM governance_candidate_object)
		ORDER BY group_member_count DESC, group_key LIMIT 1`).Scan(&key); err != nil {
		t.Fatalf("no group where %s: %v", cond, err)
	}
	return key
}

// digestExcept is an md5 over the candidate rows of every group but keys.
func digestExcept(t *testing.T, w *gcostest.World, keys []string) string {
	t.Helper()
	var d string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT md5(string_agg(x::text, E'\n' ORDER BY x::text)) FROM (`+otherRows+`) x`, keys).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// keysOfObjectBase returns the keys of a base group in every scope.
func keysOfObjectBase(t *testing.T, w *gcostest.World, key string) []string {
	t.Helper()
	return w.Strings(t, `SELECT group_key FROM governance_group WHERE (object_class, source_registry, lifecycle_status) =
		(SELECT object_class, source_registry, lifecycle_status FROM governance_group WHERE group_key = $1)`, key)
}

// closedPool returns a pool on w's database that is already closed: a store behind it cannot reach PostgreSQL.
func closedPool(t *testing.T, w *gcostest.World) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(w.Ctx, pgtest.DSN(w.Pool))
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	return pool
}
