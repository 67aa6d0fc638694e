// Package migration owns GCOS's versioned schema: embedded NNN_name.up.sql / NNN_name.down.sql steps, applied one
// transaction per step, each under a transaction-scoped advisory lock so two processes can never apply the same step.
package migration

import (
	"context"
	"embed"
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
	for {
		var mig Migration
		done, err := m.step(ctx, func(tx pgx.Tx, current int) (bool, error) {
			if current > len(m.migrations) {
				return false, fmt.Errorf("database is at migration %d but this gcos knows only %d: upgrade gcos", current, len(m.migrations))
			}
			if current == len(m.migrations) {
				return false, nil
			}
			mig = m.migrations[current]
			if _, err := tx.Exec(ctx, mig.Up); err != nil {
				return false, fmt.Errorf("migrate up %03d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+versionTable+` (version, name) VALUES ($1, $2)`, mig.Version, mig.Name); err != nil {
				return false, fmt.Errorf("migrate up %03d_%s: %w", mig.Version, mig.Name, err)
			}
			return true, nil
		})
		if err != nil || !done {
			return applied, err
		}
		applied = append(applied, mig.Version)
	}
}

// Down reverts the last n applied steps (n <= 0 reverts all); it returns the versions it reverted.
func (m *Migrator) Down(ctx context.Context, n int) ([]int, error) {
	var reverted []int
	for n <= 0 || len(reverted) < n {
		var mig Migration
		done, err := m.step(ctx, func(tx pgx.Tx, current int) (bool, error) {
			if current > len(m.migrations) {
				return false, fmt.Errorf("database is at migration %d but this gcos knows only %d: cannot revert unknown steps", current, len(m.migrations))
			}
			if current == 0 {
				return false, nil
			}
			mig = m.migrations[current-1]
			if _, err := tx.Exec(ctx, mig.Down); err != nil {
				return false, fmt.Errorf("migrate down %03d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM `+versionTable+` WHERE version = $1`, mig.Version); err != nil {
				return false, fmt.Errorf("migrate down %03d_%s: %w", mig.Version, mig.Name, err)
			}
			return true, nil
		})
		if err != nil || !done {
			return reverted, err
		}
		reverted = append(reverted, mig.Version)
	}
	return reverted, nil
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

// step runs fn in one transaction that holds the migration lock and has read the applied version: fn applies
// (or reverts) one step and says whether it did. The lock is transaction-scoped, so it works through a
// transaction pooler and can never outlive its step, and every step re-reads the version under it.
func (m *Migrator) step(ctx context.Context, fn func(tx pgx.Tx, current int) (bool, error)) (bool, error) {
	var did bool
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versionTable+` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create migration version table: %w", err)
		}
		current, err := CurrentVersion(ctx, tx)
		if err != nil {
			return err
		}
		did, err = fn(tx, current)
		return err
	})
	return did, err
}
