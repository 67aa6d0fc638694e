package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/gate"
	"gcos/intake"
	"gcos/postgres"
	"gcos/world"
)

// worldStore is a benchmark's own database with the world loaded, a pool and a store on it.
type worldStore struct {
	db    string
	pool  *pgxpool.Pool
	store *postgres.Store
	gate  *gate.Gate // over store, without a re-scanner; its view runs only where a benchmark runs it
}

// openWorld creates the benchmark's database with a world of births births; close drops it.
func (r *runner) openWorld(ctx context.Context, label string, births int, maxConns int32) (*worldStore, func(), error) {
	db, err := r.env.worldDB(ctx, label, births)
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.env.dropDB(ctx, db); err != nil {
			r.log.Warn("drop database", "db", db, "err", err)
		}
	}
	if err != nil {
		drop()
		return nil, func() {}, err
	}
	ws, closeStore, err := r.openStore(ctx, db, maxConns)
	if err != nil {
		drop()
		return nil, func() {}, err
	}
	return ws, func() { closeStore(); drop() }, nil
}

// openStore opens a pool and a store on an existing database; maxConns 0 sizes the pool as gcos up does
// (database.pool_conns, or -pool-conns).
func (r *runner) openStore(ctx context.Context, db string, maxConns int32) (*worldStore, func(), error) {
	if maxConns == 0 {
		maxConns = int32(benchConfig(r.opts).Database.PoolConns)
	}
	p, err := r.env.pool(ctx, db, maxConns, "gcos-bench")
	if err != nil {
		return nil, func() {}, err
	}
	ws := &worldStore{db: db, pool: p, store: postgres.New(p, benchConfig(r.opts), r.log.With("system", "gcos"))}
	// As gcos up wires it: a question with a token (or consistency=full) waits for the intake's progress.
	ws.gate = gate.New(ws.store, nil, gate.WithHandOff(intake.New(ws.store).Present))
	return ws, p.Close, nil
}

// scaledTarget scales a time target stated for the default world linearly to births.
func scaledTarget(seconds float64, births int) (float64, string) {
	v := seconds * float64(births) / float64(world.DefaultBirths)
	if births == world.DefaultBirths {
		return v, fmt.Sprintf("≤ %g s", seconds)
	}
	return v, fmt.Sprintf("≤ %.2f s (%g s per 1.04M)", v, seconds)
}

func benchSnapshot(ctx context.Context, r *runner) ([]row, error) {
	ws, done, err := r.openWorld(ctx, "snapshot", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	capture := func() (time.Duration, postgres.Snapshot, error) {
		t0 := time.Now()
		snap, err := ws.store.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotScan, RunID: postgres.NewRunID("bench-snapshot")})
		return time.Since(t0), snap, err
	}
	// Warm-up, untimed: both methods read the table once.
	if _, _, err := capture(); err != nil {
		return nil, err
	}
	if _, _, err := naiveSnapshot(ctx, ws.pool); err != nil {
		return nil, err
	}
	var ours, naive []float64
	var snap postgres.Snapshot
	naiveGroups := 0
	for i := 0; i < r.opts.reps; i++ {
		// Alternate the order so neither method always runs on the cache the other left.
		steps := []func() error{
			func() error {
				d, s, err := capture()
				ours, snap = append(ours, secs(d)), s
				return err
			},
			func() error {
				d, n, err := naiveSnapshot(ctx, ws.pool)
				naive, naiveGroups = append(naive, secs(d)), n
				return err
			},
		}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return nil, err
			}
		}
		r.log.Info("snapshot rep", "rep", i+1, "ours_s", ours[len(ours)-1], "naive_s", naive[len(naive)-1])
	}
	part, err := partitionedSnapshot(ctx, r, ws)
	if err != nil {
		return nil, err
	}
	tv, tt := scaledTarget(1, r.opts.births)
	return []row{part, {
		Bench: "snapshot", Metric: fmt.Sprintf("capture %s births", thousands(snap.Metrics.Totals.Births)), Unit: "s", Better: lower,
		Ours: median(ours), Naive: fptr(median(naive)), Target: &target{Op: "<=", Value: tv, Text: tt}, Reps: r.opts.reps,
		OursSamples: ours, NaiveSamples: naive,
		Note: fmt.Sprintf("ours: %d base groups → %d groups (×%d scopes), %d keyset batches, writes the evolution_snapshots row with its delta; naive: %d groups hashed, nothing written",
			snap.Metrics.Totals.BaseGroups, snap.Metrics.Totals.Groups, snap.Metrics.Totals.Scopes, snap.Metrics.Totals.Batches, naiveGroups),
	}}, nil
}

