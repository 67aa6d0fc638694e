package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/oracle"
	"gcos/postgres"
)

// TestFaults_RolesSurviveKill9 runs three `gcos up` processes (the real binary) on one database under a writer load
// and injects real faults: SIGKILL of the holder of the full-audit role in the middle of an audit, of the holder of
// the silent-gap monitor, of random processes at random moments, SIGSTOP of an audit holder past its lease (then
// SIGCONT), a PostgreSQL restart and a PostgreSQL pause (SIGSTOP/SIGCONT of every server process). Each killed
// process is replaced by a new one. Then: no intake row lost or handed off twice, every role taken over by a
// survivor after each kill, no run left running, and the final state equal to a from-scratch evaluation.
func TestFaults_RolesSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three daemons")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildGCOS(ctx, t, dir)

	db := newPrivateDB(ctx, t, filepath.Join(dir, "pg"), "gcos_faults")
	pool, dsn := db.pool, db.dsn

	ttl := 3 * time.Second
	conf := daemonTestConfig()
	conf.Intake.HeartbeatInterval = gcos.Duration(500 * time.Millisecond)
	conf.Roles.LeaseTTL = gcos.Duration(ttl)
	confPath := writeConfig(t, dir, conf)
	store := db.seedWorld(ctx, t, conf, 3000, 23)

	d := &daemons{t: t, bin: bin, dsn: dsn, config: confPath, dir: dir}
	defer d.killAll()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "gcos-*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("%s (last lines):\n%s", filepath.Base(l), strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
	for range 3 {
		d.start()
	}

	// The writer load: births and registry changes, committed by their own connections.
	writeCtx, stopWriting := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		r := rand.New(rand.NewPCG(5, 5))
		var failures int
		for i := 0; writeCtx.Err() == nil; i++ {
			_, err := pool.Exec(writeCtx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
				SELECT $1, collection_name, entity_type, 'active', 'birth-api', 'faults'
				FROM birth_registry WHERE parent_code IS NULL ORDER BY id OFFSET $2 LIMIT 1`, fmt.Sprint("fault-", i), r.IntN(2500))
			if err == nil && i%5 == 0 {
				_, err = pool.Exec(writeCtx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
					SELECT entity_type, entity_code, 'update', 'registry-sync' FROM birth_registry ORDER BY id OFFSET $1 LIMIT 1`, r.IntN(2500))
			}
			if err != nil && writeCtx.Err() == nil {
				if failures++; failures == 1 {
					t.Logf("writer: %v (the database is down or paused; retrying)", err)
				}
			}
			wait.Pace(writeCtx, 10*time.Millisecond) // the writer's pace
		}
	}()

	m := &matrix{}
	r := rand.New(rand.NewPCG(17, 3))
	var pausedEpoch int64 = -1
	for round := range 7 {
		// The holder of the full-audit role, in the middle of an audit.
		if owner, epoch, ok := d.waitRunningAudit(ctx, pool); ok {
			d.kill(owner, syscall.SIGKILL)
			m.add("SIGKILL audit holder", "full_audit", d.handover(ctx, pool, postgres.RoleFullAudit.Name, epoch))
			d.start()
		}
		// The holder of the silent-gap monitor.
		if owner, epoch, ok := d.holder(ctx, pool, intake.MonitorLease); ok {
			d.kill(owner, syscall.SIGKILL)
			m.add("SIGKILL monitor holder", "monitor", d.handover(ctx, pool, intake.MonitorLease, epoch))
			d.start()
		}
		// A random process at a random moment (mid intake poll, scan tick, promotion, or idle).
		wait.Pace(ctx, time.Duration(r.IntN(400))*time.Millisecond) // a random moment to kill at
		d.killRandom(r)
		m.add("SIGKILL random process", "any", -1)
		d.start()

		switch round {
		case 1: // a backfill killed mid-run (a one-off command): the next backfill abandons its run and completes
			for try := 0; ; try++ {
				cmd := exec.Command(bin, "backfill", "--database-url", dsn, "--config", confPath)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				running := func() bool {
					return count(t, ctx, pool, `SELECT count(*) FROM candidate_scan_run WHERE mode = 'backfill' AND status = 'running'`) > 0
				}
				wait.Until(10*time.Second, running)
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				if running() || try == 20 {
					break // killed in the middle of its run
				}
			}
			d.kills++
			// The killed one's lease refuses a new backfill (naming its holder) until it expires.
			var out []byte
			var err error
			if !wait.Until(60*time.Second, func() bool {
				out, err = exec.Command(bin, "backfill", "--database-url", dsn, "--config", confPath).CombinedOutput()
				if err != nil && !strings.Contains(string(out), "is held by") {
					t.Fatalf("the backfill after a killed one: %v\n%s", err, out)
				}
				return err == nil
			}) {
				t.Fatalf("the backfill after a killed one: %v\n%s", err, out)
			}
			m.add("SIGKILL mid-run, then run again", "backfill", -1)
		case 2: // an audit holder paused past its lease: it must not commit when it wakes up
			if owner, epoch, ok := d.waitRunningAudit(ctx, pool); ok {
				d.kill(owner, syscall.SIGSTOP)
				m.add("SIGSTOP audit holder past its lease", "full_audit", d.handover(ctx, pool, postgres.RoleFullAudit.Name, epoch))
				d.kill(owner, syscall.SIGCONT)
				pausedEpoch = epoch
			}
		case 4: // PostgreSQL restarted under the daemons
			if err := db.stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := db.start(ctx); err != nil {
				t.Fatal(err)
			}
			m.add("PostgreSQL stop + start", "all", -1)
		case 5: // PostgreSQL paused: every server process stopped for two seconds
			pids := db.cluster.ServerPIDs()
			if len(pids) == 0 {
				t.Fatal("no PostgreSQL server process found to pause")
			}
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGSTOP)
			}
			wait.Pass(ctx, 2*time.Second) // the pause lasts
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGCONT)
			}
			m.add("PostgreSQL SIGSTOP/SIGCONT", "all", -1)
		}
	}
	if d.kills < 20 {
		t.Errorf("only %d processes killed; the test asks for at least 20 kill points", d.kills)
	}
	lastFault := time.Now()
	stopWriting()
	writer.Wait()

	// Settle: the intake caught up with every row, the dirty set empty, and an audit completed after the last fault
	// (which takes its role over and abandons what the killed holders left running).
	settle(t, ctx, pool, lastFault)
	d.stopAll()

	if n := count(t, ctx, pool, `SELECT count(*) FROM candidate_scan_run WHERE status = 'running'`); n != 0 {
		t.Errorf("%d runs left running", n)
	}
	abandoned := count(t, ctx, pool, `SELECT count(*) FROM candidate_scan_run WHERE status = 'abandoned'`)
	if n := count(t, ctx, pool, `SELECT count(*) FROM candidate_scan_run WHERE lease_role = $1 AND lease_epoch = $2 AND status = 'succeeded'`,
		postgres.RoleFullAudit.Name, pausedEpoch); n != 0 {
		t.Errorf("the audit paused past its lease completed after it woke up (fencing failed)")
	}
	if n := count(t, ctx, pool, `SELECT count(*) FROM candidate_scan_run WHERE mode = 'backfill' AND status = 'abandoned'`); n == 0 {
		t.Errorf("the killed backfill's run was not abandoned by the next backfill")
	}
	if n := count(t, ctx, pool, `SELECT coalesce(sum(late_rows + future_rows), 0) FROM gov_worker_cursor`); n != 0 {
		t.Errorf("%d rows were handed off out of order (a row the cursor passed without handing it off)", n)
	}
	if n := count(t, ctx, pool, `SELECT coalesce(sum(dead_lettered), 0) FROM gov_worker_cursor`); n != 0 {
		t.Errorf("%d rows dead-lettered", n)
	}
	// A birth handed off twice would be counted twice in the counts the handoff keeps.
	if n := count(t, ctx, pool, keptCountsDifferSQL); n != 0 {
		t.Errorf("%d kept member counts differ from the source (a birth handed off twice or never)", n)
	}
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
	t.Logf("faults: %d kills, %d runs abandoned by successors, %d births; hand-over after a holder's death (lease %s): %s\n%s",
		d.kills, abandoned, rep.Births, ttl, m.handovers(), m)
}

