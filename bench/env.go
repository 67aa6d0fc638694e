package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/daemon"
	"gcos/embeddedpg"
	"gcos/events"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/migration"
	"gcos/postgres/substrate"
	"gcos/scan"
	"gcos/world"
)

// env is the database server the benchmarks run on and the databases they created (dropped by cleanup).
type env struct {
	adminDSN  string
	serverVer int // server_version_num
	log       *slog.Logger
	runID     string
	cluster   *embeddedpg.Cluster
	tmpDir    string

	mu  sync.Mutex
	dbs map[string]bool
	seq int
}

// newEnv connects to dsn, or starts a throwaway embedded cluster when dsn is empty.
func newEnv(ctx context.Context, dsn string, log *slog.Logger) (*env, error) {
	e := &env{adminDSN: dsn, log: log, runID: randomHex(3), dbs: map[string]bool{}}
	if dsn == "" {
		dir, err := os.MkdirTemp("", "gcos-bench-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		e.tmpDir = dir
		log.Info("starting a throwaway embedded PostgreSQL cluster", "dir", dir)
		c, err := embeddedpg.Start(ctx, embeddedpg.Config{
			DataDir: filepath.Join(dir, "data"), Ephemeral: true, RemoveOnStop: true, Logger: log,
		})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start embedded PostgreSQL (or pass -database-url): %w", err)
		}
		e.cluster, e.adminDSN = c, c.DSN()
	}
	conn, err := pgx.Connect(ctx, e.adminDSN)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("connect admin database: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&e.serverVer); err != nil {
		e.close()
		return nil, fmt.Errorf("server version: %w", err)
	}
	return e, nil
}

// close drops every database the run created and stops the embedded cluster; it never uses the run's context, so
// it also works after Ctrl-C.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.mu.Lock()
	names := make([]string, 0, len(e.dbs))
	for n := range e.dbs {
		names = append(names, n)
	}
	e.mu.Unlock()
	for _, n := range names {
		if err := e.dropDB(ctx, n); err != nil {
			e.log.Warn("drop database", "db", n, "err", err)
		}
	}
	if e.cluster != nil {
		if err := e.cluster.Stop(ctx); err != nil {
			e.log.Warn("stop embedded PostgreSQL", "err", err)
		}
	}
	if e.tmpDir != "" {
		_ = os.RemoveAll(e.tmpDir)
	}
}

