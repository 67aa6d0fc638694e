package intake_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type env struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Store
	cfg   gcos.IntakeConfig
}

func newEnv(t *testing.T) *env {
	t.Helper()
	w := gcostest.New(t, gcostest.Options{Config: func(cfg *gcos.Config) {
		in := &cfg.Intake
		in.PageSize = 25
		in.CatchUpPageSize = 0 // a page read ahead holds 25 too: how many polls a pass takes does not hang on a race
		in.PollInterval = gcos.Duration(20 * time.Millisecond)
		in.HorizonGuard = gcos.Duration(10 * time.Millisecond)
		in.BackoffBase = gcos.Duration(time.Millisecond)
		in.BackoffMax = gcos.Duration(2 * time.Millisecond)
	}})
	w.Exec(t, `CREATE TABLE intake_applied (source text NOT NULL, id bigint NOT NULL)`)
	return &env{ctx: w.Ctx, pool: w.Pool, store: w.Store, cfg: w.Cfg.Intake}
}

func record(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
	sources, ids := make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		sources[i], ids[i] = r.Source, r.ID
	}
	_, err := tx.Exec(ctx, `INSERT INTO intake_applied SELECT unnest($1::text[]), unnest($2::bigint[])`, sources, ids)
	return nil, err
}

func (e *env) worker() *intake.Worker {
	return &intake.Worker{Stage: intake.New(e.store), Config: e.cfg, Apply: record}
}

func (e *env) insert(t *testing.T, births, changes int) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, `
		INSERT INTO birth_registry (entity_code, collection_name, entity_type, status)
		SELECT gen_random_uuid()::text, 'intake_test', 'thing', 'active' FROM generate_series(1, $1);
	`, births); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `
		INSERT INTO registry_changelog (entity_type, entity_code, action)
		SELECT 'collection', 'intake_test', 'update' FROM generate_series(1, $1)`, changes); err != nil {
		t.Fatal(err)
	}
}

// verify fails unless every row of both sources was applied exactly once.
func (e *env) verify(t *testing.T) {
	t.Helper()
	if lost, dup, extra := e.tally(t); lost+dup+extra > 0 {
		t.Fatalf("lost %d, applied twice %d, applied but not in the source %d", lost, dup, extra)
	}
}

// tally counts the source rows not applied, the rows applied more than once and the applied rows the sources do
// not hold. GCOS's own audit rows (the audit row of the last batch may be written after the last poll) cannot be
// lost: they are the intake's own writes.
func (e *env) tally(t *testing.T) (lost, dup, extra int64) {
	t.Helper()
	if err := e.pool.QueryRow(e.ctx, `
		WITH src AS (SELECT 'birth_registry' AS source, id, false AS own FROM birth_registry
		             UNION ALL SELECT 'registry_changelog', id, id IN (SELECT changelog_id FROM governance_audit_row)
		             FROM registry_changelog),
		     got AS (SELECT source, id, count(*) AS n FROM intake_applied GROUP BY 1, 2)
		SELECT (SELECT count(*) FROM src LEFT JOIN got USING (source, id) WHERE got.n IS NULL AND NOT src.own),
		       (SELECT count(*) FROM got WHERE n > 1),
		       (SELECT count(*) FROM got LEFT JOIN src USING (source, id) WHERE src.id IS NULL)`).Scan(&lost, &dup, &extra); err != nil {
		t.Fatal(err)
	}
	return lost, dup, extra
}

