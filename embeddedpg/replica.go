package embeddedpg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// StartReplica makes a streaming replica of c in cfg.DataDir and starts it: pg_basebackup copies c's cluster
// (-R writes standby.signal and the primary_conninfo it streams from), and the replica keeps c's superuser
// password. cfg.DataDir must not hold a cluster yet. Asynchronous, as a production standby usually is: a
// transaction committed on c may not have reached the replica when c dies.
func (c *Cluster) StartReplica(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embeddedpg: Config.DataDir is required")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("replica data dir: %w", err)
	}
	pgDir := filepath.Join(dataDir, "pg")
	if _, err := os.Stat(filepath.Join(pgDir, "PG_VERSION")); err == nil {
		return nil, fmt.Errorf("replica data dir %s already holds a cluster", cfg.DataDir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replica data dir: %w", err)
	}
	if err := os.MkdirAll(pgDir, 0o700); err != nil {
		return nil, fmt.Errorf("create replica cluster dir: %w", err)
	}
	if err := chown(pgDir, c.runAs); err != nil {
		return nil, err
	}
	if c.runAs != nil {
		if err := ensureSearchable(dataDir, c.runAs, c.log); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dataDir, "pg.pass"), []byte(c.password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write replica password file: %w", err)
	}
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", superuser, "-D", pgDir,
		"-R", "-X", "stream", "-c", "fast"}
	if cfg.Ephemeral {
		args = append(args, "--no-sync")
	}
	cmd := c.command(ctx, "pg_basebackup", args...)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+c.password)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup from port %d: %w\n%s", c.port, err, tail(out, 20))
	}
	return Start(ctx, cfg)
}

// Promote ends a replica's recovery and makes it a primary (pg_ctl promote), waiting until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	out, err := c.command(ctx, "pg_ctl", "promote", "-D", c.pgDir, "-w", "-t", strconv.Itoa(secondsLeft(ctx))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl promote: %w\n%s", err, tail(out, 10))
	}
	return nil
}
