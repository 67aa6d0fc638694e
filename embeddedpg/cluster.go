package embeddedpg

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	superuser           = "postgres"
	defaultStartTimeout = 2 * time.Minute
	defaultStopTimeout  = time.Minute
	maxPortAttempts     = 5
	maxSocketPath       = 107 // sun_path is 108 bytes including the terminating NUL
	socketFileLen       = len("/.s.PGSQL.65535")
	logRotateSize       = 16 << 20
)

// defaultSettings are the server settings every cluster gets (as -c options); Config.Settings overrides them.
// They favour speed on a private cluster without risking corruption: fsync stays on.
var defaultSettings = map[string]string{
	"synchronous_commit":   "off",
	"shared_buffers":       "256MB",
	"max_connections":      "100",
	"work_mem":             "64MB",
	"maintenance_work_mem": "256MB",
	"max_wal_size":         "2GB",
	"checkpoint_timeout":   "15min",
}

// ephemeralSettings are added when Config.Ephemeral is set: a crash may corrupt such a cluster.
var ephemeralSettings = map[string]string{
	"fsync":              "off",
	"full_page_writes":   "off",
	"synchronous_commit": "off",
}

// managedSettings are set by Start and may not appear in Config.Settings.
var managedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

var settingNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Config configures Start.
type Config struct {
	// DataDir holds the cluster and its bookkeeping (required); it is created if missing.
	DataDir string
	// Logger receives lifecycle messages; nil discards them.
	Logger *slog.Logger
	// Port is the TCP port on 127.0.0.1; 0 picks a free one (and retries if it is taken meanwhile).
	Port int
	// BinDir, when set, is the only place the server binaries are looked for.
	BinDir string
	// NoSearch disables the PATH and /usr/lib/postgresql search when BinDir is empty (mostly for tests).
	NoSearch bool
	// Settings are extra server settings (name → value, as for postgres -c), applied after the defaults listed in
	// the package documentation and those of Ephemeral.
	Settings map[string]string
	// Ephemeral turns off fsync and full_page_writes (and syncing after initdb): for throwaway clusters only.
	Ephemeral bool
	// RemoveOnStop makes Stop delete the cluster and the files Start created in DataDir (and DataDir if then empty).
	RemoveOnStop bool
	// StartTimeout bounds Start when ctx has no deadline; 0 means 2 minutes.
	StartTimeout time.Duration

	pickPort func() (int, error) // test hook; nil means FreePort
}

// Cluster is a running private PostgreSQL server. Its methods are safe for concurrent use.
type Cluster struct {
	cfg       Config
	log       *slog.Logger
	dataDir   string // absolute, symlinks resolved
	pgDir     string
	logPath   string
	binDir    string
	major     string
	runAs     *account // nil: run as ourselves
	socketDir string
	tmpSocket bool // socketDir is a private temp dir, removed by Stop
	password  string
	port      int
	lock      *os.File

	mu      sync.Mutex
	stopped bool
	stopErr error
}