func (e *env) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := e.pool.QueryRow(e.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIntakeRunHandsOffTicksAndStopsCleanly: Run hands every row of both sources off, ticks a heartbeat per source
// and returns nil promptly when its context ends, leaving "stopped" in the heartbeat.
func TestIntakeRunHandsOffTicksAndStopsCleanly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insert(t, 120, 30)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.worker().Run(ctx) }()
	applied := func() int64 {
		return e.count(t, `SELECT count(*) FROM intake_applied a WHERE NOT (a.source = 'registry_changelog'
			AND a.id IN (SELECT changelog_id FROM governance_audit_row))`)
	}
	wait.For(t, 10*time.Second, "the worker hands the rows off", func() bool { return applied() >= 150 })
	e.insert(t, 5, 5)
	// GCOS's own audit rows are applied too (this apply step does not skip them): they are not the rows awaited.
	wait.For(t, 10*time.Second, "the worker picks up new rows", func() bool { return applied() >= 160 })
	if n := e.count(t, `SELECT count(*) FROM queue_heartbeat WHERE executor_name IN ('gcos.intake.birth_registry',
		'gcos.intake.registry_changelog') AND last_tick_status LIKE 'ok%' AND last_tick_at > now() - interval '5 seconds'`); n != 2 {
		t.Fatalf("want a fresh heartbeat per source, got %d", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
	if n := e.count(t, `SELECT count(*) FROM queue_heartbeat WHERE last_tick_status = 'stopped'`); n != 2 {
		t.Fatalf("want both heartbeats to say stopped, got %d", n)
	}
	e.verify(t)
}

// TestIntakeProbeWakesAQuietWorker: a source's probe says whether a row lies beyond its cursor (GCOS's own audit
// rows aside), and a quiet worker polls when it does: with an hour between polls, rows written after the worker
// went quiet are handed off all the same.
func TestIntakeProbeWakesAQuietWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.PollInterval = gcos.Duration(time.Hour)
	e.cfg.ProbeInterval = gcos.Duration(10 * time.Millisecond)
	stage := intake.New(e.store)
	sources := postgres.DefaultTailSources(e.store.Config().SourceBinding)
	probe := func() []bool {
		t.Helper()
		var found []bool
		for _, src := range sources {
			ok, err := stage.Probe(e.ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			found = append(found, ok)
		}
		return found
	}
	e.insert(t, 4, 2)
	wait.Pass(e.ctx, 30*time.Millisecond) // the horizon guard
	if _, err := e.worker().Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	// Caught up: the change ledger holds the batch's own audit row beyond the cursor, which is no reason to poll.
	if got := probe(); slices.Contains(got, true) {
		t.Fatalf("probes after catching up: %v, want none", got)
	}
	e.insert(t, 1, 0)
	if got := probe(); !got[0] || got[1] {
		t.Fatalf("probes after a birth: %v, want the births only", got)
	}

	w := e.worker()
	w.Config = e.cfg
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	applied := func() int64 { return e.count(t, `SELECT count(*) FROM intake_applied WHERE source = 'birth_registry'`) }
	wait.For(t, 10*time.Second, "the first tick hands the birth off", func() bool { return applied() == 5 })
	e.insert(t, 3, 1)
	wait.For(t, 10*time.Second, "a probe wakes the quiet worker", func() bool {
		return applied() == 8 && e.count(t, `SELECT count(*) FROM intake_applied WHERE source = 'registry_changelog'
			AND id NOT IN (SELECT changelog_id FROM governance_audit_row)`) == 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	e.verify(t)
}

// TestIntakeOnceCatchesUp: Once reads every source to its horizon; a second Once reads nothing.
func TestIntakeOnceCatchesUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.insert(t, 60, 7)
	wait.Pass(e.ctx, 30*time.Millisecond) // the horizon guard
	ticks, err := e.worker().Once(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The changelog also holds the audit row of each batch, which the tail reads as it reaches them.
	if len(ticks) != 2 || ticks[0].Read != 60 || ticks[1].Read < 7 || ticks[0].Polls < 3 || ticks[0].Lag == nil {
		t.Fatalf("first pass: %+v", ticks)
	}
	// Later passes read only GCOS's own audit rows, and a batch of nothing else is not audited again: the tail
	// settles instead of feeding on itself.
	audits := `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_intake' AND action = 'batch'`
	before := e.count(t, audits)
	for pass := 2; ; pass++ {
		ticks, err = e.worker().Once(e.ctx)
		if err != nil || ticks[0].Read != 0 || pass > 5 {
			t.Fatalf("pass %d should read at most GCOS's own audit rows: %v %+v", pass, err, ticks)
		}
		if ticks[1].Read == 0 {
			break
		}
	}
	if n := e.count(t, audits); n != before {
		t.Fatalf("passes over GCOS's own audit rows wrote %d more", n-before)
	}
	e.verify(t)
}

// TestIntakeRefusesUnmetPreconditions: a source whose timestamp is not set by the database clock stops Run with a
// clear EINVALID error instead of tailing it lossily.
func TestIntakeRefusesUnmetPreconditions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.pool.Exec(e.ctx, `CREATE TABLE handmade_births (LIKE birth_registry); ALTER TABLE handmade_births ALTER id SET NOT NULL`); err != nil {
		t.Fatal(err)
	}
	w := e.worker()
	w.Sources = []postgres.TailSource{{Name: "handmade", Kind: postgres.TailBirth, Table: "handmade_births",
		TSColumn: "born_at", IDColumn: "id"}}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	err := w.Run(ctx)
	if gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), "has no default") {
		t.Fatalf("want EINVALID naming the missing clock default, got %v", err)
	}
	if w.Stage = nil; true {
		if _, err := w.Once(e.ctx); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Fatalf("a worker without a stage must be refused: %v", err)
		}
	}
}