// daemons manages the `gcos up` processes.
type daemons struct {
	t                     *testing.T
	bin, dsn, config, dir string
	args                  []string // extra flags for every `gcos up`
	mu                    sync.Mutex
	procs                 map[int]*exec.Cmd // by pid
	started, kills        int
	stopping              bool
	exited                []string // daemons that exited while they should have been running
}

func (d *daemons) start() {
	d.t.Helper()
	d.waitUp(d.spawn())
}

func (d *daemons) spawn() string {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started++
	logf, err := os.Create(filepath.Join(d.dir, fmt.Sprintf("gcos-%d.log", d.started)))
	if err != nil {
		d.t.Fatal(err)
	}
	// Each process has a data dir of its own (`gcos up` claims its data dir), inside the test's dir: its run files
	// (api.json) land there, not in the source tree.
	dataDir := filepath.Join(d.dir, fmt.Sprintf("gcos-%d", d.started))
	cmd := exec.Command(d.bin, append([]string{"up", "--database-url", d.dsn, "--config", d.config, "--data-dir", dataDir,
		"--listen", "127.0.0.1:0", "--insecure-no-auth"}, d.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = d.dir
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	if d.procs == nil {
		d.procs = map[int]*exec.Cmd{}
	}
	pid := cmd.Process.Pid
	d.procs[pid] = cmd
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ours := d.procs[pid]; ours && !d.stopping {
			// Not killed by the test and not asked to stop: a daemon must ride out every fault.
			d.exited = append(d.exited, fmt.Sprintf("%s (pid %d): %v", filepath.Base(logf.Name()), pid, err))
			delete(d.procs, pid)
		}
	}()
	return logf.Name()
}

// waitUp waits until the daemon writing log has started serving (a daemon started while the database is down
// refuses to start, which is not what this test is about).
func (d *daemons) waitUp(log string) {
	d.t.Helper()
	wait.For(d.t, 60*time.Second, filepath.Base(log)+": the daemon starts", func() bool {
		d.check()
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), `msg="gcos up"`)
	})
}