// snapshotPartitions is how many born_at ranges the partitioned copy of the births is split into.
const snapshotPartitions = 8

// partitionedSnapshot copies the births into a table partitioned by born_at (eight ranges of equal size and a
// default partition) and captures both tables in turn: the partitioned capture reads partition by partition and
// adds their fingerprints, and must cost about what the unpartitioned one does.
func partitionedSnapshot(ctx context.Context, r *runner, ws *worldStore) (row, error) {
	exec := func(sql string) error {
		if _, err := ws.pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("partitioned births: %w", err)
		}
		return nil
	}
	var bounds []time.Time
	for i := 1; i < snapshotPartitions; i++ {
		var b time.Time
		if err := ws.pool.QueryRow(ctx, `SELECT percentile_disc($1::float8) WITHIN GROUP (ORDER BY born_at) FROM birth_registry`,
			float64(i)/snapshotPartitions).Scan(&b); err != nil {
			return row{}, fmt.Errorf("partition bounds: %w", err)
		}
		bounds = append(bounds, b)
	}
	if err := exec(`DROP TABLE IF EXISTS births_partitioned; CREATE TABLE births_partitioned (LIKE birth_registry INCLUDING DEFAULTS)
		PARTITION BY RANGE (born_at)`); err != nil {
		return row{}, err
	}
	lo := "MINVALUE"
	for i, b := range bounds {
		hi := "'" + b.UTC().Format(time.RFC3339Nano) + "'"
		if err := exec(fmt.Sprintf(`CREATE TABLE births_partitioned_%d PARTITION OF births_partitioned FOR VALUES FROM (%s) TO (%s)`, i, lo, hi)); err != nil {
			return row{}, err
		}
		lo = hi
	}
	if err := exec(`CREATE TABLE births_partitioned_rest PARTITION OF births_partitioned DEFAULT;
		INSERT INTO births_partitioned SELECT * FROM birth_registry;
		CREATE INDEX ON births_partitioned (id); CREATE INDEX ON births_partitioned (collection_name, entity_code);
		ANALYZE births_partitioned`); err != nil {
		return row{}, err
	}
	defer func() { _ = exec(`DROP TABLE births_partitioned`) }()
	cfg := benchConfig(r.opts)
	sb := &cfg.SourceBinding
	sb.Birth.Table, sb.ObjectClass.Table, sb.SourceRegistry.Table, sb.LifecycleStatus.Table = "births_partitioned", "births_partitioned", "births_partitioned", "births_partitioned"
	parted := postgres.New(ws.pool, cfg, r.log.With("system", "gcos"))
	capture := func(store *postgres.Store) (float64, postgres.Snapshot, error) {
		t0 := time.Now()
		snap, err := store.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotScan, RunID: postgres.NewRunID("bench-snapshot")})
		return secs(time.Since(t0)), snap, err
	}
	if _, _, err := capture(parted); err != nil { // warm-up, untimed
		return row{}, err
	}
	var ours, plain []float64
	var ps, us postgres.Snapshot
	for i := 0; i < r.opts.reps; i++ {
		d, s, err := capture(parted)
		if err != nil {
			return row{}, err
		}
		ours, ps = append(ours, d), s
		if d, us, err = capture(ws.store); err != nil {
			return row{}, err
		}
		plain = append(plain, d)
	}
	same := "equal"
	for k, g := range us.Metrics.Groups {
		if p := ps.Metrics.Groups[k]; p.ContentHash != g.ContentHash || p.Count != g.Count {
			same = "DIFFERENT"
			break
		}
	}
	return row{
		Bench: "snapshot", Metric: fmt.Sprintf("capture %s births, table partitioned by born_at (%d partitions)", thousands(ps.Metrics.Totals.Births), len(bounds)+1),
		Unit: "s", Better: lower, Ours: median(ours), Reps: r.opts.reps, OursSamples: ours,
		Note: fmt.Sprintf("read partition by partition (%d keyset batches) and combined; the unpartitioned capture of the same rows, in turn: %.3f s median (×%.2f); fingerprints %s",
			ps.Metrics.Totals.Batches, median(plain), median(ours)/median(plain), same),
	}, nil
}
