package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/embeddedpg"
	"gcos/gcostest/wait"
	"gcos/oracle"
	"gcos/postgres"
)

// TestFailover_PromotedReplicaTakesOver runs `gcos up` on a multi-host URL (target_session_attrs=read-write) over a
// primary and its asynchronous streaming replica, under a writer load. The replica is cut off from the primary,
// births it will never see are committed and handed off, then the primary is killed (SIGKILL) and the replica
// promoted. GCOS must block the gate while no primary answers, reconnect to the promoted replica on its own, answer
// from the new primary's history only (the births it lost are unknown again, not remembered), lose and duplicate no
// intake row the new primary holds, and verify clean afterwards.
func TestFailover_PromotedReplicaTakesOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary, a replica and the daemon")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildGCOS(ctx, t, dir)
	// Commits are flushed (and so streamed) as they happen, as on a production primary; the embedded default
	// (synchronous_commit off) could hold the last of them back from the replica for a while.
	primary := newPrivateDBWith(ctx, t, embeddedpg.Config{DataDir: filepath.Join(dir, "primary"), Ephemeral: true,
		Settings: map[string]string{"synchronous_commit": "on"}}, "gcos_failover")
	replica, err := primary.cluster.StartReplica(ctx, embeddedpg.Config{DataDir: filepath.Join(dir, "replica"), Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Stop(context.Background()) })

	conf := daemonTestConfig()
	conf.Roles.LeaseTTL = gcos.Duration(3 * time.Second)
	conf.Outage.BackoffMax = gcos.Duration(500 * time.Millisecond)
	confPath := writeConfig(t, dir, conf)
	primary.seedWorld(ctx, t, conf, 3000, 31)

	u, err := url.Parse(primary.dsn)
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	multi := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d,127.0.0.1:%d/gcos_failover?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		u.User.Username(), password, primary.cluster.Port(), replica.Port())
	replicaPool := connect(ctx, t, replica.DatabaseDSN("gcos_failover"))

	// The writers: births through the multi-host URL, reconnecting to whichever host is the primary.
	writers := connect(ctx, t, multi)
	var collection, entityType string
	if err := primary.pool.QueryRow(ctx, `SELECT collection_name, entity_type FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&collection, &entityType); err != nil {
		t.Fatal(err)
	}
	const birthSQL = `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ($1, $2, $3, 'active', 'birth-api', 'failover')`
	writeCtx, stopWriting := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		for i := 0; writeCtx.Err() == nil; i++ {
			_, _ = writers.Exec(writeCtx, birthSQL, fmt.Sprint("load-", i), collection, entityType) // fails while no primary answers
			wait.Pace(writeCtx, 10*time.Millisecond)                                                // the writers' pace
		}
	}()
	defer func() { stopWriting(); writer.Wait() }()

	d := &daemons{t: t, bin: bin, dsn: multi, config: confPath, dir: dir}
	defer d.killAll()
	log := d.spawn()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s (last lines):\n%s", filepath.Base(log), tailLines(string(b), 40))
		}
	})
	d.waitUp(log)
	api := listenURL(t, log)
	var marker int64
	if err := primary.pool.QueryRow(ctx, birthSQL+` RETURNING id`, "marker", collection, entityType).Scan(&marker); err != nil {
		t.Fatal(err)
	}
	waitHandedOff(ctx, t, primary.pool, marker)

	// The replica is cut off; births it will never see are committed on the primary and handed off by GCOS, and the
	// gate is asked about one of them (its view now remembers it).
	if _, err := replicaPool.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := replicaPool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, "the replica stops streaming once its primary_conninfo is cleared", func() bool {
		return count(t, ctx, replicaPool, `SELECT count(*) FROM pg_stat_wal_receiver`) == 0
	})
	var lostID int64
	for i := range 5 {
		if err := primary.pool.QueryRow(ctx, birthSQL+` RETURNING id`, fmt.Sprint("lost-", i), collection, entityType).Scan(&lostID); err != nil {
			t.Fatal(err)
		}
	}
	waitHandedOff(ctx, t, primary.pool, lostID)
	lost := collection + ":lost-0"
	never := collection + ":never-born"
	if a := askGate(ctx, api, lost); a.Reason == askGate(ctx, api, never).Reason {
		t.Fatalf("before the failover the gate answers for a born object as for an unknown one: %+v", a)
	}

	// The primary dies; the gate must block until a primary answers again.
	crashed := time.Now()
	for _, pid := range primary.cluster.ServerPIDs() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	blocked := waitGate(ctx, t, api, collection+":load-1", "block", func(a gateReply) bool { return a.Decision == gcos.GateBlock && a.Token == "" })
	d.check()
	promoting := time.Now()
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	answered := waitGate(ctx, t, api, collection+":load-1", "answer from the new primary", func(a gateReply) bool { return a.Token != "" })
	t.Logf("failover timeline: primary killed → gate blocks %s; promotion %s (pg_ctl promote -w) → gate answers %s after promotion",
		blocked.Sub(crashed).Round(time.Millisecond), promoted.Sub(promoting).Round(time.Millisecond), answered.Sub(promoted).Round(time.Millisecond))

	// Never newer than the new primary: the births it lost are unknown objects again.
	if a, b := askGate(ctx, api, lost), askGate(ctx, api, never); strings.ReplaceAll(a.Reason, "lost-0", "never-born") != b.Reason || a.Decision != gcos.GateBlock {
		t.Errorf("after the failover the gate answers for a birth the new primary never saw\n  %+v\nnot as for an unknown object\n  %+v", a, b)
	}
	// The writers go on against the new primary: wait for a few dozen of their births there.
	loadAt := func() int64 {
		return count(t, ctx, replicaPool, `SELECT count(*) FROM birth_registry WHERE actor_ref = 'failover' AND entity_code LIKE 'load-%'`)
	}
	base := loadAt()
	wait.For(t, 60*time.Second, "the writers commit births on the new primary", func() bool { return loadAt() >= base+30 })
	stopWriting()
	writer.Wait()
	settle(t, ctx, replicaPool, promoted)
	d.check()
	d.stopAll()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "history changed") {
		t.Errorf("the gate view did not say it reloaded on the new timeline")
	}

	for what, sql := range map[string]string{
		"rows handed off out of order":              `SELECT coalesce(sum(late_rows + future_rows), 0) FROM gov_worker_cursor`,
		"rows dead-lettered":                        `SELECT coalesce(sum(dead_lettered), 0) FROM gov_worker_cursor`,
		"kept member counts differ from the source": keptCountsDifferSQL,
	} {
		if n := count(t, ctx, replicaPool, sql); n != 0 {
			t.Errorf("after the failover: %d %s", n, what)
		}
	}
	store := postgres.New(replicaPool, conf, nil)
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
	if out, err := exec.CommandContext(ctx, bin, "verify", "--database-url", multi, "--config", confPath).CombinedOutput(); err != nil {
		t.Errorf("gcos verify after the failover: %v\n%s", err, tailLines(string(out), 20))
	}
}

// TestFailover_DemotedPrimaryDropsPooledConnections turns the primary read-only under an open store (as a demoted
// primary is): the first write it refuses makes the store drop every pooled connection, so none of the sessions
// opened before the demotion is used again, and writes go on over new ones once the server takes them.
func TestFailover_DemotedPrimaryDropsPooledConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := newPrivateDB(ctx, t, t.TempDir(), "gcos_demoted")
	conf := gcos.DefaultConfig()
	db.seedWorld(ctx, t, conf, 300, 37)
	store, err := postgres.Open(ctx, postgres.Databases{URL: db.dsn}, conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	beat := func() error { return store.Heartbeat(ctx, "gcos.test.demotion", "test", "ok") }
	for range 8 {
		if err := beat(); err != nil {
			t.Fatal(err)
		}
	}
	pids := func() []int32 {
		rows, err := db.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name IN ('gcos', 'gcos-gate') ORDER BY pid`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := pids()
	if len(before) == 0 {
		t.Fatal("the store holds no connection to the server")
	}
	readOnly := func(on bool) {
		t.Helper()
		stmt := `ALTER SYSTEM SET default_transaction_read_only = on`
		if !on {
			stmt = `ALTER SYSTEM RESET default_transaction_read_only`
		}
		conn, err := db.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		for _, sql := range []string{`SET default_transaction_read_only = off`, stmt, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	readOnly(true)
	var refused error
	if !wait.Until(60*time.Second, func() bool { refused = beat(); return postgres.IsPgCode(refused, "25006") }) {
		t.Fatalf("the server never refused a write as read-only (last: %v)", refused)
	}
	wait.For(t, 60*time.Second, "the store drops its connections after a read-only refusal", func() bool {
		return store.Counters().Demotions > 0
	})
	readOnly(false)
	wait.For(t, 60*time.Second, "writes resume once the server takes them again", func() bool { return beat() == nil })
	for _, pid := range pids() {
		if slices.Contains(before, pid) {
			t.Errorf("session %d, opened before the demotion, is still pooled (before: %v)", pid, before)
		}
	}
}

// waitHandedOff waits until the intake's birth cursor passed birth id.
func waitHandedOff(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id int64) {
	t.Helper()
	wait.For(t, 60*time.Second, fmt.Sprintf("birth %d is handed off", id), func() bool {
		return count(t, ctx, pool, `SELECT count(*) FROM gov_worker_cursor WHERE source = 'birth_registry' AND position_id >= $1`, id) > 0
	})
}

func connect(ctx context.Context, t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var listenRE = regexp.MustCompile(`msg="gcos up" listen=(http://\S+)`)

// listenURL reads the daemon's HTTP address from its start line.
func listenURL(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	m := listenRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no listen address in the start line", log)
	}
	return string(m[1])
}

type gateReply struct {
	gcos.GateAnswer
	Status int
}

// askGate asks the daemon's gate over HTTP whether object may be read; a failed request is a block.
func askGate(ctx context.Context, api, object string) gateReply {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/gate?action=read&object="+url.QueryEscape(object), nil)
	if err != nil {
		return gateReply{GateAnswer: gcos.GateAnswer{Decision: gcos.GateBlock, Reason: err.Error()}}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return gateReply{GateAnswer: gcos.GateAnswer{Decision: gcos.GateBlock, Reason: err.Error()}}
	}
	defer resp.Body.Close()
	r := gateReply{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&r.GateAnswer); err != nil || r.Decision == "" {
		r.Decision = gcos.GateBlock
	}
	return r
}

// waitGate polls the gate until ok holds and returns when it first did.
func waitGate(ctx context.Context, t *testing.T, api, object, what string, ok func(gateReply) bool) time.Time {
	t.Helper()
	var a gateReply
	if !wait.Until(90*time.Second, func() bool { a = askGate(ctx, api, object); return ok(a) }) {
		t.Fatalf("the gate did not %s within 90 s; last answer %+v", what, a)
	}
	return time.Now()
}