// check fails the test if a daemon exited on its own.
func (d *daemons) check() {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.exited) > 0 {
		d.t.Fatalf("daemons exited on their own: %s", strings.Join(d.exited, "; "))
	}
}

// kill sends sig to the process named by a lease owner (host:pid:nonce); SIGKILL also forgets it.
func (d *daemons) kill(owner string, sig syscall.Signal) {
	d.t.Helper()
	parts := strings.Split(owner, ":")
	if len(parts) < 2 {
		d.t.Fatalf("lease owner %q names no pid", owner)
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		d.t.Fatalf("lease owner %q: %v", owner, err)
	}
	d.signal(pid, sig)
}

func (d *daemons) signal(pid int, sig syscall.Signal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.procs[pid]; !ok {
		d.t.Fatalf("process %d is not one of the daemons", pid)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		d.t.Fatalf("signal %d: %v", pid, err)
	}
	if sig == syscall.SIGKILL {
		d.kills++
		delete(d.procs, pid)
	}
}

func (d *daemons) killRandom(r *rand.Rand) {
	d.check()
	d.mu.Lock()
	pids := slices.Sorted(func(yield func(int) bool) {
		for p := range d.procs {
			if !yield(p) {
				return
			}
		}
	})
	d.mu.Unlock()
	d.signal(pids[r.IntN(len(pids))], syscall.SIGKILL)
}

// stopAll stops every daemon the way an operator does (SIGTERM) and waits for each to exit.
func (d *daemons) stopAll() {
	d.check()
	d.mu.Lock()
	procs := d.procs
	d.stopping = true
	d.mu.Unlock()
	for _, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	wait.Until(60*time.Second, func() bool {
		for _, cmd := range procs {
			if syscall.Kill(cmd.Process.Pid, 0) == nil {
				return false
			}
		}
		return true
	})
	d.mu.Lock()
	d.procs = nil
	d.mu.Unlock()
}

func (d *daemons) killAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopping = true
	for pid := range d.procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	d.procs = nil
}

// holder returns a role's live holder and epoch, waiting for one (false when none appears in time).
func (d *daemons) holder(ctx context.Context, pool *pgxpool.Pool, role string) (string, int64, bool) {
	var owner string
	var epoch int64
	if wait.Until(30*time.Second, func() bool {
		err := pool.QueryRow(ctx, `SELECT owner, epoch FROM governance_role_lease WHERE role = $1 AND owner IS NOT NULL
			AND expires_at > clock_timestamp()`, role).Scan(&owner, &epoch)
		return err == nil && d.alive(owner)
	}) {
		return owner, epoch, true
	}
	d.t.Logf("no live holder of %s within 30 s", role)
	return "", 0, false
}

// waitRunningAudit waits for a full audit under way and returns its holder.
func (d *daemons) waitRunningAudit(ctx context.Context, pool *pgxpool.Pool) (string, int64, bool) {
	var owner string
	var epoch int64
	if wait.Until(30*time.Second, func() bool {
		err := pool.QueryRow(ctx, `SELECT l.owner, l.epoch FROM governance_role_lease l
			JOIN candidate_scan_run r ON r.lease_role = l.role AND r.lease_epoch = l.epoch AND r.status = 'running'
			WHERE l.role = $1 AND l.owner IS NOT NULL AND l.expires_at > clock_timestamp() LIMIT 1`, postgres.RoleFullAudit.Name).Scan(&owner, &epoch)
		return err == nil && d.alive(owner)
	}) {
		return owner, epoch, true
	}
	d.t.Logf("no full audit under way within 30 s")
	return "", 0, false
}