// TestIntakeKilledAtRandomPointsLosesAndDuplicatesNothing stops workers at random points at least 20 times (a
// context deadline anywhere in a poll, a retry or a heartbeat; sometimes two workers at once) while writers keep
// committing. The last worker catches up: every committed row was applied exactly once.
func TestIntakeKilledAtRandomPointsLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := e.pool.Begin(e.ctx)
				if err != nil {
					t.Error(err)
					return
				}
				_, err = tx.Exec(e.ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status)
					VALUES (gen_random_uuid()::text, 'intake_test', 'thing', 'active')`)
				if err == nil {
					_, err = tx.Exec(e.ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action)
						VALUES ('collection', 'intake_test', 'update')`)
				}
				wait.Pace(e.ctx, time.Duration(rand.IntN(8))*time.Millisecond) // a writer holds its transaction open
				if err == nil {
					err = tx.Commit(e.ctx)
				}
				if err != nil {
					_ = tx.Rollback(e.ctx)
					t.Error(err)
					return
				}
			}
		}()
	}
	applied := func() bool { return e.count(t, `SELECT count(*) FROM intake_applied`) > 0 }
	kills := 0
	for ; kills < 22 || !applied(); kills++ {
		// Random points in a worker's life; on a loaded machine under -race a worker may need longer to get past
		// its start-up checks and apply rows, so past the 22nd kill with nothing applied the windows grow (a
		// second more each time) until one does: the kills must prove something, whatever the machine's speed.
		window := time.Duration(20+rand.IntN(400)) * time.Millisecond
		if kills >= 22 {
			if kills >= 22+60 {
				t.Fatal("no worker applied anything in a minute-long window: the intake does not progress")
			}
			window = time.Duration(kills-21) * time.Second
		}
		ctx, cancel := context.WithTimeout(e.ctx, window)
		n := 1 + rand.IntN(2)
		errs := make(chan error, n)
		for range n {
			go func() { errs <- e.worker().Run(ctx) }()
		}
		for range n {
			if err := <-errs; err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run: %v", err)
			}
		}
		cancel()
	}
	close(stop)
	wg.Wait()
	before := e.count(t, `SELECT count(*) FROM intake_applied`)
	if before == 0 {
		t.Fatal("the killed workers never got to apply anything: the kills proved nothing")
	}
	// The last worker catches up. A killed worker's transaction can linger on the server for a moment and hold the
	// horizon back (the tail never reads past an open transaction), so the catch-up is repeated, with a generous
	// deadline, until nothing is left; a row applied twice or from nowhere fails at once.
	var lost, dup, extra int64
	caughtUp := wait.Until(90*time.Second, func() bool {
		if _, err := e.worker().Once(e.ctx); err != nil {
			t.Fatal(err)
		}
		lost, dup, extra = e.tally(t)
		if dup+extra > 0 {
			t.Fatalf("lost %d, applied twice %d, applied but not in the source %d", lost, dup, extra)
		}
		return lost == 0
	})
	if !caughtUp {
		t.Fatalf("lost %d, applied twice %d, applied but not in the source %d", lost, dup, extra)
	}
	t.Logf("%d kills; %d rows applied by killed workers, %d in all", kills, before, e.count(t, `SELECT count(*) FROM intake_applied`))
}