// Start brings up the cluster in <cfg.DataDir>/pg, creating it on first use, and returns once it accepts
// connections. It fails with ErrDataDirInUse if another process holds the data dir and with ErrNoBinaries if no
// PostgreSQL installation is found. If ctx has no deadline, cfg.StartTimeout applies.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embeddedpg: Config.DataDir is required")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("embeddedpg: invalid port %d", cfg.Port)
	}
	for name := range cfg.Settings {
		if !settingNameRE.MatchString(name) {
			return nil, fmt.Errorf("embeddedpg: invalid setting name %q", name)
		}
		if slices.Contains(managedSettings, strings.ToLower(name)) {
			return nil, fmt.Errorf("embeddedpg: setting %q is managed by embeddedpg; use Config.Port", name)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := cfg.StartTimeout
		if timeout <= 0 {
			timeout = defaultStartTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, log: log.With("subsystem", "embeddedpg")}
	if err := c.start(ctx); err != nil {
		c.abort()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	abs, err := filepath.Abs(c.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", c.cfg.DataDir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if c.dataDir, err = filepath.EvalSymlinks(abs); err != nil {
		return fmt.Errorf("data dir %s: %w", c.cfg.DataDir, err)
	}
	if c.lock, err = lockDataDir(filepath.Join(c.dataDir, "gcos.lock"), c.cfg.DataDir); err != nil {
		return err
	}
	c.pgDir = filepath.Join(c.dataDir, "pg")
	c.logPath = filepath.Join(c.dataDir, "pg.log")

	existing, err := os.ReadFile(filepath.Join(c.pgDir, "PG_VERSION"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read cluster version: %w", err)
	}
	wantMajor := strings.TrimSpace(string(existing))
	if c.binDir, c.major, err = findBinaries(c.cfg.BinDir, !c.cfg.NoSearch, wantMajor); err != nil {
		return err
	}
	if c.runAs, err = chooseAccount(c.pgDir); err != nil {
		return err
	}
	if c.runAs != nil {
		if err := ensureSearchable(c.dataDir, c.runAs, c.log); err != nil {
			return err
		}
	}
	if err := c.prepareSocketDir(); err != nil {
		return err
	}
	if c.password, err = c.loadPassword(); err != nil {
		return err
	}
	if wantMajor == "" {
		if err := c.initdb(ctx); err != nil {
			return err
		}
	} else if err := c.stopLeftover(ctx); err != nil {
		return err
	}
	if err := c.prepareLog(); err != nil {
		return err
	}
	if err := c.startServer(ctx); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dataDir, "port"), []byte(strconv.Itoa(c.port)+"\n"), 0o644); err != nil {
		return fmt.Errorf("record port: %w", err)
	}
	c.log.Info("embedded PostgreSQL ready", "data_dir", c.dataDir, "port", c.port, "version", c.major,
		"bin_dir", c.binDir, "log", c.logPath, "ephemeral", c.cfg.Ephemeral)
	return nil
}

// prepareSocketDir uses <DataDir>/run, or a private dir under the temp dir when that path is too long.
func (c *Cluster) prepareSocketDir() error {
	dir := filepath.Join(c.dataDir, "run")
	if len(dir)+socketFileLen > maxSocketPath {
		base := os.TempDir()
		if len(base)+len("/gcos-pg-1234567890")+socketFileLen > maxSocketPath {
			base = "/tmp"
		}
		tmp, err := os.MkdirTemp(base, "gcos-pg-")
		if err != nil {
			return fmt.Errorf("create socket dir: %w", err)
		}
		dir, c.tmpSocket = tmp, true
	} else if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create socket dir: %w", err)
	}
	c.socketDir = dir
	if c.tmpSocket && c.runAs != nil {
		if err := ensureSearchable(filepath.Dir(dir), c.runAs, c.log); err != nil {
			return err
		}
	}
	return chown(dir, c.runAs)
}

