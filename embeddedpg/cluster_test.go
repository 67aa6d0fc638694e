package embeddedpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// requireBinaries skips when this machine has no PostgreSQL server installed.
func requireBinaries(t *testing.T) {
	t.Helper()
	if _, err := FindBinaries(""); err != nil {
		t.Skipf("needs PostgreSQL server binaries: %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testConfig(t *testing.T, dataDir string) Config {
	return Config{
		DataDir: dataDir,
		Logger:  slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Keep parallel test clusters small.
		Settings: map[string]string{"shared_buffers": "16MB", "max_connections": "20"},
	}
}

// start starts a cluster and stops it when the test ends.
func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stop(t, c) })
	return c
}

func stop(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func execSQL(t *testing.T, c *Cluster, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryString(t *testing.T, c *Cluster, sql string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// simulateCrash makes c look like the cluster of a gcos process killed with -9: the lock is gone, the server runs.
func simulateCrash(c *Cluster) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	c.lock.Close()
	c.lock = nil
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	dir := filepath.Join(t.TempDir(), ".gcos")
	cfg := testConfig(t, dir)

	c := start(t, cfg)
	execSQL(t, c, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')")
	if got := queryString(t, c, "SHOW fsync"); got != "on" {
		t.Errorf("fsync = %s, want on for the default cluster", got)
	}
	if got := queryString(t, c, "SHOW synchronous_commit"); got != "off" {
		t.Errorf("synchronous_commit = %s, want off", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "port"))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(c.Port()) {
		t.Errorf("port file = %q, %v; want %d", b, err, c.Port())
	}
	stop(t, c)
	if err := c.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if pid, _ := postmasterPID(c.pgDir); pid != 0 {
		t.Errorf("postmaster.pid still names pid %d after Stop", pid)
	}

	// Losing pg.pass must not lock us out: Start sets a new password over the unix socket.
	if err := os.Remove(filepath.Join(dir, "pg.pass")); err != nil {
		t.Fatal(err)
	}
	c2 := start(t, cfg)
	if got := queryString(t, c2, "SELECT v FROM kept"); got != "still here" {
		t.Errorf("after restart got %q", got)
	}
	if c2.Port() != c.Port() {
		t.Errorf("restart moved the port %d → %d although it was free", c.Port(), c2.Port())
	}
	if err := c2.CreateDatabase(context.Background(), "other db"); err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	if got := queryString(t, &Cluster{port: c2.port, password: c2.password}, "SELECT 'ok'"); got != "ok" {
		t.Errorf("DSN rebuilt from port and password: %q", got)
	}
	conn := connect(t, c2.DatabaseDSN("other db"))
	if err := conn.Ping(context.Background()); err != nil {
		t.Errorf("ping other db: %v", err)
	}
}

func TestSecondStartOnSameDirIsRefused(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	dir := filepath.Join(t.TempDir(), ".gcos")
	c := start(t, testConfig(t, dir))

	c2, err := Start(context.Background(), testConfig(t, dir))
	if err == nil {
		stop(t, c2)
		t.Fatal("second Start on a data dir in use succeeded")
	}
	if !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("err = %v, want ErrDataDirInUse", err)
	}
	want := fmt.Sprintf("data dir %s is in use by another gcos process (pid %d); stop it or use --data-dir", dir, os.Getpid())
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err, want)
	}
	if err := c2.Stop(context.Background()); err != nil { // nil Cluster after a failed Start
		t.Errorf("Stop after failed Start: %v", err)
	}
	// The refused attempt must not have disturbed the running cluster.
	if got := queryString(t, c, "SELECT 'alive'"); got != "alive" {
		t.Errorf("first cluster: %q", got)
	}
	// A command run beside the holder reaches the same server.
	dsn, err := RunningDSN(c.dataDir)
	if err != nil {
		t.Fatalf("RunningDSN: %v", err)
	}
	if dsn != c.DSN() {
		t.Errorf("RunningDSN = %q, want the holder's DSN", dsn)
	}
	if _, err := RunningDSN(t.TempDir()); err == nil {
		t.Error("RunningDSN of an empty dir succeeded")
	}
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	// Something is listening on 5432 (the system server, or us).
	if l, err := net.Listen("tcp", "127.0.0.1:5432"); err == nil {
		t.Cleanup(func() { l.Close() })
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	busyPort := busy.Addr().(*net.TCPAddr).Port
	dir := filepath.Join(t.TempDir(), ".gcos")

	// An explicit port that is taken is an error naming the problem, and leaves nothing running.
	cfg := testConfig(t, dir)
	cfg.Port = busyPort
	c, err := Start(context.Background(), cfg)
	if err == nil {
		stop(t, c)
		t.Fatal("Start on a busy explicit port succeeded")
	}
	if !strings.Contains(err.Error(), "port in use") || !strings.Contains(err.Error(), "Address already in use") {
		t.Errorf("err = %v; want it to say the port is in use and show the server log", err)
	}

	// A picked port that gets taken before the server binds it is retried.
	cfg = testConfig(t, dir)
	picks := 0
	cfg.pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return busyPort, nil
		}
		return FreePort()
	}
	c = start(t, cfg)
	if picks < 2 || c.Port() == busyPort || c.Port() == 5432 {
		t.Errorf("picks = %d, port = %d (busy %d)", picks, c.Port(), busyPort)
	}
	execSQL(t, c, "SELECT 1")
}

