package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/oracle"
)

// TestPgBouncer_TransactionPooling runs `gcos up` through Debian's PgBouncer in transaction pooling mode, first
// without a session URL (event scans poll, and the daemon says so at start) and then with one (LISTEN goes to the
// server directly). Through the pooler the intake tails births, the event, incremental and full-audit scans succeed,
// the gate answers, no statement meets a prepared statement the pooler lost, and the incremental state equals a
// from-scratch evaluation of the same substrate.
func TestPgBouncer_TransactionPooling(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, PgBouncer and the daemon")
	}
	bouncer := findPgBouncer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildGCOS(ctx, t, dir)
	db := newPrivateDB(ctx, t, filepath.Join(dir, "pg"), "gcos_pooled")

	conf := daemonTestConfig()
	conf.Database.Pooling = gcos.PoolingTransaction
	confPath := writeConfig(t, dir, conf)
	store := db.seedWorld(ctx, t, conf, 3000, 29)
	var collection, entityType, code string
	if err := db.pool.QueryRow(ctx, `SELECT collection_name, entity_type, entity_code FROM birth_registry
		WHERE parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&collection, &entityType, &code); err != nil {
		t.Fatal(err)
	}

	// Each phase has a PgBouncer of its own: PgBouncer 1.18 may exit when a client's cancel request races its
	// disconnect (pgbouncer/pgbouncer#801), which a stopping process can cause; the test says so if it happens.
	phase := func(t *testing.T, name string, args []string, sessionWork string) {
		pooledDSN, bouncerAlive := startPgBouncer(ctx, t, bouncer, db, "gcos_pooled")
		// The source's writers reach the database through the pooler too (exec mode: no statement cache).
		pcfg, err := pgxpool.ParseConfig(pooledDSN + "&default_query_exec_mode=exec")
		if err != nil {
			t.Fatal(err)
		}
		writers, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer writers.Close()
		born := func(code string) int64 {
			t.Helper()
			var id int64
			if err := writers.QueryRow(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
				VALUES ($1, $2, $3, 'active', 'birth-api', 'pooled') RETURNING id`, code, collection, entityType).Scan(&id); err != nil {
				t.Fatal(err)
			}
			return id
		}
		d := &daemons{t: t, bin: bin, dsn: pooledDSN, config: confPath, dir: dir, args: args}
		defer d.killAll()
		started := time.Now()
		log := d.spawn()
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(log)
				t.Logf("%s (last lines):\n%s", filepath.Base(log), tailLines(string(b), 30))
			}
		})
		d.waitUp(log)
		var last int64
		for i := range 20 {
			last = born(fmt.Sprintf("%s-%d", name, i))
			if i%4 == 0 {
				if _, err := writers.Exec(ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
					VALUES ($1, $2, 'update', 'registry-sync')`, entityType, code); err != nil {
					t.Fatal(err)
				}
			}
		}
		settle(t, ctx, db.pool, started)
		// Session work goes to the session URL, straight to the server, or nowhere.
		listeners := count(t, ctx, db.pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'gcos-session' AND query LIKE 'LISTEN%'`)
		if want := int64(len(args) / 2); listeners != want {
			t.Errorf("%s: %d sessions of the daemon LISTEN on the server directly, want %d", name, listeners, want)
		}
		if n := count(t, ctx, db.pool, `SELECT count(*) FROM gov_worker_cursor WHERE source = 'birth_registry' AND position_id >= $1`, last); n != 1 {
			t.Fatalf("%s: the intake did not tail birth %d", name, last)
		}
		if n := count(t, ctx, db.pool, `SELECT count(*) FROM candidate_scan_run WHERE mode = 'event' AND status = 'succeeded'
			AND groups_scanned > 0 AND started_at > $1`, started); n == 0 {
			t.Errorf("%s: no event scan scanned a group through the pooler", name)
		}
		// The gate through the daemon (the CLI in its directory reaches it: its view, caught up through the pooler),
		// and the CLI's own read through the pooler (from a directory where no daemon runs).
		askGate := func(via, cwd string) {
			t.Helper()
			gate := exec.CommandContext(ctx, bin, "gate", "--database-url", pooledDSN, "--config", confPath,
				"--object", collection+":"+name+"-0", "--json")
			gate.Dir = cwd
			out, err := gate.Output()
			var answer gcos.GateAnswer
			if jerr := json.Unmarshal(out, &answer); jerr != nil || answer.Decision == "" || answer.Token == "" {
				t.Errorf("%s: gate %s through the pooler: %v %v\n%s", name, via, err, jerr, out)
			}
		}
		askGate("by the daemon", dir)
		askGate("by the CLI", t.TempDir())
		d.stopAll()
		if !bouncerAlive() {
			t.Logf("%s: PgBouncer exited as the daemon stopped (its log follows if it named a FATAL: pgbouncer/pgbouncer#801)", name)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !strings.Contains(text, `session_work="`+sessionWork) {
			t.Errorf("%s: the start does not say where session work goes (want %q):\n%s", name, sessionWork, head(text, 30))
		}
		for _, bad := range []string{"SQLSTATE 26000", "SQLSTATE 42P05", "prepared statement"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s: the daemon met %q through the pooler:\n%s", name, bad, grepLines(text, bad))
			}
		}
	}
	t.Run("without a session URL", func(t *testing.T) {
		phase(t, "nosession", nil, "none: database.pooling is transaction and no session URL")
	})
	t.Run("with a session URL", func(t *testing.T) {
		phase(t, "session", []string{"--session-database-url", db.dsn}, "the session URL")
	})

	rep, err := oracle.Verify(ctx, store, oracle.VerifyOptions{Sample: 300, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, mm := range rep.Mismatches {
		if i == 20 {
			break
		}
		t.Errorf("incremental state differs from the reference: %s", mm)
	}
}

// findPgBouncer returns Debian's pgbouncer binary. Outside CI a machine without it skips the test; CI installs it
// (.ci/run), so there it is a failure.
func findPgBouncer(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"pgbouncer", "/usr/sbin/pgbouncer"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("pgbouncer is not installed (.ci/run installs Debian's pgbouncer)")
	}
	t.Skip("pgbouncer is not installed: apt-get install pgbouncer")
	return ""
}

// startPgBouncer starts PgBouncer in transaction pooling mode in front of database on db's server and returns a
// URL through it. PgBouncer refuses to run as root, so as root it runs as user postgres (or nobody).
func startPgBouncer(ctx context.Context, t *testing.T, bin string, db *privateDB, database string) (string, func() bool) {
	t.Helper()
	u, err := url.Parse(db.dsn)
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	dir, err := os.MkdirTemp("", "gcos-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		acct, err := user.Lookup("postgres")
		if err != nil {
			acct, err = user.Lookup("nobody")
		}
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(acct.Uid)
		gid, _ := strconv.Atoi(acct.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	ini := fmt.Sprintf(`[databases]
%s = host=127.0.0.1 port=%s dbname=%s user=%s password=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
`, database, u.Port(), database, u.User.Username(), password, port, filepath.Join(dir, "users.txt"))
	for name, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", u.User.Username())} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "pgbouncer.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	alive := func() bool {
		select {
		case <-exited:
			return false
		default:
			return true
		}
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logf.Close()
		if b, _ := os.ReadFile(logf.Name()); t.Failed() || strings.Contains(string(b), "FATAL") {
			t.Logf("pgbouncer log (last lines):\n%s", tailLines(string(b), 20))
		}
	})
	pooled := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", u.User.Username(), port, database)
	if !wait.UntilCtx(ctx, 30*time.Second, func() bool {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			_ = c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("pgbouncer did not listen on %d within 30 s: %v", port, err)
	}
	return pooled, alive
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func head(text string, n int) string {
	lines := strings.Split(text, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func tailLines(text string, n int) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func grepLines(text, s string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, s) && len(out) < 10 {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