// loadPassword reads pg.pass, creating it with a fresh random password if missing.
func (c *Cluster) loadPassword() (string, error) {
	path := filepath.Join(c.dataDir, "pg.pass")
	b, err := os.ReadFile(path)
	if err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read password file: %w", err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generate password: %w", err)
	}
	pw := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write password file: %w", err)
	}
	return pw, nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	entries, err := os.ReadDir(c.pgDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(c.pgDir, 0o700); err != nil {
			return fmt.Errorf("create cluster dir: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read cluster dir: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("%s is not empty but holds no PostgreSQL cluster (no PG_VERSION); "+
			"remove it to let gcos create a new cluster, or use another --data-dir", c.pgDir)
	}
	if err := chown(c.pgDir, c.runAs); err != nil {
		return err
	}
	pwFile := filepath.Join(c.socketDir, "initdb.pw")
	if err := os.WriteFile(pwFile, []byte(c.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("write initdb password file: %w", err)
	}
	defer os.Remove(pwFile)
	if err := chown(pwFile, c.runAs); err != nil {
		return err
	}
	args := []string{"-D", c.pgDir, "-U", superuser, "-E", "UTF8", "--locale=C",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=" + pwFile}
	if c.cfg.Ephemeral {
		args = append(args, "--no-sync")
	}
	user := "current user"
	if c.runAs != nil {
		user = c.runAs.name
	}
	c.log.Info("creating PostgreSQL cluster", "dir", c.pgDir, "version", c.major, "run_as", user)
	began := time.Now()
	out, err := c.command(ctx, "initdb", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", c.pgDir, err, tail(out, 20))
	}
	c.log.Debug("initdb done", "elapsed", time.Since(began))
	return nil
}

// stopLeftover deals with a postmaster.pid left by a previous owner that died without stopping its server.
//   - The postmaster still runs (its working directory is this cluster): stop it with a fast shutdown; Start then
//     starts it again with the current port and settings.
//   - The pid is dead: PostgreSQL discards the stale file itself.
//   - The pid is a zombie or was reused by an unrelated process, which would make PostgreSQL refuse to start:
//     once no process runs in the cluster any more (orphaned children of a killed postmaster exit on their
//     own within moments), the stale file is removed.
func (c *Cluster) stopLeftover(ctx context.Context) error {
	pid, err := postmasterPID(c.pgDir)
	if err != nil || pid == 0 {
		return err
	}
	if !hasProc() {
		if processAlive(pid) {
			c.log.Warn("stopping a PostgreSQL server left running by a previous gcos process", "pid", pid)
			return c.pgCtlStop(ctx, "fast")
		}
		return nil
	}
	if processAlive(pid) && ownsCluster(pid, c.pgDir) {
		c.log.Warn("stopping a PostgreSQL server left running by a previous gcos process", "pid", pid)
		err := c.pgCtlStop(ctx, "fast")
		if err == nil || (processAlive(pid) && ownsCluster(pid, c.pgDir)) {
			return err
		}
		// It died meanwhile without removing its pid file (it was being killed as we looked): a stale file, below.
		c.log.Warn("the leftover server exited while being stopped; treating its pid file as stale", "pid", pid, "err", err)
	}
	if err := c.waitNoClusterProcesses(ctx); err != nil {
		return err
	}
	if pidExists(pid) {
		c.log.Warn("removing stale postmaster.pid: its pid is a zombie or now belongs to another process", "pid", pid)
		if err := os.Remove(filepath.Join(c.pgDir, "postmaster.pid")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale postmaster.pid: %w", err)
		}
	}
	return nil
}

// waitNoClusterProcesses waits (up to 10 s) until no process runs in the cluster directory.
func (c *Cluster) waitNoClusterProcesses(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := clusterProcesses(c.pgDir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("processes %v still run in %s although its postmaster is gone: "+
				"stop them (they are leftovers of a killed PostgreSQL server) and start again", pids, c.pgDir)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// prepareLog rotates an oversized log and makes sure the server user can append to it.
func (c *Cluster) prepareLog() error {
	if fi, err := os.Stat(c.logPath); err == nil && fi.Size() > logRotateSize {
		if err := os.Rename(c.logPath, c.logPath+".1"); err != nil {
			return fmt.Errorf("rotate server log: %w", err)
		}
	}
	f, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("create server log: %w", err)
	}
	f.Close()
	return chown(c.logPath, c.runAs)
}

// startServer runs pg_ctl start, retrying on another port if a port it picked was taken meanwhile.
func (c *Cluster) startServer(ctx context.Context) error {
	pick := c.cfg.pickPort
	if pick == nil {
		pick = FreePort
	}
	previous := c.recordedPort()
	for attempt := 1; ; attempt++ {
		c.port = c.cfg.Port
		if c.port == 0 && attempt == 1 && previous > 0 && portFree(previous) {
			// The port of the last run, while it is free: URLs a user copied from the last run keep working.
			c.port = previous
		} else if c.port == 0 {
			p, err := pick()
			if err != nil {
				return fmt.Errorf("pick a free port: %w", err)
			}
			c.port = p
		}
		offset := fileSize(c.logPath)
		out, err := c.command(ctx, "pg_ctl", "start", "-D", c.pgDir, "-l", c.logPath, "-w", "-s",
			"-t", strconv.Itoa(secondsLeft(ctx)), "-o", c.serverOptions()).CombinedOutput()
		if err == nil {
			return nil
		}
		logTail := readTail(c.logPath, offset, 30)
		// A postmaster that began but did not become ready within -t is still running: stop it.
		if pid, _ := postmasterPID(c.pgDir); pid != 0 && processAlive(pid) {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = c.pgCtlStop(stopCtx, "immediate")
			cancel()
		}
		// A socket lock file left by a postmaster killed with SIGKILL (its pid a zombie, or reused) blocks the port
		// of the last run the same way: another port is picked.
		inUse := strings.Contains(logTail, "Address already in use") || (c.port == previous && strings.Contains(logTail, "lock file"))
		if inUse && c.cfg.Port == 0 && attempt < maxPortAttempts && ctx.Err() == nil {
			c.log.Debug("port taken before the server could bind it; trying another", "port", c.port)
			continue
		}
		msg := fmt.Sprintf("start PostgreSQL on 127.0.0.1:%d", c.port)
		if inUse && c.cfg.Port != 0 {
			msg += " (port in use; pick another or leave the port unset)"
		}
		return fmt.Errorf("%s: %w\n%s\nserver log %s:\n%s", msg, err, tail(out, 10), c.logPath, logTail)
	}
}

// serverOptions renders the -c options for pg_ctl -o, which hands them to /bin/sh: each word is quoted.
func (c *Cluster) serverOptions() string {
	settings := maps.Clone(defaultSettings)
	if c.cfg.Ephemeral {
		maps.Copy(settings, ephemeralSettings)
	}
	maps.Copy(settings, c.cfg.Settings)
	settings["listen_addresses"] = "127.0.0.1"
	settings["port"] = strconv.Itoa(c.port)
	settings["unix_socket_directories"] = socketDirList(c.socketDir)
	var words []string
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		words = append(words, "-c", shellQuote(name+"="+settings[name]))
	}
	return strings.Join(words, " ")
}

// socketDirList quotes a directory for the comma-separated unix_socket_directories list when needed.
func socketDirList(dir string) string {
	if !strings.ContainsAny(dir, `, "`) {
		return dir
	}
	return `"` + strings.ReplaceAll(dir, `"`, `""`) + `"`
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// waitReady connects with pgx until the server answers or ctx ends. If the TCP password is refused (pg.pass was
// lost or replaced) it sets it again over the trusted unix socket.
func (c *Cluster) waitReady(ctx context.Context) error {
	backoff := 10 * time.Millisecond
	passwordReset := false
	for {
		err := ping(ctx, c.DSN())
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "28P01" && !passwordReset {
			passwordReset = true
			if err := c.resetPassword(ctx); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("PostgreSQL on port %d did not accept connections in time: %w\nserver log %s:\n%s",
				c.port, err, c.logPath, readTail(c.logPath, 0, 20))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func (c *Cluster) resetPassword(ctx context.Context) error {
	c.log.Info("setting the superuser password from pg.pass")
	q := url.Values{"host": {c.socketDir}, "port": {strconv.Itoa(c.port)}, "user": {superuser}, "sslmode": {"disable"}}
	conn, err := pgx.Connect(ctx, "postgres:///postgres?"+q.Encode())
	if err != nil {
		return fmt.Errorf("connect over unix socket to set password: %w", err)
	}
	defer conn.Close(ctx)
	// The password is hex, so it needs no escaping beyond the quotes; ALTER ROLE takes no parameters.
	if _, err := conn.Exec(ctx, "ALTER ROLE "+superuser+" PASSWORD '"+c.password+"'"); err != nil {
		return fmt.Errorf("set superuser password: %w", err)
	}
	return nil
}

// DSN is a postgres:// URL for the superuser on database postgres, usable by pgx. It contains the password.
func (c *Cluster) DSN() string { return c.DatabaseDSN("postgres") }

// DatabaseDSN is like DSN for another database of the cluster.
func (c *Cluster) DatabaseDSN(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, c.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port is the TCP port the server listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// ServerPIDs are the live processes of the running server (the postmaster and its children; Linux only, nil
// elsewhere), for tests that pause it.
func (c *Cluster) ServerPIDs() []int { return clusterProcesses(c.pgDir) }

// LogPath is the server log file.
func (c *Cluster) LogPath() string { return c.logPath }

// Version is the server's major version ("15").
func (c *Cluster) Version() string { return c.major }

// CreateDatabase creates database name. It fails if it already exists (SQLSTATE 42P04).
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return fmt.Errorf("create database %s: connect: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown: sessions are ended, a checkpoint is written) and waits for it,
// then releases the data dir. It is safe to call more than once and on a nil Cluster; later calls return the
// first call's result. If ctx has no deadline or is already done, a one-minute limit applies instead.
func (c *Cluster) Stop(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	if _, ok := ctx.Deadline(); !ok || ctx.Err() != nil {
		// A caller shutting down on a signal often hands over an already cancelled context: stop anyway.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), defaultStopTimeout)
		defer cancel()
	}
	err := c.stopServer(ctx)
	if err == nil {
		c.log.Info("embedded PostgreSQL stopped", "data_dir", c.dataDir)
	}
	c.stopErr = errors.Join(err, c.release())
	return c.stopErr
}

func (c *Cluster) stopServer(ctx context.Context) error {
	pid, err := postmasterPID(c.pgDir)
	if err != nil {
		return err
	}
	if pid == 0 || !processAlive(pid) {
		return nil
	}
	if err := c.pgCtlStop(ctx, "fast"); err != nil {
		c.log.Warn("fast shutdown failed; trying immediate shutdown (crash recovery will run at next start)", "err", err)
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err2 := c.pgCtlStop(stopCtx, "immediate"); err2 != nil {
			return errors.Join(err, err2)
		}
	}
	return nil
}

func (c *Cluster) pgCtlStop(ctx context.Context, mode string) error {
	out, err := c.command(ctx, "pg_ctl", "stop", "-D", c.pgDir, "-m", mode, "-w", "-s",
		"-t", strconv.Itoa(secondsLeft(ctx))).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %w\n%s", mode, err, tail(out, 10))
	}
	return nil
}

// abort undoes a failed Start: the server is stopped if it got going, and the data dir is released.
func (c *Cluster) abort() {
	if c.lock == nil {
		return // nothing of ours to undo (the lock is taken before anything else is touched)
	}
	c.stopped = true
	if c.pgDir != "" && c.binDir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.stopServer(ctx); err != nil {
			c.log.Warn("stopping PostgreSQL after a failed start", "err", err)
		}
	}
	if err := c.release(); err != nil {
		c.log.Warn("cleaning up after a failed start", "err", err)
	}
}

// release removes the temporary socket dir, applies RemoveOnStop and drops the lock (last).
func (c *Cluster) release() error {
	var errs []error
	if c.tmpSocket && c.socketDir != "" {
		errs = append(errs, os.RemoveAll(c.socketDir))
	}
	if c.cfg.RemoveOnStop && c.dataDir != "" {
		for _, name := range []string{"pg", "run", "pg.log", "pg.log.1", "pg.pass", "port", "gcos.lock"} {
			errs = append(errs, os.RemoveAll(filepath.Join(c.dataDir, name)))
		}
		_ = os.Remove(c.dataDir) // only if nothing else lives there
	}
	if c.lock != nil {
		errs = append(errs, unlockDataDir(c.lock))
		c.lock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release data dir: %w", err)
	}
	return nil
}

// command prepares a PostgreSQL program run as the server account, in the data dir, without PG* variables
// from our environment (PGDATA, PGPORT… would override what we pass).
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dataDir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_") && !strings.HasPrefix(kv, "LANG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	if c.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.runAs.credential()}
	}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// recordedPort is the port the last run recorded in <DataDir>/port, 0 if none.
func (c *Cluster) recordedPort() int {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "port"))
	if err != nil {
		return 0
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || p <= 0 || p > 65535 {
		return 0
	}
	return p
}

// portFree reports whether port can be bound on 127.0.0.1 now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// RunningDSN is the superuser URL of the cluster another process runs in dataDir (the one ErrDataDirInUse names),
// read from the port and password files that process keeps there, for a command that runs beside it. It contains
// the password. It fails if those files are missing: the holder has not finished starting the server.
func RunningDSN(dataDir string) (string, error) {
	c := &Cluster{dataDir: dataDir}
	port := c.recordedPort()
	pw, err := os.ReadFile(filepath.Join(dataDir, "pg.pass"))
	if err != nil || port == 0 {
		return "", fmt.Errorf("the cluster in %s is not ready yet (no port or password recorded)", dataDir)
	}
	c.port, c.password = port, strings.TrimSpace(string(pw))
	return c.DSN(), nil
}

// FreePort asks the kernel for a free port on 127.0.0.1 and releases it for a server to take.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func secondsLeft(ctx context.Context) int {
	if d, ok := ctx.Deadline(); ok {
		return max(1, int(time.Until(d).Seconds()))
	}
	return int(defaultStartTimeout.Seconds())
}

func fileSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// readTail returns the last n lines written to path after offset.
func readTail(path string, offset int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no server log: " + err.Error() + ")"
	}
	defer f.Close()
	const maxRead = 64 << 10
	if size := fileSize(path); size-offset > maxRead {
		offset = size - maxRead
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "(server log: " + err.Error() + ")"
	}
	b, _ := io.ReadAll(f)
	return tail(b, n)
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