func (d *daemons) alive(owner string) bool {
	parts := strings.Split(owner, ":")
	if len(parts) < 2 {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.procs[pid]
	return ok
}

// handover polls until another holder took the role (a later epoch) and returns how long that took.
func (d *daemons) handover(ctx context.Context, pool *pgxpool.Pool, role string, epoch int64) time.Duration {
	d.t.Helper()
	start := time.Now()
	wait.For(d.t, 90*time.Second, fmt.Sprintf("%s is taken over after its holder's fault (epoch %d)", role, epoch), func() bool {
		var now int64
		err := pool.QueryRow(ctx, `SELECT epoch FROM governance_role_lease WHERE role = $1`, role).Scan(&now)
		return err == nil && now > epoch
	})
	return time.Since(start)
}

// settle waits until the intake has handed off every row, no group is dirty and a full audit completed after t.
func settle(t *testing.T, ctx context.Context, pool *pgxpool.Pool, after time.Time) {
	t.Helper()
	var behind, dirty, audited int64
	if !wait.Until(3*time.Minute, func() bool {
		behind = count(t, ctx, pool, `SELECT
			(SELECT count(*) FROM birth_registry b JOIN gov_worker_cursor c ON c.source = 'birth_registry'
			 WHERE (b.born_at, b.id) > (coalesce(c.position_tstz, '-infinity'), coalesce(c.position_id, 0))) +
			(SELECT count(*) FROM registry_changelog r JOIN gov_worker_cursor c ON c.source = 'registry_changelog'
			 WHERE (r."timestamp", r.id) > (coalesce(c.position_ts, '-infinity'), coalesce(c.position_id, 0)))`)
		dirty = count(t, ctx, pool, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version) WHERE c.dirty`)
		audited = count(t, ctx, pool, `SELECT count(*) FROM candidate_scan_run WHERE mode = 'full_audit' AND status = 'succeeded' AND started_at > $1`, after)
		return behind == 0 && dirty == 0 && audited > 0
	}) {
		t.Fatalf("not settled within 3 minutes: %d rows not handed off, %d dirty groups, %d audits completed since the last fault", behind, dirty, audited)
	}
}

func count(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// keptCountsDifferSQL counts the base groups of kept collections (no recount pending) whose kept member count
// differs from the source's.
const keptCountsDifferSQL = `
WITH x AS (
    SELECT coalesce(p.entity_type, b.entity_type) AS c, coalesce(p.collection_name, b.collection_name) AS k,
           coalesce(p.status, b.status) AS s
    FROM birth_registry b
    LEFT JOIN birth_registry p ON b.parent_code IS NOT NULL AND p.collection_name = b.collection_name AND p.entity_code = b.parent_code
), src AS (SELECT c, k, s, count(*) AS n FROM x GROUP BY 1, 2, 3)
SELECT count(*) FROM (SELECT object_class, source_registry, lifecycle_status, members FROM governance_base_count) kb
FULL JOIN src ON (src.c, src.k, src.s) = (kb.object_class, kb.source_registry, kb.lifecycle_status)
WHERE coalesce(kb.source_registry, src.k) IN (SELECT source_registry FROM governance_collection_count)
  AND coalesce(kb.source_registry, src.k) NOT IN (SELECT source_registry FROM governance_recount_request)
  AND kb.members IS DISTINCT FROM src.n`

// matrix records each fault and, for a role holder's, how long its role took to pass to a survivor.
type matrix struct {
	rows []struct {
		fault, role string
		handover    time.Duration
	}
}

func (m *matrix) add(fault, role string, handover time.Duration) {
	m.rows = append(m.rows, struct {
		fault, role string
		handover    time.Duration
	}{fault, role, handover})
}

func (m *matrix) handovers() string {
	var ds []time.Duration
	for _, r := range m.rows {
		if r.handover >= 0 {
			ds = append(ds, r.handover)
		}
	}
	if len(ds) == 0 {
		return "none measured"
	}
	slices.Sort(ds)
	return fmt.Sprintf("median %s, max %s over %d", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds))
}

func (m *matrix) String() string {
	counts := map[string]int{}
	var order []string
	for _, r := range m.rows {
		k := r.fault + " × " + r.role
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "  %-45s %d\n", k, counts[k])
	}
	return b.String()
}