func (e *env) adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, e.adminDSN)
	if err != nil {
		return fmt.Errorf("connect admin: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// createDB creates a database (optionally from a template) and remembers it for cleanup.
func (e *env) createDB(ctx context.Context, label, template string) (string, error) {
	e.mu.Lock()
	e.seq++
	name := fmt.Sprintf("gcos_bench_%s_%s_%d", e.runID, label, e.seq)
	e.dbs[name] = true
	e.mu.Unlock()
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
		if e.serverVer >= 150000 {
			sql += " STRATEGY FILE_COPY" // a plain file copy: much faster than WAL-logging a big database
		}
	}
	if err := e.adminExec(ctx, sql); err != nil {
		e.forget(name)
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

func (e *env) forget(name string) {
	e.mu.Lock()
	delete(e.dbs, name)
	e.mu.Unlock()
}

// dropDB drops a database created by createDB (WITH FORCE ends sessions a failed benchmark left behind).
// dropLater drops name with a deadline of its own, so a deferred cleanup still runs after the run was cancelled.
func (e *env) dropLater(name string) {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = e.dropDB(c, name)
}

func (e *env) dropDB(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	err := e.adminExec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	if err == nil {
		e.forget(name)
	}
	return err
}

// dsnFor is the admin DSN pointed at database.
func (e *env) dsnFor(database string) string {
	if u, err := url.Parse(e.adminDSN); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + database
		return u.String()
	}
	return e.adminDSN + " dbname=" + database
}

// pool opens a pool on database; maxConns 0 keeps pgxpool's default.
func (e *env) pool(ctx context.Context, database string, maxConns int32, app string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.dsnFor(database))
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// migrated creates a database with the substrate and every GCOS migration.
func (e *env) migrated(ctx context.Context, label string) (string, error) {
	name, err := e.createDB(ctx, label, "")
	if err != nil {
		return "", err
	}
	p, err := e.pool(ctx, name, 4, "gcos-bench-setup")
	if err != nil {
		return name, err
	}
	defer p.Close()
	if _, err := substrate.Create(ctx, p); err != nil {
		return name, fmt.Errorf("substrate: %w", err)
	}
	m, err := migration.New(p)
	if err != nil {
		return name, err
	}
	if _, err := m.Up(ctx); err != nil {
		return name, fmt.Errorf("migrate: %w", err)
	}
	return name, nil
}

// worldDB creates a migrated database and loads the synthetic world of births births (seed 1) into it, then
// VACUUM ANALYZEs the big tables so every run starts from the same settled table state (hint bits set, visibility
// map built), as a long-lived production table would be.
func (e *env) worldDB(ctx context.Context, label string, births int) (string, error) {
	name, err := e.migrated(ctx, label)
	if err != nil {
		return name, err
	}
	p, err := e.pool(ctx, name, 4, "gcos-bench-world")
	if err != nil {
		return name, err
	}
	defer p.Close()
	t0 := time.Now()
	sum, err := world.Generate(ctx, p, world.Options{Births: births, Seed: 1})
	if err != nil {
		return name, fmt.Errorf("generate world: %w", err)
	}
	if err := settle(ctx, p); err != nil {
		return name, err
	}
	e.log.Info("world loaded", "db", name, "births", sum.Births, "elapsed", time.Since(t0).Round(time.Millisecond))
	return name, nil
}

// settle vacuums and analyzes the tables the benchmarks read.
func settle(ctx context.Context, p *pgxpool.Pool) error {
	for _, t := range []string{"birth_registry", "registry_changelog"} {
		if _, err := p.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{t}.Sanitize()); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return nil
}

// benchConfig is the configuration the benchmarks run GCOS with: gcos.DefaultConfig() with the overrides given
// on the command line (none by default).
func benchConfig(o *options) gcos.Config {
	cfg := gcos.DefaultConfig()
	if o.coalesceWindow > 0 {
		cfg.Scan.CoalesceWindow = gcos.Duration(o.coalesceWindow)
	}
	if o.intakePoll > 0 {
		cfg.Intake.PollInterval = gcos.Duration(o.intakePoll)
	}
	if o.noReadAhead {
		cfg.Intake.ReadAhead = false
	}
	if o.intakePage > 0 {
		cfg.Intake.PageSize = o.intakePage
	}
	if o.poolConns > 0 {
		cfg.Database.PoolConns = o.poolConns
	}
	switch {
	case o.catchUpPage < 0:
		cfg.Intake.CatchUpPageSize = 0
	case o.catchUpPage > 0:
		cfg.Intake.CatchUpPageSize = o.catchUpPage
	}
	switch {
	case o.memoryLimit < 0:
		cfg.Process.MemoryLimitMiB = 0
	case o.memoryLimit > 0:
		cfg.Process.MemoryLimitMiB = o.memoryLimit
	}
	return cfg
}

// limitMemory sets this process's soft memory limit as `gcos up` sets it (daemon.LimitMemory) for a benchmark of
// what the daemon does in process, and returns what puts the limit back.
func limitMemory(cfg gcos.Config) (restore func()) {
	prev := debug.SetMemoryLimit(-1)
	daemon.LimitMemory(cfg.Process)
	return func() { debug.SetMemoryLimit(prev) }
}

// prepared is a database with a world that has been backfilled and whose ruleset is active, with the governance
// event vocabulary registered and active: the state `gcos up --demo` reaches before it starts its workers.
func prepare(ctx context.Context, store *postgres.Store) (intake.BackfillResult, error) {
	res, err := intake.New(store).Backfill(ctx, intake.BackfillOptions{})
	if err != nil {
		return res, fmt.Errorf("backfill: %w", err)
	}
	if res.RulesetStatus == gcos.RulesetDraft {
		if _, err := store.ActivateRuleset(ctx, res.RulesetVersion, "APR-BENCH", "bench-approver"); err != nil {
			return res, fmt.Errorf("activate ruleset: %w", err)
		}
	}
	return res, events.New(store).ActivateVocabulary(ctx, "APR-BENCH", "bench-approver")
}

// handoffSince is what the intake stage's apply step did between two of its HandoffTotals.
func handoffSince(before, after intake.HandoffStats) intake.HandoffStats {
	after.Rows -= before.Rows
	after.Signals -= before.Signals
	after.Dirtied -= before.Dirtied
	after.Emitted -= before.Emitted
	after.Captured -= before.Captured
	after.Skipped -= before.Skipped
	after.Unmapped -= before.Unmapped
	after.Untrusted -= before.Untrusted
	after.Kinds = nil
	return after
}

// drainScans scans every dirty and unseeded group (incremental ticks, no debounce) until none is left.
func drainScans(ctx context.Context, store *postgres.Store) (int, error) {
	total := 0
	runID := ""
	stage := scan.New(store)
	for i := 0; i < 10_000; i++ {
		res, err := stage.ScanTick(ctx, scan.ScanOptions{Mode: postgres.ModeIncremental, RunID: runID})
		if err != nil {
			return total, err
		}
		if runID == "" {
			runID = res.RunID
		}
		total += res.Scanned + res.Seeded
		if res.Claimed == 0 || res.Scanned+res.Seeded == 0 {
			return total, nil
		}
	}
	return total, errors.New("scan did not drain the dirty set")
}

// drainDetections runs the detection pass until it has nothing left to write: the findings a world's first passes
// open (one per orphan group, owner gap, island) are its start-up, done before a benchmark measures the daemon's
// steady state.
func drainDetections(ctx context.Context, store *postgres.Store) error {
	stage := scan.New(store)
	for i := 0; i < 10_000; i++ {
		res, err := stage.Detect(ctx, "")
		if err != nil {
			return err
		}
		if res.Left+res.Deferred == 0 {
			return nil
		}
	}
	return errors.New("the detection pass did not settle")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// countRows runs a count query.
func countRows(ctx context.Context, p *pgxpool.Pool, sql string, args ...any) (int64, error) {
	var n int64
	err := p.QueryRow(ctx, sql, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", strings.Join(strings.Fields(sql), " "), err)
	}
	return n, nil
}
