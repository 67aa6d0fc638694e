// Package migration owns GCOS's versioned schema: embedded NNN_name.up.sql / NNN_name.down.sql steps, applied one
// transaction per step under a session advisory lock so two processes can never migrate at once.
package migration

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed *.sql
var files embed.FS

// lockKey is the advisory lock every migrating process takes; the value is arbitrary but fixed.
const lockKey int64 = 0x67636f735f6d6967 // "gcos_mig"

// versionTable records applied steps.
const versionTable = "gcos_schema_migration"

// Migration is one reversible schema step.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Status describes one step and whether it is applied.
type Status struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
}

var fileName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// All returns the embedded migrations in version order. It refuses gaps, duplicates and steps without a down.
func All() ([]Migration, error) { return ParseFS(files) }

// ParseFS reads a migration set from fsys with the same rules as All.
func ParseFS(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must be NNN_name.up.sql or NNN_name.down.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migration %03d: two names (%s, %s)", v, mig.Name, m[2])
		}
		switch m[3] {
		case "up":
			mig.Up = string(body)
		case "down":
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %03d_%s: needs both an up and a down step", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must be 1..n without gaps: found %03d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

// Migrator applies and reverts the embedded migrations.
type Migrator struct {
	pool       *pgxpool.Pool
	migrations []Migration
}

// New returns a Migrator over the embedded migrations.
func New(pool *pgxpool.Pool) (*Migrator, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	return &Migrator{pool: pool, migrations: all}, nil
}

// Latest is the highest known version.
func (m *Migrator) Latest() int { return len(m.migrations) }

// Up applies every pending step; it returns the versions it applied.
func (m *Migrator) Up(ctx context.Context) ([]int, error) {
	var applied []int
	err := m.locked(ctx, func(conn *pgxpool.Conn, current int) error {
		if current > len(m.migrations) {
			return fmt.Errorf("database is at migration %d but this gcos knows only %d: upgrade gcos", current, len(m.migrations))
		}
		for _, mig := range m.migrations[current:] {
			if err := step(ctx, conn, mig.Up, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+versionTable+` (version, name) VALUES ($1, $2)`, mig.Version, mig.Name)
				return err
			}); err != nil {
				return fmt.Errorf("migrate up %03d_%s: %w", mig.Version, mig.Name, err)
			}
			applied = append(applied, mig.Version)
		}
		return nil
	})
	return applied, err
}

// Down reverts the last n applied steps (n <= 0 reverts all); it returns the versions it reverted.
func (m *Migrator) Down(ctx context.Context, n int) ([]int, error) {
	var reverted []int
	err := m.locked(ctx, func(conn *pgxpool.Conn, current int) error {
		if current > len(m.migrations) {
			return fmt.Errorf("database is at migration %d but this gcos knows only %d: cannot revert unknown steps", current, len(m.migrations))
		}
		for v := current; v >= 1 && (n <= 0 || len(reverted) < n); v-- {
			mig := m.migrations[v-1]
			if err := step(ctx, conn, mig.Down, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `DELETE FROM `+versionTable+` WHERE version = $1`, mig.Version)
				return err
			}); err != nil {
				return fmt.Errorf("migrate down %03d_%s: %w", mig.Version, mig.Name, err)
			}
			reverted = append(reverted, mig.Version)
		}
		return nil
	})
	return reverted, err
}

// Status lists every known step and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	current, err := CurrentVersion(ctx, m.pool)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(m.migrations))
	for i, mig := range m.migrations {
		out[i] = Status{Version: mig.Version, Name: mig.Name, Applied: mig.Version <= current}
	}
	return out, nil
}

// CurrentVersion returns the highest applied version (0 when the version table is absent).
func CurrentVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, versionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read migration version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+versionTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("read migration version: %w", err)
	}
	return v, nil
}

// locked runs fn on one connection holding the migration advisory lock.
func (m *Migrator) locked(ctx context.Context, fn func(conn *pgxpool.Conn, current int) error) (err error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection for migration: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// Unlock on a fresh context so a cancelled ctx cannot leave the session holding the lock.
		if _, uerr := conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, lockKey); uerr != nil {
			err = errors.Join(err, fmt.Errorf("release migration lock: %w", uerr))
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versionTable+` (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create migration version table: %w", err)
	}
	current, err := CurrentVersion(ctx, conn)
	if err != nil {
		return err
	}
	return fn(conn, current)
}

// step runs one migration body and its bookkeeping in a single transaction.
func step(ctx context.Context, conn *pgxpool.Conn, body string, record func(pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, body); err != nil {
		return err
	}
	if err := record(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
