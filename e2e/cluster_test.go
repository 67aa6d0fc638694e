package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/embeddedpg"
	"gcos/gcostest"
	"gcos/postgres"
)

// privateDB is one database on a PostgreSQL cluster of the test's own, which the test may stop, start again on the
// same address, and pause.
type privateDB struct {
	cfg     embeddedpg.Config
	cluster *embeddedpg.Cluster
	dsn     string
	pool    *pgxpool.Pool
}

// newPrivateDB starts a cluster in dataDir, creates database name on it and connects a pool (short connect timeout,
// so callers notice an outage quickly). Both are cleaned up with the test.
func newPrivateDB(ctx context.Context, t *testing.T, dataDir, name string) *privateDB {
	t.Helper()
	return newPrivateDBWith(ctx, t, embeddedpg.Config{DataDir: dataDir, Ephemeral: true}, name)
}

// newPrivateDBWith is newPrivateDB with the cluster's configuration given.
func newPrivateDBWith(ctx context.Context, t *testing.T, cfg embeddedpg.Config, name string) *privateDB {
	t.Helper()
	if _, err := embeddedpg.FindBinaries(""); err != nil {
		t.Fatalf("this test needs the local PostgreSQL server binaries: %v", err)
	}
	p := &privateDB{cfg: cfg}
	var err error
	if p.cluster, err = embeddedpg.Start(ctx, p.cfg); err != nil {
		t.Fatal(err)
	}
	p.cfg.Port = p.cluster.Port() // a restarted server must answer on the same DSN
	t.Cleanup(func() { _ = p.cluster.Stop(context.Background()) })
	if err := p.cluster.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	p.dsn = p.cluster.DatabaseDSN(name)
	pcfg, err := pgxpool.ParseConfig(p.dsn)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	if p.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.pool.Close)
	return p
}

// stop shuts the server down.
func (p *privateDB) stop(ctx context.Context) error { return p.cluster.Stop(ctx) }

// start starts the server again on the same address.
func (p *privateDB) start(ctx context.Context) error {
	c, err := embeddedpg.Start(ctx, p.cfg)
	if err != nil {
		return err
	}
	p.cluster = c
	return nil
}

// buildGCOS builds the gcos binary into dir and returns its path.
func buildGCOS(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "gcos")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "gcos/cmd/gcos").CombinedOutput(); err != nil {
		t.Fatalf("build gcos: %v\n%s", err, out)
	}
	return bin
}

// seedWorld creates the substrate and GCOS's schema on p, generates a world of births, backfills it and activates
// the ruleset, and returns a store over p's pool with conf.
func (p *privateDB) seedWorld(ctx context.Context, t *testing.T, conf gcos.Config, births int, seed uint64) *postgres.Store {
	t.Helper()
	return gcostest.Seed(ctx, t, p.pool, gcostest.Options{Births: births, Seed: seed, Config: func(c *gcos.Config) { *c = conf }}).Store
}

// writeConfig writes conf as a configuration file in dir and returns its path.
func writeConfig(t *testing.T, dir string, conf gcos.Config) string {
	t.Helper()
	path := filepath.Join(dir, "gcos.json")
	doc, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// daemonTestConfig is the default configuration with the cadences an end-to-end test waits on shortened: the tail
// polls every 20 ms, event scans coalesce for 20 ms, incremental scans run every second and full audits every two
// (each proving a sample of 50), and a storm never defers a scan.
func daemonTestConfig() gcos.Config {
	conf := gcos.DefaultConfig()
	conf.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
	conf.Intake.HorizonGuard = gcos.Duration(10 * time.Millisecond)
	conf.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
	conf.Scan.IncrementalInterval = gcos.Duration(time.Second)
	conf.Scan.FullAuditInterval = gcos.Duration(2 * time.Second)
	conf.Scan.StormFraction = 1
	conf.Scan.VerifySample = 50
	return conf
}
