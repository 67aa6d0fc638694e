package intake_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/events"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// tailEnv is what the tail tests share: an isolated database, a store, an intake configuration with short
// timings, both default sources with their cursors, and a tail_applied table that apply steps tailRecord into inside
// the poll's own transaction (so the table proves exactly-once).
type tailEnv struct {
	ctx       context.Context
	pool      *pgxpool.Pool
	store     *postgres.Store
	cfg       gcos.IntakeConfig
	birth     postgres.TailSource
	changelog postgres.TailSource
	// stage is the one poll and drain use, as a worker holds one: a births page that comes back full starts reading
	// the next (intake.read_ahead), which the next poll takes.
	stage *intake.Stage
}

const tailGuard = 20 * time.Millisecond

func newTailEnv(t *testing.T) *tailEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	full := gcos.DefaultConfig()
	cfg := full.Intake
	cfg.PageSize = 100
	cfg.CatchUpPageSize = 0 // pages read ahead are pages of 100 too (TestTailReadAhead_CatchUpPages sets it)
	cfg.HorizonGuard = gcos.Duration(tailGuard)
	cfg.BackoffBase = gcos.Duration(time.Millisecond)
	cfg.BackoffMax = gcos.Duration(4 * time.Millisecond)
	cfg.MaxAttempts = 3
	cfg.LagThreshold = gcos.Duration(300 * time.Millisecond)
	e := &tailEnv{ctx: ctx, pool: pool, store: postgres.New(pool, full, nil), cfg: cfg,
		birth: postgres.BirthTailSource(full.SourceBinding), changelog: postgres.ChangelogTailSource()}
	e.stage = intake.New(e.store)
	if _, err := pool.Exec(ctx, `CREATE TABLE tail_applied (source text NOT NULL, id bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, src := range []postgres.TailSource{e.birth, e.changelog} {
		if _, err := intake.New(e.store).CheckTail(ctx, src, cfg); err != nil {
			t.Fatalf("preconditions of %s: %v", src.Name, err)
		}
		if _, err := intake.New(e.store).EnsureCursor(ctx, src); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// tailRecord is the apply step of most tests: it writes every row into tail_applied in the poll's transaction.
func tailRecord(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
	sources, ids := make([]string, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		sources[i], ids[i] = r.Source, r.ID
	}
	_, err := tx.Exec(ctx, `INSERT INTO tail_applied (source, id) SELECT unnest($1::text[]), unnest($2::bigint[])`, sources, ids)
	return nil, err
}

// poll runs one poll and fails the test on error.
func (e *tailEnv) poll(t *testing.T, src postgres.TailSource, apply intake.ApplyFunc) intake.PollResult {
	t.Helper()
	res, err := e.stage.PollTail(e.ctx, src, e.cfg, apply)
	if err != nil {
		t.Fatalf("poll %s: %v", src.Name, err)
	}
	return res
}

// drain waits until rows committed so far are below the horizon, then polls until a page is not full.
func (e *tailEnv) drain(t *testing.T, src postgres.TailSource, apply intake.ApplyFunc) intake.PollResult {
	t.Helper()
	wait.Pass(e.ctx, 2*tailGuard) // the horizon guard: every row committed so far falls below it
	for range 10_000 {
		res := e.poll(t, src, apply)
		if !res.PageFull {
			return res
		}
	}
	t.Fatal("drain: the tail never caught up")
	return intake.PollResult{}
}

// applied returns how often each id of source was applied, leaving out the change-ledger rows that are GCOS's own
// audit rows (the intake audits each batch it delivers into the ledger it tails; no writer of the test wrote them).
func (e *tailEnv) applied(t *testing.T, source string) map[int64]int {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT id FROM tail_applied a WHERE source = $1
		AND NOT (EXISTS (SELECT 1 FROM gov_worker_cursor c WHERE c.source = a.source AND c.source_table = 'registry_changelog')
		         AND EXISTS (SELECT 1 FROM governance_audit_row o WHERE o.changelog_id = a.id))`, source)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]int{}
	for _, id := range ids {
		out[id]++
	}
	return out
}

// ids returns every id of a table (of the change ledger, every id but GCOS's own audit rows: see applied).
func (e *tailEnv) ids(t *testing.T, table string) []int64 {
	t.Helper()
	own := ""
	if table == "registry_changelog" {
		own = ` WHERE id NOT IN (SELECT changelog_id FROM governance_audit_row)`
	}
	rows, err := e.pool.Query(e.ctx, `SELECT id FROM `+pgx.Identifier{table}.Sanitize()+own+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// tailExactlyOnce fails unless every id in want was applied exactly once and nothing else was applied.
func tailExactlyOnce(t *testing.T, what string, want []int64, got map[int64]int) {
	t.Helper()
	var lost, dup []int64
	wanted := map[int64]bool{}
	for _, id := range want {
		wanted[id] = true
		switch got[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			dup = append(dup, id)
		}
	}
	var extra []int64
	for id := range got {
		if !wanted[id] {
			extra = append(extra, id)
		}
	}
	if len(lost)+len(dup)+len(extra) > 0 {
		t.Fatalf("%s: %d committed rows; lost %d %v, applied twice %d %v, applied but not committed %d %v", what,
			len(want), len(lost), tailHead(lost), len(dup), tailHead(dup), len(extra), tailHead(extra))
	}
}

func tailHead(ids []int64) []int64 {
	slices.Sort(ids)
	if len(ids) > 10 {
		return ids[:10]
	}
	return ids
}

func tailInsertBirth(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, actor_ref)
		VALUES (gen_random_uuid()::text, 'tail_test', 'thing', 'active', 'tester') RETURNING id`).Scan(&id)
	return id, err
}

func tailInsertChange(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
		VALUES ('collection', 'tail_test', 'update', 'tester') RETURNING id`).Scan(&id)
	return id, err
}

