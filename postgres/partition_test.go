package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// partitionByBornAt creates table as a copy of birth_registry's columns, partitioned by born_at range at bounds
// (one partition below the first, one between each pair, and a default one above the last), with the indexes GCOS
// reads it by. Unique indexes must hold the partition key, so (collection, code) is indexed but not unique.
func partitionByBornAt(ctx context.Context, t *testing.T, w *gcostest.World, table string, bounds []time.Time) {
	t.Helper()
	w.Exec(t, fmt.Sprintf(`CREATE TABLE %[1]s (LIKE birth_registry INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (born_at);
		CREATE INDEX ON %[1]s (id); CREATE INDEX ON %[1]s (born_at, id); CREATE INDEX ON %[1]s (collection_name, entity_code)`, table))
	lo := "MINVALUE"
	for i, b := range bounds {
		hi := "'" + b.UTC().Format(time.RFC3339Nano) + "'"
		w.Exec(t, fmt.Sprintf(`CREATE TABLE %s_p%d PARTITION OF %s FOR VALUES FROM (%s) TO (%s)`, table, i, table, lo, hi))
		lo = hi
	}
	w.Exec(t, fmt.Sprintf(`CREATE TABLE %s_rest PARTITION OF %s DEFAULT`, table, table))
}

// bornAtQuartiles are the born_at values that split birth_registry in four.
func bornAtQuartiles(t *testing.T, w *gcostest.World) []time.Time {
	t.Helper()
	var q []time.Time
	if err := w.Pool.QueryRow(w.Ctx, `SELECT percentile_disc(ARRAY[0.25, 0.5, 0.75]) WITHIN GROUP (ORDER BY born_at) FROM birth_registry`).Scan(&q); err != nil {
		t.Fatal(err)
	}
	return q
}

// bindBirths points every births binding at table.
func bindBirths(table string) func(*gcos.Config) {
	return func(c *gcos.Config) {
		sb := &c.SourceBinding
		sb.Birth.Table, sb.ObjectClass.Table, sb.SourceRegistry.Table, sb.LifecycleStatus.Table = table, table, table, table
	}
}

// TestPartitionedBirths_SnapshotEqualsUnpartitioned captures the same births twice, from birth_registry and from a
// copy partitioned by born_at: the partitioned capture reads each partition on its own and adds the partitions'
// fingerprints, and must find exactly the groups, counts, bounds and fingerprints of the unpartitioned one.
func TestPartitionedBirths_SnapshotEqualsUnpartitioned(t *testing.T) {
	t.Parallel()
	w := gcostest.New(t, gcostest.Options{Births: 20_000, Seed: 13, Changes: -1})
	ctx := w.Ctx
	partitionByBornAt(ctx, t, w, "births_partitioned", bornAtQuartiles(t, w))
	w.Exec(t, `INSERT INTO births_partitioned SELECT * FROM birth_registry`)
	for _, part := range []string{"births_partitioned_p0", "births_partitioned_p1", "births_partitioned_p2", "births_partitioned_rest"} {
		if n := w.Count(t, `SELECT count(*) FROM `+part); n == 0 {
			t.Fatalf("partition %s is empty: the test would not read more than one", part)
		}
	}
	partitioned := gcostest.Over(t, w.Pool, bindBirths("births_partitioned")).Store
	capture := func(store *postgres.Store) postgres.Snapshot {
		t.Helper()
		// Small batches, so a partition is read in several and the batches of one group span partitions.
		snap, err := store.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotAudit, BatchSize: 1500, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	plain, parted := capture(w.Store), capture(partitioned)
	if plain.Metrics.Totals.Batches >= parted.Metrics.Totals.Batches {
		t.Errorf("the partitioned capture read %d batches, the unpartitioned %d: it did not read partition by partition",
			parted.Metrics.Totals.Batches, plain.Metrics.Totals.Batches)
	}
	plain.Metrics.Totals.Batches = parted.Metrics.Totals.Batches
	if plain.Metrics.Totals != parted.Metrics.Totals {
		t.Errorf("totals: unpartitioned %+v, partitioned %+v", plain.Metrics.Totals, parted.Metrics.Totals)
	}
	if len(plain.Metrics.Groups) == 0 || len(plain.Metrics.Groups) != len(parted.Metrics.Groups) {
		t.Fatalf("groups: unpartitioned %d, partitioned %d", len(plain.Metrics.Groups), len(parted.Metrics.Groups))
	}
	for key, g := range plain.Metrics.Groups {
		p, ok := parted.Metrics.Groups[key]
		if !ok || p.Count != g.Count || p.MaxID != g.MaxID || !p.MaxBornAt.Equal(g.MaxBornAt) || p.ContentHash != g.ContentHash {
			t.Errorf("group %s: unpartitioned %+v, partitioned %+v", key, g, p)
		}
	}
}

// TestPartitionedBirths_RunLikeAnyOther declares birth_registry itself partitioned by born_at before GCOS first meets
// the database: the substrate verifies, the world loads, the backfill seeds, births are tailed, and the incremental
// state equals a from-scratch evaluation.
func TestPartitionedBirths_RunLikeAnyOther(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewEmptyDB(t)
	ctx := context.Background()
	now := time.Now()
	w := gcostest.Over(t, pool, nil)
	w.Exec(t, `CREATE TABLE birth_registry (
		id bigserial, entity_code text NOT NULL, collection_name text NOT NULL, entity_type text NOT NULL, status text NOT NULL,
		born_at timestamptz NOT NULL DEFAULT now(), canonical_address text, parent_code text, source_system text, actor_ref text,
		PRIMARY KEY (id, born_at)) PARTITION BY RANGE (born_at)`)
	w.Exec(t, `CREATE INDEX ON birth_registry (born_at, id); CREATE INDEX ON birth_registry (collection_name, entity_code)`)
	for i, span := range [][2]string{{"MINVALUE", q(now.AddDate(0, -6, 0))}, {q(now.AddDate(0, -6, 0)), q(now.AddDate(0, -1, 0))}} {
		w.Exec(t, fmt.Sprintf(`CREATE TABLE birth_registry_p%d PARTITION OF birth_registry FOR VALUES FROM (%s) TO (%s)`, i, span[0], span[1]))
	}
	w.Exec(t, `CREATE TABLE birth_registry_rest PARTITION OF birth_registry DEFAULT`)
	w = gcostest.Seed(ctx, t, pool, gcostest.Options{Births: 5000, Seed: 17})
	if n := w.Count(t, `SELECT count(*) FROM pg_partition_tree('birth_registry') WHERE isleaf`); n != 3 {
		t.Fatalf("birth_registry has %d partitions, want 3", n)
	}
	// A birth after the backfill, tailed and scanned.
	var coll, class string
	if err := pool.QueryRow(ctx, `SELECT collection_name, entity_type FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class); err != nil {
		t.Fatal(err)
	}
	w.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status) VALUES ('partitioned-1', $1, $2, 'active')`, coll, class)
	b := bundleOf(w)
	b.world().IntakeAll(t)
	b.world().ScanAll(t, postgres.ModeIncremental)
	rep, err := oracle.Verify(ctx, w.Store, oracle.VerifyOptions{Sample: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range rep.Mismatches {
		t.Errorf("incremental state differs from the reference: %s", mm)
	}
	if g := gate.New(w.Store, nil).Gate(ctx, coll+":partitioned-1", gcos.ActionRead); len(g.Consulted) == 0 {
		t.Errorf("the gate consulted nothing for a birth in a partition: %+v", g)
	}
}

func q(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'" }
