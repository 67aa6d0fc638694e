// Package pgtest hands each test its own freshly migrated PostgreSQL database, cloned from a template that is
// built once per test binary, so tests run in parallel against real PostgreSQL and clean up after themselves.
//
// It honours GCOS_TEST_DATABASE_URL (an admin DSN on which it creates and drops its own databases); without it,
// it starts one throwaway cluster from the local PostgreSQL binaries for the test binary's lifetime.
// A package that uses it calls pgtest.Main from its TestMain.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/embeddedpg"
	"gcos/postgres"
	"gcos/postgres/migration"
	"gcos/postgres/substrate"
)

// EnvDatabaseURL names the admin DSN the harness uses instead of starting its own cluster.
const EnvDatabaseURL = "GCOS_TEST_DATABASE_URL"

var (
	adminDSN string
	runID    string

	templateOnce sync.Once
	templateName string
	templateErr  error
)

// Main prepares the database server for a test binary, runs the tests and tears everything down.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	runID = randomSuffix()
	ctx := context.Background()
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		adminDSN = dsn
	} else {
		dir, err := os.MkdirTemp("", "gcos-pgtest-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: temp dir:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		cluster, err := embeddedpg.Start(ctx, embeddedpg.Config{
			DataDir:      filepath.Join(dir, "data"),
			Ephemeral:    true,
			RemoveOnStop: true,
			// The intake's tail stalls on a prepared transaction (it may commit rows of any age): tests prepare some.
			Settings: map[string]string{"max_prepared_transactions": "8"},
			Logger:   slog.New(slog.DiscardHandler),
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: start throwaway PostgreSQL (or set %s): %v\n", EnvDatabaseURL, err)
			return 1
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cluster.Stop(stopCtx)
		}()
		adminDSN = cluster.DSN()
	}
	code := m.Run()
	if templateName != "" {
		_ = dropDatabase(ctx, templateName)
	}
	return code
}

// AdminDSN is the DSN of the server's maintenance database.
func AdminDSN(t testing.TB) string {
	t.Helper()
	if adminDSN == "" {
		t.Fatal("pgtest: call pgtest.Main(m) from TestMain")
	}
	return adminDSN
}

// NewDB returns a pool on a new database with the substrate tables and every GCOS migration applied.
// The database is dropped when the test ends.
func NewDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	AdminDSN(t)
	templateOnce.Do(func() { templateName, templateErr = buildTemplate() })
	if templateErr != nil {
		t.Fatalf("pgtest: build template database: %v", templateErr)
	}
	return newDatabase(t, "TEMPLATE "+pgx.Identifier{templateName}.Sanitize())
}

// NewEmptyDB returns a pool on a new, empty database (no substrate, no migrations), dropped when the test ends.
func NewEmptyDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	AdminDSN(t)
	return newDatabase(t, "TEMPLATE template0")
}

// Clone closes pool and returns a pool on a new database copied from the one behind it (CREATE DATABASE … TEMPLATE:
// a file copy, far faster than rebuilding a world), dropped when the test ends. The source stays as it was.
func Clone(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	AdminDSN(t)
	name := pool.Config().ConnConfig.Database
	pool.Close()
	return newDatabase(t, "TEMPLATE "+pgx.Identifier{name}.Sanitize())
}

// Drop closes pool and drops the database behind it now, for a test that makes many databases (a property test's
// runs); the end-of-test cleanup then finds nothing left to drop.
func Drop(pool *pgxpool.Pool) error {
	name := pool.Config().ConnConfig.Database
	pool.Close()
	return dropDatabase(context.Background(), name)
}

// DSN returns a connection string for the database behind pool, for code under test that opens its own pool.
func DSN(pool *pgxpool.Pool) string { return pool.Config().ConnString() }

func newDatabase(t testing.TB, template string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	name := "gcos_test_" + runID + "_" + randomSuffix()
	if err := adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" "+template); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(dsnFor(name))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	// As postgres.Open does: under default_query_exec_mode=exec in GCOS_TEST_DATABASE_URL (how a transaction
	// pooler is met) a []byte argument is a JSON document.
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		postgres.JSONBytes(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		if err := dropDatabase(context.Background(), name); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return pool
}

func buildTemplate() (string, error) {
	ctx := context.Background()
	name := "gcos_tmpl_" + runID
	if err := adminExec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, dsnFor(name))
	if err != nil {
		return name, err
	}
	defer pool.Close()
	if _, err := substrate.Create(ctx, pool); err != nil {
		return name, err
	}
	m, err := migration.New(pool)
	if err != nil {
		return name, err
	}
	if _, err := m.Up(ctx); err != nil {
		return name, err
	}
	return name, nil
}

func dsnFor(database string) string {
	if u, err := url.Parse(adminDSN); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + database
		return u.String()
	}
	// keyword=value form: a later dbname overrides an earlier one.
	return adminDSN + " dbname=" + database
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("connect admin: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func dropDatabase(ctx context.Context, name string) error {
	return adminExec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