func TestMissingBinaries(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	dir := filepath.Join(t.TempDir(), ".gcos")
	for name, cfg := range map[string]Config{
		"override":  {DataDir: dir, BinDir: empty},
		"no search": {DataDir: dir, NoSearch: true},
		"both":      {DataDir: dir, BinDir: empty, NoSearch: true},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Start(context.Background(), cfg)
			if err == nil {
				stop(t, c)
				t.Fatal("Start without binaries succeeded")
			}
			if !errors.Is(err, ErrNoBinaries) {
				t.Errorf("err = %v, want ErrNoBinaries", err)
			}
			for _, want := range []string{"apt-get install postgresql", "--database-url", "GCOS_DATABASE_URL"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %q; want it to mention %q", err, want)
				}
			}
		})
	}
	if _, err := FindBinaries(empty); !errors.Is(err, ErrNoBinaries) {
		t.Errorf("FindBinaries(empty dir) = %v, want ErrNoBinaries", err)
	}
	// The lock was released: the data dir is usable again.
	f, err := lockDataDir(filepath.Join(dir, "gcos.lock"), dir)
	if err != nil {
		t.Fatalf("lock after failed Start: %v", err)
	}
	f.Close()
}

func TestLeftoverPostmasterIsStopped(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	dir := filepath.Join(t.TempDir(), ".gcos")
	cfg := testConfig(t, dir)
	old := start(t, cfg)
	execSQL(t, old, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
	oldPID, _ := postmasterPID(old.pgDir)
	simulateCrash(old)

	c := start(t, cfg)
	if pid, _ := postmasterPID(c.pgDir); pid == oldPID {
		t.Errorf("postmaster %d was adopted, want it stopped and a new one started", pid)
	}
	if processAlive(oldPID) && ownsCluster(oldPID, c.pgDir) {
		t.Errorf("old postmaster %d still running", oldPID)
	}
	if got := queryString(t, c, "SELECT v::text FROM t"); got != "1" {
		t.Errorf("got %q", got)
	}
}

func TestStalePidFileAfterKill9(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	dir := filepath.Join(t.TempDir(), ".gcos")
	cfg := testConfig(t, dir)
	old := start(t, cfg)
	// synchronous_commit is off: a crash may lose the last commits, so make this one durable first. (CHECKPOINT
	// must be a statement of its own: in the same implicit transaction it would run before the commit.)
	execSQL(t, old, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	execSQL(t, old, "CHECKPOINT")
	pid, err := postmasterPID(old.pgDir)
	if err != nil || pid == 0 {
		t.Fatalf("postmaster pid: %d, %v", pid, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	simulateCrash(old)
	if _, err := os.Stat(filepath.Join(old.pgDir, "postmaster.pid")); err != nil {
		t.Fatalf("postmaster.pid should be left behind by kill -9: %v", err)
	}

	c := start(t, cfg)
	if got := queryString(t, c, "SELECT v::text FROM t"); got != "42" {
		t.Errorf("got %q", got)
	}
}

func TestEphemeralLongPathRemoveOnStop(t *testing.T) {
	t.Parallel()
	requireBinaries(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, strings.Repeat("a-rather-long-directory-name/", 4), ".gcos")
	cfg := testConfig(t, dir)
	cfg.Ephemeral = true
	cfg.RemoveOnStop = true
	c := start(t, cfg)
	if !c.tmpSocket || len(c.socketDir)+socketFileLen > maxSocketPath {
		t.Errorf("socket dir %q (temp %v) for a %d-byte data dir", c.socketDir, c.tmpSocket, len(dir))
	}
	for setting, want := range map[string]string{"fsync": "off", "full_page_writes": "off", "shared_buffers": "16MB"} {
		if got := queryString(t, c, "SHOW "+setting); got != want {
			t.Errorf("%s = %s, want %s", setting, got, want)
		}
	}
	// A caller stopping on a signal may pass a context that is already cancelled: Stop still stops.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Stop(cancelled); err != nil {
		t.Fatalf("Stop with a cancelled context: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir after Stop with RemoveOnStop: %v", err)
	}
	if _, err := os.Stat(c.socketDir); !os.IsNotExist(err) {
		t.Errorf("temp socket dir after Stop: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, cfg := range map[string]Config{
		"no data dir":     {},
		"managed setting": {DataDir: dir, Settings: map[string]string{"port": "1"}},
		"bad name":        {DataDir: dir, Settings: map[string]string{"a b": "1"}},
		"bad port":        {DataDir: dir, Port: 70000},
	} {
		if c, err := Start(context.Background(), cfg); err == nil {
			stop(t, c)
			t.Errorf("%s: Start succeeded", name)
		}
	}
	var nilCluster *Cluster
	if err := nilCluster.Stop(context.Background()); err != nil {
		t.Errorf("Stop on nil: %v", err)
	}
}

func TestServerOptionsQuoting(t *testing.T) {
	t.Parallel()
	c := &Cluster{port: 5433, socketDir: "/tmp/with space", cfg: Config{Settings: map[string]string{
		"application_name": "it's",
	}}}
	opts := c.serverOptions()
	for _, want := range []string{
		`-c 'application_name=it'\''s'`,
		`-c 'unix_socket_directories="/tmp/with space"'`,
		`-c 'port=5433'`,
		`-c 'listen_addresses=127.0.0.1'`,
		`-c 'fsync=`, // absent: only ephemeral clusters turn it off
	} {
		has := strings.Contains(opts, want)
		if has != (want != `-c 'fsync=`) {
			t.Errorf("options %s: contains %q = %v", opts, want, has)
		}
	}
}

func TestVersionLess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"9.6", "15", true}, {"15", "9.6", false}, {"15", "16", true}, {"16", "16", false}, {"10", "9.6", false},
	} {
		if got := versionLess(tc.a, tc.b); got != tc.want {
			t.Errorf("versionLess(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}