func (e *tailEnv) births(t *testing.T, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		id, err := tailInsertBirth(e.ctx, e.pool)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// session is a dedicated connection for a test's concurrent transaction.
func (e *tailEnv) session(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(e.ctx, pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func tailBegin(t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func tailTxStart(t *testing.T, tx pgx.Tx) time.Time {
	t.Helper()
	var ts time.Time
	if err := tx.QueryRow(context.Background(), `SELECT now()`).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestTailS1_TimestampTakenBeforeLaterCommits: a transaction takes its timestamp and writes nothing yet, another
// session commits later rows, then the first inserts and commits. A naive cursor would have passed the first
// transaction's row; the horizon holds the later rows back until it commits, and every row is handed off once.
func TestTailS1_TimestampTakenBeforeLaterCommits(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	a := tailBegin(t, e.session(t))
	aStart := tailTxStart(t, a)
	later := e.births(t, 3)
	if res := e.drain(t, e.birth, tailRecord); res.Read != 0 || res.HeldBy == nil {
		t.Fatalf("while A is open nothing may be read and A must hold the horizon: %+v", res)
	}
	aID, err := tailInsertBirth(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "S1", append(later, aID), e.applied(t, e.birth.Name))
	// A's row sorts before the rows committed earlier: a naive tail that had already passed them lost it.
	var aBorn, laterBorn time.Time
	if err := e.pool.QueryRow(e.ctx, `SELECT (SELECT born_at FROM birth_registry WHERE id = $1),
		(SELECT min(born_at) FROM birth_registry WHERE id = ANY ($2))`, aID, later).Scan(&aBorn, &laterBorn); err != nil {
		t.Fatal(err)
	}
	if !aBorn.Equal(aStart) || !aBorn.Before(laterBorn) {
		t.Fatalf("A's row born %v (A began %v) should sort before the later rows (%v)", aBorn, aStart, laterBorn)
	}
}

// TestTailS2_InsertThenHoldOpen: an uncommitted row holds the horizon (the poll names the holder) and every
// later committed row waits behind it; rows committed before it flow.
func TestTailS2_InsertThenHoldOpen(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	before := e.births(t, 2)
	wait.Pass(e.ctx, 2*tailGuard)
	conn := e.session(t)
	a := tailBegin(t, conn)
	aID, err := tailInsertBirth(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var aPID int32
	if err := a.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&aPID); err != nil {
		t.Fatal(err)
	}
	after := e.births(t, 2)
	res := e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "S2 while held", before, e.applied(t, e.birth.Name))
	if res.HeldBy == nil || res.HeldBy.PID != aPID {
		t.Fatalf("the poll should name pid %d as the holder: %+v", aPID, res.HeldBy)
	}
	if err := a.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "S2", append(append(before, aID), after...), e.applied(t, e.birth.Name))
}

// TestTailS3_InsertInsideSavepoint: rows written in a released savepoint (a sub-transaction id no snapshot lists)
// are handed off at commit; a row rolled back to its savepoint never is.
func TestTailS3_InsertInsideSavepoint(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	a := tailBegin(t, e.session(t))
	if _, err := a.Exec(e.ctx, `SAVEPOINT s1`); err != nil {
		t.Fatal(err)
	}
	kept, err := tailInsertBirth(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(e.ctx, `RELEASE SAVEPOINT s1; SAVEPOINT s2`); err != nil {
		t.Fatal(err)
	}
	if _, err := tailInsertBirth(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(e.ctx, `ROLLBACK TO SAVEPOINT s2`); err != nil {
		t.Fatal(err)
	}
	after := e.births(t, 3)
	if res := e.drain(t, e.birth, tailRecord); res.Read != 0 {
		t.Fatalf("nothing may be read while the savepoint writer is open: %+v", res)
	}
	if err := a.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "S3", append(after, kept), e.applied(t, e.birth.Name))
}

// TestTailS4_RollbackDoesNotStall: a writer that rolls back holds the tail only while it is open.
func TestTailS4_RollbackDoesNotStall(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	a := tailBegin(t, e.session(t))
	if _, err := tailInsertBirth(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	after := e.births(t, 3)
	if res := e.drain(t, e.birth, tailRecord); res.Read != 0 {
		t.Fatalf("held: %+v", res)
	}
	if err := a.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "S4", after, e.applied(t, e.birth.Name))
}

// tailRole creates a login role for the test (roles are cluster-wide, so the name is random) and returns its name
// and a connection config for the test database as that role.
func tailRole(t *testing.T, e *tailEnv, attrs string) (string, *pgx.ConnConfig) {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name, password := "tail_role_"+hex.EncodeToString(b), hex.EncodeToString(b)+"Pw"
	if _, err := e.pool.Exec(e.ctx, `CREATE ROLE `+name+` LOGIN `+attrs+` PASSWORD '`+password+`'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `REVOKE ALL ON ALL TABLES IN SCHEMA public FROM `+name)
		_, _ = e.pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+name)
	})
	cc, err := pgx.ParseConfig(pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	cc.User, cc.Password = name, password
	return name, cc
}

// TestTailS5_RoleFilterIgnoresReadOnlySession: an idle read-only session of another role in a transaction holds
// the horizon back without a role filter (and is named in handoff_lag), but not with one.
func TestTailS5_RoleFilterIgnoresReadOnlySession(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	reader, cc := tailRole(t, e, "")
	conn, err := pgx.ConnectConfig(e.ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	ro := tailBegin(t, conn)
	if _, err := ro.Exec(e.ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	var me string
	if err := e.pool.QueryRow(e.ctx, `SELECT current_user`).Scan(&me); err != nil {
		t.Fatal(err)
	}

	// Without the filter the reader holds everything back and is named.
	first := e.births(t, 2)
	res := e.drain(t, e.birth, tailRecord)
	if res.Read != 0 || res.HeldBy == nil || res.HeldBy.Role != reader {
		t.Fatalf("without a role filter the reader's transaction holds the horizon: %+v %+v", res, res.HeldBy)
	}
	wait.Pass(e.ctx, e.cfg.LagThreshold.Duration()+50*time.Millisecond) // the lag threshold runs out
	lag, err := intake.New(e.store).CheckTailLag(e.ctx, e.birth, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !lag.Lagging || len(lag.Holders) == 0 || lag.Holders[0].Role != reader || !strings.Contains(lag.Reason, reader) {
		t.Fatalf("handoff_lag should name the reader: %+v", lag)
	}
	findings, err := events.New(e.store).ListFindings(e.ctx, events.FindingFilter{OpenOnly: true, IssueType: string(gcos.IssueHandoffLag)})
	if err != nil || len(findings) != 1 || !strings.Contains(string(findings[0].Evidence), reader) {
		t.Fatalf("one open handoff_lag naming %s, got %v %+v", reader, err, findings)
	}

	// With the filter (only the writer role) the reader no longer matters.
	filtered := e.cfg
	filtered.RoleFilter = []string{me}
	if _, err := intake.New(e.store).CheckTail(e.ctx, e.birth, filtered); err != nil {
		t.Fatalf("the reader cannot write, so the filter is sound: %v", err)
	}
	wait.Pass(e.ctx, 2*tailGuard)
	res, err = intake.New(e.store).PollTail(e.ctx, e.birth, filtered, tailRecord)
	if err != nil {
		t.Fatal(err)
	}
	tailExactlyOnce(t, "S5 filtered", first, e.applied(t, e.birth.Name))

	// A filter that leaves out a role that can write is refused.
	if _, err := e.pool.Exec(e.ctx, `GRANT INSERT ON birth_registry TO `+reader); err != nil {
		t.Fatal(err)
	}
	if _, err := intake.New(e.store).CheckTail(e.ctx, e.birth, filtered); gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), reader) {
		t.Fatalf("a filter without writer %s must be refused, got %v", reader, err)
	}
	if _, err := e.pool.Exec(e.ctx, `REVOKE INSERT ON birth_registry FROM `+reader); err != nil {
		t.Fatal(err)
	}

	if err := ro.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	lag, err = intake.New(e.store).CheckTailLag(e.ctx, e.birth, e.cfg)
	if err != nil || lag.Lagging {
		t.Fatalf("lag should clear once the reader ends: %v %+v", err, lag)
	}
	if open, _ := gcostest.FindingOpen(e.ctx, e.pool, gcos.IssueHandoffLag); open {
		t.Fatal("handoff_lag should be resolved")
	}
}

// TestTailS7_ScanTransactionsParallelWorkersHoldNoBirths: a scan transaction's query may run parallel workers
// (counting a collection from the source does), each a backend of its own with the transaction's start; the births
// tail passes over them as over their leader, and births committed while they run are handed off.
func TestTailS7_ScanTransactionsParallelWorkersHoldNoBirths(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	before := e.births(t, 2)
	e.drain(t, e.birth, tailRecord)
	if _, err := e.pool.Exec(e.ctx, `CREATE TABLE slow_rows AS SELECT g AS v FROM generate_series(1, 20000) g; ANALYZE slow_rows`); err != nil {
		t.Fatal(err)
	}
	began, done := make(chan postgres.ScanTx, 1), make(chan error, 1)
	go func() {
		done <- e.store.InScanTx(e.ctx, func(tx pgx.Tx) error {
			var me postgres.ScanTx
			if err := tx.QueryRow(e.ctx, `SELECT pg_backend_pid(), now()`).Scan(&me.PID, &me.Start); err != nil {
				return err
			}
			if _, err := tx.Exec(e.ctx, `SET LOCAL max_parallel_workers_per_gather = 2; SET LOCAL parallel_setup_cost = 0;
				SET LOCAL parallel_tuple_cost = 0; SET LOCAL min_parallel_table_scan_size = 0`); err != nil {
				return err
			}
			began <- me
			// Minutes of sleeping rows, spread over the workers; cancelled once the test has looked.
			_, err := tx.Exec(e.ctx, `SELECT count(*) FROM slow_rows WHERE pg_sleep(0.01) IS NOT NULL`)
			return err
		})
	}()
	scan := <-began
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `SELECT pg_cancel_backend($1)`, scan.PID)
		<-done
	})
	workers := `SELECT count(*) FROM pg_stat_activity WHERE leader_pid = $1 AND backend_type = 'parallel worker'`
	wait.For(t, 30*time.Second, "the scan's query runs parallel workers", func() bool {
		var n int
		return e.pool.QueryRow(e.ctx, workers, scan.PID).Scan(&n) == nil && n > 0
	})
	later := e.births(t, 3)
	res := e.drain(t, e.birth, tailRecord)
	if res.HeldBy != nil {
		t.Fatalf("nothing but the scan transaction is open, yet the births horizon is held by %+v", res.HeldBy)
	}
	var n int
	if err := e.pool.QueryRow(e.ctx, workers, scan.PID).Scan(&n); err != nil || n == 0 {
		t.Fatalf("the parallel workers ended before the tail was looked at (%d, %v): the test proves nothing", n, err)
	}
	tailExactlyOnce(t, "S7 births while a scan's parallel workers run", append(slices.Clone(before), later...), e.applied(t, e.birth.Name))
}

// TestTailS7_ScanTransactionHoldsNoBirths: a scan transaction of this process (InScanTx) inserts no birth, so the
// births tail passes over it while it is open: births committed after it began are handed off, once. It still
// writes the change ledger, so the changelog tail waits for it and names it. Once it ends it is no longer named,
// committed or rolled back.
func TestTailS7_ScanTransactionHoldsNoBirths(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	before := e.births(t, 2)
	e.drain(t, e.birth, tailRecord)
	e.drain(t, e.changelog, tailRecord)

	began, release, done := make(chan postgres.ScanTx, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- e.store.InScanTx(e.ctx, func(tx pgx.Tx) error {
			var me postgres.ScanTx
			if err := tx.QueryRow(e.ctx, `SELECT pg_backend_pid(), now()`).Scan(&me.PID, &me.Start); err != nil {
				return err
			}
			began <- me
			<-release
			return nil
		})
	}()
	var ended sync.Once
	end := func() error {
		var err error
		ended.Do(func() { close(release); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = end() }) // a failed check must not leave the transaction open under the cleanup
	scan := <-began
	if named := e.store.ScanTransactions(); len(named) != 1 || named[0].PID != scan.PID || !named[0].Start.Equal(scan.Start) {
		t.Fatalf("the open scan transaction %+v should be named, got %+v", scan, named)
	}
	later := e.births(t, 3)
	change, err := tailInsertChange(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	res := e.drain(t, e.birth, tailRecord)
	if res.HeldBy != nil && res.HeldBy.PID == scan.PID {
		t.Fatalf("the scan transaction must not hold the births horizon: %+v", res.HeldBy)
	}
	tailExactlyOnce(t, "S7 births while a scan is open", append(slices.Clone(before), later...), e.applied(t, e.birth.Name))
	res = e.drain(t, e.changelog, tailRecord)
	if res.HeldBy == nil || res.HeldBy.PID != scan.PID {
		t.Fatalf("the changelog tail waits for the scan transaction (it writes the ledger) and names pid %d: %+v", scan.PID, res.HeldBy)
	}
	if n := e.applied(t, e.changelog.Name)[change]; n != 0 {
		t.Fatalf("change %d committed after the scan began must wait for it, applied %d times", change, n)
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	if named := e.store.ScanTransactions(); len(named) != 0 {
		t.Fatalf("a committed scan transaction is no longer named: %+v", named)
	}
	e.drain(t, e.changelog, tailRecord)
	if n := e.applied(t, e.changelog.Name)[change]; n != 1 {
		t.Fatalf("change %d is handed off once the scan ends, applied %d times", change, n)
	}
	boom := errors.New("boom")
	if err := e.store.InScanTx(e.ctx, func(pgx.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("InScanTx returns its function's error, got %v", err)
	}
	if named := e.store.ScanTransactions(); len(named) != 0 {
		t.Fatalf("a rolled-back scan transaction is no longer named: %+v", named)
	}
}

// TestTailS6_WriterLongerThanAnyFixedLag: a writer holds its timestamp longer than a fixed lag would wait while
// others keep committing and the tail keeps polling; nothing passes it, and its row arrives in order.
func TestTailS6_WriterLongerThanAnyFixedLag(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	a := tailBegin(t, e.session(t))
	tailTxStart(t, a)
	var others []int64
	deadline := time.Now().Add(1200 * time.Millisecond)
	for time.Now().Before(deadline) {
		others = append(others, e.births(t, 1)...)
		if res := e.poll(t, e.birth, tailRecord); res.Read != 0 {
			t.Fatalf("read %d rows past an open writer", res.Read)
		}
		wait.Pace(e.ctx, 40*time.Millisecond) // the other writers' pace
	}
	aID, err := tailInsertBirth(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "S6", append(others, aID), e.applied(t, e.birth.Name))
}

// tailStressWriters runs n writers inserting through insert until stop is closed: random holds (0–20 ms), a timestamp
// taken before the first write half of the time, savepoints (some rolled back) and 10% rolled-back transactions.
// It returns the ids that committed.
func tailStressWriters(t *testing.T, pool *pgxpool.Pool, n int, stop <-chan struct{},
	insert func(context.Context, pgx.Tx) (int64, error)) func() []int64 {
	t.Helper()
	var mu sync.Mutex
	var committed []int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			hold := func() { wait.Pace(ctx, time.Duration(mrand.IntN(21))*time.Millisecond) } // a writer's random hold
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := func() error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer func() { _ = tx.Rollback(ctx) }()
					if mrand.IntN(2) == 0 {
						if _, err := tx.Exec(ctx, `SELECT now()`); err != nil {
							return err
						}
					}
					hold()
					var kept []int64
					for range 1 + mrand.IntN(3) {
						if mrand.IntN(3) == 0 {
							if _, err := tx.Exec(ctx, `SAVEPOINT sp`); err != nil {
								return err
							}
							id, err := insert(ctx, tx)
							if err != nil {
								return err
							}
							if mrand.IntN(5) == 0 {
								if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT sp`); err != nil {
									return err
								}
								continue
							}
							if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT sp`); err != nil {
								return err
							}
							kept = append(kept, id)
							continue
						}
						id, err := insert(ctx, tx)
						if err != nil {
							return err
						}
						kept = append(kept, id)
					}
					hold()
					if mrand.IntN(10) == 0 {
						return tx.Rollback(ctx)
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					mu.Lock()
					committed = append(committed, kept...)
					mu.Unlock()
					return nil
				}()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	return func() []int64 {
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("writer: %v", err)
		}
		return committed
	}
}

// tailNaive is the tail without a horizon: keyset pages over (ts, id) as fast as it can, until stop, then one last
// sweep. It records what it saw.
func tailNaive(e *tailEnv, src postgres.TailSource, stop <-chan struct{}, seen map[int64]bool) {
	q := `SELECT ` + pgx.Identifier{src.TSColumn}.Sanitize() + `::text, id FROM ` + pgx.Identifier{src.Table}.Sanitize() +
		` WHERE (` + pgx.Identifier{src.TSColumn}.Sanitize() + `, id) > ($1::text::` + map[bool]string{true: "timestamptz", false: "timestamp"}[src.Kind == postgres.TailBirth] +
		`, $2) ORDER BY ` + pgx.Identifier{src.TSColumn}.Sanitize() + `, id LIMIT 50`
	ts, id := "-infinity", int64(0)
	for last := false; ; {
		select {
		case <-stop:
			last = true
		default:
		}
		for {
			rows, err := e.pool.Query(e.ctx, q, ts, id)
			if err != nil {
				return
			}
			n := 0
			for rows.Next() {
				if rows.Scan(&ts, &id) == nil {
					seen[id] = true
					n++
				}
			}
			rows.Close()
			if n < 50 {
				break
			}
		}
		if last {
			return
		}
		wait.Pace(e.ctx, time.Millisecond) // the reader's pace
	}
}

func tailTxInsertBirth(ctx context.Context, tx pgx.Tx) (int64, error) {
	return tailInsertBirth(ctx, tx)
}
func tailTxInsertChange(ctx context.Context, tx pgx.Tx) (int64, error) {
	return tailInsertChange(ctx, tx)
}

// TestTailStress_ConcurrentWriters: 16 writers committing out of order (random holds, savepoints, rollbacks) while
// a tail polls concurrently: the handed-off set equals the committed set exactly, for both sources.
func TestTailStress_ConcurrentWriters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		insert func(context.Context, pgx.Tx) (int64, error)
		page   int
	}{
		{"birth_registry", tailTxInsertBirth, 50},
		{"registry_changelog", tailTxInsertChange, 50},
		// Pages the writers fill faster than they are applied: nearly every poll takes a page read ahead.
		{"birth_registry_read_ahead", tailTxInsertBirth, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTailEnv(t)
			src := e.birth
			if tc.name == "registry_changelog" {
				src = e.changelog
			}
			pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
			if err != nil {
				t.Fatal(err)
			}
			pcfg.MaxConns = 18
			writers, err := pgxpool.NewWithConfig(e.ctx, pcfg)
			if err != nil {
				t.Fatal(err)
			}
			defer writers.Close()
			stop := make(chan struct{})
			writersDone := tailStressWriters(t, writers, 16, stop, tc.insert)
			cfg := e.cfg
			cfg.PageSize = tc.page
			// A naive tail (no horizon) runs alongside as the control: it must lose rows, or the run proved nothing.
			naiveSeen := map[int64]bool{}
			naiveDone := make(chan struct{})
			go func() {
				defer close(naiveDone)
				tailNaive(e, src, stop, naiveSeen)
			}()
			var polls, reads, ahead int
			deadline := time.Now().Add(2500 * time.Millisecond)
			for time.Now().Before(deadline) {
				res, err := e.stage.PollTail(e.ctx, src, cfg, tailRecord) // full births pages read ahead
				if err != nil {
					t.Fatal(err)
				}
				polls++
				reads += res.Read
				if res.ReadAhead {
					ahead++
				}
				if !res.PageFull {
					wait.Pace(e.ctx, time.Duration(mrand.IntN(5))*time.Millisecond) // a poller's random pace
				}
			}
			close(stop)
			committed := writersDone()
			<-naiveDone
			e.drain(t, src, tailRecord)
			naiveLost := 0
			for _, id := range committed {
				if !naiveSeen[id] {
					naiveLost++
				}
			}
			if naiveLost == 0 {
				t.Fatal("control: the naive tail lost nothing, so the writers did not commit out of order")
			}
			if len(committed) < 200 || reads == 0 {
				t.Fatalf("too little concurrency to prove anything: %d committed, %d read during the run", len(committed), reads)
			}
			tailExactlyOnce(t, tc.name, committed, e.applied(t, src.Name))
			// What committed is also exactly what the table holds.
			tailExactlyOnce(t, tc.name+" vs table", e.ids(t, src.Table), e.applied(t, src.Name))
			t.Logf("%s: %d committed rows, %d polls (%d of them read ahead), %d read while writers ran; the naive control lost %d",
				tc.name, len(committed), polls, ahead, reads, naiveLost)
		})
	}
}

// TestTailKill_ExactlyOnceAcrossAbortedPolls aborts the poll transaction at random points at least 20 times —
// context cancelled inside apply, the backend terminated mid-apply or just before the cursor advance, apply
// failing, a deadline expiring anywhere including at commit — while writers keep committing. Resumed, the tail
// has lost nothing and applied nothing twice (tail_applied is written in the poll's transaction).
func TestTailKill_ExactlyOnceAcrossAbortedPolls(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 6
	writers, err := pgxpool.NewWithConfig(e.ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writers.Close()
	stop := make(chan struct{})
	writersDone := tailStressWriters(t, writers, 4, stop, tailTxInsertBirth)
	cfg := e.cfg
	cfg.PageSize = 20
	killer := e.session(t)
	terminate := func(tx pgx.Tx) error {
		var pid int32
		if err := tx.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		_, err := killer.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
		return err
	}
	kills := map[string]int{}
	for attempt := 0; attempt < 5000 && tailSum(kills) < 25; attempt++ {
		mode := mrand.IntN(6)
		ctx, cancel := context.WithCancel(e.ctx)
		apply := tailRecord
		switch mode {
		case 1: // cancel the context inside apply, after writing
			apply = func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
				if _, err := tailRecord(ctx, tx, rows); err != nil {
					return nil, err
				}
				cancel()
				return nil, ctx.Err()
			}
		case 2: // terminate the backend mid-apply
			apply = func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
				if _, err := tailRecord(ctx, tx, rows[:len(rows)/2]); err != nil {
					return nil, err
				}
				if err := terminate(tx); err != nil {
					return nil, err
				}
				return tailRecord(ctx, tx, rows[len(rows)/2:])
			}
		case 3: // terminate after apply, before the cursor advance and commit
			apply = func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
				if _, err := tailRecord(ctx, tx, rows); err != nil {
					return nil, err
				}
				return nil, terminate(tx)
			}
		case 4: // apply fails as a whole
			apply = func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
				if _, err := tailRecord(ctx, tx, rows); err != nil {
					return nil, err
				}
				return nil, errors.New("apply crashed")
			}
		case 5: // a deadline that expires anywhere, commit included
			var inner context.Context
			inner, cancelInner := context.WithTimeout(ctx, time.Duration(mrand.IntN(4000))*time.Microsecond)
			ctx = inner
			prev := cancel
			cancel = func() { cancelInner(); prev() }
		}
		wait.Pace(e.ctx, time.Duration(mrand.IntN(10))*time.Millisecond) // a crash's random moment
		// One stage across the polls, as a worker holds it: a page read ahead by a poll that then failed is dropped.
		res, err := e.stage.PollTail(ctx, e.birth, cfg, apply)
		cancel()
		switch {
		case err != nil:
			kills[fmt.Sprint(mode)]++
		case mode >= 1 && mode <= 4 && res.Read > 0:
			t.Fatalf("mode %d should have failed: %+v", mode, res)
		}
	}
	close(stop)
	committed := writersDone()
	e.drain(t, e.birth, tailRecord)
	if n := tailSum(kills); n < 20 {
		t.Fatalf("only %d aborted polls: %v", n, kills)
	}
	tailExactlyOnce(t, "kill", committed, e.applied(t, e.birth.Name))
	t.Logf("aborted polls by mode: %v; %d committed rows", kills, len(committed))
}

func tailSum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestTailPoisonRowRetryThenDLQ: a row the apply step always fails goes to the retry lane without blocking the
// cursor or leaving a trace, is retried with backoff and dead-lettered after max_attempts (counter, finding, one
// audit row), while later rows keep flowing; a row that fails twice then succeeds is applied exactly once.
func TestTailPoisonRowRetryThenDLQ(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	ids := e.births(t, 6)
	poison, flaky := ids[1], ids[4]
	var flakyFails atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
		// Write everything first: the failed rows' writes must be rolled back by the tail.
		if _, err := tailRecord(ctx, tx, rows); err != nil {
			return nil, err
		}
		var fails []intake.RowFailure
		for _, r := range rows {
			switch {
			case r.ID == poison:
				fails = append(fails, intake.RowFailure{ID: r.ID, Kind: gcos.ChangeObjectBorn, Err: errors.New("cannot map poison")})
			case r.ID == flaky && flakyFails.Load() < 2:
				flakyFails.Add(1)
				fails = append(fails, intake.RowFailure{ID: r.ID, Err: errors.New("transient")})
			}
		}
		return fails, nil
	}
	res := e.drain(t, e.birth, apply)
	if res.Failed != 2 || res.Applied != 4 {
		t.Fatalf("poll: %+v", res)
	}
	later := e.births(t, 3)
	e.drain(t, e.birth, apply)
	got := e.applied(t, e.birth.Name)
	if got[poison] != 0 || got[flaky] != 0 {
		t.Fatalf("failed rows left a trace: %v", got)
	}
	for _, id := range append([]int64{ids[0], ids[2], ids[3], ids[5]}, later...) {
		if got[id] != 1 {
			t.Fatalf("row %d should have flowed past the poison row: %v", id, got)
		}
	}
	var payload map[string]any
	if err := e.pool.QueryRow(e.ctx, `SELECT capture_payload FROM event_pending WHERE entity_ref = ($1::bigint)::text`, poison).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	for k := range payload {
		if !slices.Contains([]string{"source", "object_ref", "change_kind", "occurred_at"}, k) {
			t.Fatalf("capture_payload carries %q: %v", k, payload)
		}
	}
	if payload["change_kind"] != "object_born" || payload["source"] != "birth_registry" {
		t.Fatalf("payload %v", payload)
	}
	wait.Until(10*time.Second, func() bool {
		if _, err := intake.New(e.store).RetryDue(e.ctx, e.birth, e.cfg, apply); err != nil {
			t.Fatal(err)
		}
		return e.count(t, `SELECT count(*) FROM event_pending WHERE processed_at IS NULL AND dead_lettered_at IS NULL`) == 0
	})
	var errCount int
	var dead *time.Time
	var addr, actor string
	if err := e.pool.QueryRow(e.ctx, `SELECT error_count, dead_lettered_at, canonical_address, actor_ref FROM event_pending
		WHERE entity_ref = ($1::bigint)::text AND event_type_hint = 'governance.handoff.retry'`, poison).Scan(&errCount, &dead, &addr, &actor); err != nil {
		t.Fatal(err)
	}
	if dead == nil || errCount != e.cfg.MaxAttempts || !strings.HasPrefix(addr, "tail_test:") || actor != "tester" {
		t.Fatalf("poison: error_count %d, dead_lettered_at %v, address %q, actor %q", errCount, dead, addr, actor)
	}
	if n := e.count(t, `SELECT count(*) FROM event_pending WHERE entity_ref = ($1::bigint)::text AND processed_at IS NOT NULL`, flaky); n != 1 {
		t.Fatal("the flaky row should have been processed by a retry")
	}
	got = e.applied(t, e.birth.Name)
	if got[poison] != 0 || got[flaky] != 1 {
		t.Fatalf("after retries: poison applied %d times, flaky %d times", got[poison], got[flaky])
	}
	c, err := intake.New(e.store).GetCursor(e.ctx, e.birth.Name)
	if err != nil {
		t.Fatal(err)
	}
	if c.DeadLettered != 1 || c.EventsSeen != 9 || c.AttemptsWritten != 8 {
		t.Fatalf("cursor counters: %+v", c)
	}
	if open, _ := gcostest.FindingOpen(e.ctx, e.pool, gcos.IssueHandoffDLQ); !open {
		t.Fatal("handoff_dlq should be open")
	}
	if n := e.count(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_dlq' AND entity_code = $1`,
		fmt.Sprintf("birth_registry:%d", poison)); n != 1 {
		t.Fatalf("want one audit row for the dead letter, got %d", n)
	}
	// Intake continues after the DLQ.
	more := e.births(t, 2)
	e.drain(t, e.birth, apply)
	if got := e.applied(t, e.birth.Name); got[more[0]] != 1 || got[more[1]] != 1 {
		t.Fatal("intake must continue after a dead letter")
	}
}

func (e *tailEnv) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := e.pool.QueryRow(e.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestCursorResetReplaysAndRefusesBadWatermarks: a reset to an earlier watermark re-delivers the rows after it
// (the apply step's idempotency makes that harmless); a bad watermark is refused with EINVALID and changes nothing.
func TestCursorResetReplaysAndRefusesBadWatermarks(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	ids := e.births(t, 5)
	e.drain(t, e.birth, tailRecord)
	type pos struct {
		born time.Time
		id   int64
	}
	var p2, p3 pos
	if err := e.pool.QueryRow(e.ctx, `SELECT born_at, id FROM birth_registry WHERE id = $1`, ids[1]).Scan(&p2.born, &p2.id); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT born_at, id FROM birth_registry WHERE id = $1`, ids[2]).Scan(&p3.born, &p3.id); err != nil {
		t.Fatal(err)
	}
	before, err := intake.New(e.store).GetCursor(e.ctx, e.birth.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "garbage", "2026-13-45T00:00:00Z", "2999-01-01T00:00:00Z",
		p2.born.UTC().Format("2006-01-02 15:04:05.999999"), p2.born.UTC().Format(time.RFC3339Nano) + "/abc",
		p2.born.UTC().Format(time.RFC3339Nano) + "/-1", "0001-01-01T00:00:00Z", strings.Repeat("9", 200)} {
		if _, err := intake.New(e.store).ResetCursor(e.ctx, e.birth.Name, bad); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Fatalf("watermark %q: want EINVALID, got %v", bad, err)
		}
	}
	if _, err := intake.New(e.store).ResetCursor(e.ctx, "no_such_source", "start"); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("unknown source: %v", err)
	}
	after, err := intake.New(e.store).GetCursor(e.ctx, e.birth.Name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Position != before.Position || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("a refused reset changed the cursor: %+v → %+v", before, after)
	}

	// (ts, id) replays strictly after the row; ts alone replays from that instant on; start replays everything.
	c, err := intake.New(e.store).ResetCursor(e.ctx, e.birth.Name, fmt.Sprintf("%s/%d", p2.born.UTC().Format(time.RFC3339Nano), p2.id))
	if err != nil {
		t.Fatal(err)
	}
	if c.PositionID == nil || *c.PositionID != p2.id {
		t.Fatalf("reset position: %+v", c)
	}
	e.drain(t, e.birth, tailRecord)
	if got := e.applied(t, e.birth.Name); got[ids[0]] != 1 || got[ids[1]] != 1 || got[ids[2]] != 2 || got[ids[4]] != 2 {
		t.Fatalf("replay after row 2: %v", got)
	}
	if _, err := intake.New(e.store).ResetCursor(e.ctx, e.birth.Name, p3.born.Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	if got := e.applied(t, e.birth.Name); got[ids[1]] != 1 || got[ids[2]] != 3 || got[ids[3]] != 3 {
		t.Fatalf("replay from row 3's instant: %v", got)
	}
	if _, err := intake.New(e.store).ResetCursor(e.ctx, e.birth.Name, "start"); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	if got := e.applied(t, e.birth.Name); got[ids[0]] != 2 {
		t.Fatalf("replay from start: %v", got)
	}
	if n := e.count(t, `SELECT count(*) FROM registry_changelog WHERE entity_type = 'governance_cursor' AND action = 'reset'`); n != 3 {
		t.Fatalf("want 3 audited resets, got %d", n)
	}

	// The change ledger's local-time cursor takes both an instant and its own local value.
	chg, err := tailInsertChange(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.changelog, tailRecord)
	var local time.Time
	if err := e.pool.QueryRow(e.ctx, `SELECT "timestamp" FROM registry_changelog WHERE id = $1`, chg).Scan(&local); err != nil {
		t.Fatal(err)
	}
	if _, err := intake.New(e.store).ResetCursor(e.ctx, e.changelog.Name, local.Format("2006-01-02T15:04:05.999999")); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.changelog, tailRecord)
	if got := e.applied(t, e.changelog.Name); got[chg] < 2 {
		t.Fatalf("changelog replay from its local time: %v", got)
	}
	cursors, err := intake.New(e.store).ListCursors(e.ctx)
	if err != nil || len(cursors) != 2 || cursors[0].Source != "birth_registry" || cursors[1].TSType != "timestamp" ||
		cursors[1].TimeZone == "" {
		t.Fatalf("list cursors: %v %+v", err, cursors)
	}
	if b, _ := json.Marshal(cursors); !strings.Contains(string(b), `"position"`) {
		t.Fatalf("cursor JSON: %s", b)
	}
}

// TestTailPreconditionsRefuseWithClearMessages: a source whose timestamp is not set by the database clock, a
// precision the guard does not cover, a DST zone for a local-time column, and a role that cannot see other
// sessions are each refused, naming the problem and the fix; good defaults pass.
func TestTailPreconditionsRefuseWithClearMessages(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	if _, err := e.pool.Exec(e.ctx, `
		CREATE TABLE births_variants (
		    id bigserial PRIMARY KEY, entity_code text, collection_name text, entity_type text, status text,
		    parent_code text, canonical_address text, source_system text, actor_ref text,
		    no_default timestamptz NOT NULL,
		    literal    timestamptz NOT NULL DEFAULT '2020-01-01 00:00:00+00',
		    coarse     timestamp(0) NOT NULL DEFAULT now(),
		    utc_local  timestamp NOT NULL DEFAULT timezone('UTC', now()),
		    at_zone    timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'Asia/Ho_Chi_Minh'),
		    clock      timestamptz NOT NULL DEFAULT clock_timestamp(),
		    cur_ts     timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
		    local_tz   timestamptz NOT NULL DEFAULT LOCALTIMESTAMP,
		    txt        text DEFAULT now()::text)`); err != nil {
		t.Fatal(err)
	}
	src := func(col string) postgres.TailSource {
		return postgres.TailSource{Name: "variant_" + col, Kind: postgres.TailBirth, Table: "births_variants", TSColumn: col, IDColumn: "id"}
	}
	for _, tc := range []struct {
		col, zone, want string
	}{
		{"no_default", "", "has no default"},
		{"literal", "", "is not the database clock"},
		{"coarse", "", "set intake.horizon_guard to at least 500ms"},
		{"local_tz", "", "local time and back"},
		{"txt", "", "must be timestamptz or timestamp"},
		{"utc_local", "Europe/Berlin", "sets its clocks back"},
		{"missing", "", "does not exist"},
	} {
		s := src(tc.col)
		s.TimeZone = tc.zone
		_, err := intake.New(e.store).CheckTail(e.ctx, s, e.cfg)
		if gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want EINVALID mentioning %q, got %v", tc.col, tc.want, err)
		}
	}
	for _, col := range []string{"utc_local", "at_zone", "clock", "cur_ts"} {
		rep, err := intake.New(e.store).CheckTail(e.ctx, src(col), e.cfg)
		if err != nil {
			t.Errorf("%s should pass: %v", col, err)
		}
		if col == "at_zone" && rep.TimeZone != "Asia/Ho_Chi_Minh" {
			t.Errorf("at_zone: the zone fixed in the default should be used, got %q", rep.TimeZone)
		}
	}
	coarse := e.cfg
	coarse.HorizonGuard = gcos.Duration(time.Second)
	if _, err := intake.New(e.store).CheckTail(e.ctx, src("coarse"), coarse); err != nil {
		t.Errorf("a guard of 1s covers timestamp(0): %v", err)
	}
	chg := e.changelog
	chg.TimeZone = "America/New_York"
	if _, err := intake.New(e.store).CheckTail(e.ctx, chg, e.cfg); err == nil || !strings.Contains(err.Error(), "sets its clocks back") {
		t.Errorf("a DST zone for the changelog must be refused: %v", err)
	}
	chg.TimeZone = "Not/AZone"
	if _, err := intake.New(e.store).CheckTail(e.ctx, chg, e.cfg); gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), "not known") {
		t.Errorf("an unknown zone must be refused: %v", err)
	}
	// A cached id sequence hands out ids out of order: the sweep for rows behind the cursor warns about it.
	if _, err := e.pool.Exec(e.ctx, `ALTER SEQUENCE births_variants_id_seq CACHE 20`); err != nil {
		t.Fatal(err)
	}
	if rep, err := intake.New(e.store).CheckTail(e.ctx, src("clock"), e.cfg); err != nil || !slices.ContainsFunc(rep.Items, func(i intake.TailCheckItem) bool {
		return i.Name == "id_sequence" && i.Status == intake.CheckWarn && strings.Contains(i.Detail, "CACHE 1")
	}) {
		t.Errorf("a cached id sequence should warn: %v %+v", err, rep.Items)
	}

	// A role without pg_read_all_stats cannot see other sessions' transactions.
	_, cc := tailRole(t, e, "")
	pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig = cc
	weak, err := pgxpool.NewWithConfig(e.ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer weak.Close()
	ws := postgres.New(weak, gcos.DefaultConfig(), nil)
	if _, err := intake.New(ws).CheckTail(e.ctx, e.birth, e.cfg); gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), "pg_read_all_stats") {
		t.Errorf("an unprivileged role must be refused naming pg_read_all_stats: %v", err)
	}
	if _, err := intake.New(ws).PollTail(e.ctx, e.birth, e.cfg, tailRecord); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Errorf("an unprivileged role's poll must be refused: %v", err)
	}

	// Prepared transactions stall (never skip) when the server allows them.
	var maxPrepared int
	if err := e.pool.QueryRow(e.ctx, `SELECT current_setting('max_prepared_transactions')::int`).Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == 0 {
		t.Log("max_prepared_transactions = 0 on this server: the prepared-transaction stall is not exercised")
		return
	}
	w := tailBegin(t, e.session(t))
	wID, err := tailInsertBirth(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	const gid = "gcos-tail-stall"
	if _, err := w.Exec(e.ctx, `PREPARE TRANSACTION '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	resolved := false
	t.Cleanup(func() {
		if !resolved {
			_, _ = e.pool.Exec(e.ctx, `ROLLBACK PREPARED '`+gid+`'`)
		}
	})
	wait.Pass(e.ctx, 2*tailGuard)
	res := e.poll(t, e.birth, tailRecord)
	if res.Read != 0 || !strings.Contains(res.Stalled, gid) || res.HeldBy == nil || res.HeldBy.PreparedGID != gid {
		t.Fatalf("a prepared transaction must stall the poll, naming it: %+v", res)
	}
	if _, err := e.pool.Exec(e.ctx, `COMMIT PREPARED '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	resolved = true
	e.drain(t, e.birth, tailRecord)
	if got := e.applied(t, e.birth.Name); got[wID] != 1 {
		t.Fatalf("the prepared row, once committed, should be handed off once: applied %d times", got[wID])
	}
}

// TestTailChangelogLocalTimeZone: registry_changelog."timestamp" holds the writers' local time. With writers in
// America/Bogota (the database's TimeZone) and the tail's own session in Asia/Ho_Chi_Minh, the horizon is still
// compared in the writers' zone and nothing is lost; a cursor told the wrong zone (12 h ahead) reads past an open
// writer and loses its row — which is why the zone is resolved from the database and kept on the cursor.
func TestTailChangelogLocalTimeZone(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	var db string
	if err := e.pool.QueryRow(e.ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET timezone = 'America/Bogota'`); err != nil {
		t.Fatal(err)
	}
	writers, err := pgxpool.New(e.ctx, pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	defer writers.Close()
	pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["timezone"] = "Asia/Ho_Chi_Minh"
	tailPool, err := pgxpool.NewWithConfig(e.ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tailPool.Close()
	store := postgres.New(tailPool, gcos.DefaultConfig(), nil)
	right := postgres.ChangelogTailSource()
	rep, err := intake.New(store).CheckTail(e.ctx, right, e.cfg)
	if err != nil || rep.TimeZone != "America/Bogota" {
		t.Fatalf("the zone should come from the database setting: %v %+v", err, rep)
	}
	// The cursor made before the database setting changed still says the old zone: EnsureCursor rebinds it.
	if c, err := intake.New(store).EnsureCursor(e.ctx, right); err != nil || c.TimeZone != "America/Bogota" {
		t.Fatalf("ensure: %v %+v", err, c)
	}
	wrong := right
	wrong.Name, wrong.TimeZone = "changelog_wrong_zone", "Asia/Ho_Chi_Minh"
	if _, err := intake.New(store).EnsureCursor(e.ctx, wrong); err != nil {
		t.Fatal(err)
	}
	conn, err := writers.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	a, err := conn.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	tailTxStart(t, a)
	later := []int64{}
	for range 3 {
		id, err := tailInsertChange(e.ctx, writers)
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, id)
	}
	wait.Pass(e.ctx, 2*tailGuard)
	for _, src := range []postgres.TailSource{right, wrong} {
		if _, err := intake.New(store).PollTail(e.ctx, src, e.cfg, tailRecord); err != nil {
			t.Fatal(err)
		}
	}
	aID, err := tailInsertChange(e.ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	wait.Pass(e.ctx, 2*tailGuard)
	if _, err := intake.New(store).PollTail(e.ctx, right, e.cfg, tailRecord); err != nil {
		t.Fatal(err)
	}
	tailExactlyOnce(t, "right zone", append(later, aID), e.applied(t, right.Name))
	// The wrong-zone cursor read the later rows before the held one committed, so that row sorts behind it: the id
	// sweep finds it (once the transactions open at its mark have ended), hands it off and reports it.
	wait.Until(30*time.Second, func() bool {
		if _, err := intake.New(store).PollTail(e.ctx, wrong, e.cfg, tailRecord); err != nil {
			t.Fatal(err)
		}
		return e.applied(t, wrong.Name)[aID] != 0
	})
	tailExactlyOnce(t, "wrong zone", append(later, aID), e.applied(t, wrong.Name))
	c, err := intake.New(store).GetCursor(e.ctx, wrong.Name)
	if err != nil || c.LateRows != 1 {
		t.Fatalf("the wrong-zone cursor counts %d late rows (%v), want 1", c.LateRows, err)
	}
	if n := tailOpenFindings(t, e, gcos.IssueHandoffOutOfOrder, wrong.Name+":behind"); n != 1 {
		t.Fatalf("%d open handoff_out_of_order findings for the late row, want 1", n)
	}
}

func tailOpenFindings(t *testing.T, e *tailEnv, typ gcos.IssueType, subject string) int64 {
	t.Helper()
	var n int64
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`,
		gcos.CoalesceKey(typ, subject)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTailWritersInOtherTimeZones: registry_changelog."timestamp" is a timestamp without time zone, so DEFAULT now()
// stores the writing session's local time. While writers in the database's zone commit out of order, sessions set to
// America/New_York (rows sort hours behind the cursor) and Asia/Tokyo (hours in the future) write too. Every
// committed row is handed off exactly once — the misplaced ones out of order, counted and reported.
func TestTailWritersInOtherTimeZones(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	var db string
	if err := e.pool.QueryRow(e.ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET timezone = 'UTC'`); err != nil {
		t.Fatal(err)
	}
	src := postgres.ChangelogTailSource()
	if c, err := intake.New(e.store).EnsureCursor(e.ctx, src); err != nil || c.TimeZone != "UTC" {
		t.Fatalf("ensure: %v %+v", err, c)
	}
	pools := map[string]*pgxpool.Pool{}
	for _, zone := range []string{"UTC", "America/New_York", "Asia/Tokyo"} {
		pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
		if err != nil {
			t.Fatal(err)
		}
		pcfg.ConnConfig.RuntimeParams["timezone"] = zone
		pcfg.MaxConns = 10
		p, err := pgxpool.NewWithConfig(e.ctx, pcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pools[zone] = p
	}
	stop := make(chan struct{})
	waits := []func() []int64{
		tailStressWriters(t, pools["UTC"], 8, stop, tailTxInsertChange),
		tailStressWriters(t, pools["America/New_York"], 2, stop, tailTxInsertChange),
		tailStressWriters(t, pools["Asia/Tokyo"], 2, stop, tailTxInsertChange),
	}
	cfg := e.cfg
	cfg.PageSize = 50
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		res, err := intake.New(e.store).PollTail(e.ctx, src, cfg, tailRecord)
		if err != nil {
			t.Fatal(err)
		}
		if !res.PageFull {
			wait.Pace(e.ctx, time.Duration(mrand.IntN(5))*time.Millisecond) // a poller's random pace
		}
	}
	close(stop)
	var committed []int64
	for _, w := range waits {
		committed = append(committed, w()...)
	}
	// Settle: poll until every committed row was handed off (the sweep needs a poll or two after the last commit),
	// then a few more polls that must hand off nothing again.
	settle := time.Now().Add(60 * time.Second)
	for len(e.applied(t, src.Name)) < len(committed) && time.Now().Before(settle) {
		e.drain(t, src, tailRecord)
	}
	for range 3 {
		e.drain(t, src, tailRecord)
	}
	tailExactlyOnce(t, "three time zones", committed, e.applied(t, src.Name))
	tailExactlyOnce(t, "three time zones vs table", e.ids(t, src.Table), e.applied(t, src.Name))
	c, err := intake.New(e.store).GetCursor(e.ctx, src.Name)
	if err != nil {
		t.Fatal(err)
	}
	if c.LateRows == 0 || c.FutureRows == 0 {
		t.Fatalf("late %d, future %d: the New York rows sort behind the cursor and the Tokyo rows in the future, "+
			"so both counts must move (else the test proved nothing)", c.LateRows, c.FutureRows)
	}
	for _, kind := range []string{"behind", "future"} {
		if n := tailOpenFindings(t, e, gcos.IssueHandoffOutOfOrder, src.Name+":"+kind); n != 1 {
			t.Fatalf("%d open handoff_out_of_order findings for %s rows, want 1", n, kind)
		}
	}
	t.Logf("%d committed rows; %d handed off behind the cursor, %d ahead of it", len(committed), c.LateRows, c.FutureRows)
}

// TestTailSweepStartClaimsNoRowInFlight: a row whose key sorts behind the cursor (a writer in another time zone),
// written by a transaction still open when the sweep starts (the cursor's first poll) and committed after it, is
// handed off: the sweep's start claims no id that an open transaction may still commit. Deterministic: the writer
// holds its transaction open across the first poll.
func TestTailSweepStartClaimsNoRowInFlight(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	src := e.changelog
	if c, err := intake.New(e.store).GetCursor(e.ctx, src.Name); err != nil || !slices.Contains([]string{"UTC", "Etc/UTC"}, c.TimeZone) {
		t.Fatalf("cursor zone %q (%v): the test needs the writers' zone UTC", c.TimeZone, err)
	}
	pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["timezone"] = "America/New_York"
	ny, err := pgxpool.NewWithConfig(e.ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ny.Close()
	// Rows the first poll reads: their keys lie below the horizon the open transaction will hold.
	for range 3 {
		if _, err := tailInsertChange(e.ctx, e.pool); err != nil {
			t.Fatal(err)
		}
	}
	wait.Pass(e.ctx, 2*tailGuard)
	tx, err := ny.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	// Open across the first poll: its key (New York wall time, read as UTC) lies hours behind the rows above, and
	// its id below the row committed next, so the sweep's start mark is above it.
	behind, err := tailInsertChange(e.ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tailInsertChange(e.ctx, e.pool); err != nil {
		t.Fatal(err)
	}
	if res := e.poll(t, src, tailRecord); res.Read != 3 {
		t.Fatalf("the first poll read %d rows, want the 3 below the open transaction's horizon", res.Read)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.drain(t, src, tailRecord)
	}
	got := e.applied(t, src.Name)
	tailExactlyOnce(t, "rows in flight at the sweep's start", e.ids(t, src.Table), got)
	if got[behind] != 1 {
		t.Fatalf("the New York row %d was handed off %d times, want once", behind, got[behind])
	}
}

// TestTailEnsureCursorRefusesRebindWithPosition: a cursor with a position cannot silently move to another table.
func TestTailEnsureCursorRefusesRebindWithPosition(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	e.births(t, 1)
	e.drain(t, e.birth, tailRecord)
	moved := e.birth
	moved.Table = "births_elsewhere"
	if _, err := e.pool.Exec(e.ctx, `CREATE TABLE births_elsewhere (LIKE birth_registry INCLUDING DEFAULTS)`); err != nil {
		t.Fatal(err)
	}
	if _, err := intake.New(e.store).EnsureCursor(e.ctx, moved); gcos.ErrorCode(err) != gcos.ECONFLICT {
		t.Fatalf("want ECONFLICT, got %v", err)
	}
	if _, err := intake.New(e.store).PollTail(e.ctx, moved, e.cfg, tailRecord); gcos.ErrorCode(err) != gcos.ECONFLICT {
		t.Fatalf("a poll with another binding must be refused, got %v", err)
	}
	if _, err := intake.New(e.store).PollTail(e.ctx, postgres.TailSource{Name: "nothing", Kind: postgres.TailBirth, Table: "birth_registry",
		TSColumn: "born_at", IDColumn: "id"}, e.cfg, tailRecord); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("a poll without a cursor: %v", err)
	}
}

// BenchmarkPollTail measures the tail alone (apply does nothing): rows read per second in pages of 10,000.
func BenchmarkPollTail(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.NewDB(b)
	full := gcos.DefaultConfig()
	store := postgres.New(pool, full, nil)
	src := postgres.BirthTailSource(full.SourceBinding)
	const rows = 200_000
	if _, err := pool.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, actor_ref)
		SELECT 'e' || g, 'c' || (g % 78), 't' || (g % 169), 'active', 'bench' FROM generate_series(1, $1) g`, rows); err != nil {
		b.Fatal(err)
	}
	if _, err := intake.New(store).EnsureCursor(ctx, src); err != nil {
		b.Fatal(err)
	}
	cfg := full.Intake
	cfg.PageSize = 10_000
	noop := func(context.Context, pgx.Tx, []postgres.TailRow) ([]intake.RowFailure, error) { return nil, nil }
	wait.Pass(ctx, 50*time.Millisecond) // past the horizon guard
	b.ResetTimer()
	read := 0
	for range b.N {
		if _, err := intake.New(store).ResetCursor(ctx, src.Name, "start"); err != nil {
			b.Fatal(err)
		}
		for {
			res, err := intake.New(store).PollTail(ctx, src, cfg, noop)
			if err != nil {
				b.Fatal(err)
			}
			read += res.Read
			if !res.PageFull {
				break
			}
		}
	}
	b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "rows/s")
}

// TestTailSweepHandsOffMisplacedRows: rows a writer inserts with its own order key — a day behind the committed
// cursor, or a day ahead of the clock — are handed off once each (behind ones a page at a time), counted and
// reported; none waits for the clock and none is lost.
func TestTailSweepHandsOffMisplacedRows(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	src := e.changelog
	cfg := e.cfg
	cfg.PageSize = 3
	first, err := tailInsertChange(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	e.drain(t, src, tailRecord) // the cursor passes the first row; the sweep starts
	var misplaced []int64
	for i := range 9 {
		when := "now() - interval '1 day'"
		if i >= 7 {
			when = "now() + interval '1 day'"
		}
		var id int64
		if err := e.pool.QueryRow(e.ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by, "timestamp")
			VALUES ('collection', 'tail_test', 'update', 'tester', `+when+`) RETURNING id`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		misplaced = append(misplaced, id)
	}
	want := append([]int64{first}, misplaced...)
	wait.Until(30*time.Second, func() bool {
		if _, err := intake.New(e.store).PollTail(e.ctx, src, cfg, tailRecord); err != nil {
			t.Fatal(err)
		}
		return len(e.applied(t, src.Name)) >= len(want)
	})
	for range 3 {
		e.drain(t, src, tailRecord)
	}
	tailExactlyOnce(t, "misplaced rows", want, e.applied(t, src.Name))
	c, err := intake.New(e.store).GetCursor(e.ctx, src.Name)
	if err != nil || c.LateRows != 7 || c.FutureRows != 2 {
		t.Fatalf("late %d, future %d (%v); want 7 and 2", c.LateRows, c.FutureRows, err)
	}
	for _, kind := range []string{"behind", "future"} {
		if n := tailOpenFindings(t, e, gcos.IssueHandoffOutOfOrder, src.Name+":"+kind); n != 1 {
			t.Fatalf("%d open handoff_out_of_order findings for %s rows, want 1", n, kind)
		}
	}
}
